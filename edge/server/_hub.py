"""The output hub: delivers what the runtime says for a participant to that participant's
connection.

Agents publish replies on ``VOICE_OUTPUT_TOPIC``; the hub sends each frame to the
participant's connection as ``reply`` JSON, and the voice pipeline (which subscribes to
the same topic) asks :meth:`OutputHub.wants_audio` whether to speak it, so a text-only
client never costs a synthesis.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

import anyio

from edge.interaction import (
    INTERRUPTED_TOPIC,
    TEXT_OUTPUT_TOPIC,
    USER_QUERY_TOPIC,
    VOICE_OUTPUT_TOPIC,
    Interrupted,
    ResponseOutput,
    UserQuery,
)
from edge.llm import ContextOverflowError, LLMError
from edge.runtime import Agent, HandlerContext
from edge.voice import (
    AUDIO_OUTPUT_TOPIC,
    SPEECH_BEGAN_TOPIC,
    SPEECH_FAILED_TOPIC,
    TRANSCRIPT_TOPIC,
    AudioOutput,
    SpeechBegan,
    SpeechFailed,
    Transcript,
)

from ._protocol import (
    NO_SPEECH,
    AudioMessage,
    ErrorMessage,
    InterruptedMessage,
    QueryEcho,
    Reply,
    ServerMessage,
    Status,
    TranscriptMessage,
)

log = logging.getLogger(__name__)

NO_SPEECH_ERROR = ErrorMessage(
    message="no speech was heard: nothing was said, or nothing the recogniser understood",
    in_reply_to="audio",
    code=NO_SPEECH,
)
BACKEND_FAILED = "backend_failed"
"""The ``code`` of the ``error`` naming a model's server that failed on a turn."""
TOO_LONG = "too_long"
"""The ``code`` of the ``error`` of a turn whose prompt does not fit the model's window."""


class Sink(Protocol):
    """One participant's connection, as the hub sees it. ``deliver`` must not block."""

    @property
    def wants_audio(self) -> bool: ...

    def deliver(self, message: ServerMessage, payload: bytes | None = None) -> None: ...


@runtime_checkable
class Replaceable(Protocol):
    """A connection another one may take over (a resume carrying the session token)."""

    def replace(self, reason: str) -> None:
        """End the connection soon; it departs as usual (never blocks)."""


@runtime_checkable
class Forgettable(Protocol):
    """A connection that can be told its participant was erased on the device."""

    def forgotten(self) -> None:
        """Say goodbye ("forgotten") and end soon; it departs as usual (never blocks)."""


@runtime_checkable
class HearsSpeech(Protocol):
    """A connection told when its participant's speech begins (the Realtime API's
    ``speech_started``); the others see it in the transcripts that follow."""

    def speech_started(self) -> None:
        """Confirmed speech began (never blocks)."""


class ParticipantTaken(ValueError):
    """The participant id is already connected."""


ARRIVAL_WAIT_S = 30.0
"""The longest an arrival waits for the participant's previous connection to depart
(the departure's own bound, ``LEAVE_TIMEOUT_S`` in the gateway, is the same)."""


@dataclass(eq=False)
class _Presence:
    """One participant's connection from its arrival until its departure has finished."""

    sink: Sink
    departing: bool = False
    gone: anyio.Event = field(default_factory=anyio.Event)


class OutputHub(Agent):
    """Routes runtime output to connected participants; see the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self._sinks: dict[str, Sink] = {}  # where output goes
        self._present: dict[str, _Presence] = {}  # attached, or departing: arrivals wait
        self._running: dict[str, int] = {}  # turns started and not finished, per participant
        self.add_handler(VOICE_OUTPUT_TOPIC, self._on_voice_reply)
        self.add_handler(TEXT_OUTPUT_TOPIC, self._on_text_reply)
        self.add_handler(USER_QUERY_TOPIC, self._on_query)
        self.add_handler(TRANSCRIPT_TOPIC, self._on_transcript)
        self.add_handler(AUDIO_OUTPUT_TOPIC, self._on_audio)
        self.add_handler(INTERRUPTED_TOPIC, self._on_interrupted)
        self.add_handler(SPEECH_FAILED_TOPIC, self._on_speech_failed)
        self.add_handler(SPEECH_BEGAN_TOPIC, self._on_speech_began)

    # -- connections --------------------------------------------------------------------

    def attach(self, participant_id: str, sink: Sink) -> None:
        """Attach at once; taken while another connection is attached or departing."""
        presence = self._present.get(participant_id)
        if presence is not None:
            state = "leaving; try again" if presence.departing else "already connected"
            raise ParticipantTaken(f"participant {participant_id!r} is {state}")
        self._present[participant_id] = _Presence(sink)
        self._sinks[participant_id] = sink

    async def arrive(self, participant_id: str, sink: Sink, *, take_over: bool = False) -> None:
        """Attach once the participant's previous connection has departed (its departure
        published, so it never lands after this arrival's join). ``take_over``: an
        attached previous connection is replaced (closed) first, else this is taken."""
        with anyio.move_on_after(ARRIVAL_WAIT_S):
            while (previous := self._present.get(participant_id)) is not None:
                if not previous.departing:
                    if not take_over or not isinstance(previous.sink, Replaceable):
                        raise ParticipantTaken(
                            f"participant {participant_id!r} is already connected"
                        )
                    log.info("participant %s resumed on a new connection", participant_id)
                    previous.sink.replace("another connection resumed this participant")
                await previous.gone.wait()
            self.attach(participant_id, sink)
            return
        raise ParticipantTaken(f"participant {participant_id!r} is still leaving; try again")

    async def end(self, participant_id: str) -> None:
        """The participant was erased on the device: their connection says goodbye and
        ends; returns once its departure has finished (or at once when none)."""
        presence = self._present.get(participant_id)
        if presence is None:
            return
        if not presence.departing:
            if isinstance(presence.sink, Forgettable):
                presence.sink.forgotten()
            elif isinstance(presence.sink, Replaceable):
                presence.sink.replace("this participant was forgotten on the device")
            else:
                self.detach(participant_id, presence.sink)
        with anyio.move_on_after(ARRIVAL_WAIT_S):
            await presence.gone.wait()

    def detach(self, participant_id: str, sink: Sink) -> None:
        """Stop delivering to ``sink``; outside :meth:`departure` it is gone at once."""
        if self._sinks.get(participant_id) is sink:
            del self._sinks[participant_id]
        presence = self._present.get(participant_id)
        if presence is not None and presence.sink is sink and not presence.departing:
            self._gone(participant_id, presence)

    @asynccontextmanager
    async def departure(self, participant_id: str, sink: Sink) -> AsyncIterator[None]:
        """Detach ``sink`` now; the participant's next arrival waits until the block (the
        departure's publication) has ended."""
        presence = self._present.get(participant_id)
        if presence is not None and presence.sink is sink:
            presence.departing = True
        try:
            self.detach(participant_id, sink)
            yield
        finally:
            if presence is not None and presence.sink is sink:
                self._gone(participant_id, presence)

    def _gone(self, participant_id: str, presence: _Presence) -> None:
        presence.gone.set()
        if self._present.get(participant_id) is presence:
            del self._present[participant_id]

    def connected(self) -> list[str]:
        return list(self._sinks)

    def wants_audio(self, participant_id: str) -> bool:
        """Whether the participant's connection asked for spoken replies (the voice
        pipeline's predicate: nobody else's replies cost a synthesis)."""
        sink = self._sinks.get(participant_id)
        return sink is not None and sink.wants_audio

    def _targets(self, participant_id: str | None) -> list[Sink]:
        if participant_id is None:
            return list(self._sinks.values())
        sink = self._sinks.get(participant_id)
        return [sink] if sink is not None else []

    def _send(
        self, participant_id: str | None, message: ServerMessage, payload: bytes | None = None
    ) -> None:
        for sink in self._targets(participant_id):
            try:
                sink.deliver(message, payload)
            except Exception:  # one connection's failure never reaches another
                log.exception("delivering %s to %s failed", message.type, participant_id)

    # -- runtime handlers ---------------------------------------------------------------

    async def _on_voice_reply(self, frame: ResponseOutput, ctx: HandlerContext) -> None:
        self._send(ctx.metadata.participant_id, _reply(frame))

    async def _on_text_reply(self, frame: ResponseOutput, ctx: HandlerContext) -> None:
        self._send(ctx.metadata.participant_id, _reply(frame))

    async def _on_query(self, query: UserQuery, ctx: HandlerContext) -> None:
        meta = ctx.metadata
        if meta.participant_id is not None:
            self._send(
                meta.participant_id,
                QueryEcho(request_id=meta.message_id, text=query.text, origin=meta.source),
            )

    async def _on_transcript(self, message: Transcript, ctx: HandlerContext) -> None:
        participant_id = ctx.metadata.participant_id
        self._send(
            participant_id,
            TranscriptMessage(
                text=message.text,
                utterance=message.utterance,
                final=message.final,
                truncated=message.truncated,
            ),
        )
        if message.final and message.error:  # the recognizer failed: say which, and why
            failed = ErrorMessage(message=message.error, in_reply_to="audio", code=BACKEND_FAILED)
            self._send(participant_id, failed)
        elif message.final and not message.text.strip():  # the utterance ends with no turn
            self._send(participant_id, NO_SPEECH_ERROR)

    async def _on_audio(self, chunk: AudioOutput, ctx: HandlerContext) -> None:
        header = AudioMessage(
            request_id=chunk.request_id,
            source=chunk.source,
            sequence=chunk.sequence,
            final=chunk.final,
            sample_rate=chunk.sample_rate,
            text=chunk.text,
            bytes=len(chunk.pcm),
        )
        self._send(ctx.metadata.participant_id, header, chunk.pcm or None)

    async def _on_speech_failed(self, message: SpeechFailed, ctx: HandlerContext) -> None:
        self._send(
            ctx.metadata.participant_id, ErrorMessage(message=message.message, code=BACKEND_FAILED)
        )

    async def _on_speech_began(self, message: SpeechBegan, ctx: HandlerContext) -> None:
        sink = self._sinks.get(ctx.metadata.participant_id or "")
        if isinstance(sink, HearsSpeech):
            sink.speech_started()

    async def _on_interrupted(self, message: Interrupted, ctx: HandlerContext) -> None:
        self._send(
            ctx.metadata.participant_id,
            InterruptedMessage(reason=message.reason, request_id=message.request_id),
        )

    async def turn_failed(self, participant_id: str, turn_id: str, exc: Exception) -> None:
        """The router's ``failed`` hook: a turn its model failed on gets an ``error`` naming
        the model (and its server, for a remote one; code ``backend_failed``) before its
        ``idle``. Other failures are the router's own message (sent before the answer). A
        turn too long for the model's window gets code ``too_long``: a shorter one works."""
        if isinstance(exc, ContextOverflowError):
            message = f"the message is too long for this device's language model: {exc}"
            self._send(participant_id, ErrorMessage(message=message, code=TOO_LONG))
        elif isinstance(exc, LLMError):
            message = f"the language model failed on this turn: {exc}"
            self._send(participant_id, ErrorMessage(message=message, code=BACKEND_FAILED))

    async def status(self, state: Literal["processing", "idle"], participant_id: str) -> None:
        """The router's ``set_status`` callback. It brackets each turn, and one
        participant's turns overlap (a new one starts while the one it cancels drains),
        so ``idle`` is sent only when the participant's last running turn has finished:
        an earlier turn's ``idle`` would end the new turn before its reply."""
        running = self._running.get(participant_id, 0) + (1 if state == "processing" else -1)
        if running > 0:
            self._running[participant_id] = running
        else:
            self._running.pop(participant_id, None)
        if state == "processing" or running <= 0:
            self._send(participant_id, Status(state=state))


def _reply(frame: ResponseOutput) -> Reply:
    return Reply(
        text=frame.text,
        request_id=frame.request_id,
        source=frame.source,
        sequence=frame.sequence,
        final=frame.final,
        timestamp_us=frame.timestamp_us,
    )
