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
from itertools import islice, pairwise
from typing import Protocol, runtime_checkable

from ._context import ParticipantContext
from ._memory import importance, is_correction, is_request, repairs, supersedes, terms
from ._render import DIALOGUE, ContextBlock, Renderer
from ._text import clip_middle, nbytes

RECALL_SECTION = "recalled"
RECALL_HEADER = "Earlier, newest first:"
"""The block's first line when it recalls more than one statement (a single one is one
line: every token of the block is evaluated anew for each request)."""
REPLACES = "latest, replaces what was said before"
"""How a statement that replaces an older one is marked (the older one is left out)."""
DEFAULT_RECALL_LIMIT = 3
"""Statements recalled per request at most."""
SEARCH_WIDTH = 4
"""Search this many times the limit, so statements already in view can be skipped and
corrections compared."""
MAX_CORRECTIONS = 64
"""The newest corrections compared with what a search found."""
AHEAD_WIDTH = 24
"""The newest statements :meth:`Recall.ahead` chooses from."""
AHEAD_LIMIT = DEFAULT_RECALL_LIMIT
"""Statements in the block chosen ahead of a request at most: a request recalling the
oldest of them sees them all, and so never more statements than its own recall could
bring (four lost an answer in one comparison: docs/conversation.md)."""
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
    about the same thing, or an update of it: :func:`~edge.conversation._memory.supersedes`)."""
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


class Recall:
    """Builds a participant's recalled block for a request, within ``budget_bytes``: up to
    ``limit`` statements; the block chosen ahead of a request holds up to ``ahead_limit``
    (0: none is chosen ahead)."""

    def __init__(
        self,
        index: RecallIndex,
        budget_bytes: int,
        renderer: Renderer,
        limit: int = DEFAULT_RECALL_LIMIT,
        ahead_limit: int = AHEAD_LIMIT,
    ) -> None:
        self.index = index
        self.budget_bytes = budget_bytes
        self.renderer = renderer
        self.limit = limit
        self.ahead_limit = ahead_limit

    def add(self, statement: Statement) -> None:
        if self.budget_bytes > 0 and statement.text.strip():
            self.index.add(statement)

    def select(self, participant_id: str, request: str, in_view: InView) -> list[Statement]:
        """The statements to recall for ``request``, newest first: relevant ones (see
        :meth:`candidates`) that the model does not see verbatim next to the request.

        What a newer statement replaces (see :func:`replaces`) is left out, and the newer
        one is recalled in its place, even when it is in view if what it replaces is in
        view too (the model sees both: the block says which one wins)."""
        return self._select(participant_id, request, in_view)[0]

    def _select(
        self, participant_id: str, request: str, in_view: InView
    ) -> tuple[list[Statement], set[int]]:
        """:meth:`select`'s statements, and ``seq`` of those that replace an older one."""
        pool, pairs = self._candidates(participant_id, request, in_view)
        return self._choose(pool, in_view, self.limit, pairs)

    @staticmethod
    def _choose(
        pool: dict[int, Statement], in_view: InView, limit: int, pairs: Pairs = frozenset()
    ) -> tuple[list[Statement], set[int]]:
        """Up to ``limit`` statements of ``pool`` (those replacing an older one first, then
        in the pool's order), newest first, and ``seq`` of those that replace one: what
        a newer statement replaces is left out, and so is what the model sees near the
        request (unless what it replaces is in view too)."""
        replaced, replacers = superseded(list(pool.values()), pairs)
        ordered = [pool[i] for i in replacers] + [
            s for s in pool.values() if s.seq not in replacers
        ]
        chosen: list[Statement] = []
        seen: set[str] = set()
        for s in ordered:
            key = s.text.strip().lower()
            if s.seq in replaced or key in seen:
                continue
            conflict = any(in_view.shows(old) for old in replacers.get(s.seq, ()))
            if in_view.shows_near(s) and not conflict:
                continue
            seen.add(key)
            chosen.append(s)
            if len(chosen) == limit:
                break
        chosen.sort(key=lambda s: (s.timestamp_us, s.seq), reverse=True)
        return chosen, {s.seq for s in chosen if s.seq in replacers}

    def ahead(self, participant_id: str, in_view: InView) -> list[Statement]:
        """The statements a next request most likely recalls, chosen before it comes: of
        the participant's newest :data:`AHEAD_WIDTH` statements, those that state a
        correction or a detail (a number, a name: :func:`~edge.conversation._memory.importance`
        above 0), the most important first, as :meth:`select` would choose them."""
        return self._ahead(participant_id, in_view)[0]

    def _ahead(self, participant_id: str, in_view: InView) -> tuple[list[Statement], set[int]]:
        if self.budget_bytes <= 0 or self.ahead_limit <= 0:
            return [], set()
        newest = self.index.newest(participant_id, AHEAD_WIDTH)
        pairs = frozenset(
            (newer.seq, older.seq)
            for newer, older in pairwise(newest)
            if repairs(newer.text, older.text)
        )
        rated = [(importance(s.text), s) for s in newest if not is_request(s.text)]
        rated = sorted((r for r in rated if r[0] > 0), key=lambda r: -r[0])  # stable: newest first
        return self._choose({s.seq: s for _, s in rated}, in_view, self.ahead_limit, pairs)

    def candidates(
        self, participant_id: str, request: str, in_view: InView
    ) -> dict[int, Statement]:
        """Statements relevant to ``request`` (the index's search, over its relevance
        floor), that state something (not a request) the request does not already say;
        and every newer statement, in view or in the index's corrections, that replaces
        one of them, or the repair said right after one
        (:func:`~edge.conversation._memory.repairs`)."""
        return self._candidates(participant_id, request, in_view)[0]

    def _candidates(
        self, participant_id: str, request: str, in_view: InView
    ) -> tuple[dict[int, Statement], Pairs]:
        """:meth:`candidates`, and the pairs of those that take back the one before."""
        if self.budget_bytes <= 0:
            return {}, frozenset()
        asked = set(terms(request))
        found = [
            s
            for s in self.index.search(participant_id, request, self.limit * SEARCH_WIDTH)
            if not is_request(s.text) and answers(s, asked)
        ]
        pool = {s.seq: s for s in found}
        pairs: set[tuple[int, int]] = set()
        if found:
            newer = self.index.corrections(participant_id, MAX_CORRECTIONS) + in_view.shown
            for s in newer:
                if any(replaces(s, f) for f in found):
                    pool.setdefault(s.seq, s)
            for f in found:
                after = self.index.following(f)
                if after is not None and repairs(after.text, f.text):
                    pool.setdefault(after.seq, after)
                    pairs.add((after.seq, f.seq))
        return pool, frozenset(pairs)

    @staticmethod
    def line(statement: Statement, replacer: bool = False) -> str:
        """``User (earlier): ...`` like a dialogue entry, or the topic's name for a note."""
        who = "User" if statement.source == DIALOGUE else statement.source
        return f"{who} ({REPLACES if replacer else 'earlier'}): {statement.text}"

    def block(self, participant_id: str, request: str, in_view: InView) -> ContextBlock | None:
        """The recalled block (None when nothing relevant is out of view and no state is
        away from the request); at most ``budget_bytes`` of text: the summary topics'
        states not next to the request first (:meth:`situation`), then the statements
        recalled for ``request``, newest first, a long one clipped.

        When the block chosen ahead (:meth:`ahead_block`, which the participant's prompt
        prefix is warmed with between turns) holds every line of it, the block is that
        one's start, down to the last line needed: the request then evaluates no recalled
        token anew (a line or two more than needed is the price). Any other block starts
        with the same states, so only its statements are evaluated anew."""
        situation = self.situation(in_view)
        room = self.budget_bytes - _cost(situation)
        said = {s.text for _, s in situation}
        chosen, replacers = self._select(participant_id, request, in_view)
        own = self._lines([s for s in chosen if s.text not in said], replacers, room)
        if not own:
            return self._render(situation, [], header=False) if situation else None
        ahead = self._lines(*self._ahead(participant_id, in_view), room)
        texts = [text for text, _ in ahead]
        if all(text in texts for text, _ in own):
            upto = 1 + max(texts.index(text) for text, _ in own)
            return self._render(situation, ahead[:upto], header=len(ahead) > 1)
        return self._render(situation, own, header=len(own) > 1)

    def ahead_block(self, participant_id: str, in_view: InView) -> ContextBlock | None:
        """The block of :meth:`situation`'s states and :meth:`ahead`'s statements, within
        ``budget_bytes`` (None when there are none): what the participant's prompt prefix
        is warmed with."""
        situation = self.situation(in_view)
        lines = self._lines(
            *self._ahead(participant_id, in_view), self.budget_bytes - _cost(situation)
        )
        if not (situation or lines):
            return None
        return self._render(situation, lines, header=len(lines) > 1)

    def situation(self, in_view: InView) -> list[tuple[str, Statement]]:
        """Lines for the summary topics' current states (the scene: where the participant
        is, what they look at) that the model does not see next to the request, within
        half of ``budget_bytes`` (a long one clipped), and their statements.

        A state is the participant's situation now, so every answer may need it, whatever
        the request's words ("Where am I?" shares none with "The participant is in a train
        carriage"); a small model uses what is next to the request and loses a state many
        exchanges above it. Next to the request means among the newest entries, as for a
        statement: repeating what is a few entries above lost answers (docs/conversation.md).
        A state changes rarely: it is in the block chosen ahead, so a request evaluates
        none of its tokens anew."""
        if self.budget_bytes <= 0:
            return []
        lines: list[tuple[str, Statement]] = []
        room = self.budget_bytes // 2
        for state in in_view.states:
            if in_view.shows_near(state) or not state.text.strip():
                continue
            text = f"{state.source} (latest): {state.text}"
            if nbytes(text) + 1 > room:
                if room < 64:
                    break
                text = clip_middle(text, room - 1)
            lines.append((text, state))
            room -= nbytes(text) + 1
        return lines

    def _lines(
        self, chosen: list[Statement], replacers: set[int], budget_bytes: int
    ) -> list[tuple[str, Statement]]:
        """The block's lines for ``chosen`` (newest first) and their statements, within
        ``budget_bytes`` with the header if more than one: a long first one clipped."""
        lines: list[tuple[str, Statement]] = []
        room = budget_bytes - (nbytes(RECALL_HEADER) + 1 if len(chosen) > 1 else 0)
        for statement in chosen:
            text = self.line(statement, statement.seq in replacers)
            cost = nbytes(text) + 1
            if cost > room:
                if lines or room < 64:
                    break
                text = clip_middle(text, room - 1)
                cost = nbytes(text) + 1
            lines.append((text, statement))
            room -= cost
        return lines

    @staticmethod
    def _render(
        situation: list[tuple[str, Statement]], lines: list[tuple[str, Statement]], header: bool
    ) -> ContextBlock:
        texts = [t for t, _ in situation] + [RECALL_HEADER] * header + [t for t, _ in lines]
        newest = max(s.timestamp_us for _, s in situation + lines)
        return ContextBlock("recalled", RECALL_SECTION, "\n".join(texts), newest)


def _cost(lines: list[tuple[str, Statement]]) -> int:
    """Bytes that ``lines`` take in a block, each with its newline."""
    return sum(nbytes(text) + 1 for text, _ in lines)


class InView:
    """What the model sees of a participant's context: the rendered blocks' ``text``, the
    ``near`` part of it (the newest blocks, next to the request), in ``shown`` the
    summary topics' states and the newest entries as statements (a newer one there can
    replace an older statement found), and in ``states`` the summary topics' states alone.

    A statement shown verbatim near the request is not recalled again. One that only a
    summary holds, or an entry many turns back, is recalled when relevant: a small model
    uses what is next to the request (measured: a fact quoted in the summary above eight
    exchanges goes unused), and only a relevant request pays for the block."""

    def __init__(
        self,
        text: str,
        near: str = "",
        shown: list[Statement] | None = None,
        states: list[Statement] | None = None,
    ) -> None:
        self.text = _normal(text)
        self.near = _normal(near)
        self.shown = shown or []
        self.states = states or []

    def shows(self, statement: Statement) -> bool:
        """Whether the statement is anywhere in the context, verbatim."""
        said = _normal(statement.text)
        return bool(said) and said in self.text

    def shows_near(self, statement: Statement) -> bool:
        """Whether the statement is verbatim in the newest blocks, next to the request."""
        said = _normal(statement.text)
        return bool(said) and said in self.near


def _normal(text: str) -> str:
    """Lower case, double quotes as single ones (an extractive summary's quoting) and
    single spaces: how a statement is looked for in the rendered context."""
    return " ".join(text.replace('"', "'").lower().split())


RECENT_ENTRIES = 4
"""The newest entries of the context that count as next to the request (a summary, at
the top of the context, never does)."""


def in_view(
    part: ParticipantContext, blocks: list[ContextBlock], recent: int = RECENT_ENTRIES
) -> InView:
    """What ``blocks`` (``part``'s rendered context) show, its newest ``recent`` entries,
    and the summary topics' states and newest entries as statements."""
    entries = [(s, e) for s in part.sections.values() if s.kind != "summary" for e in s.entries]
    entries.sort(key=lambda se: se[1].key)
    newest = entries[-recent:] if recent > 0 else []
    states = [(s, e) for s in part.sections.values() if s.kind == "summary" for e in s.entries]
    shown = [
        Statement(part.participant_id, e.seq, e.timestamp_us, s.name, e.user or e.text)
        for s, e in newest + states
    ]
    entry_blocks = [b for b in blocks if b.kind != "summary"]
    near = entry_blocks[-recent:] if recent > 0 else []
    text = "\n".join(b.text for b in blocks)
    return InView(text, "\n".join(b.text for b in near), shown, shown[len(newest) :])
