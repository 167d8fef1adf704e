"""The public :class:`ContextManager`: budgets, rendering, compaction scheduling, lifecycle."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import tzinfo
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.abc

from edge.llm import (
    ChatMessage,
    ForgetsCache,
    LLMError,
    LLMService,
    MovesCache,
    Priority,
    Warmable,
)
from edge.runtime import Agent, Topic, now_us
from edge.store import Record, SessionStore, StoredSection

from . import _persist
from ._background import Jobs, Quiet, Worker
from ._compaction import (
    CompactionPrompts,
    CompactionReport,
    CompactionRequest,
    Compactor,
    PostCompactHook,
    PreCompactHook,
    Summarized,
    call_hook,
    plan,
    previous_text,
)
from ._config import check_participant, positive_int, section_budgets, topic_names
from ._context import (
    Entry,
    ParticipantContext,
    Section,
    TranscriptEntry,
    content_identities,
    identity,
)
from ._extractive import extractive_summary
from ._recall import MemoryRecallIndex, Recall, RecallIndex, Statement, in_view
from ._recall_store import StoreRecallIndex
from ._render import DIALOGUE, ContextBlock, Renderer
from ._text import clip_middle, nbytes

log = logging.getLogger(__name__)

HISTORY_RESERVE = 256
"""Bytes ``compaction_input_budget_bytes`` must exceed half the largest section budget by."""
SUCCESSOR_KEY = "__next:"
"""Prefix of the model cache key under which a compaction warms the participant's next
prompt prefix before it commits (the key is then handed to the participant)."""


class ContextManager:
    """Participant-scoped dialogue and named background sources, compacted when idle.

    ``summary_context_topics`` name runtime topics whose update replaces that source's state;
    ``incremental_context_topics`` name topics whose updates append and are compacted.
    Budgets are UTF-8 bytes of rendered text: ``dialogue_budget_bytes`` for completed
    dialogue, ``topic_budget_bytes`` per topic (one value, or a mapping naming every
    configured topic) and ``compaction_input_budget_bytes`` for the previous summary plus
    the entries of one compaction request.

    Edge options: compaction starts only after the device (the model's activity tracker
    and this manager's answers) has been quiet for ``compaction_quiet_s`` seconds, runs at
    background priority and drains the whole backlog oldest first. A failed summary request
    (empty, cut off, an error) keeps the entries until the section's next entry; the
    ``compaction_failure_limit``-th in a row for a section gives the extractive summary
    of the participant's own statements instead. With ``rewarm`` (and a
    model that can ``warm``) the prompt prefix of each participant who completed an exchange
    is re-warmed first, once the device has been quiet for ``rewarm_quiet_s`` (at most
    ``compaction_quiet_s``), so their next answer evaluates only its request, and a
    compaction warms the prefix its summary will give the participant under a key of its
    own before it commits (the model's ``move_cache`` then hands it over): a turn during
    or right after their own compaction finds a warm prefix either way. Under steady use
    (answers less than ``compaction_quiet_s`` apart, so no quiet period comes) a section
    that overflows its budget is compacted at once without the model (the participant's
    statements verbatim, as when a model summary fails), so the prompt's start changes
    once per budget instead of on every turn. ``timezone`` is
    the zone times are shown in (local by default); ``clock`` returns Unix microseconds.

    Recall: every participant statement (what they said, each incremental topic update)
    is indexed in ``recall_index`` (the store's FTS5 index when the store keeps the whole
    conversation, else in memory); each answer request gets a
    "recalled" block of up to ``recall_budget_bytes`` with the earlier statements most
    relevant to it that are no longer in the model's view (0 turns recall off). A re-warm
    includes a block chosen ahead of the request (recent facts and corrections), so a
    request recalling one of those evaluates no recalled token anew.

    Storage: ``store`` (an :class:`edge.store.SessionStore`) keeps every participant's
    whole conversation and the model's view of it, durable when a write returns; the
    manager keeps only a cache of the view in memory (:meth:`suspend` drops it, the next
    use reloads it). Without ``store`` the manager uses an in-memory one of its own that
    keeps compacted entries only with ``keep_transcript=True``.

    Compaction runs in the background while the manager is open: ``async with
    ContextManager(llm) as ctx:``, or, without ``async with``, from the first write inside
    a running event loop until :meth:`close`.
    """

    def __init__(
        self,
        llm: LLMService,
        *,
        summary_context_topics: Sequence[str] = (),
        incremental_context_topics: Sequence[str] = (),
        dialogue_budget_bytes: int = 8_000,
        topic_budget_bytes: int | Mapping[str, int] = 4_000,
        compaction_input_budget_bytes: int = 12_000,
        compaction_prompts: CompactionPrompts | None = None,
        compaction_quiet_s: float = 1.5,
        compaction_failure_limit: int = 3,
        rewarm: bool = True,
        rewarm_quiet_s: float = 0.25,
        keep_transcript: bool = False,
        timezone: tzinfo | None = None,
        clock: Callable[[], int] = now_us,
        recall_budget_bytes: int = 1_000,
        recall_index: RecallIndex | None = None,
        store: SessionStore | None = None,
    ) -> None:
        self._llm = llm
        self._summary_topics = topic_names(summary_context_topics, "summary_context_topics")
        self._incremental_topics = topic_names(
            incremental_context_topics, "incremental_context_topics"
        )
        both = set(self._summary_topics) & set(self._incremental_topics)
        if both:
            raise ValueError(f"topics cannot be both summary and incremental: {sorted(both)}")
        self._budgets = section_budgets(
            dialogue_budget_bytes,
            topic_budget_bytes,
            self._summary_topics + self._incremental_topics,
        )
        compacted = [self._budgets[DIALOGUE]] + [self._budgets[t] for t in self._incremental_topics]
        least = max(compacted) // 2 + HISTORY_RESERVE
        value = compaction_input_budget_bytes
        if not positive_int(value) or value < least:
            raise ValueError(
                f"compaction_input_budget_bytes must be at least half the largest section "
                f"budget plus {HISTORY_RESERVE} bytes ({least}); got "
                f"{compaction_input_budget_bytes!r}"
            )
        self.compaction_input_budget_bytes = compaction_input_budget_bytes
        self._prompts = compaction_prompts or CompactionPrompts()
        if not positive_int(compaction_failure_limit):
            raise ValueError(
                f"compaction_failure_limit must be a positive int, got {compaction_failure_limit!r}"
            )
        self._compactor = Compactor(llm, self._prompts, compaction_failure_limit)
        self._quiet = Quiet(llm, compaction_quiet_s)
        self._rewarm = rewarm
        if not rewarm_quiet_s >= 0:
            raise ValueError(f"rewarm_quiet_s must be >= 0, got {rewarm_quiet_s!r}")
        self._rewarm_quiet_s = min(rewarm_quiet_s, compaction_quiet_s)
        self._owns_store = store is None
        self.store = store if store is not None else SessionStore(keep_history=keep_transcript)
        self._renderer = Renderer(timezone)
        if not (recall_budget_bytes == 0 or positive_int(recall_budget_bytes)):
            raise ValueError(
                f"recall_budget_bytes must be a non-negative int, got {recall_budget_bytes!r}"
            )
        if recall_index is None:  # a store that keeps the whole conversation indexes it
            keeps = self.store.keep_history
            recall_index = StoreRecallIndex(self.store) if keeps else MemoryRecallIndex()
        self._recall = Recall(recall_index, recall_budget_bytes, self._renderer)
        self._clock = clock
        self._participants: dict[str, ParticipantContext] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._jobs = Jobs()
        self._pre_hooks: list[PreCompactHook] = []
        self._post_hooks: list[PostCompactHook] = []
        self._worker = Worker(
            self._quiet, self._next_job, self._run_job, self._job_failed, self._quiet_for
        )
        self._closed = False
        self._warned_not_running = False
        self._answered_at: float | None = None  # when the latest answer ended

    # ----------------------------------------------------------------- configuration

    @property
    def budgets(self) -> dict[str, int]:
        """Budget in bytes of each section (``"dialogue"`` and every topic)."""
        return dict(self._budgets)

    @property
    def topics(self) -> tuple[str, ...]:
        return self._summary_topics + self._incremental_topics

    @property
    def closed(self) -> bool:
        return self._closed

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
        if event == "pre_compact":
            self._pre_hooks.append(hook)  # type: ignore[arg-type]
        elif event == "post_compact":
            self._post_hooks.append(hook)  # type: ignore[arg-type]
        else:
            raise ValueError(f"unknown hook event {event!r}; use 'pre_compact' or 'post_compact'")

    # ----------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> ContextManager:
        if self._worker.running and not self._worker.detached:
            raise RuntimeError("the context manager is already running")
        if self._closed:
            raise RuntimeError("the context manager is closed")
        await self._worker.open()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        try:
            await self.close()
        finally:  # leave the worker's task group where __aenter__ entered it
            await self._worker.close()
        return None

    def _start_worker(self) -> None:
        """The spec's usage without ``async with``: start compaction on the first write."""
        if self._worker.running or self._closed or self._worker.start_detached():
            return
        if not self._warned_not_running:
            self._warned_not_running = True
            log.warning(
                "the context manager cannot compact here (no asyncio loop); use "
                "`async with ContextManager(...)` to compact in the background"
            )

    async def suspend(self, participant_id: str) -> None:
        """Cancel the participant's compaction, wait for it, and drop their context from
        memory; it stays stored and comes back on the next use (a reconnect). Idempotent;
        other participants are unaffected."""
        await self._jobs.cancel(participant_id)
        self._participants.pop(participant_id, None)
        self._locks.pop(participant_id, None)

    async def clear(self, participant_id: str) -> None:
        """Cancel the participant's compaction, wait for it, and forget their context
        everywhere, the store, the recall index and the model's saved prompt state
        included. Idempotent; other participants are unaffected. Works from any task and
        cancel scope: a cancelled caller still forgets everything before it returns."""
        with anyio.CancelScope(shield=True):
            await self.suspend(participant_id)
            self._recall.index.forget(participant_id)
            if isinstance(self._llm, ForgetsCache):
                await self._llm.forget_cache(participant_id)
            if not (self._closed and self._owns_store):  # the own store closes with it
                await self.store.run(self.store.forget, participant_id)

    async def resume(self, participant_id: str) -> bool:
        """Load a returning participant's context now and re-warm their prompt prefix in
        the background (after a restart the model's cache is cold). False when nothing is
        stored for them."""
        check_participant(participant_id)
        if self._closed or not self.store.exists(participant_id):
            return False
        part = self._participant(participant_id)
        if part.system is not None and self._rewarm:
            part.warm_pending = True
            self._start_worker()
            self._worker.wake()
        return True

    async def close(self) -> None:
        """Stop compaction and drop every participant from memory and later writes; what
        is stored stays stored (the manager's own in-memory store is closed). Works from
        any task and cancel scope, inside or outside ``async with``; idempotent. It only
        cancels work and waits for it to end, so it completes in a cancelled scope too."""
        self._closed = True
        with anyio.CancelScope(shield=True):
            await self._worker.stop()
            await self._jobs.cancel_all()
        for participant_id in self._participants:
            self._recall.index.forget(participant_id)
        self._participants.clear()
        self._locks.clear()
        if self._owns_store:
            self.store.close()

    # ----------------------------------------------------------------- activity

    @contextmanager
    def answering(self) -> Iterator[None]:
        """Mark an answer in flight: background compaction waits until it is over and
        the device has been quiet for ``compaction_quiet_s``."""
        try:
            with self._quiet.own.interactive():
                yield
        finally:
            self._answered_at = time.monotonic()

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

        return ContextSubscriber(
            self, self._summary_topics, self._incremental_topics, activity_topics
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
        ``exchange_id``, or same content and time) or the manager is closed."""
        check_participant(participant_id)
        if not isinstance(user, str) or not isinstance(assistant, str):
            raise TypeError("an exchange needs str user and assistant text")
        if self._closed:
            log.debug("context manager closed; exchange for %r dropped", participant_id)
            return False
        ts = self._clock() if timestamp_us is None else int(timestamp_us)
        ids = content_identities(user, assistant, timestamp_us)
        if exchange_id is not None:
            ids = [identity(("id", exchange_id)), *ids]
        if ids[0] in self._participant(participant_id).identities:
            return False
        record = Record("exchange", DIALOGUE, ts, user=user, assistant=assistant)
        return await self._record(participant_id, record, ids)

    async def _record(self, participant_id: str, record: Record, ids: list[bytes]) -> bool:
        """Write ``record`` to the store (durable when this returns), then to the cached
        view. False when the store already had its identity."""
        self._start_worker()
        stored = await self.store.run(self.store.add_record, participant_id, record, ids)
        if stored is None:
            return False
        part = self._participants.get(participant_id)
        if part is None or self._closed or (ids and ids[0] in part.identities):
            return True  # not cached (suspended) or reloaded with it: the store has it
        part.identities.update(ids)
        section = part.sections[record.section]
        section.add(_persist.rendered(section, stored, self._renderer))
        if record.kind != "state":
            said = record.user if record.kind == "exchange" else record.text
            self._recall.add(
                Statement(participant_id, stored.id, record.timestamp_us, record.section, said)
            )
        if record.kind == "exchange" and part.system is not None and self._rewarm:
            part.warm_pending = True  # the next answer then evaluates only its request
        if section.needs_compaction() and self._pressed(section):
            await self._compact_without_model(part, section)
        if section.needs_compaction() or part.warm_pending:
            self._worker.wake()
        return True

    def _pressed(self, section: Section) -> bool:
        """Whether ``section`` overflows its budget while answers come too close together
        (less than ``compaction_quiet_s`` apart) to give its compaction a quiet period:
        the view would then leave its oldest entries out, shifting the prompt's start
        (and re-evaluating it) on turn after turn."""
        answered = self._answered_at
        if answered is None or time.monotonic() - answered >= self._quiet.quiet_s:
            return False
        used = nbytes(previous_text(section, self._renderer)) + section.pending_bytes
        return used > section.budget

    async def _compact_without_model(self, part: ParticipantContext, section: Section) -> None:
        """Compact ``section`` now without the model: the participant's statements verbatim
        (the extractive summary), all but the newest dialogue exchange, so the prompt's
        start changes once per budget instead of on every turn. Skipped while background
        work holds the participant: a model compaction or re-warm that found no quiet
        model is cancelled (it would start again when the device is idle)."""
        lock = self._lock(part.participant_id)
        if lock.locked():
            await self._jobs.cancel(part.participant_id)
        async with lock:
            if self._participants.get(part.participant_id) is not part:
                return
            started = time.perf_counter()
            taken = self._candidates(part, section, 1 if section.kind == DIALOGUE else 0)
            if not taken:
                return
            text = extractive_summary(
                section.summary, taken, section.summary_limit, dialogue=section.kind == DIALOGUE
            )
            made = Summarized(
                text or None, "extractive", "no quiet period: compacted without the model"
            )
            previous = previous_text(section, self._renderer)
            texts = [e.rendered for e in taken]
            await self._commit(part, section, made, taken, previous, texts, started)

    async def reconcile(
        self,
        participant_id: str,
        history: Sequence[Any],
        *,
        exchange_ids: Sequence[object | None] = (),
        timestamps: Sequence[int | None] = (),
    ) -> int:
        """Record the contiguous tail of ``history`` (objects with ``user`` and
        ``assistant``, e.g. the router's) that follows the newest exchange already known;
        returns how many were recorded. Earlier unknown exchanges are not replayed."""
        check_participant(participant_id)
        items = list(history)
        ids = list(exchange_ids) + [None] * (len(items) - len(exchange_ids))
        times = list(timestamps) + [None] * (len(items) - len(timestamps))
        part = self._participants.get(participant_id)
        start = len(items)
        for i in range(len(items) - 1, -1, -1):
            keys = content_identities(items[i].user, items[i].assistant, times[i])
            if ids[i] is not None:
                keys.insert(0, identity(("id", ids[i])))
            if part is not None and part.knows(keys):
                break
            start = i
        recorded = 0
        for i in range(start, len(items)):
            recorded += await self.record_exchange(
                participant_id,
                items[i].user,
                items[i].assistant,
                timestamp_us=times[i],
                exchange_id=ids[i],
            )
        return recorded

    async def update(
        self, participant_id: str, topic: str, text: str, *, timestamp_us: int | None = None
    ) -> None:
        """Apply a topic's update: a summary topic's replaces its state (clipped to the
        topic budget), an incremental topic's is appended and compacted later."""
        check_participant(participant_id)
        if not isinstance(text, str):
            raise TypeError("a context update needs str text")
        if topic not in self._budgets or topic == DIALOGUE:
            raise ValueError(
                f"unknown context topic {topic!r}; configured: {list(self.topics) or 'none'}"
            )
        if self._closed:
            log.debug("context manager closed; update of %r dropped", topic)
            return
        ts = self._clock() if timestamp_us is None else int(timestamp_us)
        self._participant(participant_id)  # cached before the write, so the view gets it
        kind = "state" if topic in self._summary_topics else "update"
        await self._record(participant_id, Record(kind, topic, ts, text=text), [])

    # ----------------------------------------------------------------- reading

    def blocks(self, participant_id: str) -> list[ContextBlock]:
        """The model's view: summaries first, then entries in recorded-time order, each
        section within its budget (oldest uncompacted entries left out while over it)."""
        part = self._cached(participant_id)
        return part.blocks(self._renderer) if part else []

    def render(self, participant_id: str, *, now_us: int | None = None) -> str:
        """The context message: :meth:`blocks` then the current time."""
        now = self._clock() if now_us is None else now_us
        return self._renderer.context_message(self.blocks(participant_id), now)

    def render_blocks(
        self,
        blocks: list[ContextBlock],
        *,
        now_us: int | None = None,
        recalled: ContextBlock | None = None,
    ) -> str:
        """A context message from chosen ``blocks`` (e.g. a subset of :meth:`blocks`), then
        the current time, then ``recalled`` (see :meth:`recalled`)."""
        now = self._clock() if now_us is None else now_us
        return self._renderer.context_message(list(blocks), now, recalled)

    def messages(
        self, participant_id: str, *, system: str, request: str, now_us: int | None = None
    ) -> list[ChatMessage]:
        """An answer request's three messages: ``system``, the context, ``request``.

        ``system`` is remembered so compaction can re-warm the same prompt prefix."""
        check_participant(participant_id)
        if not self._closed:
            part = self._participant(participant_id)
            if part.system != system:  # once per participant and prompt: kept for re-warming
                part.system = system
                self.store.set_system(participant_id, system)
        blocks = self.blocks(participant_id)
        recalled = self._recalled(participant_id, request, blocks)
        context = self.render_blocks(blocks, now_us=now_us, recalled=recalled)
        return [
            ChatMessage(role="system", content=system),
            ChatMessage(role="user", content=context),
            ChatMessage(role="user", content=request),
        ]

    def recalled(self, participant_id: str, request: str) -> ContextBlock | None:
        """The earlier statements most relevant to ``request`` that the model no longer
        sees, newest first, within ``recall_budget_bytes`` (None when there are none).
        :meth:`messages` places it after the context and the current time, right before the
        request. What precedes it is what the participant's cache is warmed with, followed
        by the block chosen ahead of the request: a block that is its start evaluates
        nothing anew; any other, each of its tokens."""
        return self._recalled(participant_id, request, self.blocks(participant_id))

    def _recalled(
        self, participant_id: str, request: str, blocks: list[ContextBlock]
    ) -> ContextBlock | None:
        part = self._participants.get(participant_id)
        if part is None or self._recall.budget_bytes <= 0:
            return None
        return self._recall.block(participant_id, request, in_view(part, blocks))

    def transcript(
        self, participant_id: str, *, offset: int = 0, limit: int | None = None
    ) -> list[TranscriptEntry]:
        """The whole conversation, verbatim, in recorded-time order (from ``offset``, at
        most ``limit`` entries): everything ever recorded with a durable store or
        ``keep_transcript=True``, otherwise what is not yet compacted."""
        if self._closed and self._owns_store:
            return []
        records, _ = self.store.history(participant_id, offset=offset, limit=limit or -1)
        return [_persist.transcript_entry(r) for r in records]

    def summary(self, participant_id: str, section: str = DIALOGUE) -> str:
        part = self._cached(participant_id)
        return part.sections[section].summary if part and section in part.sections else ""

    def last_compaction(self, participant_id: str) -> CompactionReport | None:
        part = self._participants.get(participant_id)
        if part is not None or (self._closed and self._owns_store):
            return part.last_compaction if part is not None else None
        reports = self.store.compactions(participant_id, 1)

        return _persist.report_from(reports[0]) if reports else None

    def pending(self) -> int:
        """Sections waiting for compaction, across participants."""
        return sum(
            s.needs_compaction() for p in self._participants.values() for s in p.sections.values()
        )

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
        part = self._cached(participant_id)
        if part is None:
            return []
        names = (
            [section]
            if section
            else [s.name for s in part.sections.values() if s.kind != "summary"]
        )
        for name in names:
            if name not in part.sections or part.sections[name].kind == "summary":
                raise ValueError(f"{name!r} is not a compacted section of this manager")
        reports: list[CompactionReport] = []
        async with self._lock(participant_id):
            for name in names:
                sec = part.sections[name]
                keep = max(keep_last or 0, 1 if sec.kind == DIALOGUE else 0)
                while self._participants.get(participant_id) is part:
                    candidates = self._candidates(part, sec, keep)
                    if not candidates:
                        break
                    report = await self._compact_step(part, sec, candidates, custom=summary)
                    reports.append(report)
                    if not report.ok or summary is not None:
                        break
        return reports

    async def _compact_step(
        self,
        part: ParticipantContext,
        section: Section,
        candidates: list[Entry],
        *,
        custom: str | None = None,
    ) -> CompactionReport:
        """One compaction request of ``section``, cancellable by ``clear()``."""
        started = time.perf_counter()
        limit = section.summary_limit
        previous = previous_text(section, self._renderer)
        if custom is not None:
            taken, texts = candidates, [e.rendered for e in candidates]
        else:
            taken, texts = plan(
                candidates, previous, self.compaction_input_budget_bytes, self._renderer
            )
        made = Summarized(None, "cancelled", "cancelled")
        successor: tuple[str, str] | None = None
        try:
            with self._jobs.track(part.participant_id):
                made = await self._summarize(part, section, previous, texts, limit, custom, taken)
                if made.text is not None:
                    successor = await self._warm_successor(part, section, made.text, taken)
            report = await self._commit(part, section, made, taken, previous, texts, started)
            if report.ok:  # applied: the prefix warmed aside becomes the participant's
                adopted, successor = await self._adopt_successor(part, successor), None
                part.warm_pending = part.warm_pending and not adopted
            return report
        finally:
            if successor is not None:  # warmed, then not adopted (no summary, a clear)
                await self._drop_successor(successor[0])

    async def _commit(
        self,
        part: ParticipantContext,
        section: Section,
        made: Summarized,
        taken: list[Entry],
        previous: str,
        texts: list[str],
        started: float,
    ) -> CompactionReport:
        if self._participants.get(part.participant_id) is not part:
            made = Summarized(None, "cancelled", "participant cleared", made.attempts)
        result = made.text
        report = CompactionReport(
            part.participant_id,
            section.name,
            made.method,
            result is not None,
            len(taken),
            nbytes(previous) + sum(nbytes(t) for t in texts),
            nbytes(result) if result is not None else 0,
            time.perf_counter() - started,
            made.reason or ("" if result is not None else "no summary"),
            list(made.attempts),
        )
        if made.reason in ("participant cleared", "cancelled"):
            return report  # cleared, or superseded (see _compact_without_model): no failure
        if result is None:
            log.warning(
                "compaction of %r for %r failed (%s); entries kept until the next one",
                section.name,
                part.participant_id,
                report.reason,
            )
            state, covered = StoredSection(section.summary, section.span, True), []
        else:
            state = StoredSection(result, section.span_with(taken), False)
            covered = [e.seq for e in taken]
        await self.store.run(  # one transaction: a crash leaves it before or after
            self.store.apply_compaction,
            part.participant_id,
            section.name,
            state,
            covered,
            _persist.report_data(report),
        )
        if made.request_failed:
            section.failures.append(made.request_failed)
        elif result is not None:
            section.failures.clear()
        if result is None:
            section.fail()
        else:
            section.apply_summary(result, taken)
            part.warm_pending = True
        part.last_compaction = report
        for hook in self._post_hooks:
            try:
                await call_hook(hook, report)
            except Exception:
                log.exception("post_compact hook failed")
        self._worker.wake()
        return report

    async def _summarize(
        self,
        part: ParticipantContext,
        section: Section,
        previous: str,
        texts: list[str],
        limit: int,
        custom: str | None,
        taken: list[Entry] | None = None,
    ) -> Summarized:
        if custom is not None:
            return Summarized(clip_middle(custom, limit) if custom.strip() else None, "custom")
        request = CompactionRequest(
            part.participant_id, section.name, section.summary, tuple(texts), limit
        )
        for hook in self._pre_hooks:
            decision = await call_hook(hook, request)
            if decision is False:
                return Summarized(None, "cancelled", "pre_compact hook skipped it")
            if isinstance(decision, str):
                return Summarized(
                    clip_middle(decision, limit) if decision.strip() else None, "hook"
                )
        return await self._compactor.summarize(section, previous, texts, taken)

    # ----------------------------------------------------------------- the cached view

    def _new_participant(self, participant_id: str) -> ParticipantContext:
        sections = [Section(DIALOGUE, "dialogue", self._budgets[DIALOGUE])]
        sections += [Section(t, "summary", self._budgets[t]) for t in self._summary_topics]
        sections += [Section(t, "incremental", self._budgets[t]) for t in self._incremental_topics]
        return ParticipantContext(participant_id, sections)

    def _cached(self, participant_id: str) -> ParticipantContext | None:
        """The participant's cached view, loaded from the store when they are stored."""
        part = self._participants.get(participant_id)
        if part is None and not self._closed:
            stored = self.store.load(participant_id)
            if stored is not None:
                part = self._new_participant(participant_id)
                _persist.restore(part, stored, self._renderer)
                self._participants[participant_id] = part
                if any(s.needs_compaction() for s in part.sections.values()):
                    self._worker.wake()
        return part

    def _participant(self, participant_id: str) -> ParticipantContext:
        part = self._cached(participant_id)
        if part is None:
            part = self._participants[participant_id] = self._new_participant(participant_id)
        return part

    def _lock(self, participant_id: str) -> anyio.Lock:
        lock = self._locks.get(participant_id)
        if lock is None:
            lock = self._locks[participant_id] = anyio.Lock()
        return lock

    def _candidates(self, part: ParticipantContext, section: Section, keep: int) -> list[Entry]:
        """The oldest uncompacted entries, leaving the newest ``keep`` in memory: those
        evicted to the store first (read back, oldest first), then those in memory."""
        if section.evicted:
            records = self.store.view_records(part.participant_id, section.name, limit=64)
            in_memory = {e.seq for e in section.entries}
            older = [r for r in records if r.id not in in_memory]
            if older:
                return [_persist.rendered(section, r, self._renderer) for r in older]
            section.evicted = 0
        return section.entries[: max(len(section.entries) - keep, 0)]

    # ----------------------------------------------------------------- background jobs

    def _next_job(self) -> tuple[str, ParticipantContext, Section | None] | None:
        if self._closed:
            return None
        best: tuple[tuple[int, int], ParticipantContext, Section] | None = None
        for pid, part in self._participants.items():
            if self._lock(pid).locked():
                continue
            for section in part.sections.values():
                if section.needs_compaction():
                    key = section.oldest_key()
                    if best is None or key < best[0]:
                        best = (key, part, section)
        if self._rewarm and isinstance(self._llm, Warmable):
            # before compactions (a turn during one then finds a warm prefix), except for a
            # participant between the steps of a compaction run: their prefix is in flux,
            # and the run's last step warms the one it leaves
            for pid, part in self._participants.items():
                if part.warm_pending and not part.compacting and not self._lock(pid).locked():
                    return ("warm", part, None)
        if best is not None:
            return ("compact", best[1], best[2])
        if self._rewarm and isinstance(self._llm, Warmable):
            for pid, part in self._participants.items():
                if part.warm_pending and not self._lock(pid).locked():
                    return ("warm", part, None)
        return None

    async def _run_job(self, job: tuple[str, ParticipantContext, Section | None]) -> None:
        kind, part, section = job
        async with self._lock(part.participant_id):
            if self._participants.get(part.participant_id) is not part:
                return
            if kind == "compact" and section is not None:
                keep = 1 if section.kind == DIALOGUE else 0
                part.compacting = True
                try:
                    await self._compact_step(part, section, self._candidates(part, section, keep))
                finally:
                    part.compacting = part.needs_compaction()
            else:
                await self._warm(part)

    def _quiet_for(self, job: tuple[str, ParticipantContext, Section | None]) -> float:
        """How long the device must be quiet before ``job`` runs: a re-warm (a fraction of
        a second at background priority, which any turn preempts) only briefly, so a
        follow-up a second or two later finds the prefix warm; a compaction the whole
        ``compaction_quiet_s``."""
        return self._rewarm_quiet_s if job[0] == "warm" else self._quiet.quiet_s

    def _job_failed(self, job: tuple[str, ParticipantContext, Section | None]) -> None:
        _, part, section = job
        if section is not None:
            section.fail()
        part.warm_pending = False

    async def _warm(self, part: ParticipantContext) -> None:
        """Evaluate the participant's prompt prefix (system prompt and context with the
        current time) into their KV state, so the next answer evaluates only its recalled
        block and request: in the same minute the whole prefix is reused, later all but the
        time's last digits (its date and hour rarely change between turns)."""
        part.warm_pending = False
        if not isinstance(self._llm, Warmable) or part.system is None:
            return
        with self._jobs.track(part.participant_id):
            await self._warm_into(part, self._prefix(part), part.participant_id)

    def _prefix(self, view: ParticipantContext) -> str:
        """The context message a warm evaluates: ``view``'s blocks (a participant's, or
        what a compaction will leave them), the current time, and the recalled block
        chosen ahead of the next request (a request whose own recall it holds evaluates
        no recalled token anew; one without recall drops it for free: it comes last)."""
        blocks = view.blocks(self._renderer)
        ahead = self._recall.ahead_block(view.participant_id, in_view(view, blocks))
        return self._renderer.context_message(blocks, self._clock(), ahead)

    async def _warm_into(self, part: ParticipantContext, context: str, key: str) -> bool:
        assert isinstance(self._llm, Warmable) and part.system is not None
        messages = [
            ChatMessage(role="system", content=part.system),
            ChatMessage(role="user", content=context),
        ]
        try:
            await self._llm.warm(messages, cache_key=key, priority=Priority.BACKGROUND)
        except LLMError as exc:
            log.warning("re-warming the prompt of %r failed: %s", part.participant_id, exc)
            return False
        return True

    async def _warm_successor(
        self, part: ParticipantContext, section: Section, summary: str, taken: list[Entry]
    ) -> tuple[str, str] | None:
        """Before a compaction commits: warm the prompt prefix the participant will have
        once ``summary`` replaces ``taken`` under a key of its own, while their current
        prefix (warmed before the compaction started) still serves their turns. Returns
        the key and the context warmed; :meth:`_adopt_successor` makes it theirs."""
        llm = self._llm
        if not (self._rewarm and isinstance(llm, Warmable) and isinstance(llm, MovesCache)):
            return None
        if part.system is None:
            return None
        after = replace(section, entries=list(section.entries))
        after.apply_summary(summary, taken)
        sections = [after if s is section else s for s in part.sections.values()]
        view = ParticipantContext(part.participant_id, sections)
        if view.needs_compaction():
            return None  # more steps follow (a backlog): the last one warms what they leave
        context = self._prefix(view)
        key = SUCCESSOR_KEY + part.participant_id
        warmed = False
        try:
            warmed = await self._warm_into(part, context, key)
        finally:
            if not warmed:  # failed or cancelled (a clear): drop what it left
                await self._drop_successor(key)
        return (key, context) if warmed else None

    async def _drop_successor(self, key: str) -> None:
        if isinstance(self._llm, ForgetsCache):
            with anyio.CancelScope(shield=True):
                await self._llm.forget_cache(key)

    async def _adopt_successor(
        self, part: ParticipantContext, successor: tuple[str, str] | None
    ) -> bool:
        """After the commit: the successor prefix becomes the participant's KV state.
        True when it is exactly their prompt prefix now (no re-warm needed)."""
        if successor is None or not isinstance(self._llm, MovesCache):
            return False
        key, warmed = successor
        moved = await self._llm.move_cache(key, part.participant_id)
        return moved and warmed == self._prefix(part)

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
        if self._closed:
            raise RuntimeError("the context manager is closed")
        loaded = _persist.load(Path(path), self.store)
        for pid in loaded:
            await self.suspend(pid)  # the next use reads the imported context
            self._cached(pid)
        return loaded
