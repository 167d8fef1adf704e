"""A Wyoming server (the Home Assistant voice protocol): ``asr``, ``tts`` and ``handle``.

* ``describe`` → ``info`` naming the models.
* ``asr``: ``transcribe`` (optional), ``audio-start``, ``audio-chunk``..., ``audio-stop``
  → ``transcript`` (the whole recording through the service's speech-to-text model).
* ``tts``: ``synthesize`` → ``audio-start``, ``audio-chunk``..., ``audio-stop``.
* ``handle``: ``transcript`` → ``handled`` (the answer of router + conversation, as for
  any participant) or ``not-handled``, echoing the transcript's context. A transcript
  whose context names a ``conversation_id`` (Home Assistant's) is a turn of that
  conversation's participant, kept across connections until idle (see
  :mod:`._conversations`); without one, the connection is the participant
  (``wyoming-N``): joined at its first turn, gone when the connection closes.

Bad input gets a Wyoming ``error`` event naming the problem and the connection stays open.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from dataclasses import dataclass, field
from functools import partial

import anyio
import numpy as np
from anyio.abc import TaskGroup
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event
from wyoming.handle import Handled, NotHandled
from wyoming.info import (
    AsrModel,
    AsrProgram,
    Attribution,
    Describe,
    HandleModel,
    HandleProgram,
    Info,
    TtsProgram,
    TtsVoice,
)
from wyoming.server import AsyncEventHandler, AsyncTcpServer
from wyoming.tts import Synthesize

from edge.voice import (
    AudioFormatError,
    NothingToSpeakError,
    SpeechToText,
    TextToSpeech,
    chunk_pcm,
    float_to_pcm16,
    pcm16_to_float,
    resample,
)
from edge.voice._audio import STT_RATE, check_format

from ._client import reply_text
from ._conversations import Conversations
from ._gateway import ClientError, Gateway
from ._hub import ParticipantTaken
from ._protocol import Reply, ServerMessage, Status

log = logging.getLogger(__name__)

SOURCE = "wyoming"
ATTRIBUTION = Attribution(name="xr-edge", url="https://github.com/")
CHUNK_MS = 100
MAX_ASR_SECONDS = 120


@dataclass
class WyomingBackend:
    """What the Wyoming handlers use; ``stt``/``tts`` None turn that domain off."""

    gateway: Gateway
    stt: SpeechToText | None
    tts: TextToSpeech | None
    models: dict[str, str]
    version: str
    handle_timeout_s: float = 60.0
    conversations: Conversations = field(init=False)

    def __post_init__(self) -> None:
        self.conversations = Conversations(self.gateway)

    def info(self) -> Info:
        def program(cls, name: str, description: str, **kw):  # type: ignore[no-untyped-def]
            return cls(
                name=name,
                attribution=ATTRIBUTION,
                installed=True,
                description=description,
                version=self.version,
                **kw,
            )

        asr = (
            [
                program(
                    AsrProgram,
                    "edge-asr",
                    "faster-whisper speech to text",
                    models=[
                        program(
                            AsrModel,
                            self.models.get("stt", "stt"),
                            "speech to text",
                            languages=["en"],
                        )
                    ],
                )
            ]
            if self.stt is not None
            else []
        )
        tts = (
            [
                program(
                    TtsProgram,
                    "edge-tts",
                    "Piper text to speech",
                    voices=[
                        program(
                            TtsVoice, self.models.get("tts", "tts"), "voice", languages=["en_US"]
                        )
                    ],
                )
            ]
            if self.tts is not None
            else []
        )
        handle = [
            program(
                HandleProgram,
                "edge-agent",
                "router + conversation on the local LLM",
                models=[
                    program(
                        HandleModel, self.models.get("llm", "llm"), "conversation", languages=["en"]
                    )
                ],
            )
        ]
        return Info(asr=asr, tts=tts, handle=handle)


class WyomingHandler(AsyncEventHandler):
    """One Wyoming connection."""

    def __init__(
        self,
        backend: WyomingBackend,
        participant_id: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        super().__init__(reader, writer)
        self.backend = backend
        self.participant_id = participant_id
        self._audio: list[np.ndarray] | None = None
        self._format: tuple[int, int] | None = None  # (rate, channels)
        self._joined = False
        self._frames: list[Reply] = []
        self._idle = anyio.Event()

    # -- hub sink -------------------------------------------------------------------------

    wants_audio = False

    def deliver(self, message: ServerMessage, payload: bytes | None = None) -> None:
        if isinstance(message, Reply):
            self._frames.append(message)
        elif isinstance(message, Status) and message.state == "idle":
            self._idle.set()

    # -- events -----------------------------------------------------------------------------

    async def handle_event(self, event: Event) -> bool:
        try:
            await self._dispatch(event)
        except ClientError as exc:
            await self.write_event(Error(text=str(exc), code="bad-request").event())
        except Exception as exc:  # a model failure: report it, keep the connection
            log.exception("wyoming %s failed", event.type)
            await self.write_event(Error(text=f"{event.type} failed: {exc}", code="failed").event())
        return True

    async def _dispatch(self, event: Event) -> None:
        if Describe.is_type(event.type):
            await self.write_event(self.backend.info().event())
        elif Transcribe.is_type(event.type):
            self._need(self.backend.stt, "asr")
            self._audio, self._format = [], None
        elif AudioStart.is_type(event.type):
            self._need(self.backend.stt, "asr")
            start = AudioStart.from_event(event)
            self._check(start.rate, start.width, start.channels)
            self._audio, self._format = [], (start.rate, start.channels)
        elif AudioChunk.is_type(event.type):
            await self._chunk(AudioChunk.from_event(event))
        elif AudioStop.is_type(event.type):
            await self._transcribe()
        elif Synthesize.is_type(event.type):
            await self._synthesize(Synthesize.from_event(event).text)
        elif Transcript.is_type(event.type):
            transcript = Transcript.from_event(event)
            await self._handle(transcript.text, transcript.context)
        else:
            raise ClientError(
                f"unsupported event {event.type!r}: this server offers "
                "describe, asr, tts and handle"
            )

    @staticmethod
    def _need(model: object, domain: str) -> None:
        if model is None:
            raise ClientError(f"this server runs without {domain}")

    @staticmethod
    def _check(rate: int, width: int, channels: int) -> None:
        try:
            check_format(rate, width, channels)
        except AudioFormatError as exc:
            raise ClientError(str(exc)) from None

    async def _chunk(self, chunk: AudioChunk) -> None:
        self._need(self.backend.stt, "asr")
        if self._audio is None:
            raise ClientError("audio-chunk before audio-start")
        self._check(chunk.rate, chunk.width, chunk.channels)
        fmt = (chunk.rate, chunk.channels)
        if self._format is not None and fmt != self._format:
            raise ClientError(f"audio format changed mid-stream from {self._format} to {fmt}")
        self._format = fmt
        try:
            samples = pcm16_to_float(chunk.audio, chunk.channels)
        except AudioFormatError as exc:
            raise ClientError(str(exc)) from None
        total = sum(len(a) for a in self._audio) + len(samples)
        if total > MAX_ASR_SECONDS * chunk.rate:
            self._audio = None
            raise ClientError(f"recording longer than {MAX_ASR_SECONDS} s; send shorter turns")
        self._audio.append(samples)

    async def _transcribe(self) -> None:
        stt = self.backend.stt
        self._need(stt, "asr")
        if self._audio is None:
            raise ClientError("audio-stop before audio-start")
        parts, fmt = self._audio, self._format
        self._audio, self._format = None, None
        rate = fmt[0] if fmt else STT_RATE
        audio = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        audio = resample(audio, rate, STT_RATE)
        result = await anyio.to_thread.run_sync(stt.transcribe, audio)  # type: ignore[union-attr]
        await self.write_event(Transcript(text=result.text.strip(), language="en").event())

    async def _synthesize(self, text: str) -> None:
        tts = self.backend.tts
        self._need(tts, "tts")
        try:
            synthesis = await anyio.to_thread.run_sync(tts.synthesize, text)  # type: ignore[union-attr]
        except NothingToSpeakError as exc:
            raise ClientError(str(exc)) from None
        rate = synthesis.sample_rate
        await self.write_event(AudioStart(rate=rate, width=2, channels=1).event())
        for piece in chunk_pcm(float_to_pcm16(synthesis.audio), rate, CHUNK_MS):
            await self.write_event(AudioChunk(rate=rate, width=2, channels=1, audio=piece).event())
        await self.write_event(AudioStop().event())

    async def _handle(self, text: str, context: dict | None) -> None:
        gateway = self.backend.gateway
        if not text.strip():
            raise ClientError("transcript has no text to handle")
        cid = (context or {}).get("conversation_id")
        if cid is None:  # this connection is the participant
            if not self._joined:
                self._attach(self.participant_id)
                self._joined = True
                await gateway.join(self.participant_id, "Wyoming client", SOURCE)
            await self._answer(self.participant_id, text, context)
            return
        conversations = self.backend.conversations
        pid = await conversations.begin(str(cid))
        try:
            self._attach(pid)
            try:
                await self._answer(pid, text, context)
            finally:
                gateway.hub.detach(pid, self)
        finally:
            conversations.end(pid)

    def _attach(self, participant_id: str) -> None:
        try:
            self.backend.gateway.hub.attach(participant_id, self)
        except ParticipantTaken as exc:
            raise ClientError(str(exc)) from None

    async def _answer(self, participant_id: str, text: str, context: dict | None) -> None:
        gateway = self.backend.gateway
        self._frames, self._idle = [], anyio.Event()
        turn_id = await gateway.query(participant_id, text, SOURCE)
        with anyio.move_on_after(self.backend.handle_timeout_s) as scope:
            await self._idle.wait()
        answer = reply_text([f for f in self._frames if f.request_id == turn_id])
        if scope.cancelled_caught:
            await gateway.interrupt(participant_id, turn_id, SOURCE)
            await self.write_event(
                NotHandled(text=answer or "Sorry, that took too long.", context=context).event()
            )
        elif answer:
            await self.write_event(Handled(text=answer, context=context).event())
        else:
            await self.write_event(
                NotHandled(text="I have no answer to that.", context=context).event()
            )

    async def disconnect(self) -> None:
        if self._joined:
            self.backend.gateway.hub.detach(self.participant_id, self)
            await self.backend.gateway.leave(self.participant_id, "connection closed", SOURCE)


class WyomingServer:
    """The Wyoming TCP server; ``async with`` runs it, leaving closes every connection."""

    def __init__(self, backend: WyomingBackend, host: str, port: int) -> None:
        self.backend = backend
        self.host = host
        self.port = port
        self._server: AsyncTcpServer | None = None
        self._tg: TaskGroup | None = None
        self._ids = itertools.count(1)

    @property
    def bound_port(self) -> int:
        inner = self._server._server if self._server is not None else None
        if inner is None:
            raise RuntimeError("the Wyoming server is not running")
        return int(inner.sockets[0].getsockname()[1])

    def _factory(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> WyomingHandler:
        return WyomingHandler(self.backend, f"wyoming-{next(self._ids)}", reader, writer)

    async def __aenter__(self) -> WyomingServer:
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        try:
            server = AsyncTcpServer(self.host, self.port)
            await server.start(partial(WyomingServer._factory, self))
        except BaseException:
            tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)
            raise
        self._server = server
        tg.start_soon(self.backend.conversations.run)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            tasks = list(server._handlers)  # the library's per-connection tasks
            await server.stop()
            if tasks:  # each publishes its participant's departure
                await asyncio.gather(*tasks, return_exceptions=True)
            inner = server._server
            if inner is not None:
                with contextlib.suppress(Exception):
                    await inner.wait_closed()
        tg, self._tg = self._tg, None
        if tg is not None:
            tg.cancel_scope.cancel()  # the idle reaper
            await tg.__aexit__(None, None, None)
        with anyio.CancelScope(shield=True):
            await self.backend.conversations.close()
