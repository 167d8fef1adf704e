"""The runtime agent that delivers the router's configured topics to it and runs the
turns that arrive that way."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Literal

import anyio

from edge.interaction import Interrupted, ParticipantJoined, ParticipantLeft, UserQuery
from edge.llm import LLMUnavailableError
from edge.runtime import Agent, AgentRuntime, HandlerContext

from ._config import ParticipantHooks, RouterTopics
from ._output import ControlOutput, TopicOutput
from ._state import Run, TurnCancelled
from ._types import AgentTurn

if TYPE_CHECKING:
    from ._router import AgentRouter

log = logging.getLogger(__name__)


class RouterSubscriber(Agent):
    """Handlers return quickly: a query's turn runs in the router's task group (when the
    router is entered with ``async with``), so the publisher is not held for the turn;
    ``hooks.status`` hears ``processing`` / ``idle`` around it and ``hooks.failed`` a turn
    that ended with an error, before its ``idle``."""

    def __init__(self, router: AgentRouter, topics: RouterTopics, hooks: ParticipantHooks) -> None:
        super().__init__()
        self.router = router
        self._topics = topics
        self._status_callback = hooks.status
        self._failed_callback = hooks.failed
        self._warned_inline = False
        self.add_handler(topics.query, self.on_query)
        for topic, handler in (
            (topics.joined, self.on_joined),
            (topics.left, self.on_left),
            (topics.interrupted, self.on_interrupted),
        ):
            if topic is not None:
                self.add_handler(topic, handler)

    async def on_query(self, message: UserQuery, ctx: HandlerContext) -> None:
        meta = ctx.metadata
        if meta.participant_id is None:
            log.warning("dropping query %s: it names no participant", meta.message_id)
            return
        turn = AgentTurn(
            participant_id=meta.participant_id,
            turn_id=meta.message_id,
            query=message.text,
            history=message.history,
            timestamp_us=message.timestamp_us
            if message.timestamp_us is not None
            else meta.timestamp_us,
        )
        inline = await self._spawn(turn, ctx.runtime)
        if inline is not None:
            await inline

    async def on_joined(self, message: ParticipantJoined, ctx: HandlerContext) -> None:
        if ctx.metadata.participant_id is not None:
            await self.router._participants.joined(ctx.metadata.participant_id)

    async def on_left(self, message: ParticipantLeft, ctx: HandlerContext) -> None:
        pid = ctx.metadata.participant_id
        if pid is None:
            return
        try:
            await self.router.participant_left(pid)
        except Exception:
            log.exception("departure of participant %s failed (retry participant_left)", pid)

    async def on_interrupted(self, message: Interrupted, ctx: HandlerContext) -> None:
        await self.router._participants.interrupted(ctx.metadata.participant_id, message.request_id)

    async def _spawn(self, turn: AgentTurn, runtime: AgentRuntime) -> Awaitable[None] | None:
        """Register a runtime turn and start it in the router's task group; returns the
        coroutine to await inline when the router was not entered. The turn is
        ``processing`` from here, before a turn it replaces can end: that one's ``idle``
        would otherwise tell the client that the new query's turn is over."""
        router = self.router
        try:
            run = router._participants.arrive(turn)
        except (RuntimeError, ValueError, TypeError) as exc:
            log.warning("dropping query %s: %s", turn.turn_id, exc)
            return None
        await self._status("processing", turn.participant_id)
        out = TopicOutput(runtime, self._topics.output, turn)
        if router._tasks.running:
            router._tasks.start_soon(self._turn, run, out)
            return None
        if not self._warned_inline:
            self._warned_inline = True
            log.warning(
                "router used by a runtime without `async with router`: turns run inline and "
                "hold up their publisher"
            )
        return self._turn(run, out)

    async def _turn(self, run: Run, out: ControlOutput) -> None:
        """Run a turn that :meth:`_spawn` reported ``processing``; ``idle`` when it ends."""
        pid = run.turn.participant_id
        try:
            await self.router._execute(run, out)
        except TurnCancelled:
            pass
        except LLMUnavailableError as exc:  # a model's server is down: expected, one line
            log.error("turn %s of participant %s failed: %s", run.turn.turn_id, pid, exc)
            await self._failed(pid, run.turn.turn_id, exc)
        except Exception as exc:
            log.exception("turn %s of participant %s failed", run.turn.turn_id, pid)
            await self._failed(pid, run.turn.turn_id, exc)
        finally:
            with anyio.CancelScope(shield=True):
                await self._status("idle", pid)

    async def _failed(self, participant_id: str, turn_id: str, exc: Exception) -> None:
        if self._failed_callback is None:
            return
        with anyio.CancelScope(shield=True):
            try:
                await self._failed_callback(participant_id, turn_id, exc)
            except Exception:
                log.exception("failed(%r, %r) failed", participant_id, turn_id)

    async def _status(self, status: Literal["processing", "idle"], participant_id: str) -> None:
        if self._status_callback is None:
            return
        try:
            await self._status_callback(status, participant_id)
        except Exception:
            log.exception("set_status(%r, %r) failed", status, participant_id)
