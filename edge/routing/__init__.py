"""Participant-scoped routing among agents: admission before speech, explicit focus,
bounded rerouting, a default fallback and clarification."""

from ._config import (
    DEFAULT_CONTEXT_BUDGET_BYTES,
    ParticipantHooks,
    RouterConfig,
    RouterTopics,
)
from ._history import DialogueHistory, RecentExchanges
from ._output import reply_frame
from ._router import AgentRouter
from ._state import TurnCancelled
from ._turn_context import RoutingTurnContext, current_turn_context
from ._types import (
    Admission,
    AgentExchange,
    AgentTurn,
    DestinationResult,
    LeaveAware,
    Resumable,
    RoutableAgent,
    RoutingAid,
    StartedSignal,
)

__all__ = [
    "DEFAULT_CONTEXT_BUDGET_BYTES",
    "Admission",
    "AgentExchange",
    "AgentRouter",
    "AgentTurn",
    "DestinationResult",
    "DialogueHistory",
    "LeaveAware",
    "ParticipantHooks",
    "RecentExchanges",
    "Resumable",
    "RoutableAgent",
    "RouterConfig",
    "RouterTopics",
    "RoutingAid",
    "RoutingTurnContext",
    "StartedSignal",
    "TurnCancelled",
    "current_turn_context",
    "reply_frame",
]
