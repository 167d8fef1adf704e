"""Completed exchanges as the router sees them: the :class:`DialogueHistory` protocol the
dialogue's owner implements, the newest ones within a byte budget, and who records a
destination's exchange."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

from edge.interaction import Exchange


def newest_within(exchanges: Sequence[Exchange], budget_bytes: int) -> list[Exchange]:
    """The newest whole exchanges whose total size fits ``budget_bytes``, oldest first.

    Selection stops at the first exchange that does not fit, so the result is always a
    contiguous, most recent run of the history (never an older exchange without the
    newer ones).
    """
    kept: list[Exchange] = []
    used = 0
    for exchange in reversed(exchanges):
        size = exchange.size
        if used + size > budget_bytes:
            break
        kept.append(exchange)
        used += size
    kept.reverse()
    return kept


def as_lines(exchanges: Iterable[Exchange]) -> tuple[str, ...]:
    """History as short transcript lines for a routing decision."""
    lines: list[str] = []
    for exchange in exchanges:
        lines.append(f"User: {exchange.user}")
        if exchange.assistant:
            lines.append(f"Assistant: {exchange.assistant}")
    return tuple(lines)


@runtime_checkable
class DialogueHistory(Protocol):
    """The owner of the participants' completed exchanges, as the router reads and adds to
    them. The application's context side implements it (``Conversation.dialogue``, over
    its ``ContextManager``); without one the router keeps a :class:`RecentExchanges`."""

    def recent(self, participant_id: str, budget_bytes: int) -> Sequence[Exchange]:
        """The participant's newest whole exchanges within ``budget_bytes``, oldest first
        (:func:`newest_within`)."""
        ...

    async def record(self, participant_id: str, exchange: Exchange) -> None:
        """Add a completed exchange (with its ``exchange_id``); one whose ``exchange_id``
        is already there is not added again."""
        ...

    async def forget(self, participant_id: str) -> None:
        """The participant left the router; the owner decides what it keeps."""
        ...


class RecentExchanges:
    """A :class:`DialogueHistory` in memory: the newest exchanges within ``budget_bytes``
    per participant, forgotten on departure."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._exchanges: dict[str, list[Exchange]] = {}

    def recent(self, participant_id: str, budget_bytes: int) -> list[Exchange]:
        return newest_within(self._exchanges.get(participant_id, []), budget_bytes)

    async def record(self, participant_id: str, exchange: Exchange) -> None:
        kept = self._exchanges.setdefault(participant_id, [])
        if all(e.exchange_id != exchange.exchange_id for e in kept):
            kept.append(exchange)
            self._exchanges[participant_id] = newest_within(kept, self.budget_bytes)

    async def forget(self, participant_id: str) -> None:
        self._exchanges.pop(participant_id, None)


def records_itself(destination: object, dialogue: DialogueHistory) -> bool:
    """Whether ``destination`` records its completed exchanges in ``dialogue`` itself: it
    owns the router's dialogue (``AgentRouter(..., dialogue=conversation.dialogue)``), so
    the router leaves its exchanges to it and records only the other destinations'."""
    return getattr(destination, "dialogue", None) is dialogue
