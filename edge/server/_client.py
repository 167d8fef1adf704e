"""A small WebSocket client for the session protocol (``edge client`` and the tests)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from websockets.asyncio.client import ClientConnection, connect
from websockets.uri import parse_uri

from ._access import is_this_machine, read_token
from ._pins import ServerTrust, peer_certificate
from ._protocol import (
    AudioFormat,
    AudioMessage,
    Compacted,
    ContextView,
    ErrorMessage,
    Hello,
    HistoryPage,
    Imported,
    QueryEcho,
    Reply,
    ServerMessage,
    Status,
    TranscriptMessage,
    Welcome,
    parse_server_message,
)
from ._redact import guard_library_logs
from ._settings import default_data_dir
from ._tls import local_fingerprint


class ClientRequestError(RuntimeError):
    """The service answered a request with an error (the text is the server's)."""


class HelloRefused(ConnectionError):
    """The service answered ``hello`` with an error (token, session): it was reached, and
    said no; the text is the server's."""


ROUTER_SOURCE = "router"  # the source of the router's own messages (edge.routing)


def local_token(url: str) -> str | None:
    """The device access token for a service on this machine (a loopback address, its
    host name as ``edge serve`` prints it, or one of its addresses): ``EDGE_TOKEN``, else
    ``<data_dir>/token`` (``EDGE_DATA_DIR`` or the default). Never looked up for another
    host's URL, so a local token is not handed to a remote service."""
    try:
        host = parse_uri(url).host
    except ValueError:
        return None
    if not is_this_machine(host):
        return None
    env = os.environ.get("EDGE_TOKEN")
    if env:
        return env
    data_dir = os.environ.get("EDGE_DATA_DIR")
    return read_token(Path(data_dir) if data_dir else default_data_dir())


def _local_data_dir() -> Any:
    return os.environ.get("EDGE_DATA_DIR") or default_data_dir()


def default_trust(url: str) -> ServerTrust:
    """Pin on first use (the user's pin store); a service on this machine is also known
    by the certificate in its data directory."""
    try:
        local = is_this_machine(parse_uri(url).host)
    except ValueError:
        local = False
    return ServerTrust(local=local_fingerprint(_local_data_dir()) if local else None)


def reply_text(replies: list[Reply]) -> str:
    """One text from a turn's reply frames: the router's messages (each complete in
    itself) first, then each destination's streamed deltas joined."""
    ordered = sorted(replies, key=lambda r: (r.source != ROUTER_SOURCE, r.source, r.sequence))
    parts: list[str] = []
    stream = ""
    for frame in ordered:
        if frame.source == ROUTER_SOURCE:
            parts.append(frame.text.strip())
        else:
            stream += frame.text
    parts.append(stream.strip())
    return " ".join(p for p in parts if p)


@dataclass
class TurnResult:
    """Everything the server sent for one turn, in arrival order."""

    request_id: str
    query: str
    replies: list[Reply] = field(default_factory=list)
    transcripts: list[TranscriptMessage] = field(default_factory=list)
    audio: list[tuple[AudioMessage, bytes]] = field(default_factory=list)
    errors: list[ErrorMessage] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The reply text: the router's messages first, then each destination's stream."""
        return reply_text(self.replies)

    @property
    def pcm(self) -> bytes:
        return b"".join(data for _, data in self.audio)


_SPOKEN = ("audio", "end_of_utterance")


def _refuses(message: ServerMessage, text: str | None) -> bool:
    """Whether ``message`` is the error that ends a turn before it began (see
    :meth:`EdgeClient.collect_turn`)."""
    if not isinstance(message, ErrorMessage):
        return False
    return message.in_reply_to == "text" if text is not None else message.in_reply_to in _SPOKEN


class EdgeClient:
    """``async with EdgeClient(url) as client:`` connects and says hello.

    ``token`` is the device access token; None finds it on this machine for a loopback
    URL (:func:`local_token`), ``""`` sends none. ``trust`` says which certificate a
    ``wss://`` service may show (default: :func:`default_trust`).

    ``receive()`` returns the next server message (with the binary frame following an
    ``audio`` header); ``ask(text)`` sends a text turn and collects its reply.
    """

    open_timeout: float = 10.0
    """Seconds for the connection and the service's ``welcome`` (set on an instance to change)."""

    def __init__(
        self,
        url: str,
        *,
        participant_id: str | None = None,
        display_name: str = "",
        audio: AudioFormat | None = None,
        want_audio: bool = False,
        token: str | None = None,
        resume: str | None = None,
        trust: ServerTrust | None = None,
    ) -> None:
        self.url = url
        self.trust = trust  # for wss:// (None: default_trust(url), pinning on first use)
        self.tls_fingerprint: str | None = None  # the key the service showed (wss://)
        if token is None:
            token = local_token(url)
        self.hello = Hello(
            type="hello",
            participant_id=participant_id,
            display_name=display_name,
            audio=audio,
            want_audio=want_audio,
            token=token or None,
            resume=resume,
        )
        self.welcome: Welcome | None = None
        self.ws: ClientConnection | None = None
        self.backlog: list[tuple[ServerMessage, bytes | None]] = []

    @property
    def participant_id(self) -> str:
        if self.welcome is None:
            raise RuntimeError("not connected")
        return self.welcome.participant_id

    @property
    def session_token(self) -> str | None:
        """What to pass as ``resume=`` to come back to this participant's context."""
        if self.welcome is None:
            raise RuntimeError("not connected")
        return self.welcome.session_token

    # -- session features ----------------------------------------------------------------

    async def request(self, message: dict[str, Any], reply_type: str, limit_s: float = 30.0) -> Any:
        """Send a session request and return the server's ``reply_type`` answer (other
        messages arriving meanwhile stay queued for :meth:`receive`); an ``error`` in
        reply to it raises ``ClientRequestError``."""
        await self.send(message)
        kept: list[tuple[ServerMessage, bytes | None]] = []
        try:
            with anyio.fail_after(limit_s):
                while True:
                    reply, payload = await self._next()
                    if reply.type == reply_type:
                        return reply
                    if isinstance(reply, ErrorMessage) and reply.in_reply_to == message["type"]:
                        raise ClientRequestError(reply.message)
                    kept.append((reply, payload))
        finally:
            self.backlog.extend(kept)

    async def history(self, offset: int = 0, limit: int = 50) -> HistoryPage:
        """A page of the whole conversation (everything recorded), oldest first."""
        return await self.request({"type": "history", "offset": offset, "limit": limit}, "history")

    async def context_view(self) -> ContextView:
        """The model's current view: blocks, per-section bytes used against budgets."""
        return await self.request({"type": "context_view"}, "context_view")

    async def compact(
        self,
        *,
        keep_last: int | None = None,
        summary: str | None = None,
        section: str | None = None,
    ) -> Compacted:
        message = {"type": "compact", "keep_last": keep_last, "summary": summary}
        message["section"] = section
        return await self.request({k: v for k, v in message.items() if v is not None}, "compacted")

    async def last_compaction(self) -> dict[str, Any] | None:
        reply = await self.request({"type": "last_compaction"}, "last_compaction")
        return reply.report

    async def export(self) -> dict[str, Any]:
        """This participant as a versioned JSON document (``edge.session/1``)."""
        return (await self.request({"type": "export"}, "export")).document

    async def import_session(self, document: dict[str, Any]) -> Imported:
        """Replace this participant's conversation with an exported one."""
        return await self.request({"type": "import", "document": document}, "imported")

    async def forget(self) -> None:
        """Erase this participant on the service; the connection then closes."""
        await self.request({"type": "forget"}, "bye")

    async def __aenter__(self) -> EdgeClient:
        guard_library_logs()  # the hello carries tokens: never into a -vv log
        secure = parse_uri(self.url).secure
        trust = (self.trust or default_trust(self.url)) if secure else None
        tls: dict[str, Any] = {"ssl": trust.context()} if trust is not None else {}
        self.ws = await connect(
            self.url,
            open_timeout=self.open_timeout,
            compression=None,
            max_size=1 << 22,
            **tls,
        )
        if trust is not None:  # before the hello (and its token) goes out
            await self._check_certificate(trust)
        await self.send(self.hello.model_dump(exclude_none=True))
        with anyio.fail_after(self.open_timeout):
            while self.welcome is None:
                message, payload = await self.receive()
                if isinstance(message, Welcome):
                    self.welcome = message
                elif isinstance(message, ErrorMessage):
                    raise HelloRefused(f"the server refused hello: {message.message}")
                else:
                    self.backlog.append((message, payload))
        return self

    async def _check_certificate(self, trust: ServerTrust) -> None:
        assert self.ws is not None
        uri = parse_uri(self.url)
        try:
            self.tls_fingerprint = trust.check(
                f"{uri.host}:{uri.port}", peer_certificate(self.ws.transport)
            )
        except BaseException:
            await self.ws.close()
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        if self.ws is not None:
            await self.ws.close()

    async def send(self, message: dict[str, Any] | str) -> None:
        assert self.ws is not None, "not connected"
        await self.ws.send(message if isinstance(message, str) else json.dumps(message))

    async def hold(self) -> None:
        """Push-to-talk pressed: a pause does not end the utterance until
        :meth:`end_of_utterance`."""
        await self.send({"type": "hold"})

    async def end_of_utterance(self) -> None:
        """Push-to-talk release: the server ends the utterance now (no silence needed)."""
        await self.send({"type": "end_of_utterance"})

    async def send_audio(self, pcm: bytes) -> None:
        assert self.ws is not None, "not connected"
        await self.ws.send(pcm)

    async def speak(
        self,
        pcm: bytes,
        *,
        realtime: bool = True,
        chunk_ms: int = 32,
        trailing_silence_s: float = 1.5,
    ) -> float:
        """Send a recording (PCM16 in the hello's audio format) as microphone frames of
        ``chunk_ms`` (32: one window of the service's VAD at 16 kHz, as the console sends
        them), at real-time pace unless ``realtime`` is False, then silence so the
        utterance ends.
        Returns the ``perf_counter`` time the last speech frame was sent."""
        fmt = self.hello.audio
        if fmt is None:
            raise ValueError("speak() needs an audio format in hello (audio=AudioFormat(...))")
        frame_bytes = 2 * fmt.channels
        step = max(1, fmt.sample_rate * chunk_ms // 1000) * frame_bytes
        # one stream: the silence goes on from the speech's last frame, so every frame but
        # the very last is whole (the service's VAD windows stay aligned with them)
        audio = pcm + bytes(int(fmt.sample_rate * trailing_silence_s) * frame_bytes)
        start = time.perf_counter()
        spoken_until = start
        for n, offset in enumerate(range(0, len(audio), step)):
            await self.send_audio(audio[offset : offset + step])
            if offset < len(pcm):
                spoken_until = time.perf_counter()
            if realtime:
                await anyio.sleep(max(0.0, start + (n + 1) * chunk_ms / 1000 - time.perf_counter()))
        return spoken_until

    async def receive(self) -> tuple[ServerMessage, bytes | None]:
        if self.backlog:
            return self.backlog.pop(0)
        return await self._next()

    async def _next(self) -> tuple[ServerMessage, bytes | None]:
        assert self.ws is not None, "not connected"
        raw = await self.ws.recv()

        if isinstance(raw, bytes):
            raise ValueError("binary frame without an audio header")
        message = parse_server_message(raw)
        payload = None
        if isinstance(message, AudioMessage) and message.bytes:
            data = await self.ws.recv()
            if not isinstance(data, bytes) or len(data) != message.bytes:
                raise ValueError("audio header not followed by its binary frame")
            payload = data
        return message, payload

    async def collect_turn(
        self,
        *,
        text: str | None = None,
        limit_s: float = 60.0,
        on_message: Callable[[ServerMessage], None] | None = None,
    ) -> TurnResult:
        """Receive until a turn of this participant completes: its ``query`` echo, then
        ``status: idle``, then (when audio was asked for) the final audio chunk of every
        source that replied. ``text`` None takes the next turn, spoken or typed.

        A turn the service refused ends at its ``error``, before any echo: for ``text``,
        the error in reply to a ``text`` message; for a spoken turn, one in reply to
        ``audio`` or ``end_of_utterance`` (``no_speech`` when nothing was heard). The
        result then has no ``request_id`` and the error in ``errors``."""
        result: TurnResult | None = None
        transcripts: list[TranscriptMessage] = []
        idle = False
        speaks = bool(self.welcome and self.welcome.audio_out_rate)
        spoken: set[str] = set()

        def done() -> bool:
            if result is None or not idle:
                return False
            if not speaks:
                return True
            return {r.source for r in result.replies if r.text.strip()} <= spoken

        with anyio.fail_after(limit_s):
            while not done():
                message, payload = await self.receive()
                if on_message is not None:
                    on_message(message)
                if result is None and _refuses(message, text):
                    assert isinstance(message, ErrorMessage)
                    return TurnResult("", "", transcripts=transcripts, errors=[message])
                if isinstance(message, TranscriptMessage):
                    (result.transcripts if result is not None else transcripts).append(message)
                elif isinstance(message, QueryEcho):
                    if result is None and (text is None or message.text == text):
                        result = TurnResult(
                            message.request_id, message.text, transcripts=transcripts
                        )
                elif result is None:
                    continue
                elif isinstance(message, Reply) and message.request_id == result.request_id:
                    result.replies.append(message)
                elif isinstance(message, AudioMessage) and message.request_id == result.request_id:
                    result.audio.append((message, payload or b""))
                    if message.final:
                        spoken.add(message.source)
                elif isinstance(message, ErrorMessage):
                    result.errors.append(message)
                elif isinstance(message, Status) and message.state == "idle":
                    idle = True
        assert result is not None
        return result

    async def ask(
        self,
        text: str,
        *,
        limit_s: float = 60.0,
        on_message: Callable[[ServerMessage], None] | None = None,
    ) -> TurnResult:
        await self.send({"type": "text", "text": text})
        return await self.collect_turn(text=text, limit_s=limit_s, on_message=on_message)
