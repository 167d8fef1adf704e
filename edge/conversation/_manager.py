"""The public :class:`ContextManager`: the face over the records and views (``_views.py``),
compaction (``_compacting.py``, scheduled by ``_schedule.py``) and the participants' model
prefixes (``_prefixes.py``), configured by one :class:`~edge.conversation.ContextConfig`.

Edge options: compaction starts only after the device (the model's activity tracker and
this manager's answers) has been quiet for ``compaction_quiet_s`` seconds, runs at
background priority and drains the whole backlog oldest first. A failed summary request
(empty, cut off, an error) keeps the entries until the section's next entry; the
``compaction_failure_limit``-th in a row for a section gives the extractive summary of the
participant's own statements instead. With ``rewarm`` (and a model that can ``warm``) the
prompt prefix of each participant who completed an exchange is re-warmed first, once the
device has been quiet for ``rewarm_quiet_s`` (at most ``compaction_quiet_s``), so their
next answer evaluates only its request, and a compaction warms the prefix its summary will
give the participant under a key of its own before it commits (the model's ``move_cache``
then hands it over): a turn during or right after their own compaction finds a warm prefix
either way. Under steady use (answers less than ``compaction_quiet_s`` apart, so no quiet
period comes) a section that overflows its budget is compacted at once without the model
(the participant's statements verbatim, as when a model summary fails), so the prompt's
start changes once per budget instead of on every turn.

Recall: every participant statement (what they said, each incremental topic update) is
indexed in ``recall_index`` (the store's FTS5 index when the store keeps the whole
conversation, else in memory); each answer request gets a "recalled" block of up to
``recall_budget_bytes`` with the earlier statements most relevant to it that are no longer
in the model's view (0 turns recall off). A re-warm includes a block chosen ahead of the
request (recent facts and corrections), so a request recalling one of those evaluates no
recalled token anew.

Storage: ``store`` (an :class:`edge.store.SessionStore`) keeps every participant's whole
conversation and the model's view of it, durable when a write returns; the manager keeps
only a cache of the view in memory (:meth:`ContextManager.suspend` drops it, the next use
reloads it). Without ``store`` the manager uses an in-memory one of its own that keeps
compacted entries only with ``keep_transcript=True``.

Compaction runs in the background while the manager is open: ``async with
ContextManager(llm) as ctx:``, or, without ``async with``, from the first write inside a
running event loop until :meth:`ContextManager.close`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, NamedTuple, Unpack

import anyio

from edge.interaction import Exchange
from edge.llm import ChatMessage, LLMService
from edge.recall import MemoryRecallIndex, RecallIndex, StoreRecallIndex
from edge.runtime import Agent, Topic, now_us
from edge.store import SessionStore

from . import _persist
from ._background import Jobs, Quiet
from ._compacting import Compaction
from ._compaction import CompactionReport, Compactor, PostCompactHook, PreCompactHook
from ._config import ContextConfig, ContextOptions, check_participant
from ._context import TranscriptEntry
from ._dialogue import ContextDialogue
from ._prefixes import SYSTEM_PROMPT_KEY, Prefixes, PrefixWarmer
from ._recall import Recall
from ._render import DIALOGUE, ContextBlock, Renderer
from ._schedule import Scheduler
from ._stated import StatedAnswer
from ._views import Views
from ._writing import Writer


class _Parts(NamedTuple):
    """The manager's parts, each with one job, wired to each other."""

    views: Views
    jobs: Jobs
    quiet: Quiet
    prefixes: Prefixes
    compaction: Compaction
    schedule: Scheduler
    writer: Writer

    @classmethod
    def assemble(
        cls,
        llm: LLMService,
        c: ContextConfig,
        store: SessionStore,
        owns_store: bool,
        recall_index: RecallIndex | None,
        clock: Callable[[], int],
    ) -> _Parts:
        if recall_index is None:  # a store that keeps the whole conversation indexes it
            keeps = store.keep_history
            recall_index = StoreRecallIndex(store) if keeps else MemoryRecallIndex()
        recall = Recall(recall_index, c.recall_budget_bytes, Renderer(c.timezone))
        views = Views(c, store, recall, clock, owns_store)
        jobs, quiet = Jobs(), Quiet(llm, c.compaction_quiet_s)
        prefixes = Prefixes(llm, views, jobs, rewarm=c.rewarm)
        compactor = Compactor(llm, c.compaction_prompts, c.compaction_failure_limit)
        compaction = Compaction(views, compactor, prefixes, jobs, quiet)
        schedule = Scheduler(views, compaction, prefixes, quiet)
        compaction.wake = views.on_backlog = schedule.wake
        writer = Writer(views, compaction, schedule)
        return cls(views, jobs, quiet, prefixes, compaction, schedule, writer)


class ContextManager:
    """Participant-scoped dialogue and named background sources, compacted when idle.

    ``config`` (a :class:`ContextConfig`; ``options`` are its fields as keywords, applied
    over it) names the topics: ``summary_context_topics`` whose update replaces that
    source's state, ``incremental_context_topics`` whose updates append and are compacted.
    Budgets are UTF-8 bytes of rendered text: ``dialogue_budget_bytes`` for completed
    dialogue, ``topic_budget_bytes`` per topic (one value, or a mapping naming every
    configured topic) and ``compaction_input_budget_bytes`` for the previous summary plus
    the entries of one compaction request. ``timezone`` is the zone times are shown in
    (local by default); ``clock`` returns Unix microseconds. ``store`` and
    ``recall_index``: see the module, which also says when compaction, re-warming and
    recall happen.
    """

    def __init__(
        self,
        llm: LLMService,
        config: ContextConfig | None = None,
        *,
        store: SessionStore | None = None,
        recall_index: RecallIndex | None = None,
        clock: Callable[[], int] = now_us,
        **options: Unpack[ContextOptions],
    ) -> None:
        self.config = c = (config or ContextConfig()).with_options(**options)
        self.compaction_input_budget_bytes = c.compaction_input_budget_bytes
        self.store = store if store is not None else SessionStore(keep_history=c.keep_transcript)
        parts = _Parts.assemble(llm, c, self.store, store is None, recall_index, clock)
        self._views, self._jobs, self._quiet, self._prefixes = parts[:4]
        self._compaction, self._schedule, self._writer = parts[4:]
        self._participants, self._recall = self._views.participants, self._views.recall
        self._renderer = self._views.renderer

    # ----------------------------------------------------------------- configuration

    @property
    def budgets(self) -> dict[str, int]:
        """Budget in bytes of each section (``"dialogue"`` and every topic)."""
        return self.config.budgets

    @property
    def topics(self) -> tuple[str, ...]:
        return self.config.topics

    @property
    def closed(self) -> bool:
        return self._views.closed

    def participants(self) -> list[str]:
        return list(self._participants)

    def add_hook(
        self,
        event: Literal["pre_compact", "post_compact"],
        hook: PreCompactHook | PostCompactHook,
    ) -> None:
        """``pre_compact(request)`` runs before each compaction: return None to proceed,
        False to skip it (entries kept, retried after the next entry) or a string to use as
        the summary. ``post_compact(report)`` sees every result. Either may be async."""
        self._compaction.add_hook(event, hook)

    def prefix_warmer(
        self, system_prompt: Callable[[], str], shared_key: str | None = SYSTEM_PROMPT_KEY
    ) -> PrefixWarmer:
        """A runtime agent warming each joining participant's prompt prefix (the system
        prompt, from the state :meth:`PrefixWarmer.warm_shared` evaluates under
        ``shared_key``), so their first answer starts fast; ``async with`` it."""
        return PrefixWarmer(self._prefixes, system_prompt, shared_key)

    # ----------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> ContextManager:
        await self._schedule.open()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        await self._schedule.close(self.close)
        return None

    async def suspend(self, participant_id: str) -> None:
        """Cancel the participant's compaction, wait for it, and drop their context from
        memory; it stays stored and comes back on the next use (a reconnect). Idempotent;
        other participants are unaffected."""
        await self._jobs.cancel(participant_id)
        self._views.drop(participant_id)

    async def clear(self, participant_id: str) -> None:
        """Cancel the participant's compaction, wait for it, and forget their context
        everywhere, the store, the recall index and the model's saved prompt state
        included. Idempotent; other participants are unaffected. Works from any task and
        cancel scope: a cancelled caller still forgets everything before it returns."""
        with anyio.CancelScope(shield=True):
            await self.suspend(participant_id)
            self._recall.index.forget(participant_id)
            await self._prefixes.forget(participant_id)
            if not (self.closed and self._views.owns_store):  # the own store closes with it
                await self.store.run(self.store.forget, participant_id)

    async def resume(self, participant_id: str) -> bool:
        """Load a returning participant's context now and re-warm their prompt prefix in
        the background (after a restart the model's cache is cold). False when nothing is
        stored for them."""
        check_participant(participant_id)
        if self.closed or not self.store.exists(participant_id):
            return False
        self._schedule.rewarm_soon(self._views.participant(participant_id))
        return True

    async def close(self) -> None:
        """Stop compaction and drop every participant from memory and later writes; what
        is stored stays stored (the manager's own in-memory store is closed). Works from
        any task and cancel scope, inside or outside ``async with``; idempotent. It only
        cancels work and waits for it to end, so it completes in a cancelled scope too."""
        self._views.closed = True
        with anyio.CancelScope(shield=True):
            await self._schedule.worker.stop()
            await self._jobs.cancel_all()
        self._views.close()

    # ----------------------------------------------------------------- activity

    @contextmanager
    def answering(self) -> Iterator[None]:
        """Mark an answer in flight: background compaction waits until it is over and
        the device has been quiet for ``compaction_quiet_s``."""
        try:
            with self._quiet.own.interactive():
                yield
        finally:
            self._compaction.answered_at = time.monotonic()

    def touch(self) -> None:
        """Record participant activity now (restarts the quiet period)."""
        self._quiet.own.touch()

    # ----------------------------------------------------------------- writing

    def subscriber(self, activity_topics: Sequence[Topic[Any]] = ()) -> Agent:
        """An :class:`edge.runtime.Agent` applying the configured topics' updates; register
        it with the runtime that delivers them, before the runtime starts. A message on
        any of ``activity_topics`` (e.g. the voice pipeline's transcripts: a partial every
        0.8 s of speech) counts as participant activity (:meth:`touch`), so background
        work does not start while someone is talking."""
        from ._topics import ContextSubscriber

        c = self.config
        return ContextSubscriber(
            self, c.summary_context_topics, c.incremental_context_topics, activity_topics
        )

    async def record_exchange(
        self,
        participant_id: str,
        user: str,
        assistant: str,
        *,
        timestamp_us: int | None = None,
        exchange_id: object | None = None,
    ) -> bool:
        """Record one completed exchange; False when it was already recorded (same
        ``exchange_id``) or the manager is closed. One without an ``exchange_id`` is
        recorded each time."""
        exchange = Exchange(user, assistant, exchange_id, timestamp_us)
        return await self._writer.record_exchange(participant_id, exchange)

    async def reconcile(
        self,
        participant_id: str,
        history: Sequence[Exchange],
        *,
        exchange_ids: Sequence[object | None] = (),
        timestamps: Sequence[int | None] = (),
    ) -> int:
        """The spec's history reconciliation (:meth:`ContextDialogue.reconcile`)."""
        return await ContextDialogue(self).reconcile(
            participant_id, history, exchange_ids, timestamps
        )

    async def update(
        self, participant_id: str, topic: str, text: str, *, timestamp_us: int | None = None
    ) -> None:
        """Apply a topic's update: a summary topic's replaces its state (clipped to the
        topic budget), an incremental topic's is appended and compacted later."""
        await self._writer.update(participant_id, topic, text, timestamp_us)

    # ----------------------------------------------------------------- reading

    def blocks(self, participant_id: str) -> list[ContextBlock]:
        """The model's view: summaries first, then entries in recorded-time order, each
        section within its budget (oldest uncompacted entries left out while over it)."""
        return self._views.blocks(participant_id)

    def render(self, participant_id: str, *, now_us: int | None = None) -> str:
        """The context message: :meth:`blocks` then the current time."""
        return self.render_blocks(self.blocks(participant_id), now_us=now_us)

    def render_blocks(
        self,
        blocks: list[ContextBlock],
        *,
        now_us: int | None = None,
        recalled: ContextBlock | None = None,
    ) -> str:
        """A context message from chosen ``blocks`` (e.g. a subset of :meth:`blocks`), then
        the current time, then ``recalled`` (see :meth:`recalled`)."""
        now = self._views.clock() if now_us is None else now_us
        return self._renderer.context_message(list(blocks), now, recalled)

    def messages(
        self, participant_id: str, *, system: str, request: str, now_us: int | None = None
    ) -> list[ChatMessage]:
        """An answer request's three messages: ``system``, the context, ``request``.

        ``system`` is remembered so compaction can re-warm the same prompt prefix."""
        check_participant(participant_id)
        return self._views.messages(participant_id, system, request, now_us)

    def recalled(self, participant_id: str, request: str) -> ContextBlock | None:
        """The earlier statements most relevant to ``request`` that the model no longer
        sees, newest first, within ``recall_budget_bytes`` (None when there are none).
        :meth:`messages` places it after the context and the current time, right before the
        request. What precedes it is what the participant's cache is warmed with, followed
        by the block chosen ahead of the request: a block that is its start evaluates
        nothing anew; any other, each of its tokens."""
        return self._views.recalled(participant_id, request, self.blocks(participant_id))

    def stated(self, participant_id: str, request: str) -> StatedAnswer | None:
        """The reply to ``request`` told back from what the participant stated, when it
        asks for a fact they may have stated ("What is my locker code?", "When is the
        briefing now?"): their newest statement about it, the one a correction replaced
        left out, in the second person; :data:`~edge.recall.NOT_STATED` when they stated
        nothing about it. None when the request asks for something else, or their record
        cannot tell (the model answers). Only their own statements, with recall's search
        (``recall_budget_bytes`` 0: always None)."""
        check_participant(participant_id)
        return self._views.stated(participant_id, request)

    def transcript(
        self, participant_id: str, *, offset: int = 0, limit: int | None = None
    ) -> list[TranscriptEntry]:
        """The whole conversation, verbatim, in recorded-time order (from ``offset``, at
        most ``limit`` entries): everything ever recorded with a durable store or
        ``keep_transcript=True``, otherwise what is not yet compacted."""
        return self._views.transcript(participant_id, offset, limit or -1)

    def summary(self, participant_id: str, section: str = DIALOGUE) -> str:
        return self._views.summary(participant_id, section)

    def last_compaction(self, participant_id: str) -> CompactionReport | None:
        return self._views.last_compaction(participant_id)

    def pending(self) -> int:
        """Sections waiting for compaction, across participants."""
        return self._views.pending()

    def busy(self) -> bool:
        """Whether background work waits (:meth:`pending`) or runs (a compaction step, a
        re-warm)."""
        return bool(self.pending()) or self._jobs.any()

    # ----------------------------------------------------------------- compaction

    async def compact(
        self,
        participant_id: str,
        *,
        section: str | None = None,
        summary: str | None = None,
        keep_last: int | None = None,
    ) -> list[CompactionReport]:
        """Compact now, without waiting for a quiet device: every compacted section, or
        ``section``, keeping the newest ``keep_last`` entries (at least the newest dialogue
        exchange). ``summary`` replaces the model's summary with your own."""
        return await self._compaction.compact(participant_id, section, summary, keep_last or 0)

    # ----------------------------------------------------------------- save and restore

    def save(self, path: str | Path, participant_ids: Sequence[str] | None = None) -> None:
        """Write participants' exports (both views, summaries, topic states, identities,
        compaction reports; every stored participant by default) to one JSON file.
        Configuration and hooks are not saved."""
        ids = list(participant_ids) if participant_ids is not None else None
        if ids is None:
            ids = [p.participant_id for p in self.store.participants()]
        _persist.save(Path(path), self.store, ids)

    async def load(self, path: str | Path) -> list[str]:
        """Import a file written by :meth:`save`, replacing those participants' context;
        this manager's own topics and budgets apply (sections it does not configure stay
        in the history, out of the model's view). Returns the participants loaded."""
        if self.closed:
            raise RuntimeError("the context manager is closed")
        loaded = _persist.load(Path(path), self.store)
        for pid in loaded:
            await self.suspend(pid)  # the next use reads the imported context
            self._views.cached(pid)
        return loaded
