"""The WebSocket server: one connection is one participant's full-duplex session.

A session reads client messages (JSON text frames, PCM16 binary frames) and hands them
to the :class:`Gateway`; a writer task sends what the :class:`OutputHub` delivers, from a
bounded outbox, so a slow client never holds up the runtime (it is disconnected when its
outbox overflows). A malformed message gets an ``error`` reply and the session goes on;
a dropped connection is a departure (``ParticipantLeft``).

Access (:class:`AccessPolicy`): a browser ``Origin`` must be the service's own page or
allow-listed (else HTTP 403); the device token comes in ``hello.token`` or an
``Authorization: Bearer`` header (a wrong header is refused with 401); a connection must
say a valid ``hello`` within ``hello_timeout_s`` (else it is closed 1008); connections
are capped in total and per client address (1013).
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Protocol

import anyio
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from edge.llm import ReportsCache

from ._access import TokenFile, bearer_token, origin_allowed, token_matches
from ._console import ConsolePages
from ._gateway import ClientError, Gateway
from ._hub import ParticipantTaken
from ._limits import AudioPacer, ConnectionSlots, LogLimiter
from ._protocol import (
    Bye,
    ContextUpdate,
    EndOfUtterance,
    ErrorMessage,
    Forget,
    Goodbye,
    Hello,
    Hold,
    Interrupt,
    ProtocolError,
    ServerMessage,
    SessionRequest,
    TextTurn,
    Welcome,
    new_participant_id,
    parse_client_message,
)
from ._redact import guard_library_logs
from ._sessions import Sessions
from ._tls import CertificateKeeper
from ._tls_port import tls_connection

log = logging.getLogger(__name__)
limited_log = LogLimiter(log)

SOURCE = "websocket"
MAX_FRAME_BYTES = 1 << 20
NORMAL_CLOSURE = 1000
POLICY_VIOLATION = 1008
TRY_AGAIN_LATER = 1013


@dataclass(frozen=True)
class AccessPolicy:
    """Who may open a session. ``token`` None: no token needed (``--insecure``)."""

    token: str | TokenFile | None = None  # a TokenFile follows `edge token --rotate`
    allowed_origins: tuple[str, ...] = ()
    hello_timeout_s: float = 10.0
    max_per_address: int = 8
    audio_burst_s: float = 30.0  # microphone audio taken at once; after that ...
    audio_rate: float = 2.0  # ... at most this many seconds of audio per second

    def current_token(self) -> str | None:
        """The token a new connection must present now (None: none needed)."""
        return self.token.current() if isinstance(self.token, TokenFile) else self.token


class PortFront(Protocol):
    """Another protocol on this port (``edge.api``'s HTTP APIs): its connection class sees
    each request first and keeps those it serves; its WebSocket paths get its handler."""

    def connection_class(self) -> type[ServerConnection]: ...

    def upgrade(self, path: str) -> Callable[[ServerConnection], Awaitable[None]] | None: ...

    async def aclose(self) -> None: ...


class _Refused(Exception):
    """The hello was refused in a way that ends the connection (close code 1008 with
    ``reason``): a wrong or missing token, a malformed hello."""

    def __init__(self, message: str, reason: str = "device access token required") -> None:
        super().__init__(message)
        self.reason = reason


class WebSocketSession:
    """One connection; ``run`` returns when the client leaves or the connection drops."""

    def __init__(
        self,
        ws: ServerConnection,
        gateway: Gateway,
        *,
        session_id: int,
        outbox_size: int,
        access: AccessPolicy | None = None,
    ) -> None:
        self.ws = ws
        self.gateway = gateway
        self.session_id = session_id
        self.access = access or AccessPolicy()
        request = ws.request
        header = request.headers.get("Authorization") if request is not None else None
        expected = self.access.current_token()
        self._authorized = expected is None or (
            header is not None and token_matches(expected, bearer_token(header))
        )
        self.participant_id: str | None = None
        self.hello: Hello | None = None
        self._send, self._receive = anyio.create_memory_object_stream[
            tuple[ServerMessage, bytes | None]
        ](outbox_size)
        self._scope: anyio.CancelScope | None = None
        self._reading = anyio.CancelScope()  # cancelled: stop reading, send what is queued
        self._leave_reason = "connection closed"
        self._last_audio_error = ""
        self._close: tuple[int, str] | None = None  # code and reason, when we end it
        self._pacer = AudioPacer(self.access.audio_burst_s, self.access.audio_rate)
        self._departed = False

    @property
    def wants_audio(self) -> bool:
        return self.hello is not None and self.hello.want_audio and self.gateway.voice

    def deliver(self, message: ServerMessage, payload: bytes | None = None) -> None:
        """Queue a message for the client (called by the hub; never blocks)."""
        try:
            self._send.send_nowait((message, payload))
        except anyio.WouldBlock:
            if self._leave_reason != "client too slow":
                log.warning("participant %s reads too slowly; disconnecting", self.participant_id)
                self._leave_reason = "client too slow"
            if self._scope is not None:
                self._scope.cancel()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    def replace(self, reason: str) -> None:
        """Another connection resumed this participant: end this one (it departs as
        usual, before its close handshake, so a dead link holds nobody up)."""
        self._leave_reason = "replaced by a newer connection"
        self._close = (NORMAL_CLOSURE, reason)
        if self._scope is not None:
            self._scope.cancel()

    def forgotten(self) -> None:
        """The participant was erased on the device (`edge sessions forget`): the reading
        stops, the goodbye goes out after what is queued, and the session departs."""
        self._leave_reason = "forget"
        self._close = (NORMAL_CLOSURE, "this participant was forgotten on the device")
        self.deliver(Goodbye(reason="forgotten"))
        self._reading.cancel()

    async def run(self) -> None:
        try:
            with anyio.CancelScope() as self._scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._writer, self._receive)
                    with self._reading:
                        await self._reader()
                    await self._send.aclose()  # the writer drains the outbox, then ends
        finally:
            self._send.close()
            if self.participant_id is not None and self.hello is not None and not self._departed:
                await self._depart(self.participant_id, self._leave_reason)
        if self._close is not None:
            await self.ws.close(*self._close)

    async def _depart(self, participant_id: str, reason: str) -> None:
        """Publish the departure; the participant's next connection waits for it."""
        self._departed = True
        async with self.gateway.hub.departure(participant_id, self):
            await self.gateway.leave(participant_id, reason, SOURCE)

    async def _writer(self, receive: Any) -> None:
        async with receive:
            async for message, payload in receive:
                try:
                    await self.ws.send(message.model_dump_json())
                    if payload:
                        await self.ws.send(payload)
                except ConnectionClosed:
                    return

    async def _reader(self) -> None:
        try:
            # only hello (or errors) until joined; the deadline bounds receiving it, not
            # the wait for the participant's previous connection to depart (bounded apart)
            deadline = anyio.current_time() + self.access.hello_timeout_s
            while self.hello is None:
                with anyio.move_on_after(deadline - anyio.current_time()) as waiting:
                    raw = await self.ws.recv()
                if waiting.cancelled_caught:
                    self._close = (
                        POLICY_VIOLATION,
                        f"no hello within {self.access.hello_timeout_s:g} s",
                    )
                    return
                if not await self._handle(raw):
                    return
            async for raw in self.ws:
                if not await self._handle(raw):
                    return
        except ConnectionClosed:
            pass
        except _Refused as exc:  # the error goes out first, then the close (in run)
            self.deliver(ErrorMessage(message=str(exc), in_reply_to="hello"))
            self._close = (POLICY_VIOLATION, exc.reason)

    def _error(self, message: str, in_reply_to: str | None) -> None:
        self.deliver(ErrorMessage(message=message, in_reply_to=in_reply_to))

    async def _handle(self, raw: str | bytes) -> bool:
        """Handle one frame; False ends the session."""
        if isinstance(raw, bytes):
            await self._audio(raw)
            return True
        try:
            message = parse_client_message(raw)
        except ProtocolError as exc:
            if self.hello is None and exc.message_type == "hello":
                raise _Refused(str(exc), "malformed hello") from None  # like a wrong token
            self._error(str(exc), exc.message_type)
            return True
        try:
            if isinstance(message, Hello):
                await self._hello(message)
            elif self.hello is None or self.participant_id is None:
                raise ClientError(f"send hello before {message.type!r}")
            elif isinstance(message, TextTurn):
                await self.gateway.query(self.participant_id, message.text, SOURCE)
            elif isinstance(message, Interrupt):
                await self.gateway.interrupt(self.participant_id, message.request_id, SOURCE)
            elif isinstance(message, EndOfUtterance):
                await self.gateway.end_of_utterance(self.participant_id, SOURCE)
            elif isinstance(message, Hold):
                await self.gateway.hold(self.participant_id, SOURCE)
            elif isinstance(message, ContextUpdate):
                await self.gateway.context(self.participant_id, message.topic, message.text, SOURCE)
            elif isinstance(message, Bye):
                self._leave_reason = "bye"
                self.deliver(Goodbye(reason="bye"))
                return False
            elif isinstance(message, Forget):
                await self._forget()
                return False
            elif isinstance(message, SessionRequest):
                self.deliver(await self._sessions().answer(self.participant_id, message))
        except ClientError as exc:
            self._error(str(exc), message.type)
        except _Refused:
            raise
        except Exception as exc:  # a bug or a failing subscriber: report it, keep the session
            limited_log.log(
                logging.ERROR,
                f"handle {message.type}",
                "handling %s from %s failed",
                message.type,
                self.participant_id,
                exc_info=True,
            )
            self._error(f"internal error handling {message.type!r}: {exc}", message.type)
        return True

    async def _hello(self, hello: Hello) -> None:
        if self.hello is not None:
            raise ClientError(f"already joined as {self.participant_id!r}")
        if not self._authorized:
            if not token_matches(self.access.current_token(), hello.token):
                raise _Refused(self._token_needed(hello.token is None))
            self._authorized = True
        pid = hello.participant_id or new_participant_id()
        await self._arrive(pid, hello.resume)
        token, resumed = None, None
        if self.gateway.sessions is not None:
            try:
                token, resumed = await self.gateway.sessions.open(pid, hello.resume)
            except BaseException:
                self.gateway.hub.detach(pid, self)
                raise
            if hello.protocol < 2:  # protocol 1 clients never see the session fields
                token, resumed = None, None
        self.participant_id, self.hello = pid, hello
        g = self.gateway
        self.deliver(
            Welcome(
                participant_id=pid,
                server=g.server,
                profile=g.profile,
                models=g.models,
                context_topics=list(g.context_topics),
                audio_out_rate=g.audio_out_rate if self.wants_audio else None,
                session_token=token,
                resumed=resumed,
            )
        )

        try:
            await g.join(pid, hello.display_name, SOURCE)
        except ClientError:
            g.hub.detach(pid, self)
            self.participant_id, self.hello = None, None
            raise

    def _token_needed(self, missing: bool) -> str:
        """Why the hello is refused, in the words of the client's person: a browser page
        (it sends ``Origin``) is opened with the token in its address; a program passes it."""
        request = self.ws.request
        if request is not None and request.headers.get("Origin") is not None:
            return (
                "this page needs the device's access token"
                if missing
                else "this page holds an old or wrong device access token"
            ) + (
                ": open the console address `edge serve` printed (it ends in ?token=…), "
                "or add ?token= and the token `edge token` shows on the device to this "
                "page's address"
            )
        return (
            "this service needs its device access token: pass --token to `edge client` "
            "(EdgeClient(token=...), or hello.token); `edge token` on the service's machine "
            "shows it"
            if missing
            else "wrong device access token (`edge token` on the service's machine shows "
            "the current one; pass it with --token)"
        )

    async def _arrive(self, pid: str, resume: str | None) -> None:
        """Attach once the participant's previous connection has departed; a resume with
        the session token takes over a connection still attached (a link gone silent)."""
        hub, sessions = self.gateway.hub, self.gateway.sessions
        take_over = resume is not None and sessions is not None and pid in hub.connected()
        if take_over:
            assert sessions is not None
            await sessions.check(pid, resume)
        try:
            await hub.arrive(pid, self, take_over=take_over)
        except ParticipantTaken as exc:
            raise ClientError(str(exc)) from None

    def _sessions(self) -> Sessions:
        if self.gateway.sessions is None:
            raise ClientError("this server keeps no sessions")
        return self.gateway.sessions

    async def _forget(self) -> None:
        """Leave (the running answer drains), erase the participant, then say bye."""
        pid = self.participant_id
        assert pid is not None
        sessions = self._sessions()
        self._departed = True
        async with self.gateway.hub.departure(pid, self):  # a reconnect waits for the erase
            await self.gateway.leave(pid, "forget", SOURCE)
            await sessions.forget(pid)
        self.deliver(Goodbye(reason="forgotten"))

    async def _audio(self, pcm: bytes) -> None:
        if self.hello is None or self.participant_id is None:
            self._audio_error("send hello before audio frames")
            return
        fmt = self.hello.audio
        if fmt is None:
            self._audio_error("binary audio frames need an audio format in hello")
            return
        try:
            await self.gateway.audio(
                self.participant_id, pcm, fmt.sample_rate, fmt.channels, SOURCE
            )
        except ClientError as exc:
            self._audio_error(str(exc))
        await self._pacer.take(len(pcm) / (2 * fmt.channels * fmt.sample_rate))

    def _audio_error(self, message: str) -> None:
        """Audio arrives ten times a second: the same problem is reported once."""
        if message != self._last_audio_error:
            self._last_audio_error = message
            self._error(message, "audio")


class WebSocketServer:
    """Accepts sessions on ``host:port`` (port 0 picks one); ``async with`` to run it."""

    def __init__(
        self,
        gateway: Gateway,
        host: str,
        port: int,
        *,
        max_sessions: int = 32,
        outbox_size: int = 2048,
        access: AccessPolicy | None = None,
        tls: CertificateKeeper | None = None,
    ) -> None:
        self.gateway = gateway
        self.tls = tls  # None: plain http:// and ws://
        self.host = host
        self.port = port
        self.max_sessions = max_sessions
        self.outbox_size = outbox_size
        self.access = access or AccessPolicy()
        self.slots = ConnectionSlots(max_sessions, self.access.max_per_address)
        self.console = ConsolePages()
        self.sessions: dict[int, WebSocketSession] = {}
        self._ids = itertools.count(1)
        self._server: Server | None = None
        self.front: PortFront | None = None  # set before entering (edge.api.serve_api)

    @property
    def bound_port(self) -> int:
        if self._server is None:
            raise RuntimeError("the WebSocket server is not running")
        return int(self._server.sockets[0].getsockname()[1])

    async def __aenter__(self) -> WebSocketServer:
        guard_library_logs()
        self._server = await serve(
            self._connection,
            self.host,
            self.port,
            max_size=MAX_FRAME_BYTES,
            compression=None,  # PCM does not compress; deflate would cost CPU on the device
            open_timeout=self.access.hello_timeout_s,  # the HTTP upgrade is on the same clock
            process_request=self._http,
            create_connection=self._connection_class(),
        )
        return self

    def _connection_class(self) -> type[ServerConnection] | None:
        """The front's connections (or websockets' own), over TLS unless ``tls`` is None: a
        handshake is bounded like the hello (a client that starts one and stalls is
        dropped), and a plain ``http://`` request is told to use ``https://``."""
        base = self.front.connection_class() if self.front else None
        if self.tls is None:
            return base
        timeout_s = self.access.hello_timeout_s
        return tls_connection(base or ServerConnection, self.tls.context, timeout_s)

    async def __aexit__(self, *exc_info: object) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()  # closes every session (code 1001); each publishes its departure
            with anyio.CancelScope(shield=True):
                if self.front is not None:
                    await self.front.aclose()
                await server.wait_closed()

    def health(self) -> dict[str, Any]:
        g = self.gateway
        backends = g.backends() if g.backends is not None else None
        down = backends is not None and any(b.get("state") == "down" for b in backends.values())
        return {
            "status": "degraded" if down else "ok",  # up; a model's server is down
            "server": g.server,
            "profile": g.profile,
            "models": g.models,
            "voice": g.voice,
            "sessions": len(self.sessions),
            "participants": len(g.hub.connected()),
            **({"speculation": g.speculation.as_dict()} if g.speculation is not None else {}),
            **({"store": g.sessions.health()} if g.sessions is not None else {}),
            **({"tls": self.tls.certificate.describe()} if self.tls is not None else {}),
            **({"backends": backends} if backends is not None else {}),
            **({"model_state": g.llm.cache_stats()} if isinstance(g.llm, ReportsCache) else {}),
        }

    def _http(self, connection: ServerConnection, request: Request) -> Response | None:
        """Plain HTTP ``GET /health`` answers a JSON status (for monitoring), ``GET /`` the
        browser console's page and ``/console/…`` its files; a foreign
        browser ``Origin`` gets 403 and a wrong bearer token 401; anything else goes on to
        the WebSocket handshake."""
        if request.path.split("?")[0] == "/health":
            response = connection.respond(HTTPStatus.OK, json.dumps(self.health()) + "\n")
            del response.headers["Content-Type"]
            response.headers["Content-Type"] = "application/json"
            return response
        page = self.console.respond(request)  # the browser console (edge/server/_console.py)
        if page is not None:
            return page
        headers = request.headers
        if not origin_allowed(
            headers.get("Origin"), headers.get("Host"), self.access.allowed_origins
        ):
            return connection.respond(
                HTTPStatus.FORBIDDEN,
                "this page's origin may not use the service (see allowed_origins)\n",
            )
        authorization = headers.get("Authorization")
        if authorization is not None and not token_matches(
            self.access.current_token(), bearer_token(authorization)
        ):
            return connection.respond(HTTPStatus.UNAUTHORIZED, "wrong device access token\n")
        return None

    async def _connection(self, ws: ServerConnection) -> None:
        address = str(ws.remote_address[0]) if ws.remote_address else "?"
        refused = self.slots.acquire(address)
        if refused is not None:
            await ws.close(TRY_AGAIN_LATER, refused)
            return
        path = ws.request.path.split("?")[0] if ws.request is not None else ""
        route = self.front.upgrade(path) if self.front is not None else None
        if route is not None:
            try:
                await route(ws)
            finally:
                self.slots.release(address)
            return
        sid = next(self._ids)
        session = WebSocketSession(
            ws, self.gateway, session_id=sid, outbox_size=self.outbox_size, access=self.access
        )
        self.sessions[sid] = session
        try:
            await session.run()
        except Exception:
            limited_log.log(logging.ERROR, "session", "session %s failed", sid, exc_info=True)
        finally:
            del self.sessions[sid]
            self.slots.release(address)
