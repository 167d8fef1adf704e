"""One port, two protocols: the WebSocket server's connections hand plain HTTP API requests
to an HTTP/1.1 server.

The service's port is served by ``websockets`` (the session protocol, the console,
``/health``), whose HTTP parser takes only the ``GET`` of an upgrade. Each connection is a
:class:`FrontConnection` (a ``websockets`` ``ServerConnection``, passed to ``serve`` as
``create_connection``) that reads the request head before ``websockets`` sees it: a request
under ``/v1/`` or ``/api/`` that is not a WebSocket upgrade moves the connection (after TLS,
on the same transport) to uvicorn's ``h11`` protocol, which runs the ASGI app of
:mod:`edge.api` with keep-alive, chunked streaming, flow control and disconnect detection.
Everything else (``/v1/realtime`` included) goes on to ``websockets`` unchanged.

A head not complete within ``head_timeout_s`` (the hello timeout), or over
:data:`MAX_HEAD_BYTES`, ends the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, cast

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState
from websockets.asyncio.server import ServerConnection

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 16 * 1024
API_PREFIXES = (b"/v1/", b"/api/")
SHUTDOWN_GRACE_S = 2.0


def is_api_request(head: bytes) -> bool:
    """Whether a request head (up to its blank line) is for the HTTP API: its path is
    under ``/v1/`` or ``/api/`` and it does not ask for a WebSocket upgrade."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[1].startswith(API_PREFIXES):
        return False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"upgrade" and b"websocket" in value.lower():
            return False
    return True


class HttpPort:
    """The HTTP/1.1 side of the port: uvicorn's protocol over an ASGI ``app``."""

    def __init__(self, app: Any, *, head_timeout_s: float = 10.0, keep_alive_s: float = 5.0):
        self.config = uvicorn.Config(
            app,
            lifespan="off",
            http="h11",
            ws="none",
            log_config=None,
            access_log=False,
            proxy_headers=False,
            server_header=False,
            date_header=True,
            timeout_keep_alive=int(keep_alive_s),
            h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        )
        self.config.load()
        self.state = ServerState()
        self.head_timeout_s = head_timeout_s

    def take(self, transport: asyncio.Transport, head: bytes) -> None:
        """Serve the connection from now on; ``head`` is what was read of it so far."""
        protocol = H11Protocol(self.config, self.state, {})
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        protocol.data_received(head)

    async def aclose(self) -> None:
        """Close idle connections, let running requests finish for a moment, then end
        them (the service is stopping)."""
        for connection in list(self.state.connections):
            connection.shutdown()
        tasks = list(self.state.tasks)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=SHUTDOWN_GRACE_S)
            for task in pending:
                task.cancel()
        for connection in list(self.state.connections):
            with contextlib.suppress(Exception):
                connection.transport.abort()

    def connection_class(self) -> type[ServerConnection]:
        port = self

        class Connection(FrontConnection):
            http = port

        return Connection


class FrontConnection(ServerConnection):
    """A ``websockets`` connection that first reads the request head and hands API requests
    to :attr:`http` (see the module docstring)."""

    http: HttpPort

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # websockets' own setup (its handshake task) waits until the head says it is ours
        self._front_transport = cast(asyncio.Transport, transport)  # a socket's: abort()s
        self._head = b""
        self._decided = False
        self._websocket = False  # websockets' own connection_made has run
        self._timer = self.loop.call_later(self.http.head_timeout_s, self._too_slow)

    def _too_slow(self) -> None:
        if not self._decided:
            self._decided = True
            self._front_transport.abort()

    def data_received(self, data: bytes) -> None:
        if self._decided:
            super().data_received(data)
            return
        self._head += data
        end = self._head.find(b"\r\n\r\n")
        if end < 0 and len(self._head) <= MAX_HEAD_BYTES:
            return
        self._decided = True
        self._timer.cancel()
        head, self._head = self._head, b""
        transport: Any = self._front_transport
        if end >= 0 and is_api_request(head[:end]):
            self.http.take(transport, head)
            return
        self._websocket = True
        super().connection_made(transport)  # websockets takes it from here
        super().data_received(head)

    def eof_received(self) -> None:
        if not self._websocket:
            self._decided = True
            self._timer.cancel()
            return  # the transport closes itself
        super().eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._websocket:
            self._decided = True
            self._timer.cancel()
            return
        super().connection_lost(exc)
