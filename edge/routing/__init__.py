"""Participant-scoped routing among agents: admission before speech, explicit focus,
bounded rerouting, a default fallback and clarification."""

from ._types import (
    Admission,
    AgentExchange,
    AgentTurn,
    DestinationResult,
    RoutableAgent,
    RoutingAid,
    RoutingTurnContext,
    current_turn_context,
)

__all__ = [
    "Admission",
    "AgentExchange",
    "AgentTurn",
    "DestinationResult",
    "RoutableAgent",
    "RoutingAid",
    "RoutingTurnContext",
    "current_turn_context",
]
