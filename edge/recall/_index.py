"""Recall indexes: where every statement a participant makes is kept, searched with a
request's words, and the heuristics that compare statements (which replaces which).

:class:`MemoryRecallIndex` keeps the index in memory (BM25 over stemmed terms);
:class:`~edge.recall.StoreRecallIndex` reads the durable store's FTS5 index. Both
implement :class:`RecallIndex`.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from itertools import islice
from typing import Protocol, runtime_checkable

from ._memory import is_correction, supersedes, terms

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

    def newest(self, participant_id: str, limit: int) -> list[Statement]:
        """The participant's newest ``limit`` statements, newest first."""
        ...

    def following(self, statement: Statement) -> Statement | None:
        """The participant's next statement after ``statement`` (None if it is the newest
        or no longer kept)."""
        ...

    def forget(self, participant_id: str) -> None: ...


@dataclass
class _Postings:
    """One participant's statements (by a running number) and which contain each term."""

    statements: dict[int, tuple[Statement, Counter[str]]] = field(default_factory=dict)
    postings: dict[str, set[int]] = field(default_factory=dict)
    corrections: dict[int, Statement] = field(default_factory=dict)
    ids: dict[int, int] = field(default_factory=dict)
    """Running number of each statement's ``seq``."""
    total_terms: int = 0
    next_id: int = 0

    def add(self, statement: Statement) -> None:
        counts = Counter(terms(statement.text))
        self.statements[self.next_id] = (statement, counts)
        self.ids[statement.seq] = self.next_id
        if statement.correction:
            self.corrections[self.next_id] = statement
        for term in counts:
            self.postings.setdefault(term, set()).add(self.next_id)
        self.total_terms += sum(counts.values())
        self.next_id += 1

    def drop_oldest(self) -> None:
        oldest = next(iter(self.statements))  # dicts keep insertion order
        statement, counts = self.statements.pop(oldest)
        self.corrections.pop(oldest, None)
        if self.ids.get(statement.seq) == oldest:
            del self.ids[statement.seq]
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

    def newest(self, participant_id: str, limit: int) -> list[Statement]:
        p = self._by_participant.get(participant_id)
        if p is None or limit <= 0:
            return []
        return [p.statements[i][0] for i in islice(reversed(p.statements), limit)]

    def following(self, statement: Statement) -> Statement | None:
        p = self._by_participant.get(statement.participant_id)
        i = p.ids.get(statement.seq) if p else None
        if p is None or i is None:
            return None
        nxt = p.statements.get(i + 1)  # running numbers are contiguous: the oldest go first
        return nxt[0] if nxt else None

    def forget(self, participant_id: str) -> None:
        self._by_participant.pop(participant_id, None)


def replaces(newer: Statement, older: Statement) -> bool:
    """Whether ``newer`` replaces ``older``: said later, and superseding it (a correction
    about the same thing, or an update of it: :func:`~edge.recall.supersedes`)."""
    if (newer.timestamp_us, newer.seq) <= (older.timestamp_us, older.seq):
        return False
    return supersedes(newer.text, older.text)


Pairs = frozenset[tuple[int, int]]
"""``(newer seq, older seq)``: statements that replace others by being said right after."""


def superseded(
    pool: list[Statement], pairs: Pairs = frozenset()
) -> tuple[set[int], dict[int, list[Statement]]]:
    """``seq`` of the statements in ``pool`` that a newer one replaces (:func:`replaces`,
    or a pair of ``pairs``), and for each statement that replaces one (and is not itself
    replaced) what it replaces."""
    replaced: set[int] = set()
    replacers: dict[int, list[Statement]] = {}
    for newer in pool:
        for older in pool:
            if (newer.seq, older.seq) in pairs or replaces(newer, older):
                replaced.add(older.seq)
                replacers.setdefault(newer.seq, []).append(older)
    return replaced, {k: v for k, v in replacers.items() if k not in replaced}


def answers(statement: Statement, asked: set[str]) -> bool:
    """Whether ``statement`` can answer a request whose search terms are ``asked``: it says
    something the request does not (an earlier request repeated, or a statement that only
    echoes the question, cannot), and it shares a word with the request beyond numbers (a
    number alone, "5" in "Where is sample 5?" and in "Start timer 5 for 5 minutes", does
    not make it relevant; a request of numbers only keeps every match)."""
    said = set(terms(statement.text))
    words = {t for t in asked if not any(c.isdigit() for c in t)}
    return bool(said - asked) and (not words or bool(words & said))
