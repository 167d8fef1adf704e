"""Fail fast when a port is taken: checked before any model loads, so a second
``edge serve`` says so at once instead of after loading every model."""

from __future__ import annotations

import errno
import socket


class PortTaken(OSError):
    """Another process listens on the port (the text names it and what to do)."""


def check_port_free(host: str, port: int | None, what: str) -> None:
    """Raise :class:`PortTaken` when ``host:port`` cannot be bound because something
    listens there; port 0 or None (pick any, or off) and other bind problems pass (the
    server's own bind reports those)."""
    if not port:
        return
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise PortTaken(
                        f"the {what} port {port} on {host} is in use: is another `edge serve` "
                        "running? (choose other ports with --port / --wyoming-port)"
                    ) from None
