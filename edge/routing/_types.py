"""Public contracts between the router and its destinations."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from edge.interaction import Exchange


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


AgentExchange = Exchange
"""One completed request and the destination's response context (the routing spec's name
for the service's one exchange type, :class:`edge.interaction.Exchange`)."""


@dataclass(frozen=True)
class AgentTurn:
    """The current turn and the completed exchanges selected for a destination.

    ``history`` carries the exchanges as the router's dialogue holds them (with their
    identities and times). ``exchange_id`` identifies the exchange this turn completes (the
    router sets it): a destination that owns the router's dialogue (``Conversation``,
    whose ``dialogue`` the router was given) records its exchange itself under this id,
    and the router then records nothing; the router records every other destination's."""

    participant_id: str
    turn_id: str
    query: str
    history: tuple[Exchange, ...] = ()
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
