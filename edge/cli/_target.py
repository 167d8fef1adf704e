"""What ``edge client`` is told to talk to, checked before it connects: the service's
address (the console's ``http://`` address works too), the participant id, and a plain
sentence for a service that cannot be reached."""

from __future__ import annotations

import argparse
import socket
import ssl
from urllib.parse import SplitResult, parse_qs, urlsplit, urlunsplit

SCHEMES = {"ws": "ws", "wss": "wss", "http": "ws", "https": "wss"}


class TargetError(ValueError):
    """An address ``edge client`` cannot use; the text says why."""


def client_url(url: str) -> tuple[str, str | None]:
    """``(websocket URL, token)`` for ``url``: a ``ws://`` address as it is; the console's
    ``http://host:port/?token=…`` (the same port serves both) as its ``ws://`` address and
    the token in it."""
    parts = urlsplit(url.strip())
    scheme = SCHEMES.get(parts.scheme.lower())
    if scheme is None or not parts.hostname:
        raise TargetError(
            f"{url!r} is not the service's address: give ws://HOST:PORT (as `edge serve` "
            "prints it) or the console's http://HOST:PORT/ address"
        )
    try:
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError as exc:
        raise TargetError(f"{url!r}: {exc}") from None
    token = parse_qs(parts.query).get("token", [None])[0]
    if scheme == parts.scheme and not token:
        return urlunsplit(parts), None
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/"), "", "")), token


def participant_id(value: str) -> str:
    """``--participant``: an id the protocol takes, else a usage error naming the rule."""
    from edge.server import check_participant_id

    try:
        return check_participant_id(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def unreachable(url: str, exc: BaseException) -> str:
    """Why ``url`` could not be reached (or dropped us), in words, with what to check."""
    from websockets.exceptions import ConnectionClosed, InvalidMessage, InvalidStatus

    if isinstance(exc, ConnectionClosed):
        return f"the service at {url} closed the connection: {exc}"
    parts = urlsplit(url)
    # a TLS port answers a plain request with a 400 (older services: closed at once)
    plain_refused = isinstance(exc, (InvalidMessage, InvalidStatus))
    if parts.scheme == "ws" and plain_refused and _speaks_tls(parts):
        secure = urlunsplit(("wss", *parts[1:]))
        return (
            f"the service at {url} serves TLS (as `edge serve` does unless --no-tls): "
            f"use {secure} (or the console's https:// address)"
        )
    if isinstance(exc, ConnectionRefusedError):
        reason = "nothing listens there (connection refused)"
    elif isinstance(exc, TimeoutError):
        reason = "no answer in time"
    else:
        reason = str(exc) or type(exc).__name__
    return f"cannot talk to {url}: {reason}. Is `edge serve` running at that address?"


def _speaks_tls(parts: SplitResult) -> bool:
    """Whether the server at ``parts`` completes a TLS handshake (its certificate is not
    checked: this only tells a ws:// address that it reached a wss:// service)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((parts.hostname, parts.port or 80), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname=parts.hostname):
                return True
    except (OSError, ValueError):
        return False
