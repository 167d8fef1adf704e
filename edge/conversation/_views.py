"""The records and the model's views of them: what the manager writes to the store, the
participants' views cached in memory (loaded from the store on use), and what an answer
request is shown (the context blocks, the recalled block)."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from edge.llm import ChatMessage
from edge.recall import Statement
from edge.store import Record, SessionStore

from . import _persist
from ._compaction import CompactionReport
from ._config import ContextConfig
from ._context import Entry, ParticipantContext, Section, TranscriptEntry
from ._recall import InView, Recall, in_view
from ._render import DIALOGUE, ContextBlock
from ._stated import StatedAnswer, stated_answer


class Views:
    """Participants' cached views over ``store``, and the statements they make in
    ``recall``'s index. ``on_backlog`` is called when a view loaded from the store has
    sections waiting for compaction."""

    def __init__(
        self,
        config: ContextConfig,
        store: SessionStore,
        recall: Recall,
        clock: Callable[[], int],
        owns_store: bool,
    ) -> None:
        self.config = config
        self.budgets = config.budgets
        self.store = store
        self.owns_store = owns_store
        self.recall = recall
        self.renderer = recall.renderer
        self.clock = clock
        self.participants: dict[str, ParticipantContext] = {}
        self.locks: dict[str, anyio.Lock] = {}
        self.closed = False
        self.on_backlog: Callable[[], None] = lambda: None

    # ----------------------------------------------------------------- the cached views

    def new(self, participant_id: str) -> ParticipantContext:
        budgets, c = self.budgets, self.config
        sections = [Section(DIALOGUE, "dialogue", budgets[DIALOGUE])]
        sections += [Section(t, "summary", budgets[t]) for t in c.summary_context_topics]
        sections += [Section(t, "incremental", budgets[t]) for t in c.incremental_context_topics]
        return ParticipantContext(participant_id, sections)

    def cached(self, participant_id: str) -> ParticipantContext | None:
        """The participant's cached view, loaded from the store when they are stored."""
        part = self.participants.get(participant_id)
        if part is None and not self.closed:
            stored = self.store.load(participant_id)
            if stored is not None:
                part = self.new(participant_id)
                _persist.restore(part, stored, self.renderer)
                self.participants[participant_id] = part
                if part.needs_compaction():
                    self.on_backlog()
        return part

    def participant(self, participant_id: str) -> ParticipantContext:
        part = self.cached(participant_id)
        if part is None:
            part = self.participants[participant_id] = self.new(participant_id)
        return part

    def current(self, part: ParticipantContext) -> bool:
        """Whether ``part`` is still the participant's view (not cleared or reloaded)."""
        return self.participants.get(part.participant_id) is part

    def lock(self, participant_id: str) -> anyio.Lock:
        lock = self.locks.get(participant_id)
        if lock is None:
            lock = self.locks[participant_id] = anyio.Lock()
        return lock

    def drop(self, participant_id: str) -> None:
        self.participants.pop(participant_id, None)
        self.locks.pop(participant_id, None)

    def close(self) -> None:
        """Drop every participant from memory and the recall index (what is stored stays
        stored; the manager's own in-memory store is closed)."""
        self.closed = True
        for participant_id in self.participants:
            self.recall.index.forget(participant_id)
        self.participants.clear()
        self.locks.clear()
        if self.owns_store:
            self.store.close()

    def candidates(self, part: ParticipantContext, section: Section, keep: int) -> list[Entry]:
        """The oldest uncompacted entries, leaving the newest ``keep`` in memory: those
        evicted to the store first (read back, oldest first), then those in memory."""
        if section.evicted:
            records = self.store.view_records(part.participant_id, section.name, limit=64)
            in_memory = {e.seq for e in section.entries}
            older = [r for r in records if r.id not in in_memory]
            if older:
                return [_persist.rendered(section, r, self.renderer) for r in older]
            section.evicted = 0
        return section.entries[: max(len(section.entries) - keep, 0)]

    # ----------------------------------------------------------------- writing

    async def write(
        self, participant_id: str, record: Record, ids: list[bytes]
    ) -> tuple[bool, Section | None]:
        """Write ``record`` to the store (durable when this returns), then to the cached
        view: whether the store took it (not when it already had its identity), and the
        section of the cached view it went to (None when the view is not cached)."""
        stored = await self.store.run(self.store.add_record, participant_id, record, ids)
        if stored is None:
            return False, None
        part = self.participants.get(participant_id)
        if part is None or self.closed or (ids and ids[0] in part.identities):
            return True, None  # not cached (suspended) or reloaded with it: the store has it
        part.identities.update(ids)
        section = part.sections[record.section]
        section.add(_persist.rendered(section, stored, self.renderer))
        if record.kind != "state":
            said = record.user if record.kind == "exchange" else record.text
            self.recall.add(
                Statement(participant_id, stored.id, record.timestamp_us, record.section, said)
            )
        return True, section

    def remember_system(self, participant_id: str, system: str) -> None:
        """Keep the participant's system prompt (for re-warming their prefix)."""
        part = self.participant(participant_id)
        if part.system != system:  # once per participant and prompt
            part.system = system
            self.store.set_system(participant_id, system)

    # ----------------------------------------------------------------- reading

    def blocks(self, participant_id: str) -> list[ContextBlock]:
        part = self.cached(participant_id)
        return part.blocks(self.renderer) if part else []

    def messages(
        self, participant_id: str, system: str, request: str, now_us: int | None
    ) -> list[ChatMessage]:
        """An answer request's three messages: ``system``, the context, ``request``;
        ``system`` is remembered for re-warming."""
        if not self.closed:
            self.remember_system(participant_id, system)
        blocks = self.blocks(participant_id)
        recalled = self.recalled(participant_id, request, blocks)
        now = self.clock() if now_us is None else now_us
        context = self.renderer.context_message(blocks, now, recalled)
        return [
            ChatMessage(role="system", content=system),
            ChatMessage(role="user", content=context),
            ChatMessage(role="user", content=request),
        ]

    def in_view(self, part: ParticipantContext, blocks: list[ContextBlock]) -> InView:
        return in_view(part, blocks)

    def recalled(
        self, participant_id: str, request: str, blocks: list[ContextBlock]
    ) -> ContextBlock | None:
        part = self.participants.get(participant_id)
        if part is None or self.recall.budget_bytes <= 0:
            return None
        return self.recall.block(participant_id, request, self.in_view(part, blocks))

    def stated(self, participant_id: str, request: str) -> StatedAnswer | None:
        part = self.cached(participant_id)
        view = self.in_view(part, part.blocks(self.renderer)) if part else InView("")
        return stated_answer(self.recall, participant_id, request, view)

    def transcript(self, participant_id: str, offset: int, limit: int) -> list[TranscriptEntry]:
        if self.closed and self.owns_store:
            return []
        records, _ = self.store.history(participant_id, offset=offset, limit=limit)
        return [_persist.transcript_entry(r) for r in records]

    def summary(self, participant_id: str, section: str) -> str:
        part = self.cached(participant_id)
        return part.sections[section].summary if part and section in part.sections else ""

    def last_compaction(self, participant_id: str) -> CompactionReport | None:
        part = self.participants.get(participant_id)
        if part is not None or (self.closed and self.owns_store):
            return part.last_compaction if part is not None else None
        reports = self.store.compactions(participant_id, 1)
        return _persist.report_from(reports[0]) if reports else None

    def pending(self) -> int:
        """Sections waiting for compaction, across participants."""
        return sum(
            s.needs_compaction() for p in self.participants.values() for s in p.sections.values()
        )
