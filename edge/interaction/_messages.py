"""Message payloads exchanged between the service's agents and its clients.

The participant, the message id, the correlation id, the source and the publication time
travel in :class:`edge.runtime.MessageMetadata`; payloads carry what a client needs to
render or play a message on its own, so they stay meaningful once serialized.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True)
class Exchange:
    """One completed exchange: the participant's request (``user``) and the response
    context kept for it (``assistant``), with its identity (``exchange_id``: a routed
    turn's, or its recorder's own; None when it has none yet) and the time of its request
    (``timestamp_us``, Unix microseconds; None: unknown). Two exchanges are equal when
    their words are (``AgentExchange("Hi", "Hello")`` equals a turn's history entry saying
    that); the identity and the time are not compared.

    The one exchange type of the service: a query's seed history (:class:`UserQuery`),
    routing's ``AgentExchange`` (a turn's history), the dialogue history the router reads
    and adds to, and the context's store adapter all pass it on as it is.
    """

    user: str
    assistant: str
    exchange_id: object | None = field(default=None, compare=False)
    timestamp_us: int | None = field(default=None, compare=False)

    __pydantic_config__ = ConfigDict(extra="forbid")  # in a payload: no unknown keys

    @property
    def size(self) -> int:
        """UTF-8 bytes of its text, the unit of the history budgets."""
        return len(self.user.encode("utf-8")) + len(self.assistant.encode("utf-8"))


class UserQuery(_Payload):
    """What a participant asked, as text (typed, or transcribed from speech).

    ``timestamp_us`` is when the participant said it (Unix microseconds), when the input
    layer knows; otherwise the publication time stands for it. The query's message id is
    the turn id that every reply refers to.
    """

    text: str
    timestamp_us: int | None = None
    history: tuple[Exchange, ...] = ()
    """Completed exchanges that seed the router's history of a participant without any."""

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("a query needs some text")
        return value


class ResponseOutput(_Payload):
    """Text for a participant: one frame of a streamed reply, or a standalone update.

    A reply stream is identified by ``(request_id, source)``: ``request_id`` is the turn
    id it answers and ``source`` who speaks (a route name, or ``"router"`` for admission
    preambles, acknowledgments, clarifications and failure messages). Frames of a stream
    carry ``sequence`` 0, 1, 2, ... and the last one has ``final=True`` (it may be empty).
    A message with ``request_id=None`` is a standalone update, complete in itself.
    ``timestamp_us`` is the originating turn's time, so clients can order replies.
    Output layers play the router's frames for a turn before the destination's.
    """

    text: str = ""
    request_id: str | None = None
    source: str = ""
    sequence: int = Field(default=0, ge=0)
    final: bool = True
    timestamp_us: int | None = None


class ParticipantJoined(_Payload):
    """A participant joined (the participant id is in the message metadata)."""

    display_name: str = ""


class ParticipantLeft(_Payload):
    """A participant left or their connection dropped."""

    reason: str = ""


class Interrupted(_Payload):
    """A participant interrupted (barge-in, a stop button): stop current output.

    Published for one participant, or globally with no participant in the metadata.
    ``request_id`` names the superseded turn when known.
    """

    reason: str = ""
    request_id: str | None = None


class ConversationContextUpdate(_Payload):
    """Background context for the conversation; the topic decides how it is applied."""

    text: str
