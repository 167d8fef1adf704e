"""Recall: earlier participant statements brought back into the prompt when relevant.

Every statement a participant makes (what they said in an exchange, each incremental topic
update such as a dictated note) goes into a :class:`RecallIndex`. For each answer request
:class:`Recall` searches it with the request and renders the few best statements that are
no longer in the model's view (compacted away, or kept in a summary only in other words)
as a "recalled" block, inside its byte budget. The block comes after every stable part of
the context message, so the cached prompt prefix is unchanged.

Corrections win: the block lists statements newest first and says so, and an older
statement that a newer correction about the same thing replaces is left out.

:class:`MemoryRecallIndex` keeps the index in memory (BM25 over stemmed terms). A durable
store implements the same protocol (e.g. SQLite FTS5 beside the recorded exchanges).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ._context import ParticipantContext
from ._memory import is_correction, key_details, terms
from ._render import ContextBlock, Renderer
from ._text import clip_middle, nbytes

RECALL_SECTION = "recalled"
RECALL_HEADER = "Recalled from earlier, newest first (a newer statement replaces an older one):"
DEFAULT_RECALL_LIMIT = 3
"""Statements recalled per request at most."""
SEARCH_WIDTH = 4
"""Search this many times the limit, so statements already in view can be skipped and
corrections compared."""
MAX_CORRECTIONS = 64
"""The newest corrections compared with what a search found."""
MAX_STATEMENTS = 5_000
"""Statements an in-memory index keeps per participant, oldest dropped first (about 0.7 KB
each: a few MB per participant at most; a durable store keeps every one on disk)."""


@dataclass(frozen=True)
class Statement:
    """One thing a participant said or a topic recorded for them.

    ``seq`` identifies the stored entry it came from in the model's view; ``source`` is
    ``"dialogue"`` or the topic's name."""

    participant_id: str
    seq: int
    timestamp_us: int
    source: str
    text: str

    @property
    def correction(self) -> bool:
        return is_correction(self.text)


@runtime_checkable
class RecallIndex(Protocol):
    """Where statements are kept for recall; searched with a request's text."""

    def add(self, statement: Statement) -> None: ...

    def search(self, participant_id: str, query: str, limit: int) -> list[Statement]:
        """The participant's statements most relevant to ``query``, best first."""
        ...

    def corrections(self, participant_id: str, limit: int) -> list[Statement]:
        """The participant's newest ``limit`` corrections (:attr:`Statement.correction`)."""
        ...

    def forget(self, participant_id: str) -> None: ...


@dataclass
class _Postings:
    """One participant's statements (by a running number) and which contain each term."""

    statements: dict[int, tuple[Statement, Counter[str]]] = field(default_factory=dict)
    postings: dict[str, set[int]] = field(default_factory=dict)
    corrections: dict[int, Statement] = field(default_factory=dict)
    total_terms: int = 0
    next_id: int = 0

    def add(self, statement: Statement) -> None:
        counts = Counter(terms(statement.text))
        self.statements[self.next_id] = (statement, counts)
        if statement.correction:
            self.corrections[self.next_id] = statement
        for term in counts:
            self.postings.setdefault(term, set()).add(self.next_id)
        self.total_terms += sum(counts.values())
        self.next_id += 1

    def drop_oldest(self) -> None:
        oldest = next(iter(self.statements))  # dicts keep insertion order
        _, counts = self.statements.pop(oldest)
        self.corrections.pop(oldest, None)
        for term in counts:
            ids = self.postings[term]
            ids.discard(oldest)
            if not ids:
                del self.postings[term]
        self.total_terms -= sum(counts.values())


class MemoryRecallIndex:
    """An in-memory :class:`RecallIndex` ranking by BM25 (k1 1.2, b 0.75); a search only
    visits the statements that share a term with the query."""

    K1 = 1.2
    B = 0.75

    def __init__(self, max_statements: int = MAX_STATEMENTS, min_score: float = 1.2) -> None:
        self._by_participant: dict[str, _Postings] = {}
        self._max = max_statements
        self.min_score = min_score
        """Less relevant statements are not returned (a term shared with half of the
        statements scores about 0.7; a rare one about 2)."""

    def add(self, statement: Statement) -> None:
        p = self._by_participant.setdefault(statement.participant_id, _Postings())
        p.add(statement)
        if len(p.statements) > self._max:
            p.drop_oldest()

    def search(self, participant_id: str, query: str, limit: int) -> list[Statement]:
        p = self._by_participant.get(participant_id)
        wanted = set(terms(query)) & (p.postings.keys() if p else set())
        if p is None or not wanted:
            return []
        n = len(p.statements)
        average = max(p.total_terms / n, 1.0)
        scores: dict[int, float] = {}
        for term in wanted:
            ids = p.postings[term]
            idf = math.log(1 + (n - len(ids) + 0.5) / (len(ids) + 0.5))
            for i in ids:
                counts = p.statements[i][1]
                tf = counts[term]
                norm = tf + self.K1 * (1 - self.B + self.B * sum(counts.values()) / average)
                scores[i] = scores.get(i, 0.0) + idf * tf * (self.K1 + 1) / norm
        ranked = sorted(
            ((score, i) for i, score in scores.items() if score >= self.min_score),
            key=lambda s: (-s[0], -s[1]),
        )
        return [p.statements[i][0] for _, i in ranked[:limit]]

    def corrections(self, participant_id: str, limit: int) -> list[Statement]:
        p = self._by_participant.get(participant_id)
        return list(p.corrections.values())[-limit:][::-1] if p and limit > 0 else []

    def forget(self, participant_id: str) -> None:
        self._by_participant.pop(participant_id, None)


def replaces(newer: Statement, older: Statement) -> bool:
    """Whether ``newer`` replaces ``older``: said later about the same thing, either a
    correction sharing a term with it, or an update sharing two terms that states its own
    number or name ("The door code is 4812 since this morning" after "... is 1234")."""
    if (newer.timestamp_us, newer.seq) <= (older.timestamp_us, older.seq):
        return False
    shared = set(terms(newer.text)) & set(terms(older.text))
    if newer.correction:
        return bool(shared)
    return len(shared) >= 2 and bool(key_details(newer.text)) and bool(key_details(older.text))


def superseded(pool: list[Statement]) -> tuple[set[int], set[int]]:
    """``seq`` of the statements in ``pool`` that a newer one replaces, and of those that
    replace one."""
    replaced: set[int] = set()
    replacers: set[int] = set()
    for newer in pool:
        for older in pool:
            if replaces(newer, older):
                replaced.add(older.seq)
                replacers.add(newer.seq)
    return replaced, replacers - replaced


class Recall:
    """Builds a participant's recalled block for a request, within ``budget_bytes``."""

    def __init__(
        self,
        index: RecallIndex,
        budget_bytes: int,
        renderer: Renderer,
        limit: int = DEFAULT_RECALL_LIMIT,
    ) -> None:
        self.index = index
        self.budget_bytes = budget_bytes
        self.renderer = renderer
        self.limit = limit

    def add(self, statement: Statement) -> None:
        if self.budget_bytes > 0 and statement.text.strip():
            self.index.add(statement)

    def select(self, participant_id: str, request: str, in_view: InView) -> list[Statement]:
        """The statements to recall for ``request``, newest first.

        What a newer statement replaces (see :func:`replaces`) is left out, and the newer
        one is recalled in its place, even when it is in view (a correction must win where
        the request can see it); otherwise what is in view is not repeated."""
        if self.budget_bytes <= 0:
            return []
        found = self.index.search(participant_id, request, self.limit * SEARCH_WIDTH)
        pool = {s.seq: s for s in found}
        if found:
            newer = self.index.corrections(participant_id, MAX_CORRECTIONS) + in_view.shown
            for s in newer:
                if any(replaces(s, f) for f in found):
                    pool.setdefault(s.seq, s)
        replaced, replacers = superseded(list(pool.values()))
        ordered = [pool[i] for i in pool if i in replacers] + [
            s for s in pool.values() if s.seq not in replacers
        ]
        chosen: list[Statement] = []
        seen: set[str] = set()
        for s in ordered:
            key = s.text.strip().lower()
            if s.seq in replaced or key in seen:
                continue
            if in_view.shows(s) and s.seq not in replacers:
                continue
            seen.add(key)
            chosen.append(s)
            if len(chosen) == self.limit:
                break
        return sorted(chosen, key=lambda s: (s.timestamp_us, s.seq), reverse=True)

    def line(self, statement: Statement) -> str:
        when = self.renderer.time(statement.timestamp_us)
        who = "The user said" if statement.source == "dialogue" else statement.source
        return f"[{when}] {who}: {statement.text}"

    def block(self, participant_id: str, request: str, in_view: InView) -> ContextBlock | None:
        """The recalled block (None when nothing relevant is out of view); at most
        ``budget_bytes`` of text: the newest statements first, a long one clipped."""
        chosen = self.select(participant_id, request, in_view)
        lines: list[str] = []
        room = self.budget_bytes - nbytes(RECALL_HEADER)
        for statement in chosen:
            text = self.line(statement)
            cost = nbytes(text) + 1
            if cost > room:
                if lines or room < 64:
                    break
                text = clip_middle(text, room - 1)
                cost = nbytes(text) + 1
            lines.append(text)
            room -= cost
        if not lines:
            return None
        text = "\n".join([RECALL_HEADER, *lines])
        newest = max(s.timestamp_us for s in chosen)
        return ContextBlock("recalled", RECALL_SECTION, text, newest)


class InView:
    """What the model sees verbatim close to the request: the newest uncompacted entries
    (``seqs``) and, in ``shown``, those and every summary topic's current state as
    statements (a newer one there can replace an older statement found).

    A statement that only a summary holds is still recalled: the summary is condensed (a
    model's paraphrase, or an extractive list among other statements). So is an older
    entry still shown verbatim further up (a note dictated many turns ago sits at its
    recorded time, above every exchange since): a small model uses what is next to the
    request, and the recalled block puts the participant's exact words there."""

    def __init__(self, seqs: set[int], shown: list[Statement] | None = None) -> None:
        self.seqs = seqs
        self.shown = shown or []

    def shows(self, statement: Statement) -> bool:
        return statement.seq in self.seqs


RECENT_ENTRIES = 4
"""Entries this close to the request (newest across sections) are not recalled again."""


def in_view(part: ParticipantContext, recent: int = RECENT_ENTRIES) -> InView:
    """The newest ``recent`` entries of ``part``'s rendered context, across sections, and
    the summary topics' states."""
    entries = [(s, e) for s in part.sections.values() if s.kind != "summary" for e in s.entries]
    entries.sort(key=lambda se: se[1].key)
    newest = entries[-recent:] if recent > 0 else []
    states = [(s, e) for s in part.sections.values() if s.kind == "summary" for e in s.entries]
    shown = [
        Statement(part.participant_id, e.seq, e.timestamp_us, s.name, e.user or e.text)
        for s, e in newest + states
    ]
    return InView({e.seq for _, e in newest}, shown)
