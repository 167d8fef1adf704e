"""The one owner of the conversation's state: the participants' views cached in memory
(loaded from the store on use), their locks, what each waits for (a re-warm of their
prompt prefix, the rest of a compaction run), whether the manager is closed, and every
write the manager makes to the store. The other parts hold the participant they work on
and change it only through this owner's intent methods."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from edge.recall import Statement
from edge.store import Record, SessionStore, StoredSection

from . import _persist
from ._compaction import CompactionReport, Summarized
from ._config import ContextConfig
from ._context import Entry, ParticipantContext, Section
from ._recall import Recall
from ._render import DIALOGUE


class ContextState:
    """Participants' cached views over ``store``, and the statements they make in
    ``recall``'s index. ``wake`` tells the background worker there is work: a view loaded
    from the store with sections waiting for compaction, a compaction committed.
    ``owns_store``: the manager's own in-memory store, closed with it."""

    def __init__(
        self,
        config: ContextConfig,
        store: SessionStore,
        recall: Recall,
        owns_store: bool,
        wake: Callable[[], None],
    ) -> None:
        self._config = config
        self._store = store
        self._owns_store = owns_store
        self._recall = recall
        self._renderer = recall.renderer
        self._wake = wake
        self._participants: dict[str, ParticipantContext] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._warm: set[ParticipantContext] = set()  # their prefix waits for a re-warm
        self._compacting: set[ParticipantContext] = set()  # between a run's steps
        self._closed = False

    # ----------------------------------------------------------------- the cached views

    @property
    def closed(self) -> bool:
        return self._closed

    def new(self, participant_id: str) -> ParticipantContext:
        """An empty view of the configured sections (not kept)."""
        budgets, c = self._config.budgets, self._config
        sections = [Section(DIALOGUE, "dialogue", budgets[DIALOGUE])]
        sections += [Section(t, "summary", budgets[t]) for t in c.summary_context_topics]
        sections += [Section(t, "incremental", budgets[t]) for t in c.incremental_context_topics]
        return ParticipantContext(participant_id, sections)

    def peek(self, participant_id: str) -> ParticipantContext | None:
        """The participant's view when it is in memory (nothing is loaded)."""
        return self._participants.get(participant_id)

    def cached(self, participant_id: str) -> ParticipantContext | None:
        """The participant's cached view, loaded from the store when they are stored."""
        part = self._participants.get(participant_id)
        if part is None and not self._closed:
            stored = self._store.load(participant_id)
            if stored is not None:
                part = self.new(participant_id)
                _persist.restore(part, stored, self._renderer)
                self._participants[participant_id] = part
                if any(s.summary for s in part.sections.values()):
                    self._warm.add(part)  # a summary changed the prefix since a warm
                if part.needs_compaction():
                    self._wake()
        return part

    def participant(self, participant_id: str) -> ParticipantContext:
        """The participant's view, made (and kept) when they have none."""
        part = self.cached(participant_id)
        if part is None:
            part = self._participants[participant_id] = self.new(participant_id)
        return part

    def view(self, participant_id: str) -> ParticipantContext:
        """The participant's view, or an empty one (not kept) when they have none."""
        return self.cached(participant_id) or self.new(participant_id)

    def ids(self) -> list[str]:
        return list(self._participants)

    def idle(self) -> list[ParticipantContext]:
        """The participants in memory whose lock no background work or compaction holds."""
        return [p for pid, p in self._participants.items() if not self.lock(pid).locked()]

    def current(self, part: ParticipantContext) -> bool:
        """Whether ``part`` is still the participant's view (not cleared or reloaded)."""
        return self._participants.get(part.participant_id) is part

    def lock(self, participant_id: str) -> anyio.Lock:
        lock = self._locks.get(participant_id)
        if lock is None:
            lock = self._locks[participant_id] = anyio.Lock()
        return lock

    def pending(self) -> int:
        """Sections waiting for compaction, across participants."""
        parts = self._participants.values()
        return sum(s.needs_compaction() for p in parts for s in p.sections.values())

    # ----------------------------------------------------------------- what a participant waits for

    def mark_warm(self, part: ParticipantContext) -> None:
        """``part``'s prompt prefix changed (an exchange, a summary): re-warm it."""
        if self.current(part):
            self._warm.add(part)

    def take_warm(self, part: ParticipantContext) -> bool:
        """Take ``part``'s pending re-warm (it runs now, or is given up); whether it had one."""
        taken = part in self._warm
        self._warm.discard(part)
        return taken

    def wants_warm(self, part: ParticipantContext) -> bool:
        return part in self._warm

    def begin_compaction(self, part: ParticipantContext) -> None:
        """A background compaction step of ``part`` starts."""
        if self.current(part):
            self._compacting.add(part)

    def end_compaction(self, part: ParticipantContext) -> None:
        """The step ended: ``part`` stays between a run's steps while a backlog remains."""
        if part.needs_compaction() and self.current(part):
            self._compacting.add(part)
        else:
            self._compacting.discard(part)

    def compacting(self, part: ParticipantContext) -> bool:
        """Whether ``part`` is between the steps of a compaction run (its prefix in flux)."""
        return part in self._compacting

    # ----------------------------------------------------------------- lifecycle

    def drop(self, participant_id: str) -> None:
        """Drop the participant from memory (what is stored stays stored)."""
        part = self._participants.pop(participant_id, None)
        self._locks.pop(participant_id, None)
        if part is not None:
            self._warm.discard(part)
            self._compacting.discard(part)

    async def forget(self, participant_id: str) -> None:
        """Forget the participant in the recall index and the store (the manager's own
        store closes with it: nothing to forget there once closed)."""
        self._recall.index.forget(participant_id)
        if not (self._closed and self._owns_store):
            await self._store.run(self._store.forget, participant_id)

    def close(self) -> None:
        """Take no more writes (they are dropped from now on)."""
        self._closed = True

    def release(self) -> None:
        """Drop every participant from memory and the recall index (what is stored stays
        stored; the manager's own in-memory store is closed)."""
        self._closed = True
        for participant_id in self._participants:
            self._recall.index.forget(participant_id)
        self._participants.clear()
        self._locks.clear()
        self._warm.clear()
        self._compacting.clear()
        if self._owns_store:
            self._store.close()

    # ----------------------------------------------------------------- the store

    def records(self, participant_id: str, offset: int, limit: int) -> list[Record]:
        """The participant's whole conversation from the store, in recorded-time order."""
        if self._closed and self._owns_store:
            return []
        records, _ = self._store.history(participant_id, offset=offset, limit=limit)
        return records

    def last_compaction(self, participant_id: str) -> CompactionReport | None:
        part = self._participants.get(participant_id)
        if part is not None or (self._closed and self._owns_store):
            return part.last_compaction if part is not None else None
        reports = self._store.compactions(participant_id, 1)
        return _persist.report_from(reports[0]) if reports else None

    def candidates(self, part: ParticipantContext, section: Section, keep: int) -> list[Entry]:
        """The oldest uncompacted entries, leaving the newest ``keep`` in memory: those
        evicted to the store first (read back, oldest first), then those in memory."""
        if section.evicted:
            records = self._store.view_records(part.participant_id, section.name, limit=64)
            in_memory = {e.seq for e in section.entries}
            older = [r for r in records if r.id not in in_memory]
            if older:
                return [_persist.rendered(section, r, self._renderer) for r in older]
            section.evicted = 0
        return section.entries[: max(len(section.entries) - keep, 0)]

    async def write(
        self, participant_id: str, record: Record, ids: list[bytes]
    ) -> tuple[bool, Section | None]:
        """Write ``record`` to the store (durable when this returns), then to the cached
        view: whether the store took it (not when it already had its identity), and the
        section of the cached view it went to (None when the view is not cached)."""
        stored = await self._store.run(self._store.add_record, participant_id, record, ids)
        if stored is None:
            return False, None
        part = self._participants.get(participant_id)
        if part is None or self._closed or (ids and ids[0] in part.identities):
            return True, None  # not cached (suspended) or reloaded with it: the store has it
        part.identities.update(ids)
        section = part.sections[record.section]
        section.add(_persist.rendered(section, stored, self._renderer))
        if record.kind != "state":
            said = record.user if record.kind == "exchange" else record.text
            self._recall.add(
                Statement(participant_id, stored.id, record.timestamp_us, record.section, said)
            )
        return True, section

    def remember_system(self, participant_id: str, system: str) -> None:
        """Keep the participant's system prompt (for re-warming their prefix)."""
        if self._closed:
            return
        part = self.participant(participant_id)
        if part.system != system:  # once per participant and prompt
            part.system = system
            self._store.set_system(participant_id, system)

    async def apply_compaction(
        self,
        part: ParticipantContext,
        section: Section,
        made: Summarized,
        taken: list[Entry],
        report: CompactionReport,
    ) -> None:
        """Commit ``made`` to the store (one transaction: a crash leaves it before or
        after) and to the cached view: the summary, or the failure counted."""
        if made.text is None:
            state, covered = StoredSection(section.summary, section.span, True), []
        else:
            state = StoredSection(made.text, section.span_with(taken), False)
            covered = [e.seq for e in taken]
        store = self._store
        await store.run(
            store.apply_compaction,
            part.participant_id,
            section.name,
            state,
            covered,
            _persist.report_data(report),
        )
        if made.request_failed:
            section.failures.append(made.request_failed)
        elif made.text is not None:
            section.failures.clear()
        if made.text is None:
            section.fail()
        else:
            section.apply_summary(made.text, taken)
            self.mark_warm(part)
        part.last_compaction = report
