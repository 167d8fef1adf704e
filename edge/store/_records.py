"""Recording exchanges, states and compactions, and reading the model's view and the history."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from ._database import _RECORD_COLUMNS, MAX_REPORTS, StoreDatabase, _record
from ._types import Record, StoredParticipant, StoredSection


class StoreRecords:
    """Recording exchanges, states and compactions, and reading the model's view and the history."""

    def __init__(self, database: StoreDatabase) -> None:
        self.database = database

    # -- writing ------------------------------------------------------------------------

    def add_record(
        self, participant_id: str, record: Record, keys: Sequence[bytes] = ()
    ) -> Record | None:
        """Record ``record`` with its identities ``keys`` (the first is the one that must
        be new); None when that identity is already known (nothing is written). A
        ``state`` replaces the section's previous state in the model's view."""
        with self.database.transaction() as db:
            if (
                keys
                and db.execute(
                    "SELECT 1 FROM identities WHERE participant = ? AND key = ?",
                    (participant_id, keys[0]),
                ).fetchone()
            ):
                return None
            self.database.ensure(db, participant_id)
            if record.kind == "state":
                self._leave_view(
                    db,
                    "participant = ? AND section = ? AND in_view = 1",
                    (participant_id, record.section),
                )
            cursor = db.execute(
                "INSERT INTO records (participant, kind, section, timestamp_us, text, user, "
                "assistant, exchange_key, in_view) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1)",
                (
                    participant_id,
                    record.kind,
                    record.section,
                    record.timestamp_us,
                    record.text,
                    record.user,
                    record.assistant,
                    keys[0] if keys and record.kind == "exchange" else None,
                ),
            )
            db.executemany(
                "INSERT OR IGNORE INTO identities (participant, key) VALUES (?, ?)",
                [(participant_id, k) for k in keys],
            )
            rid = cursor.lastrowid
        assert rid is not None
        return Record(
            record.kind,
            record.section,
            record.timestamp_us,
            record.text,
            record.user,
            record.assistant,
            rid,
            True,
        )

    def _leave_view(self, db: sqlite3.Connection, where: str, args: tuple[Any, ...]) -> None:
        if self.database.keep_history:
            db.execute(f"UPDATE records SET in_view = 0 WHERE {where}", args)
        else:
            db.execute(f"DELETE FROM records WHERE {where}", args)

    def set_system(self, participant_id: str, system: str) -> None:
        with self.database.transaction() as db:
            self.database.ensure(db, participant_id)
            db.execute("UPDATE participants SET system = ? WHERE id = ?", (system, participant_id))

    def apply_compaction(
        self,
        participant_id: str,
        section: str,
        state: StoredSection,
        covered: Sequence[int],
        report: dict[str, Any] | None,
    ) -> None:
        """In one transaction: the section's new summary, the ``covered`` records out of
        the model's view, and the report. A failed compaction passes no ``covered`` (its
        records stay in view) and the section's stalled state. Nothing is written for a
        participant erased meanwhile (a compaction never brings one back)."""
        with self.database.transaction() as db:
            if not db.execute(
                "SELECT 1 FROM participants WHERE id = ?", (participant_id,)
            ).fetchone():
                return
            span = state.span or (None, None)
            db.execute(
                "INSERT INTO sections (participant, name, summary, span_start, span_end, "
                "stalled) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (participant, name) DO UPDATE "
                "SET summary = excluded.summary, span_start = excluded.span_start, "
                "span_end = excluded.span_end, stalled = excluded.stalled",
                (participant_id, section, state.summary, span[0], span[1], int(state.stalled)),
            )
            for start in range(0, len(covered), 500):
                ids = list(covered[start : start + 500])
                marks = ",".join("?" * len(ids))
                self._leave_view(db, f"participant = ? AND id IN ({marks})", (participant_id, *ids))
            if report is not None:
                self._add_report(db, participant_id, section, report)

    def _add_report(
        self, db: sqlite3.Connection, participant_id: str, section: str, report: dict[str, Any]
    ) -> None:
        db.execute(
            "INSERT INTO compactions (participant, section, at_us, report) VALUES (?, ?, ?, ?)",
            (participant_id, section, self.database.clock(), json.dumps(report, sort_keys=True)),
        )
        db.execute(
            "DELETE FROM compactions WHERE participant = ? AND id NOT IN (SELECT id FROM "
            "compactions WHERE participant = ? ORDER BY id DESC LIMIT ?)",
            (participant_id, participant_id, MAX_REPORTS),
        )

    # -- reading ------------------------------------------------------------------------

    def exists(self, participant_id: str) -> bool:
        with self.database.read() as db:
            return (
                db.execute("SELECT 1 FROM participants WHERE id = ?", (participant_id,)).fetchone()
                is not None
            )

    def knows(self, participant_id: str, key: bytes) -> bool:
        """Whether an exchange with the identity ``key`` was recorded for the participant
        (identities outlive compaction and retention's erasing of history)."""
        with self.database.read() as db:
            return (
                db.execute(
                    "SELECT 1 FROM identities WHERE participant = ? AND key = ?",
                    (participant_id, key),
                ).fetchone()
                is not None
            )

    def load(self, participant_id: str) -> StoredParticipant | None:
        """The participant's model view, or None when the store has never seen them."""
        with self.database.read() as db:
            row = db.execute(
                "SELECT system FROM participants WHERE id = ?", (participant_id,)
            ).fetchone()
            if row is None:
                return None
            out = StoredParticipant(participant_id, system=row[0])
            for name, summary, start, end, stalled in db.execute(
                "SELECT name, summary, span_start, span_end, stalled FROM sections "
                "WHERE participant = ?",
                (participant_id,),
            ):
                span = (start, end) if start is not None and end is not None else None
                out.sections[name] = StoredSection(summary, span, bool(stalled))
            out.view = [
                _record(r)
                for r in db.execute(
                    f"SELECT {_RECORD_COLUMNS} FROM records WHERE participant = ? AND "
                    "in_view = 1 ORDER BY timestamp_us, id",
                    (participant_id,),
                )
            ]
            out.identities = {
                bytes(k)
                for (k,) in db.execute(
                    "SELECT key FROM identities WHERE participant = ?", (participant_id,)
                )
            }
            out.last_compaction = self._reports(db, participant_id, 1)[0]
        return out

    def _reports(
        self, db: sqlite3.Connection, participant_id: str, limit: int
    ) -> list[dict[str, Any] | None]:
        rows = db.execute(
            "SELECT report FROM compactions WHERE participant = ? ORDER BY id DESC LIMIT ?",
            (participant_id, limit),
        ).fetchall()
        return [json.loads(r[0]) for r in rows] or [None]

    def view_records(self, participant_id: str, section: str, *, limit: int) -> list[Record]:
        """The oldest records of ``section`` still in the model's view."""
        with self.database.read() as db:
            rows = db.execute(
                f"SELECT {_RECORD_COLUMNS} FROM records WHERE participant = ? AND in_view = 1 "
                "AND section = ? ORDER BY timestamp_us, id LIMIT ?",
                (participant_id, section, limit),
            ).fetchall()
        return [_record(r) for r in rows]

    def compactions(self, participant_id: str, limit: int = MAX_REPORTS) -> list[dict[str, Any]]:
        """The newest compaction reports, newest first."""
        with self.database.read() as db:
            return [r for r in self._reports(db, participant_id, limit) if r is not None]

    def history(
        self, participant_id: str, *, offset: int = 0, limit: int = 100
    ) -> tuple[list[Record], int]:
        """A page of the whole conversation in recorded-time order, and the total count."""
        with self.database.read() as db:
            total = db.execute(
                "SELECT COUNT(*) FROM records WHERE participant = ?", (participant_id,)
            ).fetchone()[0]
            rows = db.execute(
                f"SELECT {_RECORD_COLUMNS} FROM records WHERE participant = ? "
                "ORDER BY timestamp_us, id LIMIT ? OFFSET ?",
                (participant_id, limit, offset),
            ).fetchall()
        return [_record(r) for r in rows], int(total)
