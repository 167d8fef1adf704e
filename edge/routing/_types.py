"""Public contracts between the router and its destinations."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable


@dataclass(frozen=True)
class Admission:
    """A destination's decision before it speaks or starts work.

    ``accept`` permits work (``preamble`` is spoken first, only then); ``decline`` hands
    control back for another route; ``clarify`` ends routing with ``text`` as a question;
    ``release`` clears focus and returns the same query to ordinary routing (``text``, if
    any, is spoken before rerouting). Declining does not clear focus or call ``release()``.
    """

    disposition: Literal["accept", "decline", "clarify", "release"]
    preamble: str = ""
    text: str = ""


@dataclass(frozen=True)
class AgentExchange:
    """One completed request and the destination's response context."""

    user: str
    assistant: str


@dataclass(frozen=True)
class AgentTurn:
    """The current turn and the completed exchanges selected for a destination.

    ``exchange_id`` identifies the exchange this turn completes (the router sets it): a
    destination that records the exchange itself records it under this id, and the
    router's own record of it then adds nothing."""

    participant_id: str
    turn_id: str
    query: str
    history: tuple[AgentExchange, ...] = ()
    timestamp_us: int | None = None
    exchange_id: str | None = None


@dataclass(frozen=True)
class DestinationResult:
    """Optional response context for history, and the focus transition.

    Destinations return ``answer``, ``focus`` or ``release``; the router returns
    ``clarify`` when it asked for clarification before any answer. ``text`` is kept in
    history, never delivered as output.
    """

    disposition: Literal["answer", "focus", "release", "clarify"] = "answer"
    text: str = ""


@dataclass(frozen=True)
class RoutingAid:
    """Brief routing metadata for one participant, separate from full instructions."""

    name: str
    description: str
    priority: int = 0
    eligible: bool = True
    eligibility: str = "available"
    examples: tuple[str, ...] = ()
    """Short phrases typical of requests for this route (lexical routing evidence)."""


StartedSignal = Callable[[], Awaitable[None]]


@runtime_checkable
class RoutableAgent(Protocol):
    """A destination the router can admit, answer with, and release.

    A destination that is also :class:`LeaveAware` has its ``participant_left()`` called
    on departure instead of ``release()``.
    """

    def routing_aid(self, participant_id: str) -> RoutingAid: ...

    async def admit(self, turn: AgentTurn, *, focused: bool) -> Admission: ...

    async def answer(self, turn: AgentTurn, *, started: StartedSignal) -> DestinationResult: ...

    async def release(self, participant_id: str) -> None: ...


@runtime_checkable
class LeaveAware(Protocol):
    """A destination with its own departure hook (e.g. one that ends a participant's
    session and keeps its stored context), called instead of ``release()``."""

    async def participant_left(self, participant_id: str) -> None: ...


@runtime_checkable
class Resumable(Protocol):
    """A destination that keeps what a participant was doing across connections (a note
    being dictated): asked once per arrival, before the participant's first turn."""

    async def resume(self, participant_id: str) -> bool:
        """Restore the participant's state; True when this destination should hold their
        focus again."""
