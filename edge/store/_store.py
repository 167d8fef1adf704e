"""The SQLite sessions store: one file (WAL mode) or an in-memory database.

Durability: WAL with ``synchronous=FULL`` by default, so a write is on disk (the WAL is
fsynced) when the call that made it returns, and it survives a power cut, not only a
crash of the process (``NORMAL`` survives a crash but may lose the newest writes on a power
cut). Every write is one ``BEGIN IMMEDIATE`` transaction, so after any crash a participant
is as it was before or after it, never half. Calls are synchronous and thread-safe (one
connection behind a lock); async callers run them in a worker thread (:meth:`run`).

:class:`SessionStore` is one database (:mod:`._database`) held by three parts with one job
each, none knowing another: sessions (:mod:`._tokens`), records (:mod:`._records`) and
erasing (:mod:`._retention`). A caller may hold the part it uses
(``store.records``); the store's own methods are those parts' methods.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from edge.runtime import now_us

from ._database import STORE_FILE, StoreDatabase, StoreError, new_token, token_hash
from ._records import StoreRecords
from ._retention import StoreRetention
from ._tokens import SessionTokens

__all__ = ["STORE_FILE", "SessionStore", "StoreError", "new_token", "token_hash"]


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
        self.database = db = StoreDatabase(
            path, keep_history=keep_history, synchronous=synchronous, clock=clock
        )
        self.tokens = tokens = SessionTokens(db)
        self.records = records = StoreRecords(db)
        self.retention = retention = StoreRetention(db)
        self.path, self.keep_history, self.schema_version = db.path, keep_history, db.schema_version
        self.on_disk, self.connection, self.lock = db.on_disk, db.connection, db.lock
        self.run, self.transaction, self.close = db.run, db.transaction, db.close
        self.size_bytes = db.size_bytes
        self.claim, self.reissue, self.touch = tokens.claim, tokens.reissue, tokens.touch
        self.session_value, self.set_session_value = tokens.session_value, tokens.set_session_value
        self.add_record, self.set_system = records.add_record, records.set_system
        self.apply_compaction, self.exists, self.load = (
            records.apply_compaction,
            records.exists,
            records.load,
        )
        self.view_records, self.compactions = records.view_records, records.compactions
        self.history = records.history
        self.participants, self.forget = retention.participants, retention.forget
        self.forgotten, self.handled_forgotten = retention.forgotten, retention.handled_forgotten
        self.scrub, self.enforce = retention.scrub, retention.enforce
