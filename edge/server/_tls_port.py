"""TLS on the service port, after a look at the first byte a client sends.

A browser or client pointed at ``http://`` or ``ws://`` on the TLS port would get a TLS
error or nothing at all. Each connection of :func:`tls_connection` first peeks at the
client's first byte without reading it (``MSG_PEEK`` on a duplicate of the socket):

* a TLS record (a ClientHello starts with 0x16): the TLS handshake runs on the connection
  (``loop.start_tls``), then the connection class it wraps takes the encrypted transport
  as if the server had been made with TLS;
* an HTTP request in plain text: the head is read (bounded) and answered in plain text,
  then the connection closes: a browser's page load (``GET`` or ``HEAD`` without an
  upgrade) is redirected (307) to the same address under ``https://``; anything else
  (``ws://``, an API client's ``http://`` base URL) gets ``400`` saying to use
  ``https://`` / ``wss://``;
* anything else, or nothing within ``timeout_s``: the connection is dropped.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import ssl
from typing import Any

from websockets.asyncio.server import ServerConnection

TLS_RECORD = 0x16  # a TLS handshake record: how every ClientHello starts
MAX_PLAIN_HEAD = 8 * 1024
_HOST = re.compile(rb"^[A-Za-z0-9.\-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$")
_TARGET = re.compile(rb"^/[\x21-\x7e]*$")


async def first_byte(transport: asyncio.Transport) -> int | None:
    """The first byte the client sent, left unread for the transport (None: the client
    closed without sending anything)."""
    sock = transport.get_extra_info("socket")
    dup = socket.socket(fileno=os.dup(sock.fileno()))  # the transport keeps its own fd
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    try:
        loop.add_reader(dup.fileno(), _set, ready)
        try:
            await ready
        finally:
            loop.remove_reader(dup.fileno())
        data = dup.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    finally:
        dup.close()  # the duplicate only: the connection stays open
    return data[0] if data else None


def _set(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def plain_answer(head: bytes, local: tuple[Any, ...] | None) -> bytes:
    """The plain-text HTTP answer to a plain ``http://`` or ``ws://`` request head."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    method, target = (parts[0], parts[1]) if len(parts) == 3 else (b"", b"")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    host = headers.get(b"host", b"")
    if not _HOST.match(host):
        address = f"[{local[0]}]" if local and ":" in local[0] else local and local[0]
        host = f"{address}:{local[1]}".encode() if local else b"this-host:port"
    https = b"https://" + host
    text = (
        f"This port speaks only TLS: open {https.decode()}/ in a browser, use "
        f"{https.decode()}/v1 as an API base URL and wss://{host.decode()} for WebSocket "
        "clients (plain http:// and ws:// are not served).\n"
    ).encode()
    browser = method in (b"GET", b"HEAD") and b"upgrade" not in headers
    if browser and _TARGET.match(target):
        status, extra = b"307 Temporary Redirect", b"Location: " + https + target + b"\r\n"
    else:
        status, extra = b"400 Bad Request", b""
    return (
        b"HTTP/1.1 " + status + b"\r\n" + extra
        + b"Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
        + b"Content-Length: " + str(len(text)).encode() + b"\r\n\r\n"
        + (b"" if method == b"HEAD" else text)
    )  # fmt: skip


class _Plain(asyncio.Protocol):
    """Reads a plain request's head (bounded), answers it (unless not ``http``) and
    closes."""

    def __init__(self, transport: asyncio.Transport, done: asyncio.Future[None], http: bool):
        self.transport = transport
        self.head = b""
        self.done = done
        self.http = http

    def data_received(self, data: bytes) -> None:
        if not self.http:  # read first, so that the close is orderly
            self._answer(b"")
            return
        self.head += data
        end = self.head.find(b"\r\n\r\n")
        if end >= 0 or len(self.head) > MAX_PLAIN_HEAD:
            self._answer(self.head[: end if end >= 0 else MAX_PLAIN_HEAD])

    def eof_received(self) -> bool | None:
        self._answer(self.head)
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def _answer(self, head: bytes) -> None:
        if self.done.done():
            return
        if self.http:
            local = self.transport.get_extra_info("sockname")
            self.transport.write(plain_answer(head, local))
        self.transport.close()
        self.done.set_result(None)


class TlsStart:
    """The TLS side of :func:`tls_connection`'s class (a mixin before the wrapped class)."""

    tls_context: ssl.SSLContext
    tls_timeout_s: float
    _starting: asyncio.Task[None] | None = None

    def connection_made(self, transport: Any) -> None:
        self._raw = transport
        self._early: list[tuple[str, Any]] = []  # what came before the class took over
        self._ready = False
        transport.pause_reading()  # nothing is read before the first byte is known
        self._starting = asyncio.get_running_loop().create_task(self._start())

    async def _start(self) -> None:
        raw, loop = self._raw, asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.tls_timeout_s):
                first = await first_byte(raw)
                if first is not None and first != TLS_RECORD:
                    done = loop.create_future()
                    http = 0x41 <= first <= 0x5A  # A-Z: an HTTP method
                    raw.set_protocol(_Plain(raw, done, http))
                    raw.resume_reading()
                    await done
                    return
        except (OSError, TimeoutError):
            first = None
        if first is None:
            raw.abort()
            return
        try:
            secure = await loop.start_tls(
                raw,
                self,  # type: ignore[arg-type]  # a protocol once mixed into its class
                self.tls_context,
                server_side=True,
                ssl_handshake_timeout=self.tls_timeout_s,
            )
        except (OSError, ssl.SSLError, ConnectionError, TimeoutError):
            return  # start_tls closed the connection; asyncio logs a failed handshake
        self._ready = True
        super().connection_made(secure)  # type: ignore[misc]  # the wrapped class's
        for kind, arg in self._early:
            getattr(super(), kind)(*arg)

    def data_received(self, data: bytes) -> None:
        if self._ready:
            super().data_received(data)  # type: ignore[misc]  # the wrapped class's
        else:  # sent with the end of the handshake, before _start resumed
            self._early.append(("data_received", (data,)))

    def eof_received(self) -> bool | None:
        if self._ready:
            return super().eof_received()  # type: ignore[misc]  # the wrapped class's
        self._early.append(("eof_received", ()))
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._ready:
            super().connection_lost(exc)  # type: ignore[misc]  # the wrapped class's
        elif self._starting is not None and not self._starting.done():
            self._early.append(("connection_lost", (exc,)))
        # else: never handed over (plain HTTP answered, or dropped)


def tls_connection(
    base: type[ServerConnection], context: ssl.SSLContext, timeout_s: float
) -> type[ServerConnection]:
    """``base`` (a ``websockets`` connection class) on a port that speaks TLS, with plain
    ``http://`` answered (see the module docstring); ``timeout_s`` bounds the first byte,
    the handshake and a plain request's head."""
    attributes = {"tls_context": context, "tls_timeout_s": timeout_s}
    return type("TlsConnection", (TlsStart, base), attributes)
