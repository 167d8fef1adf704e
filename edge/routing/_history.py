"""Completed exchanges kept per participant, selected newest first within a byte budget."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ._types import AgentExchange


@dataclass(frozen=True)
class Exchange:
    """A completed exchange with the identity and time the router tracks for it."""

    exchange_id: object
    user: str
    assistant: str
    timestamp_us: int | None = None

    @property
    def size(self) -> int:
        return exchange_bytes(self.user, self.assistant)

    def public(self) -> AgentExchange:
        return AgentExchange(self.user, self.assistant)


def exchange_bytes(user: str, assistant: str) -> int:
    """UTF-8 size of an exchange, the unit of the context budget."""
    return len(user.encode("utf-8")) + len(assistant.encode("utf-8"))


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
