"""What a connected client can do, as runtime messages: one place for both protocols.

Each method publishes on the standard topics for one participant and turns a failure
(a payload the topic rejects, a subscriber that raised) into :class:`ClientError` with a
message naming the problem, so the protocol adapters can answer an error and go on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from edge.interaction import (
    INTERRUPTED_TOPIC,
    PARTICIPANT_JOINED_TOPIC,
    PARTICIPANT_LEFT_TOPIC,
    USER_QUERY_TOPIC,
    ConversationContextUpdate,
    Interrupted,
    ParticipantJoined,
    ParticipantLeft,
    UserQuery,
)
from edge.llm import GenerationOptions, LLMService, Messages, Priority, TextStream
from edge.runtime import AgentRuntime, MessageMetadata, PayloadError, Topic
from edge.speculation import SpeculationStats
from edge.voice import (
    AUDIO_INPUT_TOPIC,
    END_OF_UTTERANCE_TOPIC,
    HOLD_FLOOR_TOPIC,
    AudioInput,
    EndOfUtterance,
    HoldFloor,
)

from ._hub import OutputHub

if TYPE_CHECKING:
    from ._sessions import Sessions

log = logging.getLogger(__name__)

LEAVE_TIMEOUT_S = 30.0


class ClientError(ValueError):
    """A client request that could not be carried out; the text says why."""


def _reason(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_reason(e) for e in exc.exceptions)
    return str(exc) or type(exc).__name__


@dataclass
class Gateway:
    """The runtime side of every client session (WebSocket and Wyoming)."""

    runtime: AgentRuntime
    hub: OutputHub
    context_topics: tuple[str, ...] = ()
    voice: bool = False
    server: str = "edge"
    profile: str | None = None
    models: dict[str, str] = field(default_factory=dict)
    audio_out_rate: int | None = None
    speculation: SpeculationStats | None = None  # answers started before the endpoint
    sessions: Sessions | None = None  # durable sessions (resume, history, export, ...)
    backends: Callable[[], dict[str, Any]] | None = None  # each model's backend, for /health
    llm: LLMService | None = None  # stateless answers (edge.api), through its scheduler
    instructions: dict[str, str] = field(default_factory=dict)
    """A session's own instructions to the model, per participant (a Realtime
    ``session.update``): the conversation adds them to its system message."""

    async def _publish(
        self, topic: Topic[Any], message: Any, participant_id: str, source: str
    ) -> MessageMetadata:
        if not self.runtime.running:
            raise ClientError("the service is shutting down")
        try:
            return await self.runtime.publish(
                topic, message, participant_id=participant_id, source=source
            )
        except (PayloadError, ExceptionGroup) as exc:
            raise ClientError(_reason(exc)) from exc

    def complete(self, messages: Messages, options: GenerationOptions) -> TextStream:
        """A stateless answer to a client's own messages (no participant, nothing
        recorded), at interactive priority in the one model scheduler."""
        if self.llm is None or not self.runtime.running:
            raise ClientError("the service is shutting down")
        return self.llm.stream(
            messages, GenerationOptions.of(options, priority=Priority.INTERACTIVE)
        )

    async def join(self, participant_id: str, display_name: str, source: str) -> None:
        await self._publish(
            PARTICIPANT_JOINED_TOPIC,
            ParticipantJoined(display_name=display_name),
            participant_id,
            source,
        )

    async def leave(self, participant_id: str, reason: str, source: str) -> None:
        """Publish the departure even while the caller is being cancelled; never raises."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(LEAVE_TIMEOUT_S) as scope:
            try:
                if self.runtime.running:
                    await self.runtime.publish(
                        PARTICIPANT_LEFT_TOPIC,
                        ParticipantLeft(reason=reason),
                        participant_id=participant_id,
                        source=source,
                    )
            except Exception:
                log.exception("publishing the departure of %s failed", participant_id)
        if scope.cancelled_caught:
            log.warning("the departure of %s took over %.0f s", participant_id, LEAVE_TIMEOUT_S)

    async def query(self, participant_id: str, text: str, source: str) -> str:
        """Publish a turn; returns its id (the ``request_id`` of every reply)."""
        try:
            query = UserQuery(text=text)
        except ValueError as exc:
            raise ClientError(_reason(exc)) from None
        meta = await self._publish(USER_QUERY_TOPIC, query, participant_id, source)
        return meta.message_id

    async def audio(
        self, participant_id: str, pcm: bytes, sample_rate: int, channels: int, source: str
    ) -> None:
        if not self.voice:
            raise ClientError("this server runs without voice: send text turns")
        chunk = AudioInput(pcm=pcm, sample_rate=sample_rate, channels=channels)
        await self._publish(AUDIO_INPUT_TOPIC, chunk, participant_id, source)

    async def end_of_utterance(self, participant_id: str, source: str) -> None:
        """Push-to-talk release: end the participant's utterance now."""
        if not self.voice:
            raise ClientError("this server runs without voice: there is no utterance to end")
        await self._publish(END_OF_UTTERANCE_TOPIC, EndOfUtterance(), participant_id, source)

    async def hold(self, participant_id: str, source: str) -> None:
        """Push-to-talk pressed: only the release (or the length cap) ends the utterance."""
        if not self.voice:
            raise ClientError("this server runs without voice: there is no utterance to hold")
        await self._publish(HOLD_FLOOR_TOPIC, HoldFloor(), participant_id, source)

    async def interrupt(self, participant_id: str, request_id: str | None, source: str) -> None:
        await self._publish(
            INTERRUPTED_TOPIC,
            Interrupted(reason="client", request_id=request_id),
            participant_id,
            source,
        )

    async def context(self, participant_id: str, topic: str, text: str, source: str) -> None:
        if topic not in self.context_topics:
            known = ", ".join(self.context_topics) or "none"
            raise ClientError(f"unknown context topic {topic!r}; this server takes: {known}")
        await self._publish(
            Topic(topic, ConversationContextUpdate),
            ConversationContextUpdate(text=text),
            participant_id,
            source,
        )
