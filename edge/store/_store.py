"""The SQLite sessions store: one file (WAL mode) or an in-memory database.

Durability: WAL with ``synchronous=FULL`` by default, so a write is on disk (the WAL is
fsynced) when the call that made it returns, and it survives a power cut, not only a
crash of the process (``NORMAL`` survives a crash but may lose the newest writes on a power
cut). Every write is one ``BEGIN IMMEDIATE`` transaction, so after any crash a participant
is as it was before or after it, never half. Calls are synchronous and thread-safe (one
connection behind a lock); async callers run them in a worker thread (:meth:`run`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio

from edge.runtime import now_us

from ._schema import migrate
from ._types import (
    ParticipantInfo,
    Record,
    Retention,
    SessionRefused,
    StoredParticipant,
    StoredSection,
)

T = TypeVar("T")

STORE_FILE = "sessions.sqlite3"
MAX_REPORTS = 50
"""Compaction reports kept per participant (oldest erased first)."""

_RECORD_COLUMNS = "id, kind, section, timestamp_us, text, user, assistant, in_view"


class StoreError(OSError):
    """The store's file cannot be opened or written; the text names it."""


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _record(row: sqlite3.Row | tuple[Any, ...]) -> Record:
    rid, kind, section, ts, text, user, assistant, in_view = row
    return Record(kind, section, ts, text, user, assistant, rid, bool(in_view))


class SessionStore:
    """Participants' whole conversations and model views. ``path`` None keeps everything
    in memory (tests, or users who opt out of durability).

    ``keep_history`` False erases records once compacted (only the model's view is
    kept). ``synchronous`` is SQLite's ``FULL`` (default: durable across power cuts) or
    ``NORMAL`` (durable across crashes of the process).
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        keep_history: bool = True,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        clock: Callable[[], int] = now_us,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self.keep_history = keep_history
        self._clock = clock
        self._lock = threading.Lock()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        target = str(self.path) if self.path is not None else ":memory:"
        self._db = sqlite3.connect(target, isolation_level=None, check_same_thread=False)
        try:
            if self.path is not None:
                mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise RuntimeError(f"{self.path}: SQLite refused WAL mode ({mode})")
            if synchronous not in ("FULL", "NORMAL"):
                raise ValueError(f"synchronous must be FULL or NORMAL, not {synchronous!r}")
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.execute("PRAGMA busy_timeout=5000")
            self.schema_version = migrate(self._db)
        except sqlite3.Error as exc:
            self._db.close()
            raise StoreError(
                f"cannot open the sessions store {target}: {exc} (is the data directory "
                "writable, the disk not full?)"
            ) from exc
        except BaseException:
            self._db.close()
            raise

    # -- plumbing -----------------------------------------------------------------------

    @property
    def on_disk(self) -> bool:
        return self.path is not None

    @property
    def connection(self) -> sqlite3.Connection:
        """The connection, for extensions that add their own tables in a migration; hold
        :meth:`transaction` (or :attr:`lock`) around every use."""
        return self._db

    @property
    def lock(self) -> threading.Lock:
        return self._lock

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Call ``fn(*args)`` off the event loop when the store is on disk (writes wait for
        an fsync); in memory it runs inline. Not abandoned on cancellation: the caller
        always learns whether the write happened."""
        if self.path is None:
            return fn(*args)
        return await anyio.to_thread.run_sync(fn, *args)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` ... ``COMMIT`` under the lock; rolled back on error."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            yield self._db

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def size_bytes(self) -> int:
        """The store's size on disk (database, WAL and shared-memory files)."""
        if self.path is None:
            with self._read() as db:
                pages = db.execute("PRAGMA page_count").fetchone()[0]
                return int(pages) * int(db.execute("PRAGMA page_size").fetchone()[0])
        total = 0
        for suffix in ("", "-wal", "-shm"):
            try:
                total += os.path.getsize(f"{self.path}{suffix}")
            except OSError:
                pass
        return total

    def _ensure(self, db: sqlite3.Connection, participant_id: str) -> None:
        now = self._clock()
        db.execute(
            "INSERT INTO participants (id, created_us, last_seen_us) VALUES (?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET last_seen_us = excluded.last_seen_us",
            (participant_id, now, now),
        )

    # -- sessions -----------------------------------------------------------------------

    def claim(self, participant_id: str, resume: str | None) -> tuple[str, bool]:
        """Open a session: a new (or token-less) participant gets a fresh session token;
        an existing one must present its token in ``resume``. Returns ``(token,
        resumed)``; raises :class:`SessionRefused`. Only a SHA-256 of the token is stored."""
        with self.transaction() as db:
            row = db.execute(
                "SELECT token_hash FROM participants WHERE id = ?", (participant_id,)
            ).fetchone()
            stored = row[0] if row is not None else None
            if stored is not None:
                if resume is None or not hmac.compare_digest(stored, token_hash(resume)):
                    raise SessionRefused(
                        f"participant {participant_id!r} already has a session: come back "
                        "with the session token it was given"
                        + (", and that token is not it" if resume is not None else "")
                        + f". Token lost? `edge sessions token {participant_id}` on the "
                        "service's machine issues a new one (the conversation is kept)"
                    )
                self._ensure(db, participant_id)
                return resume, True
            token = secrets.token_urlsafe(24)
            self._ensure(db, participant_id)
            db.execute(
                "UPDATE participants SET token_hash = ? WHERE id = ?",
                (token_hash(token), participant_id),
            )
            return token, row is not None

    def reissue(self, participant_id: str) -> str:
        """A new session token for a stored participant, for one who lost theirs: the old
        token stops working, the conversation is kept. ``KeyError`` when none is stored."""
        token = secrets.token_urlsafe(24)
        with self.transaction() as db:
            changed = db.execute(
                "UPDATE participants SET token_hash = ? WHERE id = ?",
                (token_hash(token), participant_id),
            ).rowcount
        if not changed:
            raise KeyError(f"no stored participant {participant_id!r}")
        return token

    def touch(self, participant_id: str) -> None:
        with self.transaction() as db:
            db.execute(
                "UPDATE participants SET last_seen_us = ? WHERE id = ?",
                (self._clock(), participant_id),
            )

    def session_value(self, participant_id: str, key: str) -> str | None:
        """What :meth:`set_session_value` kept under ``key`` for the participant."""
        with self._read() as db:
            row = db.execute(
                "SELECT value FROM session_state WHERE participant = ? AND key = ?",
                (participant_id, key),
            ).fetchone()
        return row[0] if row is not None else None

    def set_session_value(self, participant_id: str, key: str, value: str | None) -> None:
        """Keep ``value`` under ``key`` with the participant's session (None erases it);
        durable when the call returns, erased with the participant."""
        with self.transaction() as db:
            if value is None:
                db.execute(
                    "DELETE FROM session_state WHERE participant = ? AND key = ?",
                    (participant_id, key),
                )
                return
            self._ensure(db, participant_id)
            db.execute(
                "INSERT INTO session_state (participant, key, value) VALUES (?, ?, ?) "
                "ON CONFLICT (participant, key) DO UPDATE SET value = excluded.value",
                (participant_id, key, value),
            )

    # -- writing ------------------------------------------------------------------------

    def add_record(
        self, participant_id: str, record: Record, keys: Sequence[bytes] = ()
    ) -> Record | None:
        """Record ``record`` with its identities ``keys`` (the first is the one that must
        be new); None when that identity is already known (nothing is written). A
        ``state`` replaces the section's previous state in the model's view."""
        with self.transaction() as db:
            if (
                keys
                and db.execute(
                    "SELECT 1 FROM identities WHERE participant = ? AND key = ?",
                    (participant_id, keys[0]),
                ).fetchone()
            ):
                return None
            self._ensure(db, participant_id)
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
        if self.keep_history:
            db.execute(f"UPDATE records SET in_view = 0 WHERE {where}", args)
        else:
            db.execute(f"DELETE FROM records WHERE {where}", args)

    def set_system(self, participant_id: str, system: str) -> None:
        with self.transaction() as db:
            self._ensure(db, participant_id)
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
        with self.transaction() as db:
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
            (participant_id, section, self._clock(), json.dumps(report, sort_keys=True)),
        )
        db.execute(
            "DELETE FROM compactions WHERE participant = ? AND id NOT IN (SELECT id FROM "
            "compactions WHERE participant = ? ORDER BY id DESC LIMIT ?)",
            (participant_id, participant_id, MAX_REPORTS),
        )

    # -- reading ------------------------------------------------------------------------

    def exists(self, participant_id: str) -> bool:
        with self._read() as db:
            return (
                db.execute("SELECT 1 FROM participants WHERE id = ?", (participant_id,)).fetchone()
                is not None
            )

    def load(self, participant_id: str) -> StoredParticipant | None:
        """The participant's model view, or None when the store has never seen them."""
        with self._read() as db:
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
        with self._read() as db:
            rows = db.execute(
                f"SELECT {_RECORD_COLUMNS} FROM records WHERE participant = ? AND in_view = 1 "
                "AND section = ? ORDER BY timestamp_us, id LIMIT ?",
                (participant_id, section, limit),
            ).fetchall()
        return [_record(r) for r in rows]

    def compactions(self, participant_id: str, limit: int = MAX_REPORTS) -> list[dict[str, Any]]:
        """The newest compaction reports, newest first."""
        with self._read() as db:
            return [r for r in self._reports(db, participant_id, limit) if r is not None]

    def history(
        self, participant_id: str, *, offset: int = 0, limit: int = 100
    ) -> tuple[list[Record], int]:
        """A page of the whole conversation in recorded-time order, and the total count."""
        with self._read() as db:
            total = db.execute(
                "SELECT COUNT(*) FROM records WHERE participant = ?", (participant_id,)
            ).fetchone()[0]
            rows = db.execute(
                f"SELECT {_RECORD_COLUMNS} FROM records WHERE participant = ? "
                "ORDER BY timestamp_us, id LIMIT ? OFFSET ?",
                (participant_id, limit, offset),
            ).fetchall()
        return [_record(r) for r in rows], int(total)

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

    def forget(self, participant_id: str) -> bool:
        """Erase the participant everywhere (records, summaries, identities, reports,
        token); False when there was nothing to erase."""
        with self.transaction() as db:
            cursor = db.execute("DELETE FROM participants WHERE id = ?", (participant_id,))
            return cursor.rowcount > 0

    def enforce(self, retention: Retention, active: Sequence[str] = ()) -> dict[str, int]:
        """Apply ``retention``: erase idle participants (never one in ``active``) and trim
        compacted history by age and size. The model's view is never touched."""
        now = self._clock()
        erased = records = 0
        with self.transaction() as db:
            if retention.idle_expiry_s is not None:
                cutoff = now - int(retention.idle_expiry_s * 1e6)
                idle = [
                    pid
                    for (pid,) in db.execute(
                        "SELECT id FROM participants WHERE last_seen_us < ?", (cutoff,)
                    )
                    if pid not in set(active)
                ]
                for pid in idle:
                    erased += db.execute("DELETE FROM participants WHERE id = ?", (pid,)).rowcount
            if retention.history_age_s is not None:
                cutoff = now - int(retention.history_age_s * 1e6)
                records += db.execute(
                    "DELETE FROM records WHERE in_view = 0 AND timestamp_us < ?", (cutoff,)
                ).rowcount
            if retention.history_bytes is not None:
                records += self._trim_bytes(db, retention.history_bytes)
        return {"participants_erased": erased, "records_erased": records}

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
