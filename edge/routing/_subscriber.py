"""The runtime agent that delivers the router's configured topics to it."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from edge.interaction import Interrupted, ParticipantJoined, ParticipantLeft, UserQuery
from edge.runtime import Agent, HandlerContext

from ._types import AgentExchange, AgentTurn

if TYPE_CHECKING:
    from ._router import AgentRouter

log = logging.getLogger(__name__)


class RouterSubscriber(Agent):
    """Handlers return quickly: a query's turn runs in the router's task group (when the
    router is entered with ``async with``), so the publisher is not held for the turn."""

    def __init__(self, router: AgentRouter) -> None:
        super().__init__()
        self.router = router

    async def on_query(self, message: UserQuery, ctx: HandlerContext) -> None:
        meta = ctx.metadata
        if meta.participant_id is None:
            log.warning("dropping query %s: it names no participant", meta.message_id)
            return
        turn = AgentTurn(
            participant_id=meta.participant_id,
            turn_id=meta.message_id,
            query=message.text,
            history=tuple(AgentExchange(h.user, h.assistant) for h in message.history),
            timestamp_us=message.timestamp_us
            if message.timestamp_us is not None
            else meta.timestamp_us,
        )
        inline = self.router._spawn_runtime_turn(turn, ctx.runtime)
        if inline is not None:
            await inline

    async def on_joined(self, message: ParticipantJoined, ctx: HandlerContext) -> None:
        if ctx.metadata.participant_id is not None:
            await self.router._joined(ctx.metadata.participant_id)

    async def on_left(self, message: ParticipantLeft, ctx: HandlerContext) -> None:
        pid = ctx.metadata.participant_id
        if pid is None:
            return
        try:
            await self.router.participant_left(pid)
        except Exception:
            log.exception("departure of participant %s failed (retry participant_left)", pid)

    async def on_interrupted(self, message: Interrupted, ctx: HandlerContext) -> None:
        await self.router._interrupted(ctx.metadata.participant_id, message.request_id)


def build_subscriber(router: AgentRouter) -> RouterSubscriber:
    agent = RouterSubscriber(router)
    handlers: list[tuple[Any, Any]] = [
        (router._query_topic, agent.on_query),
        (router._joined_topic, agent.on_joined),
        (router._left_topic, agent.on_left),
        (router._interrupted_topic, agent.on_interrupted),
    ]
    for topic, handler in handlers:
        if topic is not None:
            agent.add_handler(topic, handler)
    return agent
