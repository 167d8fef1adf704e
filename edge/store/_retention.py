"""Listing participants and erasing them: forget, retention, and scrubbing erased words."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence

from ._database import StoreDatabase, StoreError, _purge_recall_index, token_hash
from ._types import ParticipantInfo, Retention

ASSIGNED_ID = re.compile(r"(?:p|wyoming:anon)-[0-9a-f]{12}")
"""An id the service assigned to a client that named none (``p-`` + 12 hex)."""


class StoreRetention(StoreDatabase):
    """Listing participants and erasing them: forget, retention, and scrubbing erased words."""

    def participants(self) -> list[ParticipantInfo]:
        with self._read() as db:
            rows = db.execute(
                "SELECT p.id, p.created_us, p.last_seen_us, p.token_hash IS NOT NULL, "
                "COUNT(r.id), COALESCE(SUM(r.in_view), 0), COALESCE(SUM(LENGTH(CAST(r.text "
                "AS BLOB)) + LENGTH(CAST(r.user AS BLOB)) + LENGTH(CAST(r.assistant AS BLOB))"
                "), 0) FROM participants p LEFT JOIN records r ON r.participant = p.id "
                "GROUP BY p.id ORDER BY p.last_seen_us DESC"
            ).fetchall()
        return [
            ParticipantInfo(pid, created, seen, count, in_view, size, bool(token))
            for pid, created, seen, token, count, in_view, size in rows
        ]

    # -- erasing ------------------------------------------------------------------------

    def forget(self, participant_id: str, *, notify: bool = False) -> bool:
        """Erase the participant everywhere (records, summaries, identities, reports,
        token); False when there was nothing to erase. ``notify`` (another process than
        the service, such as `edge sessions forget`): the id's hash is left for a running
        service, which erases what it holds of them and removes it (:meth:`forgotten`)."""
        with self.transaction() as db:
            erased = db.execute("DELETE FROM participants WHERE id = ?", (participant_id,))
            if erased.rowcount > 0:
                _purge_recall_index(db)
            if notify and erased.rowcount > 0:
                db.execute(
                    "INSERT INTO forgotten (hash, at_us) VALUES (?, ?) "
                    "ON CONFLICT (hash) DO UPDATE SET at_us = excluded.at_us",
                    (token_hash(participant_id), self._clock()),
                )
        if erased.rowcount > 0:
            self.scrub()
        return erased.rowcount > 0

    def forgotten(self) -> dict[str, int]:
        """Participants another process erased (``forget(notify=True)``) and no service has
        handled yet: the hash of each id (:func:`token_hash`) and when it was erased."""
        with self._read() as db:
            return dict(db.execute("SELECT hash, at_us FROM forgotten").fetchall())

    def handled_forgotten(self, hashes: Sequence[str]) -> None:
        """The service erased what it held of these (or held nothing of them)."""
        with self.transaction() as db:
            db.executemany("DELETE FROM forgotten WHERE hash = ?", [(h,) for h in hashes])

    def scrub(self) -> None:
        """Make erased words gone from every file: the recall index merged without them
        (done by the erasing transaction), the freed pages zeroed (``secure_delete``) and
        the WAL, which still holds the pages as they were, checkpointed and truncated."""
        if self.path is None:
            return
        with self._lock:
            busy, _, _ = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            raise StoreError(
                f"{self.path}-wal: another connection kept the checkpoint that erases "
                "words from the WAL from completing; close it and erase again"
            )

    def enforce(self, retention: Retention, active: Sequence[str] = ()) -> dict[str, int]:
        """Apply ``retention``: erase idle participants (never one in ``active``) and trim
        compacted history by age and size. The model's view is never touched."""
        now = self._clock()
        erased = records = 0
        with self.transaction() as db:
            for pid in self._idle(db, retention, now, set(active)):
                erased += db.execute("DELETE FROM participants WHERE id = ?", (pid,)).rowcount
            if retention.history_age_s is not None:
                cutoff = now - int(retention.history_age_s * 1e6)
                records += db.execute(
                    "DELETE FROM records WHERE in_view = 0 AND timestamp_us < ?", (cutoff,)
                ).rowcount
            if retention.history_bytes is not None:
                records += self._trim_bytes(db, retention.history_bytes)
            if erased or records:
                _purge_recall_index(db)
        if erased or records:
            self.scrub()
        return {"participants_erased": erased, "records_erased": records}

    @staticmethod
    def _idle(
        db: sqlite3.Connection, retention: Retention, now: int, active: set[str]
    ) -> list[str]:
        """The participants ``retention`` erases for not being seen (never an active one)."""
        limits = [retention.idle_expiry_s, retention.assigned_idle_expiry_s]
        if all(limit is None for limit in limits):
            return []
        everyone, assigned = (None if limit is None else now - int(limit * 1e6) for limit in limits)
        rows = db.execute("SELECT id, last_seen_us FROM participants").fetchall()
        return [
            pid
            for pid, seen in rows
            if pid not in active
            and (
                (everyone is not None and seen < everyone)
                or (assigned is not None and seen < assigned and ASSIGNED_ID.fullmatch(pid))
            )
        ]

    def _trim_bytes(self, db: sqlite3.Connection, limit: int) -> int:
        erased = 0
        for (pid,) in db.execute("SELECT id FROM participants").fetchall():
            rows = db.execute(
                "SELECT id, LENGTH(CAST(text AS BLOB)) + LENGTH(CAST(user AS BLOB)) + "
                "LENGTH(CAST(assistant AS BLOB)) FROM records WHERE participant = ? AND "
                "in_view = 0 ORDER BY timestamp_us DESC, id DESC",
                (pid,),
            ).fetchall()
            total, drop = 0, []
            for rid, size in rows:
                total += size
                if total > limit:
                    drop.append(rid)
            for start in range(0, len(drop), 500):
                ids = drop[start : start + 500]
                erased += db.execute(
                    f"DELETE FROM records WHERE id IN ({','.join('?' * len(ids))})", ids
                ).rowcount
        return erased
