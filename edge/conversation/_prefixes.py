"""The one owner of a participant's model prefix: every warm, move and forget of it.

Prompt evaluation is the slow part on a CPU (DESIGN.md): an answer's prompt starts with
the system prompt and the participant's context, the same from one turn to the next, so
the model keeps its evaluated state under the participant's cache key and an answer
evaluates only what is new. :class:`Prefixes` keeps that state warm:

* at start, the system prompt alone under :data:`SYSTEM_PROMPT_KEY`
  (:meth:`PrefixWarmer.warm_shared`), and when a participant joins, their own state from a
  copy of it with their context and the current time on top (:class:`PrefixWarmer`, a
  runtime agent on ``participant.joined``), so a first answer evaluates only its request;
* after an exchange (once the device is briefly quiet), the system prompt and the
  participant's context with the current time and the recalled block chosen ahead of the
  next request (:meth:`Prefixes.rewarm`);
* during a compaction, the prefix its summary will leave, under :data:`SUCCESSOR_KEY`,
  moved to the participant when the compaction commits (:meth:`Prefixes.warm_successor`,
  :meth:`Prefixes.adopt`);
* when a participant is forgotten, their state (:meth:`Prefixes.forget`).

Every warm runs at background priority: interactive work preempts it. Backends without
``warm`` (remote servers, scripted models) skip it; without ``move_cache`` no successor
is warmed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

import anyio

from edge.interaction import PARTICIPANT_JOINED_TOPIC, ParticipantJoined
from edge.llm import (
    ChatMessage,
    ForgetsCache,
    LLMError,
    LLMService,
    MovesCache,
    Priority,
    Warmable,
)
from edge.runtime import Agent, BackgroundTasks, HandlerContext

from ._background import Jobs
from ._context import Entry, ParticipantContext, Section, Successor
from ._state import ContextState

log = logging.getLogger(__name__)

SYSTEM_PROMPT_KEY = "conversation:system"
"""The model cache key holding the conversation's system prompt alone, which participants'
states start from (participant ids cannot contain ":", so none collides with it)."""
SUCCESSOR_KEY = "__next:"
"""Prefix of the model cache key under which a compaction warms the participant's next
prompt prefix before it commits (the key is then handed to the participant)."""


class Prefixes:
    """Warms, moves and forgets participants' prompt prefixes in ``llm``'s cache: each
    the context message ``prefix(view)`` renders for a participant's view of ``state``,
    tracked in ``jobs`` (so a clear cancels it).

    ``rewarm`` False turns the re-warm after an exchange and the successor of a
    compaction off (the join-time and shared warms stay)."""

    def __init__(
        self,
        llm: LLMService,
        state: ContextState,
        prefix: Callable[[ParticipantContext], str],
        jobs: Jobs,
        *,
        rewarm: bool,
    ) -> None:
        self.llm = llm
        self.state = state
        self.prefix = prefix
        self.jobs = jobs
        self.rewarm_on = rewarm

    @property
    def can_rewarm(self) -> bool:
        return self.rewarm_on and isinstance(self.llm, Warmable)

    # ---------------------------------------------------------------- the system prompt

    async def warm_system(self, key: str, system: str, seed: str | None = None) -> bool:
        """Evaluate ``system`` alone under ``key`` (the shared state, or a joining
        participant's, starting from the ``seed`` key's state). Best effort: False when
        the model cannot warm or the warm failed (logged)."""
        if not isinstance(self.llm, Warmable):
            return False
        try:
            await self.llm.warm(
                [ChatMessage(role="system", content=system)],
                cache_key=key,
                priority=Priority.BACKGROUND,
                seed_key=seed,
                user_next=True,
            )
        except Exception as exc:
            log.warning("warming the prompt of %s failed: %r", key, exc)
            return False
        return True

    # ---------------------------------------------------------------- the participant's prefix

    async def rewarm(self, part: ParticipantContext) -> None:
        """Evaluate the participant's prompt prefix (system prompt and context with the
        current time) into their KV state, so the next answer evaluates only its recalled
        block and request: in the same minute the whole prefix is reused, later all but the
        time's last digits (its date and hour rarely change between turns)."""
        self.state.take_warm(part)
        if not isinstance(self.llm, Warmable) or part.system is None:
            return
        with self.jobs.track(part.participant_id):
            await self._warm(part.system, self.prefix(part), part.participant_id)

    async def warm_words(self, participant_id: str, messages: list[ChatMessage]) -> None:
        """The participant is still speaking: evaluate their answer request ``messages`` up
        to the end of its words so far (the last message, a partial transcript), so the
        answer to the whole utterance evaluates only its last words. Best effort."""
        if not isinstance(self.llm, Warmable):
            return
        with self.jobs.track(participant_id):
            try:
                await self.llm.warm(
                    messages, cache_key=participant_id, priority=Priority.BACKGROUND, open_last=True
                )
            except LLMError as exc:
                log.debug("warming %s's words so far failed: %s", participant_id, exc)

    async def warm_joined(self, participant_id: str, system: str, seed: str | None) -> bool:
        """A participant joined: their state from ``seed``'s (the system prompt alone),
        then their prompt prefix on top (their stored context, or none yet, and the current
        time), so their first answer evaluates only its request. True once the system
        prompt is theirs (the prefix on top is best effort, like every re-warm)."""
        if not await self.warm_system(participant_id, system, seed):
            return False
        if self.rewarm_on:
            await self._warm(system, self.prefix(self.state.view(participant_id)), participant_id)
        return True

    async def _warm(self, system: str, context: str, key: str) -> bool:
        assert isinstance(self.llm, Warmable)
        messages = [
            ChatMessage(role="system", content=system),
            ChatMessage(role="user", content=context),
        ]
        try:
            await self.llm.warm(
                messages, cache_key=key, priority=Priority.BACKGROUND, user_next=True
            )
        except LLMError as exc:
            log.warning("re-warming the prompt under %r failed: %s", key, exc)
            return False
        return True

    async def warm_successor(
        self, part: ParticipantContext, section: Section, summary: str, taken: list[Entry]
    ) -> Successor | None:
        """Before a compaction commits: warm the prompt prefix the participant will have
        once ``summary`` replaces ``taken`` under a key of its own, while their current
        prefix (warmed before the compaction started) still serves their turns. Returns
        the key and the context warmed; :meth:`adopt` makes it theirs."""
        if not (self.can_rewarm and isinstance(self.llm, MovesCache)) or part.system is None:
            return None
        after = replace(section, entries=list(section.entries))
        after.apply_summary(summary, taken)
        sections = [after if s is section else s for s in part.sections.values()]
        view = ParticipantContext(part.participant_id, sections)
        if view.needs_compaction():
            return None  # more steps follow (a backlog): the last one warms what they leave
        context = self.prefix(view)
        key = SUCCESSOR_KEY + part.participant_id
        warmed = False
        try:
            warmed = await self._warm(part.system, context, key)
        finally:
            if not warmed:  # failed or cancelled (a clear): drop what it left
                await self.drop(key)
        return (key, context) if warmed else None

    async def drop(self, key: str) -> None:
        """Forget the state under ``key`` (a successor not adopted), even when cancelled."""
        if isinstance(self.llm, ForgetsCache):
            with anyio.CancelScope(shield=True):
                await self.llm.forget_cache(key)

    async def adopt(self, part: ParticipantContext, successor: Successor | None) -> bool:
        """After the commit: the successor prefix becomes the participant's KV state.
        True when it is exactly their prompt prefix now (no re-warm needed)."""
        if successor is None or not isinstance(self.llm, MovesCache):
            return False
        key, warmed = successor
        moved = await self.llm.move_cache(key, part.participant_id)
        return moved and warmed == self.prefix(part)

    async def forget(self, participant_id: str) -> None:
        """Forget the participant's saved prompt state."""
        if isinstance(self.llm, ForgetsCache):
            await self.llm.forget_cache(participant_id)


class PrefixWarmer(Agent):
    """Warms a joining participant's prompt prefix, so their first answer starts fast: on
    ``participant.joined`` it evaluates ``system_prompt()`` into the participant's state,
    starting from the shared one (:meth:`warm_shared`, which the service runs at start),
    and their context with the current time on top (:meth:`Prefixes.warm_joined`);
    the conversation's answers use the same key as their seed, so a participant who speaks
    before their own warm has run (or whose state was evicted) still reuses the system
    prompt. ``async with`` owns the warm-up tasks; leaving cancels those still running."""

    def __init__(
        self,
        prefixes: Prefixes,
        system_prompt: Callable[[], str],
        shared_key: str | None = SYSTEM_PROMPT_KEY,
    ) -> None:
        super().__init__()
        self.prefixes = prefixes
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
        if pid is not None and self._tasks.running and isinstance(self.prefixes.llm, Warmable):
            self._tasks.start_soon(self._warm, pid)

    async def warm_shared(self) -> None:
        """Evaluate the system prompt under ``shared_key`` (nothing without one, or for a
        backend without ``warm``). Best effort: a failure is logged."""
        if self.shared_key is not None:
            await self.prefixes.warm_system(self.shared_key, self.system_prompt())

    async def _warm(self, participant_id: str) -> None:
        system, seed = self.system_prompt(), self.shared_key
        if await self.prefixes.warm_joined(participant_id, system, seed):
            self.warmed.append(participant_id)
