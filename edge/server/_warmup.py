"""Warm a joining participant's prompt prefix, so their first answer starts fast.

Prompt evaluation is the slow part on a CPU (DESIGN.md): the conversation's system prompt
alone is ~150 tokens, most of a cold first turn. When a participant joins, the
:class:`PrefixWarmer` evaluates it into that participant's KV state (the conversation's
``cache_key``) at background priority, so interactive work preempts it and it never
delays anyone's answer. Backends without ``warm`` (remote servers, scripted models) skip it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from edge.interaction import PARTICIPANT_JOINED_TOPIC, ParticipantJoined
from edge.llm import ChatMessage, LLMService, Priority, Warmable
from edge.runtime import Agent, BackgroundTasks, HandlerContext

log = logging.getLogger(__name__)


class PrefixWarmer(Agent):
    """``async with`` owns the warm-up tasks; leaving cancels those still running."""

    def __init__(self, llm: LLMService, system_prompt: Callable[[], str]) -> None:
        super().__init__()
        self.llm = llm
        self.system_prompt = system_prompt
        self.warmed: list[str] = []
        self._tasks = BackgroundTasks("the prefix warmer")
        self.add_handler(PARTICIPANT_JOINED_TOPIC, self._on_joined)

    async def __aenter__(self) -> PrefixWarmer:
        await self._tasks.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._tasks.close()

    async def _on_joined(self, message: ParticipantJoined, ctx: HandlerContext) -> None:
        pid = ctx.metadata.participant_id
        if pid is not None and self._tasks.running and isinstance(self.llm, Warmable):
            self._tasks.start_soon(self._warm, pid)

    async def _warm(self, participant_id: str) -> None:
        try:
            assert isinstance(self.llm, Warmable)
            await self.llm.warm(
                [ChatMessage(role="system", content=self.system_prompt())],
                cache_key=participant_id,
                priority=Priority.BACKGROUND,
            )
            self.warmed.append(participant_id)
        except Exception as exc:
            log.warning("warming the prompt of %s failed: %r", participant_id, exc)
