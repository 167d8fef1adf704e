"""``current_turn_context()``: the routing spec's accessor for the active routed turn.

The project's own code reads a turn's identity from its fields (``AgentTurn.exchange_id``);
this accessor serves code that only has the asynchronous context (the spec's contract)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from ._types import AgentTurn


@dataclass(frozen=True)
class RoutingTurnContext:
    """Read-only metadata of the active routed turn (a stable snapshot).

    Outside a routed turn the identifiers are None and the tuples empty.
    """

    exchange_id: object | None = None
    history_exchange_ids: tuple[object | None, ...] = ()
    history_timestamps: tuple[int | None, ...] = ()


_OUTSIDE_TURN = RoutingTurnContext()
_TURN_CONTEXT: ContextVar[RoutingTurnContext | None] = ContextVar(
    "edge_routing_turn_context", default=None
)


def current_turn_context() -> RoutingTurnContext:
    """The metadata of the routed turn running in this asynchronous context."""
    return _TURN_CONTEXT.get() or _OUTSIDE_TURN


@contextmanager
def routed_turn(turn: AgentTurn) -> Iterator[None]:
    """Make ``turn`` (with its history's identities and times) the active routed turn."""
    token = _TURN_CONTEXT.set(
        RoutingTurnContext(
            exchange_id=turn.exchange_id,
            history_exchange_ids=tuple(e.exchange_id for e in turn.history),
            history_timestamps=tuple(e.timestamp_us for e in turn.history),
        )
    )
    try:
        yield
    finally:
        _TURN_CONTEXT.reset(token)
