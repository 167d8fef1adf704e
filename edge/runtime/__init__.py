"""Typed in-process topics: :class:`Topic`, :class:`Agent`, :class:`AgentRuntime`.

Example::

    QUESTIONS = Topic("questions", UserQuery)

    class Echo(Agent):
        @subscribe(QUESTIONS)
        async def on(self, message: UserQuery, ctx: HandlerContext) -> None:
            await ctx.publish(ANSWERS, ResponseOutput(text=message.text))

    runtime = AgentRuntime()
    runtime.register("echo", Echo())
    async with runtime:
        await runtime.publish(QUESTIONS, UserQuery(text="hi"), participant_id="p1")
"""

from ._agent import Agent, Handler, subscribe
from ._compute import (
    COMPUTE_GATE,
    FIRST_SENTENCE,
    NORMAL,
    URGENT,
    ComputeGate,
    OrderedLock,
    YieldedToUrgentError,
    current_urgency,
    gives_way,
    urgency,
    yielding,
)
from ._runtime import AgentRuntime, HandlerContext, MessageMetadata, new_id, now_us
from ._tasks import BackgroundTasks
from ._topic import PayloadError, Topic
from ._trace import TRACES, GateHold, TurnTrace, TurnTraces, current_owner, owned_by
from ._turn_order import FIRST_PIECES, FirstPieces, place_in_line, turn_started

__all__ = [
    "COMPUTE_GATE",
    "FIRST_PIECES",
    "FIRST_SENTENCE",
    "NORMAL",
    "TRACES",
    "URGENT",
    "Agent",
    "AgentRuntime",
    "BackgroundTasks",
    "ComputeGate",
    "FirstPieces",
    "GateHold",
    "Handler",
    "HandlerContext",
    "MessageMetadata",
    "OrderedLock",
    "PayloadError",
    "Topic",
    "TurnTrace",
    "TurnTraces",
    "YieldedToUrgentError",
    "current_owner",
    "current_urgency",
    "gives_way",
    "new_id",
    "now_us",
    "owned_by",
    "place_in_line",
    "subscribe",
    "turn_started",
    "urgency",
    "yielding",
]
