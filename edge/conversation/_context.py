"""Participant-scoped context: sections of entries under a rolling summary.

Each section (the dialogue, each incremental topic) holds its summary and the entries added
since it was written. The state machine is small:

* an entry arrives -> it is stored verbatim (sorted by recorded time) and a stalled
  section becomes eligible for compaction again;
* uncompacted entries exceed half the budget -> the section is *draining*: compaction
  takes its oldest entries (all but the newest dialogue exchange) in one or more requests;
* a compaction succeeds -> the summary is replaced and the entries it covered dropped;
* a compaction fails -> the entries stay and the section *stalls* until its next entry;
  the manager's ``compaction_failure_limit``-th failed request in a row gives an
  extractive summary instead (``Section.failures``).

Nothing is ever dropped: every entry is in the store (``edge.store``) until a compaction
covers it. Memory stays bounded: beyond ``BACKLOG_FACTOR`` budgets of uncompacted entries
the oldest are *evicted* from memory only (``Section.evicted`` counts them); they are left
out of the prompt anyway, and compaction reads them back from the store, oldest first.

A summary topic is a section whose single state each update replaces; it never compacts.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ._render import DIALOGUE, BlockKind, ContextBlock, Renderer
from ._text import clip_middle, nbytes

if TYPE_CHECKING:
    from ._compaction import CompactionReport

log = logging.getLogger(__name__)

SectionKind = Literal["dialogue", "incremental", "summary"]
_ENTRY_BLOCK: dict[SectionKind, BlockKind] = {
    "dialogue": "exchange",
    "incremental": "update",
    "summary": "state",
}

MIN_CLIP_BYTES = 64
"""The least a clipped block keeps, even when a section's budget is smaller."""

BACKLOG_FACTOR = 8
"""Uncompacted entries beyond this many section budgets are evicted from memory, oldest
first (they stay stored until compacted), so a model that keeps failing to compact cannot
grow a device's memory without bound."""


@dataclass(eq=False)
class Entry:
    """One stored exchange or topic update, with its rendered text cached; ``seq`` is the
    store's record id."""

    seq: int
    timestamp_us: int
    rendered: str
    text: str = ""
    user: str = ""
    assistant: str = ""

    @property
    def size(self) -> int:
        return nbytes(self.rendered)

    @property
    def key(self) -> tuple[int, int]:
        return (self.timestamp_us, self.seq)


@dataclass(frozen=True)
class TranscriptEntry:
    """One thing recorded for a participant, verbatim (the whole-conversation view)."""

    kind: Literal["exchange", "update", "state"]
    section: str
    timestamp_us: int
    text: str = ""
    user: str = ""
    assistant: str = ""


@dataclass(eq=False)
class Section:
    name: str
    kind: SectionKind
    budget: int
    summary: str = ""
    span: tuple[int, int] | None = None
    entries: list[Entry] = field(default_factory=list)
    stalled: bool = False
    draining: bool = False
    evicted: int = 0
    failures: list[str] = field(default_factory=list)
    """How the section's summary requests failed since its last summary, in a row."""

    @property
    def summary_limit(self) -> int:
        return self.budget // 4

    @property
    def pending_bytes(self) -> int:
        return sum(e.size for e in self.entries)

    def add(self, entry: Entry) -> None:
        if self.kind == "summary":
            self.entries = [entry]
            return
        keys = [e.key for e in self.entries]
        self.entries.insert(bisect.bisect(keys, entry.key), entry)
        self.stalled = False
        evicted = 0
        while len(self.entries) > 1 and self.pending_bytes > BACKLOG_FACTOR * self.budget:
            self.entries.pop(0)
            evicted += 1
        if evicted:
            self.evicted += evicted
            log.info(
                "section %r: compaction backlog over %d x its budget; %d oldest entr%s kept "
                "only in the store until compacted",
                self.name,
                BACKLOG_FACTOR,
                evicted,
                "y" if evicted == 1 else "ies",
            )

    def eligible(self) -> list[Entry]:
        """Entries in memory compaction may take: all but the newest dialogue exchange
        (evicted entries, older than these, are read back from the store first)."""
        if self.kind == "summary":
            return []
        return self.entries[:-1] if self.kind == DIALOGUE else list(self.entries)

    def needs_compaction(self) -> bool:
        if self.kind == "summary" or self.stalled or not (self.eligible() or self.evicted):
            return False
        if self.evicted or self.pending_bytes > self.budget // 2:
            self.draining = True
        return self.draining

    def span_with(self, covered: list[Entry]) -> tuple[int, int]:
        """The time a summary covering the previous one and ``covered`` spans."""
        start = self.span[0] if self.span else min(e.timestamp_us for e in covered)
        end = max([e.timestamp_us for e in covered] + ([self.span[1]] if self.span else []))
        return (start, end)

    def apply_summary(self, summary: str, covered: list[Entry]) -> None:
        """Replace the summary with one that covers the previous one and ``covered``."""
        span = self.span_with(covered)
        gone = {e.seq for e in covered}
        kept = [e for e in self.entries if e.seq not in gone]
        self.evicted = max(self.evicted - (len(covered) - (len(self.entries) - len(kept))), 0)
        self.entries = kept
        self.summary = summary
        self.span = span
        if not self.eligible() and not self.evicted:
            self.draining = False

    def fail(self) -> None:
        self.stalled = True
        self.draining = False

    def _newest_within(self, room: int) -> list[tuple[Entry, str, bool]]:
        """The newest entries that fit ``room``, dropped from the oldest in quanta."""
        sizes = [e.size for e in self.entries]
        total = sum(sizes)
        drop = 0
        while drop < len(sizes) - 1 and total > room:
            total -= sizes[drop]
            drop += 1
        average = max(sum(sizes) // len(sizes), 1)
        quantum = max(1, self.budget // DROP_QUANTUM_FRACTION // average)
        drop = min(-(-drop // quantum) * quantum, len(sizes) - 1)
        kept = self.entries[drop:]
        if sum(e.size for e in kept) > room:
            newest = kept[-1]
            return [(newest, clip_middle(newest.rendered, max(room, MIN_CLIP_BYTES)), True)]
        return [(e, e.rendered, False) for e in kept]

    def oldest_key(self) -> tuple[int, int]:
        if self.evicted:  # older than anything in memory
            return (0, 0)
        return self.entries[0].key if self.entries else (2**63, 0)

    def blocks(self, renderer: Renderer, participant_id: str) -> list[ContextBlock]:
        """This section's blocks within its budget (see the spec's over-budget rule)."""
        out: list[ContextBlock] = []
        used = 0
        if self.summary and self.span:
            text = renderer.summary(self.name, self.span[0], self.span[1], self.summary)
            out.append(ContextBlock("summary", self.name, text, self.span[1], self.span[0]))
            used = nbytes(text)
        kind = _ENTRY_BLOCK[self.kind]
        if used + self.pending_bytes <= self.budget:
            kept = [(e, e.rendered, False) for e in self.entries]
        else:
            kept = self._newest_within(self.budget - used)
            left_out = len(self.entries) - len(kept)
            log.warning(
                "participant %r: section %r is over its %d-byte budget while compaction "
                "is pending; %d older entr%s left out of the prompt",
                participant_id,
                self.name,
                self.budget,
                left_out,
                "y" if left_out == 1 else "ies",
            )
        out.extend(
            ContextBlock(kind, self.name, text, e.timestamp_us, clipped=clipped)
            for e, text, clipped in kept
        )
        return out


DROP_QUANTUM_FRACTION = 4
"""While over budget, the oldest entries are left out in steps of about a quarter of the
budget, so the rendered prefix (and the model's KV cache of it) stays the same for several
turns instead of shifting by one entry on every turn."""


Successor = tuple[str, str]
"""A participant's prompt prefix warmed aside during a compaction: its cache key and the
context message it holds."""


def exchange_key(exchange_id: object) -> bytes:
    """The short identity (8 bytes) the store keeps for an exchange's id (the same bytes as
    in every earlier version of the store, so an existing store's exchanges stay known)."""
    return hashlib.blake2b(repr(("id", exchange_id)).encode("utf-8"), digest_size=8).digest()


class ParticipantContext:
    """Everything the manager keeps for one participant."""

    def __init__(self, participant_id: str, sections: Iterable[Section]) -> None:
        self.participant_id = participant_id
        self.sections = {s.name: s for s in sections}
        self.identities: set[bytes] = set()
        self.system: str | None = None
        self.last_compaction: CompactionReport | None = None

    def needs_compaction(self) -> bool:
        return any(section.needs_compaction() for section in self.sections.values())

    def knows(self, identities: Iterable[bytes]) -> bool:
        return any(i in self.identities for i in identities)

    def blocks(self, renderer: Renderer) -> list[ContextBlock]:
        """Summaries first (oldest span first), then entries in recorded-time order."""
        summaries: list[ContextBlock] = []
        entries: list[ContextBlock] = []
        for section in self.sections.values():
            for block in section.blocks(renderer, self.participant_id):
                (summaries if block.kind == "summary" else entries).append(block)
        summaries.sort(key=lambda b: b.timestamp_us)
        entries.sort(key=lambda b: b.timestamp_us)  # stable: ties keep section order
        return summaries + entries
