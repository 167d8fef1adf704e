"""Warm a joining participant's prompt prefix, so their first answer starts fast.

Prompt evaluation is the slow part on a CPU (DESIGN.md): the conversation's system prompt
alone is ~150 tokens, most of a cold first turn. The service evaluates it once at start
under :data:`SYSTEM_PROMPT_KEY`; when a participant joins, the :class:`PrefixWarmer`
copies that state into the participant's own (the conversation's ``cache_key``) at
background priority, so interactive work preempts it and it never delays anyone's answer.
Backends without ``warm`` (remote servers, scripted models) skip it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from edge.interaction import PARTICIPANT_JOINED_TOPIC, ParticipantJoined
from edge.llm import ChatMessage, LLMService, Priority, Warmable
from edge.runtime import Agent, BackgroundTasks, HandlerContext

log = logging.getLogger(__name__)

SYSTEM_PROMPT_KEY = "conversation:system"
"""The model cache key holding the conversation's system prompt alone, which participants'
states start from (participant ids cannot contain ":", so none collides with it)."""


class PrefixWarmer(Agent):
    """``async with`` owns the warm-up tasks; leaving cancels those still running.

    With ``shared_key``, :meth:`warm_shared` evaluates the system prompt once under that key
    (the service does it at start), and a joining participant's warm starts from a copy of
    it instead of evaluating it again; the conversation's answers use the same key as their
    seed, so a participant who speaks before their own warm has run (or whose state was
    evicted) still reuses the system prompt."""

    def __init__(
        self, llm: LLMService, system_prompt: Callable[[], str], shared_key: str | None = None
    ) -> None:
        super().__init__()
        self.llm = llm
        self.system_prompt = system_prompt
        self.shared_key = shared_key
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

    async def warm_shared(self) -> None:
        """Evaluate the system prompt under ``shared_key`` (nothing without one, or for a
        backend without ``warm``). Best effort: a failure is logged."""
        if self.shared_key is not None and isinstance(self.llm, Warmable):
            await self._warm(self.shared_key)

    async def _warm(self, key: str) -> None:
        seed = self.shared_key if key != self.shared_key else None
        try:
            assert isinstance(self.llm, Warmable)
            await self.llm.warm(
                [ChatMessage(role="system", content=self.system_prompt())],
                cache_key=key,
                priority=Priority.BACKGROUND,
                seed_key=seed,
            )
            if key != self.shared_key:
                self.warmed.append(key)
        except Exception as exc:
            log.warning("warming the prompt of %s failed: %r", key, exc)
