"""The sessions store's database: one SQLite file (WAL mode) or an in-memory database.

Durability: WAL with ``synchronous=FULL`` by default, so a write is on disk (the WAL is
fsynced) when the call that made it returns, and it survives a power cut, not only a
crash of the process (``NORMAL`` survives a crash but may lose the newest writes on a power
cut). Every write is one ``BEGIN IMMEDIATE`` transaction, so after any crash a participant
is as it was before or after it, never half. Calls are synchronous and thread-safe (one
connection behind a lock); async callers run them in a worker thread (:meth:`run`).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio

from edge.runtime import now_us

from ._private import DIR_MODE, private_store_files
from ._schema import migrate
from ._types import (
    Record,
)

T = TypeVar("T")

STORE_FILE = "sessions.sqlite3"
MAX_REPORTS = 50
"""Compaction reports kept per participant (oldest erased first)."""

_RECORD_COLUMNS = "id, kind, section, timestamp_us, text, user, assistant, in_view"


class StoreError(OSError):
    """The store's file cannot be opened or written; the text names it."""


def new_token(nbytes: int = 24) -> str:
    """A random URL-safe token that does not start with "-", so it can follow an option on
    a command line (``edge client --resume TOKEN``) without being read as an option."""
    token = secrets.token_urlsafe(nbytes)
    while token.startswith("-"):
        token = secrets.token_urlsafe(nbytes)
    return token


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _record(row: sqlite3.Row | tuple[Any, ...]) -> Record:
    rid, kind, section, ts, text, user, assistant, in_view = row
    return Record(kind, section, ts, text, user, assistant, rid, bool(in_view))


def _purge_recall_index(db: sqlite3.Connection) -> None:
    """FTS5 marks a deleted row's terms deleted but keeps them in its segments until they
    merge; merging every segment now drops them from the index's pages."""
    db.execute("INSERT INTO recall (recall) VALUES ('optimize')")


class StoreDatabase:
    """The store's one connection: opened and migrated, behind a lock, every write one
    ``BEGIN IMMEDIATE`` transaction. ``path`` None keeps everything in memory.

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
        self.clock = clock
        self._lock = threading.Lock()
        if self.path is not None:
            self.path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            private_store_files(self.path)
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
            self._db.execute("PRAGMA secure_delete=ON")  # erased words are zeroed, not freed
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
    def read(self) -> Iterator[sqlite3.Connection]:
        """The connection under the lock, for reads (no transaction)."""
        with self._lock:
            yield self._db

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def size_bytes(self) -> int:
        """The store's size on disk (database, WAL and shared-memory files)."""
        if self.path is None:
            with self.read() as db:
                pages = db.execute("PRAGMA page_count").fetchone()[0]
                return int(pages) * int(db.execute("PRAGMA page_size").fetchone()[0])
        total = 0
        for suffix in ("", "-wal", "-shm"):
            try:
                total += os.path.getsize(f"{self.path}{suffix}")
            except OSError:
                pass
        return total

    def ensure(self, db: sqlite3.Connection, participant_id: str) -> None:
        now = self.clock()
        db.execute(
            "INSERT INTO participants (id, created_us, last_seen_us) VALUES (?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET last_seen_us = excluded.last_seen_us",
            (participant_id, now, now),
        )
