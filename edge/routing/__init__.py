"""Participant-scoped routing among agents: admission before speech, explicit focus,
bounded rerouting, a default fallback and clarification."""

from ._router import _DEFAULT_CONTEXT_BUDGET_BYTES, AgentRouter
from ._state import TurnCancelled
from ._types import (
    Admission,
    AgentExchange,
    AgentTurn,
    DestinationResult,
    LeaveAware,
    Resumable,
    RoutableAgent,
    RoutingAid,
    RoutingTurnContext,
    StartedSignal,
    current_turn_context,
)

DEFAULT_CONTEXT_BUDGET_BYTES = _DEFAULT_CONTEXT_BUDGET_BYTES

__all__ = [
    "DEFAULT_CONTEXT_BUDGET_BYTES",
    "Admission",
    "AgentExchange",
    "AgentRouter",
    "AgentTurn",
    "DestinationResult",
    "LeaveAware",
    "Resumable",
    "RoutableAgent",
    "RoutingAid",
    "RoutingTurnContext",
    "StartedSignal",
    "TurnCancelled",
    "current_turn_context",
]
