"""Recall from a durable :class:`~edge.store.SessionStore`: its FTS5 table ``recall``.

The store's schema (version 3, with the statement's owner since version 5) indexes every
statement in the transaction that records it (a trigger on ``records``), so recall covers
the whole conversation, survives restarts, and forgets what the store forgets (``forget``,
retention). A search matches the participant's owner token first, so it ranks (SQLite's
BM25, over the statement's text only) that participant's statements alone.
"""

from __future__ import annotations

from edge.store import SessionStore

from ._index import Statement
from ._memory import STOPWORDS, is_correction, words

# CROSS JOIN keeps the full-text match the outer loop (SQLite's planner would otherwise
# walk the participant's records newest first and evaluate the match for each one: seconds
# at 50,000 records)
_SEARCH = """
    SELECT r.id, r.timestamp_us, r.section, recall.body
    FROM recall CROSS JOIN records r ON r.id = recall.rowid
    WHERE recall MATCH ? AND r.participant = ? AND bm25(recall, 1.0, 0.0) <= ?
    ORDER BY bm25(recall, 1.0, 0.0), r.id DESC LIMIT ?
"""
_NEWEST = """
    SELECT r.id, r.timestamp_us, r.section, recall.body
    FROM recall CROSS JOIN records r ON r.id = recall.rowid
    WHERE recall MATCH ? AND r.participant = ?
    ORDER BY r.id DESC LIMIT ?
"""
_LATEST = """
    SELECT r.id, r.timestamp_us, r.section, recall.body
    FROM records r CROSS JOIN recall ON recall.rowid = r.id
    WHERE r.participant = ? AND r.kind IN ('exchange', 'update')
    ORDER BY r.id DESC LIMIT ?
"""
_FOLLOWING = """
    SELECT r.id, r.timestamp_us, r.section, recall.body
    FROM records r CROSS JOIN recall ON recall.rowid = r.id
    WHERE r.participant = ? AND r.id > ? AND r.kind IN ('exchange', 'update')
    ORDER BY r.id LIMIT 1
"""
CORRECTION_WORDS = (
    "actually correction meant mean sorry misspoke not instead changed moved switched replaced "
    "reset longer rather update updated updates now scratch wrong change plan plans wait no "
    "rerouted rescheduled postponed pushed brought cancelled canceled"
).split()
"""Words of :func:`~edge.recall.is_correction`'s phrases, to find candidates
in the index; each candidate is then checked with it."""


_CORRECTION_MATCH = " OR ".join(f'"{w}"' for w in CORRECTION_WORDS)  # stop words included


def match_any(text: str) -> str:
    """An FTS5 query matching any word of ``text`` but stop words (each quoted)."""
    seen = dict.fromkeys(w.lower() for w in words(text) if w.lower() not in STOPWORDS)
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in seen)


def owned(participant_id: str, match: str) -> str:
    """``match`` over the statements' text, for ``participant_id``'s statements only: its
    owner token is the schema's ``'p' || hex(substr(participant, 1, 48))`` (two ids that
    share their first 48 characters share it; the search also compares the id)."""
    owner = "p" + participant_id[:48].encode().hex().upper()
    return f'owner:"{owner}" AND body:({match})'


class StoreRecallIndex:
    """A :class:`~edge.conversation.RecallIndex` over a session store's FTS5 table.

    ``add`` and ``forget`` do nothing: the store indexes each statement as it records it
    and drops it with its record. ``min_score`` is the least BM25 score returned."""

    def __init__(self, store: SessionStore, min_score: float = 1.2) -> None:
        self.store = store
        self.min_score = min_score

    def add(self, statement: Statement) -> None:
        """Indexed by the store's trigger in the transaction that recorded it."""

    def forget(self, participant_id: str) -> None:
        """The store's ``forget`` deletes the records, and the trigger their index rows."""

    def _statements(self, participant_id: str, sql: str, *args: object) -> list[Statement]:
        """The participant's statements that ``sql`` selects (id, time, section, body)."""
        with self.store.lock:
            rows = self.store.connection.execute(sql, args).fetchall()
        return [Statement(participant_id, *row) for row in rows]

    def search(self, participant_id: str, query: str, limit: int) -> list[Statement]:
        match = match_any(query)
        if not match or limit <= 0:
            return []
        return self._statements(
            participant_id,
            _SEARCH,
            owned(participant_id, match),
            participant_id,
            -self.min_score,
            limit,
        )

    def corrections(self, participant_id: str, limit: int) -> list[Statement]:
        if limit <= 0:
            return []
        match = owned(participant_id, _CORRECTION_MATCH)
        found = self._statements(participant_id, _NEWEST, match, participant_id, limit * 4)
        return [s for s in found if is_correction(s.text)][:limit]

    def newest(self, participant_id: str, limit: int) -> list[Statement]:
        if limit <= 0:
            return []
        return self._statements(participant_id, _LATEST, participant_id, limit)

    def following(self, statement: Statement) -> Statement | None:
        pid = statement.participant_id
        return next(iter(self._statements(pid, _FOLLOWING, pid, statement.seq)), None)
