"""Recall: earlier participant statements brought back into the prompt when relevant.

Every statement a participant makes (what they said in an exchange, each incremental topic
update such as a dictated note) goes into an :class:`edge.recall.RecallIndex`. For each
answer request
:class:`Recall` searches it with the request and renders the few best statements that are
no longer in the model's view (compacted away, or kept in a summary only in other words)
as a "recalled" block, inside its byte budget. The block comes after every stable part of
the context message, so the cached prompt prefix is unchanged.

Corrections win: the block lists statements newest first and says so, and an older
statement that a newer correction about the same thing replaces is left out.

The indexes and the heuristics comparing statements are the ``edge.recall`` package's;
this module chooses what to recall and renders the block.
"""

from __future__ import annotations

from itertools import pairwise

from edge.recall import (
    Pairs,
    RecallIndex,
    Statement,
    answers,
    importance,
    is_request,
    repairs,
    replaces,
    superseded,
    terms,
)

from ._context import ParticipantContext
from ._render import ContextBlock, Renderer
from ._text import clip_middle, nbytes

RECALL_SECTION = "recalled"
RECALL_HEADER = "Earlier, newest first:"
"""The block's first line when it recalls more than one statement (a single one is one
line: every token of the block is evaluated anew for each request)."""
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
        correction or a detail (a number, a name: :func:`~edge.recall.importance`
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
        (:func:`~edge.recall.repairs`)."""
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
                after = self.repair_of(f)
                if after is not None:
                    pool.setdefault(after.seq, after)
                    pairs.add((after.seq, f.seq))
        return pool, frozenset(pairs)

    def repair_of(self, statement: Statement) -> Statement | None:
        """The participant's next statement when it takes ``statement`` back
        (:func:`~edge.recall.repairs`: "Wait, no, ...", "It moved to 11."), else None."""
        after = self.index.following(statement)
        return after if after is not None and repairs(after.text, statement.text) else None

    @staticmethod
    def line(statement: Statement, replacer: bool = False) -> str:
        """The statement as it was said, with no label: a small model copies a line's
        label into its reply ("The user (earlier): ..."); the header says what the lines
        are, and a replaced statement is never shown next to what replaces it."""
        return statement.text.strip()

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
            text = state.text.strip()
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
