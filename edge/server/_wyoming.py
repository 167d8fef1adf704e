"""A Wyoming server (the Home Assistant voice protocol): ``asr``, ``tts`` and ``handle``.

* ``describe`` → ``info`` naming the models.
* ``asr``: ``transcribe`` (optional), ``audio-start``, ``audio-chunk``..., ``audio-stop``
  → ``transcript`` (the whole recording through the service's speech-to-text model).
* ``tts``: ``synthesize`` → ``audio-start``, ``audio-chunk``..., ``audio-stop``.
* ``handle``: ``transcript`` → ``handled`` (the answer of router + conversation, as for
  any participant) or ``not-handled``, echoing the transcript's context. A transcript
  whose context names a ``conversation_id`` (Home Assistant's) is a turn of that
  conversation's participant ``wyoming:<id>``, kept across connections until idle (see
  :mod:`._conversations`); without one, the connection is a fresh random participant
  (``wyoming:anon-<hex>``): joined at its first turn, gone when the connection closes.

Bad input gets a Wyoming ``error`` event naming the problem and the connection stays open;
a broken frame (a length over the limit or of the wrong type, a peer silent past the read
timeout) gets an ``error`` and the connection is closed (:mod:`._wyoming_read`).

Access: Home Assistant cannot send a token, so the service binds Wyoming to loopback
unless ``wyoming_allow`` lists client addresses; then only those (and loopback) are
served. Connections are capped in total and per address; a ``synthesize`` is limited in
length, spoken sentence by sentence (the voice is free between sentences for everyone
else's speech) and stops when its requester leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar, cast

import anyio
import numpy as np
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event, Eventable
from wyoming.handle import Handled, HandledStop, NotHandled
from wyoming.info import (
    Artifact,
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

from edge.runtime import BackgroundTasks, owned_by
from edge.voice import (
    STT_RATE,
    AudioFormatError,
    Recognizer,
    Recording,
    RecordingFullError,
    RecordingPauses,
    SpeechToText,
    StreamResampler,
    TextToSpeech,
    check_format,
    pcm16_to_float,
)

from ._access import address_allowed
from ._conversations import HaConversationParticipants
from ._gateway import ClientError, Gateway
from ._hub import ParticipantTaken
from ._limits import AudioPacer, ConnectionSlots, LogLimiter, printable, return_freed_memory
from ._protocol import MAX_TEXT_CHARS, Reply, ServerMessage, Status, new_participant_id
from ._wyoming_asr import AsrSpeculation, next_recording
from ._wyoming_read import EventError, FramingError, ReadLimits, read_event
from ._wyoming_stream import (
    PreparedSpeech,
    ReplyFeed,
    SynthesizeStream,
    stream_handled,
    synthesize_whole,
    write_transcript,
)

log = logging.getLogger(__name__)
limited_log = LogLimiter(log)
_Program = TypeVar("_Program", bound=Artifact)
_Parsed = TypeVar("_Parsed", bound=Eventable)
_Model = TypeVar("_Model")

SOURCE = "wyoming"
ATTRIBUTION = Attribution(name="xr-edge", url="https://github.com/")
CHUNK_MS = 100
MAX_ASR_SECONDS = 120
STOP_GRACE_S = 2.0


@dataclass(frozen=True)
class WyomingLimits:
    """Bounds per connection and for the server (see docs/reliability.md)."""

    max_connections: int = 16
    max_per_address: int = 8
    read_timeout_s: float = 30.0
    max_synthesize_chars: int = 2000
    max_asr_seconds: float = MAX_ASR_SECONDS
    audio_burst_s: float = 30.0  # audio taken at once; after that ...
    audio_rate: float = 2.0  # ... at most this many seconds of audio per second

    @property
    def read(self) -> ReadLimits:
        return ReadLimits(read_timeout_s=self.read_timeout_s)


@dataclass
class WyomingBackend:
    """What the Wyoming handlers use; ``stt``/``tts`` None turn that domain off."""

    gateway: Gateway
    stt: SpeechToText | None
    tts: TextToSpeech | None
    models: dict[str, str]
    version: str
    handle_timeout_s: float = 60.0
    limits: WyomingLimits = field(default_factory=WyomingLimits)
    speculation: AsrSpeculation | None = None  # transcribe during the client's silence
    # (participant, utterance, words): an asr recording's likely words, for its answer to
    # start before ``handle`` brings them (the conversation's participant, named by
    # ``transcribe``; the recording's utterance key, ``wyoming:<n>``)
    provisional: Callable[[str, str, str], None] | None = None
    # the passes' recognizer (the voice pipeline's, shared with its listeners; one of
    # ``stt``'s own without it)
    recognizer: Recognizer | None = None
    conversations: HaConversationParticipants = field(init=False)
    prepared: PreparedSpeech = field(init=False)  # likely answers' first sentences
    # the conversation participant each client address last asked for (its next asr
    # recording is most likely that conversation's next turn)
    last_asked: dict[str, str] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.conversations = HaConversationParticipants(self.gateway)
        self.prepared = PreparedSpeech(self.tts, f"{SOURCE}:")
        if self.recognizer is None and self.stt is not None:
            self.recognizer = Recognizer.of(self.stt)

    def speculate(
        self, spawn: Callable[..., None] | None, utterance: int, on_text: Callable[[str], None]
    ) -> RecordingPauses | None:
        """Recording ``utterance``'s pause recognizer (None: no speculation here)."""
        if self.speculation is None or self.recognizer is None or spawn is None:
            return None
        return self.speculation.start(self.recognizer, spawn, utterance, on_text)

    def info(self) -> Info:
        """What ``describe`` answers: the domains this server offers, with their models."""
        stt, tts, llm = (self.models.get(k, k) for k in ("stt", "tts", "llm"))
        version = self.version
        asr = [_asr_program(stt, version)] if self.stt is not None else []
        voices = [_tts_program(tts, version)] if self.tts is not None else []
        return Info(asr=asr, tts=voices, handle=[_handle_program(llm, version)])


def _program(cls: type[_Program], name: str, description: str, version: str, **kw: Any) -> _Program:
    return cls(
        name=name,
        attribution=ATTRIBUTION,
        installed=True,
        description=description,
        version=version,
        **kw,
    )


def _asr_program(model: str, version: str) -> AsrProgram:
    return _program(
        AsrProgram,
        "edge-asr",
        "faster-whisper speech to text",
        version,
        supports_transcript_streaming=True,
        models=[_program(AsrModel, model, "speech to text", version, languages=["en"])],
    )


def _tts_program(voice: str, version: str) -> TtsProgram:
    return _program(
        TtsProgram,
        "edge-tts",
        "Piper text to speech",
        version,
        supports_synthesize_streaming=True,
        voices=[_program(TtsVoice, voice, "voice", version, languages=["en_US"])],
    )


def _handle_program(model: str, version: str) -> HandleProgram:
    return _program(
        HandleProgram,
        "edge-agent",
        "router + conversation on the local LLM",
        version,
        supports_handled_streaming=True,
        models=[_program(HandleModel, model, "conversation", version, languages=["en"])],
    )


class WyomingHandler(AsyncEventHandler):
    """One Wyoming connection."""

    def __init__(
        self,
        backend: WyomingBackend,
        participant_id: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        refused: str | None = None,
    ) -> None:
        super().__init__(reader, writer)
        self.backend = backend
        self.participant_id = participant_id
        self.refused = refused  # why this connection is not served (it is told, then closed)
        self._audio: Recording | None = None  # the recording, resampled to 16 kHz
        self._recorded = False  # whether this connection ever recorded
        self._speculation: RecordingPauses | None = None
        self._asr_for: str | None = None  # the conversation participant the recording is for
        self._utterance = 0  # the recording's number (its guess's key)
        self._resampler: StreamResampler | None = None
        limits = backend.limits
        self._pacer = AudioPacer(limits.audio_burst_s, limits.audio_rate)
        self._format: tuple[int, int] | None = None  # (rate, channels)
        self._joined = False
        self._feed = ReplyFeed()  # the current handle request's reply
        self._synthesis = SynthesizeStream(
            self.write_event, backend.tts, backend.limits.max_synthesize_chars, backend.prepared
        )

    # -- hub sink -------------------------------------------------------------------------

    wants_audio = False

    def deliver(self, message: ServerMessage, payload: bytes | None = None) -> None:
        if isinstance(message, Reply):
            self._feed.push(message)
        elif isinstance(message, Status) and message.state == "idle":
            self._feed.finish()

    # -- events -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Read events within the limits (:func:`read_event`) until the peer leaves."""
        try:
            if self.refused is not None:
                await self.write_event(Error(text=self.refused, code="refused").event())
                return
            while True:
                try:
                    event = await read_event(self.reader, self.backend.limits.read)
                except EventError as exc:
                    await self.write_event(Error(text=str(exc), code="bad-request").event())
                    continue
                except FramingError as exc:
                    await self.write_event(Error(text=str(exc), code="bad-frame").event())
                    return
                if event is None or not await self.handle_event(event):
                    return
        except (ConnectionError, OSError):
            pass  # the peer went away while we wrote
        finally:
            # the recording's memory goes now, and what its chunks used goes to the system
            self._audio, self._resampler, self._speculation = None, None, None
            if self._recorded and self.spawn is not None:
                with contextlib.suppress(RuntimeError):  # the server is stopping
                    self.spawn(anyio.to_thread.run_sync, return_freed_memory)
            await self.disconnect()
            self.writer.close()

    async def handle_event(self, event: Event) -> bool:
        try:
            await self._dispatch(event)
        except ClientError as exc:
            await self.write_event(Error(text=str(exc), code="bad-request").event())
        except (ConnectionError, OSError):
            return False
        except Exception as exc:  # a model failure: report it, keep the connection
            limited_log.log(
                logging.ERROR,
                f"wyoming {event.type[:40]}",
                "wyoming %s failed",
                printable(event.type),
                exc_info=True,
            )
            await self.write_event(
                Error(text=f"{event.type[:40]} failed: {exc}", code="failed").event()
            )
        return True

    @staticmethod
    def _parse(cls: type[_Parsed], event: Event) -> _Parsed:
        """``cls.from_event`` with a missing or mistyped field as a client error."""
        try:
            return cast(_Parsed, cls.from_event(event))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ClientError(f"malformed {event.type!r} event: {exc!r}"[:200]) from None

    async def _dispatch(self, event: Event) -> None:
        if await self._synthesis.on_event(event):  # streaming synthesize
            return
        if Describe.is_type(event.type):
            await self.write_event(self.backend.info().event())
        elif Transcribe.is_type(event.type):
            self._need(self.backend.stt, "asr")
            self._start_recording(None)
            self._asr_for = _active_conversation(
                self.backend, self._parse(Transcribe, event).context, self.address
            )
        elif AudioStart.is_type(event.type):
            self._need(self.backend.stt, "asr")
            start = self._parse(AudioStart, event)
            self._check(start.rate, start.width, start.channels)
            self._start_recording((start.rate, start.channels))
        elif AudioChunk.is_type(event.type):
            await self._chunk(self._parse(AudioChunk, event))
        elif AudioStop.is_type(event.type):
            await self._transcribe()
        elif Synthesize.is_type(event.type):
            await self._synthesize(_text(self._parse(Synthesize, event).text))
        elif Transcript.is_type(event.type):
            transcript = self._parse(Transcript, event)
            context = transcript.context
            if context is not None and not isinstance(context, dict):
                raise ClientError("transcript context must be a JSON object")
            await self._handle(_text(transcript.text), context)
        else:
            raise ClientError(
                f"unsupported event {printable(event.type, 60)}: this server offers "
                "describe, asr, tts and handle"
            )

    def _start_recording(self, fmt: tuple[int, int] | None) -> None:
        limit = int(self.backend.limits.max_asr_seconds * STT_RATE)
        self._audio, self._format, self._recorded = Recording(limit), fmt, True
        self._pacer.restart()
        self._resampler = StreamResampler(fmt[0], STT_RATE) if fmt is not None else None
        self._utterance = next_recording()
        self._speculation = self.backend.speculate(self.spawn, self._utterance, self._heard)

    def _heard(self, text: str) -> None:
        """The recording's likely words (a pass in the client's silence, or the final one;
        "" retracts them: speech resumed)."""
        if self._asr_for is not None and self.backend.provisional is not None:
            self.backend.provisional(self._asr_for, f"{SOURCE}:{self._utterance}", text)

    @staticmethod
    def _need(model: _Model | None, domain: str) -> _Model:
        if model is None:
            raise ClientError(f"this server runs without {domain}")
        return model

    @staticmethod
    def _check(rate: int, width: int, channels: int) -> None:
        if not all(type(v) is int for v in (rate, width, channels)):
            raise ClientError("audio rate, width and channels must be integers")
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
        if self._resampler is None:
            self._resampler = StreamResampler(chunk.rate, STT_RATE)
        self._format = fmt
        if not isinstance(chunk.audio, bytes):
            raise ClientError("audio-chunk needs a binary payload")
        try:
            samples = pcm16_to_float(chunk.audio, chunk.channels)
        except AudioFormatError as exc:
            raise ClientError(str(exc)) from None
        # kept at 16 kHz whatever the rate sent: memory per connection is bounded by the
        # length cap alone (120 s x 16 kHz x 4 B = 7.7 MB)
        samples = self._resampler.process(samples)
        try:
            self._audio.append(samples)
        except RecordingFullError:
            self._audio, self._resampler, self._speculation = None, None, None
            limit = self.backend.limits.max_asr_seconds
            raise ClientError(f"recording longer than {limit:g} s; send shorter turns") from None
        if self._speculation is not None:
            self._speculation.feed(samples, self._audio)
        await self._pacer.take(len(samples) / STT_RATE)

    async def _transcribe(self) -> None:
        recognizer = self.backend.recognizer
        if recognizer is None:
            raise ClientError("this server runs without asr")
        if self._audio is None:
            raise ClientError("audio-stop before audio-start")
        recording, resampler, speculation = self._audio, self._resampler, self._speculation
        self._audio, self._format, self._resampler, self._speculation = None, None, None, None
        text = await speculation.take() if speculation is not None else None
        if text is not None:  # no speech after the pause it transcribed
            self._heard(text)  # its answer starts before the client has the transcript
            self._asr_for = None
            await write_transcript(self.write_event, text)
            return
        if resampler is not None:
            with contextlib.suppress(RecordingFullError):  # the filter's tail, if it fits
                recording.append(resampler.process(np.zeros(0, np.float32), last=True))
        audio = recording.audio()
        del recording
        result = await recognizer.transcribe(audio, self.participant_id, SOURCE)
        self._heard(result.text.strip())
        self._asr_for = None
        await write_transcript(self.write_event, result.text.strip())

    async def _synthesize(self, text: str) -> None:
        tts = self._need(self.backend.tts, "tts")
        await synthesize_whole(
            self.write_event,
            tts,
            text,
            self.backend.limits.max_synthesize_chars,
            lambda: self.writer.is_closing() or self.reader.at_eof(),
            self.backend.prepared,
        )

    async def _handle(self, text: str, context: dict | None) -> None:
        gateway = self.backend.gateway
        if not text.strip():
            raise ClientError("transcript has no text to handle")
        if len(text) > MAX_TEXT_CHARS:
            raise ClientError(f"transcript is over {MAX_TEXT_CHARS} characters")
        cid = (context or {}).get("conversation_id")
        if cid is None:  # this connection is the participant
            if not self._joined:
                self._attach(self.participant_id)
                self._joined = True
                await gateway.join(self.participant_id, "Wyoming client", SOURCE)
            await self._answer(self.participant_id, text, context)
            return
        conversations = self.backend.conversations
        if not isinstance(cid, str):
            raise ClientError("conversation_id must be a string")
        pid = await conversations.begin(cid)
        _remember(self.backend.last_asked, self.address, pid)
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
        """Stream the answer (``handled-start``/``-chunk``/``-stop``), then send it whole
        in ``handled`` (or ``not-handled``) for clients without streaming."""
        gateway = self.backend.gateway
        self._feed = feed = ReplyFeed()
        turn_id = await gateway.query(participant_id, text, SOURCE)
        write, limit = self.write_event, self.backend.handle_timeout_s
        async with _stopped_if_left(gateway, participant_id, turn_id):
            streamed, timed_out = await stream_handled(write, feed, turn_id, context, limit)
        if streamed:
            await self.write_event(HandledStop().event())
        answer = feed.text(turn_id)
        if timed_out:
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

    address = "?"  # the client's
    release: Callable[[], None] | None = None  # gives the connection slot back
    spawn: Callable[..., None] | None = None  # starts a task in the server's task group

    async def disconnect(self) -> None:
        release, self.release = self.release, None
        if release is not None:
            release()
        if self._joined:
            self.backend.gateway.hub.detach(self.participant_id, self)
            await self.backend.gateway.leave(self.participant_id, "connection closed", SOURCE)


@contextlib.asynccontextmanager
async def _stopped_if_left(
    gateway: Gateway, participant_id: str, turn_id: str
) -> AsyncIterator[None]:
    """A client that leaves while its answer streams (the write fails) stops the turn:
    the model's steps go to those still waiting, not to an answer nobody reads."""
    try:
        yield
    except BaseException:
        with anyio.CancelScope(shield=True):
            await gateway.interrupt(participant_id, turn_id, SOURCE)
        raise


def _active_conversation(backend: WyomingBackend, context: object, address: str) -> str | None:
    """The conversation a ``transcribe`` is most likely for: the one its context names,
    else the one its client address last asked for; when that one is active (its context
    loaded) and answers may start early, its participant: the recording's answer may
    start before ``handle`` brings its words."""
    if backend.provisional is None:
        return None
    cid = context.get("conversation_id") if isinstance(context, dict) else None
    if isinstance(cid, str):
        try:
            pid: str | None = backend.conversations.participant(cid)
        except ClientError:
            return None  # handle refuses it in due course
    else:
        pid = backend.last_asked.get(address)
    return pid if pid in backend.conversations.active() else None


def _remember(last: dict[str, str], address: str, participant_id: str, keep: int = 64) -> None:
    last.pop(address, None)
    last[address] = participant_id  # newest last; the oldest addresses go
    while len(last) > keep:
        del last[next(iter(last))]


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ClientError(f"text must be a string, got {type(value).__name__}")
    return value


class WyomingServer:
    """The Wyoming TCP server; ``async with`` runs it, leaving closes every connection."""

    def __init__(
        self, backend: WyomingBackend, host: str, port: int, *, allow: tuple[str, ...] = ()
    ) -> None:
        self.backend = backend
        self.host = host
        self.port = port
        self.allow = allow
        limits = backend.limits
        self.slots = ConnectionSlots(limits.max_connections, limits.max_per_address)
        self._server: AsyncTcpServer | None = None
        self._tasks = BackgroundTasks("WyomingServer")

    @property
    def bound_port(self) -> int:
        inner = self._server._server if self._server is not None else None
        if not isinstance(inner, asyncio.Server):
            raise RuntimeError("the Wyoming server is not running")
        return int(inner.sockets[0].getsockname()[1])

    def _factory(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> WyomingHandler:
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if peer else "?"
        refused = None
        if not address_allowed(address, self.allow):
            refused = "this address may not use the service (see wyoming_allow)"
        else:
            refused = self.slots.acquire(address)
        pid = f"{SOURCE}:{new_participant_id('anon')}"
        handler = WyomingHandler(self.backend, pid, reader, writer, refused=refused)
        if refused is None:
            handler.address = address
            handler.release = partial(self.slots.release, address)
            handler.spawn = self._tasks.start_soon
        return handler

    async def __aenter__(self) -> WyomingServer:
        await self._tasks.open()
        try:
            server = AsyncTcpServer(self.host, self.port)
            with owned_by("wyoming"):  # each connection's work, in the gate's traces
                await server.start(partial(WyomingServer._factory, self))
        except BaseException:
            await self._tasks.close()
            raise
        self._server = server
        self._tasks.start_soon(self.backend.conversations.run)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(8):
            tasks = list(server._handlers)  # the library's per-connection tasks
            await server.stop()  # ends each connection's reading
            if tasks:  # each publishes its participant's departure; a busy one is cancelled
                _, pending = await asyncio.wait(tasks, timeout=STOP_GRACE_S)
                for task in pending:
                    task.cancel()
                if pending:
                    await asyncio.wait(pending, timeout=STOP_GRACE_S)
            inner = server._server
            if inner is not None:
                with contextlib.suppress(Exception):
                    await inner.wait_closed()
        await self._tasks.close()  # the idle reaper
        with anyio.CancelScope(shield=True):
            await self.backend.conversations.close()
