"""Answers from the record: a question about what the participant said, told back from
their own statements instead of generated.

The search is recall's (:meth:`~edge.conversation._recall.Recall.candidates`: only this
participant's statements, the same limit), so it is as private and as bounded as the
recalled block. Of the statements found, the one that matches the question's subject best
(the newest among equals) is followed to the newest statement that replaces it (a
correction, an update, a repair said right after: :func:`~edge.recall.replaces`), and
that one is told back (:func:`~edge.recall.spoken`). A question about one of the
participant's things ("my ...") that shares no word with anything they said gets
:data:`~edge.recall.NOT_STATED`, unless a
summary topic (the scene) could hold the answer in words a search does not match: the
model answers then, as it does any question the record does not answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from edge.recall import (
    NOT_STATED,
    Asked,
    Statement,
    asked_of_record,
    coverage,
    is_request,
    rating,
    replaces,
    spoken,
)

from ._recall import InView, Recall
from ._text import nbytes

SEARCH = 12
"""Statements a search for what the answer corrects looks at."""
NEWEST = 24
"""The participant's newest statements considered besides the search's finds (a record of a
few statements scores under the search's relevance floor)."""


@dataclass(frozen=True)
class StatedAnswer:
    """The reply to a question about what the participant said: ``text``, told back from
    ``statement`` (None: nothing they said answers it), which replaced ``replaced`` (newest
    first)."""

    text: str
    statement: Statement | None
    replaced: tuple[Statement, ...] = ()


def stated_answer(
    recall: Recall, participant_id: str, request: str, in_view: InView
) -> StatedAnswer | None:
    """The answer to ``request`` from the participant's statements, or None when the
    request does not ask for a stated fact or their record cannot tell (the model
    answers)."""
    asked = asked_of_record(request)
    if asked is None or recall.budget_bytes <= 0:
        return None
    pool = recall.candidates(participant_id, asked.query or request, in_view)
    for s in recall.index.newest(participant_id, NEWEST):  # a short record is under the
        if not is_request(s.text):  # search's relevance floor
            pool.setdefault(s.seq, s)
    best = _best(asked, list(pool.values()))
    if best is None:
        related = any(coverage(asked, s.text) for s in pool.values())
        if asked.mine and not related and not in_view.states:
            return StatedAnswer(NOT_STATED, None)
        return None
    chain = _replacements(recall, best, pool)
    answer = chain[-1]
    older = {s.seq: s for s in recall.index.search(participant_id, answer.text, SEARCH)}
    older.update(pool)  # what the answer corrects shares its words: the search finds it
    replaced = tuple(chain[:-1]) + tuple(
        s
        for s in older.values()
        if s not in chain and (replaces(answer, s) or recall.repair_of(s) == answer)
    )
    replaced = tuple(sorted(replaced, key=lambda s: (s.timestamp_us, s.seq), reverse=True))
    text = spoken(answer.text, asked, tuple(s.text for s in replaced))
    return StatedAnswer(_within(text, recall.budget_bytes), answer, replaced)


def _best(asked: Asked, pool: list[Statement]) -> Statement | None:
    """The statement that answers ``asked`` best (:func:`~edge.recall.rating`), the newest
    among equals."""
    rated = [(r, s.timestamp_us, s.seq, s) for s in pool if (r := rating(asked, s.text))]
    return max(rated, key=lambda r: r[:3])[3] if rated else None


def _replacements(recall: Recall, first: Statement, pool: dict[int, Statement]) -> list[Statement]:
    """``first``, then each newer statement that replaces the one before it: a
    correction or update in ``pool`` (:func:`~edge.recall.replaces`), or the repair said
    right after it (:meth:`~edge.conversation._recall.Recall.repair_of`)."""
    chain = [first]
    while len(chain) <= len(pool):
        current = chain[-1]
        newer = [s for s in pool.values() if s.seq != current.seq and replaces(s, current)]
        repair = recall.repair_of(current)
        if repair is not None:
            newer.append(repair)
        if not newer:
            break
        chain.append(max(newer, key=lambda s: (s.timestamp_us, s.seq)))
    return chain


def _within(text: str, budget_bytes: int) -> str:
    """``text`` cut at a word to ``budget_bytes`` (the recall budget) at most."""
    if nbytes(text) <= budget_bytes:
        return text
    cut = text.encode()[: budget_bytes - 3].decode("utf-8", "ignore").rsplit(" ", 1)[0]
    return cut + "…"
