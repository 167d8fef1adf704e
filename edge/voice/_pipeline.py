"""The voice pipeline: an agent on the runtime that listens and speaks for participants.

Per participant it keeps a :class:`Listener` (audio in → VAD → endpointing → STT →
``UserQuery``) and a :class:`Speaker` (``ResponseOutput`` → sentences → TTS → audio
out), created on the participant's first audio or reply and dropped when they leave.

Barge-in: when the listener confirms speech while the speaker is active, the speaker
stops at once (at most the chunk being published still goes out), every request it knew
is superseded (later frames for them are dropped), and ``Interrupted`` is published for
the participant. The new utterance becomes the next turn as usual. An ``Interrupted``
from anyone else (a stop button, the server) stops the output the same way. Publishing
a participant's new query supersedes their earlier turns: replies to those that have not
been spoken yet are dropped (the router cancels them too).

Lifecycle: ``async with pipeline:`` owns the background work of every participant;
enter it before starting the runtime and leave it after stopping the runtime
(``async with pipeline, runtime:``). Models load on first use in worker threads, or up
front with :meth:`VoicePipeline.load`.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import numpy as np
from pydantic import BaseModel

from edge.interaction import (
    INTERRUPTED_TOPIC,
    PARTICIPANT_LEFT_TOPIC,
    USER_QUERY_TOPIC,
    VOICE_OUTPUT_TOPIC,
    Interrupted,
    ParticipantLeft,
    ResponseOutput,
    UserQuery,
)
from edge.runtime import TRACES, Agent, AgentRuntime, BackgroundTasks, HandlerContext, Topic

from ._audio import STT_RATE, StreamResampler, check_format, pcm16_to_float
from ._config import VoiceConfig
from ._listener import Listener, VoiceActivity
from ._messages import (
    AUDIO_INPUT_TOPIC,
    AUDIO_OUTPUT_TOPIC,
    END_OF_UTTERANCE_TOPIC,
    HOLD_FLOOR_TOPIC,
    SPECULATION_TOPIC,
    SPEECH_BEGAN_TOPIC,
    SPEECH_FAILED_TOPIC,
    TRANSCRIPT_TOPIC,
    AudioInput,
    AudioOutput,
    EndOfUtterance,
    HoldFloor,
    Speculation,
    SpeechBegan,
    SpeechFailed,
    Transcript,
)
from ._pause import Recognizer
from ._sentences import first_piece
from ._speaker import Speaker
from ._stt import LoadsModel, SpeechToText, WhisperSTT
from ._synthesis import FirstAudio
from ._tts import PiperTTS, TextToSpeech
from ._vad import SileroVAD

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VoiceTopics:
    """The topics a :class:`VoicePipeline` reads and writes (the defaults are the
    service's; tests and embedders may rename them)."""

    audio_input: Topic[AudioInput] = AUDIO_INPUT_TOPIC
    audio_output: Topic[AudioOutput] = AUDIO_OUTPUT_TOPIC
    reply: Topic[ResponseOutput] = VOICE_OUTPUT_TOPIC
    query: Topic[UserQuery] = USER_QUERY_TOPIC
    transcript: Topic[Transcript] = TRANSCRIPT_TOPIC
    speculation: Topic[Speculation] = SPECULATION_TOPIC
    end_of_utterance: Topic[EndOfUtterance] = END_OF_UTTERANCE_TOPIC
    hold_floor: Topic[HoldFloor] = HOLD_FLOOR_TOPIC
    interrupted: Topic[Interrupted] = INTERRUPTED_TOPIC
    participant_left: Topic[ParticipantLeft] = PARTICIPANT_LEFT_TOPIC


@dataclass
class _Session:
    listener: Listener
    speaker: Speaker
    scope: anyio.CancelScope
    turns: deque[str] = field(default_factory=lambda: deque(maxlen=32))  # query ids
    resampler: StreamResampler | None = None
    input_format: tuple[int, int] | None = None  # (rate, channels)

    def hear(self, chunk: AudioInput, samples: np.ndarray, published_us: int) -> None:
        """``samples`` of ``chunk`` (published at ``published_us``) to the listener, at
        16 kHz."""
        fmt = (chunk.sample_rate, chunk.channels)
        if self.input_format != fmt or self.resampler is None:
            self.input_format = fmt
            self.resampler = StreamResampler(chunk.sample_rate, STT_RATE)
        start_us = chunk.timestamp_us
        if start_us is None:  # it ended when it was published (the runtime's clock)
            start_us = published_us - len(samples) * 1_000_000 // chunk.sample_rate
        audio = self.resampler.process(samples)
        if len(audio):
            self.listener.feed(audio, start_us)


class _SpeakerOutput:
    """Where one participant's speaker sends its audio, and its failures (one error per
    request, as a ``SpeechFailed``)."""

    def __init__(self, pipeline: VoicePipeline, participant_id: str) -> None:
        self.pipeline = pipeline
        self.participant_id = participant_id
        self.reported: deque[str | None] = deque(maxlen=32)

    async def audio(self, chunk: AudioOutput, correlation_id: str | None) -> None:
        pipeline, pid = self.pipeline, self.participant_id
        if chunk.pcm or chunk.final:
            pipeline._first_audio.heard(pid)
        if chunk.pcm:
            TRACES.mark(pid, "first_audio_out", once=True)
        await pipeline._publish(pipeline.topics.audio_output, chunk, pid, correlation_id)

    def failed(self, request_id: str | None, message: str) -> None:
        tasks = self.pipeline._tasks
        if tasks.running and request_id not in self.reported:
            self.reported.append(request_id)
            failure = SpeechFailed(backend="tts", message=message, request_id=request_id)
            tasks.start_soon(
                self.pipeline._publish_quietly, SPEECH_FAILED_TOPIC, failure, self.participant_id
            )


class VoicePipeline(Agent):
    """Listens and speaks for every participant; see the module docstring.

    ``stt`` and ``tts`` default to the catalogue's Whisper and Piper models; ``config`` is
    the voice's settings (:meth:`VoiceConfig.for_device` derives them from a device
    profile); ``vad_factory`` makes one VAD stream per participant (Silero by default);
    ``wants_audio(participant_id)`` says whose replies to speak (default: everyone's; the
    server passes its output hub's predicate, so text-only clients cost no synthesis).
    ``topics`` renames the topics.
    """

    def __init__(
        self,
        *,
        stt: SpeechToText | None = None,
        tts: TextToSpeech | None = None,
        config: VoiceConfig | None = None,
        vad_factory: Callable[[], VoiceActivity] | None = None,
        wants_audio: Callable[[str], bool] | None = None,
        name: str = "voice",
        topics: VoiceTopics = VoiceTopics(),
    ) -> None:
        super().__init__()
        self.stt = stt if stt is not None else WhisperSTT()
        self.tts = tts if tts is not None else PiperTTS()
        self.config = config or VoiceConfig()
        self.name = name
        self.topics = topics
        self._vad_factory: Callable[[], VoiceActivity] = vad_factory or SileroVAD
        self._wants_audio: Callable[[str], bool] = wants_audio or (lambda _pid: True)
        self.recognizer = Recognizer.of(  # every voice's transcription passes
            self.stt,
            timeout_s=self.config.pass_timeout_s,
            full_window=self.config.full_window_pause_pass,
        )
        self.stt_cost = self.recognizer.cost  # how long a transcription pass takes here
        # a voice that orders its own callers (the sentence a listener waits for first)
        self._tts_limiter = anyio.CapacityLimiter(getattr(self.tts, "concurrent_callers", 1))
        self._first_audio = FirstAudio()  # whose turn waits for its first sentence
        self._sessions: dict[str, _Session] = {}
        self._tasks = BackgroundTasks("the voice pipeline")
        self._runtime: AgentRuntime | None = None
        self.add_handler(topics.audio_input, self._on_audio)
        self.add_handler(topics.end_of_utterance, self._on_end_of_utterance)
        self.add_handler(topics.hold_floor, self._on_hold)
        self.add_handler(topics.reply, self._on_reply)
        self.add_handler(topics.query, self._on_query)
        self.add_handler(topics.interrupted, self._on_interrupted)
        self.add_handler(topics.participant_left, self._on_left)

    # -- lifecycle ----------------------------------------------------------------------

    async def load(self) -> None:
        """Load the STT, TTS and VAD models now, in worker threads, and time one warm-up
        transcription (it decides whether partial transcripts are affordable here)."""
        for model in (self.stt, self.tts):
            if isinstance(model, LoadsModel):
                await anyio.to_thread.run_sync(model.load)
        await anyio.to_thread.run_sync(self._vad_factory)
        await self.recognizer.warm_up()

    async def __aenter__(self) -> VoicePipeline:
        await self._tasks.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Stop every participant's listening and speaking (in-flight model calls finish)."""
        self._sessions.clear()
        await self._tasks.close()

    def participants(self) -> list[str]:
        return list(self._sessions)

    def session(self, participant_id: str) -> tuple[Listener, Speaker]:
        """The participant's listener and speaker (KeyError when they have none)."""
        found = self._sessions[participant_id]
        return found.listener, found.speaker

    async def _session(self, participant_id: str, ctx: HandlerContext) -> _Session:
        found = self._sessions.get(participant_id)
        if found is not None:
            return found
        if not self._tasks.running:
            raise RuntimeError("the voice pipeline is not running: use `async with pipeline:`")
        self._runtime = ctx.runtime
        listener = Listener(participant_id, self.config, self._vad_factory(), self.recognizer, self)
        out, tts, first = _SpeakerOutput(self, participant_id), self._tts_limiter, self._first_audio
        speaker = Speaker(participant_id, self.config, self.tts, tts, out.audio, out.failed, first)
        scope = anyio.CancelScope()
        session = _Session(listener, speaker, scope)
        self._sessions[participant_id] = session

        async def run(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            with scope:
                try:
                    async with anyio.create_task_group() as tg:
                        await tg.start(listener.run)
                        await tg.start(speaker.run)
                        task_status.started()
                except Exception as exc:  # this participant's voice alone: nobody else's
                    _contain(self, participant_id, session, exc)

        await self._tasks.start(run)
        return session

    async def _close(self, participant_id: str) -> None:
        session = self._sessions.pop(participant_id, None)
        self._first_audio.heard(participant_id)
        if session is not None:
            session.scope.cancel()

    # -- handlers -----------------------------------------------------------------------

    async def _on_audio(self, chunk: AudioInput, ctx: HandlerContext) -> None:
        participant = ctx.metadata.participant_id
        if participant is None:
            raise ValueError("audio input needs a participant (participant_id in the metadata)")
        check_format(chunk.sample_rate, chunk.sample_width, chunk.channels)
        samples = pcm16_to_float(chunk.pcm, chunk.channels)  # AudioFormatError when ragged
        session = await self._session(participant, ctx)
        if len(samples):  # empty chunks (keep-alives) are ignored
            session.hear(chunk, samples, ctx.metadata.timestamp_us)

    async def _on_hold(self, message: HoldFloor, ctx: HandlerContext) -> None:
        participant = ctx.metadata.participant_id
        if participant is None:
            raise ValueError("a hold needs a participant (participant_id in the metadata)")
        (await self._session(participant, ctx)).listener.hold()

    async def _on_end_of_utterance(self, message: EndOfUtterance, ctx: HandlerContext) -> None:
        participant = ctx.metadata.participant_id
        session = self._sessions.get(participant) if participant is not None else None
        if session is not None:
            session.listener.end_utterance()

    async def _on_reply(self, frame: ResponseOutput, ctx: HandlerContext) -> None:
        participant = ctx.metadata.participant_id
        if participant is None:
            for pid in list(self._sessions):  # a global announcement: all who listen hear it
                if self._wants_audio(pid):
                    self._sessions[pid].speaker.on_output(frame, ctx.metadata.correlation_id)
            return
        if frame.text.strip():
            TRACES.mark(participant, "first_token", once=True, source=frame.source)
        if not self._wants_audio(participant):
            return
        session = await self._session(participant, ctx)
        if not session.speaker.on_output(frame, ctx.metadata.correlation_id):
            log.debug("dropped a frame of superseded request %s", frame.request_id)

    async def _on_query(self, query: UserQuery, ctx: HandlerContext) -> None:
        """A participant's new turn (spoken or typed) supersedes their earlier turns."""
        participant = ctx.metadata.participant_id
        session = self._sessions.get(participant) if participant is not None else None
        if participant is not None and session is not None:
            session.speaker.drop(session.turns)
            session.turns.append(ctx.metadata.message_id)
            if self._wants_audio(participant):
                self._first_audio.wait_for(participant)

    async def _on_interrupted(self, message: Interrupted, ctx: HandlerContext) -> None:
        if ctx.metadata.source == self.name:
            return  # our own barge-in: already handled
        participant = ctx.metadata.participant_id
        targets = [participant] if participant is not None else list(self._sessions)
        for pid in targets:
            session = self._sessions.get(pid)
            if session is not None:
                session.speaker.interrupt()

    async def _on_left(self, message: ParticipantLeft, ctx: HandlerContext) -> None:
        if ctx.metadata.participant_id is not None:
            await self._close(ctx.metadata.participant_id)

    async def prepare_reply(self, participant_id: str, deltas: AsyncIterable[str]) -> None:
        """Synthesize, ahead of time, the first piece the participant's speaker would say
        of a reply streamed as ``deltas`` (a speculative answer's held text). Nothing is
        sent: a reply that starts with exactly that piece is spoken from it at once."""
        session = self._sessions.get(participant_id)
        if session is None or not self._wants_audio(participant_id):
            return
        text = await first_piece(deltas, self.config.splitter())
        if text and self._sessions.get(participant_id) is session:
            session.speaker.prepare(text)

    # -- listener hooks -----------------------------------------------------------------

    def speech_started(self, participant_id: str) -> None:
        if self._tasks.running:  # told at once (the Realtime API's speech_started)
            self._tasks.start_soon(
                self._publish_quietly, SPEECH_BEGAN_TOPIC, SpeechBegan(), participant_id
            )
        session = self._sessions.get(participant_id)
        if session is None or not session.speaker.active:
            return
        superseded = session.speaker.interrupt()
        request_id = superseded[-1] if superseded else None
        log.info("barge-in by %s stops request %s", participant_id, request_id)
        if self._tasks.running:
            self._tasks.start_soon(
                self._publish_quietly,
                self.topics.interrupted,
                Interrupted(reason="barge-in", request_id=request_id),
                participant_id,
            )

    async def transcript(self, participant_id: str, transcript: Transcript) -> None:
        if transcript.final and not transcript.text.strip():
            self._first_audio.retract(participant_id)  # nothing heard: no query follows
        await self._publish(self.topics.transcript, transcript, participant_id)

    async def speculate(self, participant_id: str, text: str, utterance: int) -> None:
        if not text:
            self._first_audio.retract(participant_id)  # speech resumed
        elif participant_id in self._sessions and self._wants_audio(participant_id):
            self._first_audio.expect(participant_id)  # their answer starts now
        await self._publish(
            self.topics.speculation, Speculation(text=text, utterance=utterance), participant_id
        )

    async def query(self, participant_id: str, text: str, timestamp_us: int) -> None:
        TRACES.mark(participant_id, "query")
        await self._publish(
            self.topics.query,
            UserQuery(text=text, timestamp_us=timestamp_us),
            participant_id,
            timestamp_us=timestamp_us,
        )

    # -- publishing ---------------------------------------------------------------------

    async def _publish(
        self,
        topic: Topic[Any],
        message: BaseModel,
        participant_id: str,
        correlation_id: str | None = None,
        timestamp_us: int | None = None,
    ) -> None:
        runtime = self._runtime
        if runtime is None or not runtime.running:
            return
        await runtime.publish(
            topic,
            message,
            participant_id=participant_id,
            source=self.name,
            correlation_id=correlation_id,
            timestamp_us=timestamp_us,
        )

    async def _publish_quietly(
        self, topic: Topic[Any], message: BaseModel, participant_id: str
    ) -> None:
        try:
            await self._publish(topic, message, participant_id)
        except Exception:
            log.exception("publishing %s for %s failed", topic.name, participant_id)


def _contain(
    pipeline: VoicePipeline, participant_id: str, session: _Session, exc: Exception
) -> None:
    """A fault in ``participant_id``'s listener or speaker ends their voice session
    alone: logged once, told to them as a ``SpeechFailed`` (an ``error`` frame), and
    their next audio or reply opens a fresh session."""
    cause = _leaf(exc)
    log.error("the voice of %s failed; their voice session is closed", participant_id, exc_info=exc)
    if pipeline._sessions.get(participant_id) is session:
        del pipeline._sessions[participant_id]
    if pipeline._tasks.running:
        text = f"this participant's voice failed ({type(cause).__name__}: {cause})"
        failure = SpeechFailed(backend="voice", message=text)
        pipeline._tasks.start_soon(
            pipeline._publish_quietly, SPEECH_FAILED_TOPIC, failure, participant_id
        )


def _leaf(exc: BaseException) -> BaseException:
    """The first exception a task group's ``ExceptionGroup`` wraps (``exc`` itself when
    it is none)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
