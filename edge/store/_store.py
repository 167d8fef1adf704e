"""The SQLite sessions store: one file (WAL mode) or an in-memory database.

Durability: WAL with ``synchronous=FULL`` by default, so a write is on disk (the WAL is
fsynced) when the call that made it returns, and it survives a power cut, not only a
crash of the process (``NORMAL`` survives a crash but may lose the newest writes on a power
cut). Every write is one ``BEGIN IMMEDIATE`` transaction, so after any crash a participant
is as it was before or after it, never half. Calls are synchronous and thread-safe (one
connection behind a lock); async callers run them in a worker thread (:meth:`run`).
The class is put together from parts with one job each: the connection
(:mod:`._database`), sessions (:mod:`._tokens`), records (:mod:`._records`) and erasing
(:mod:`._retention`).
"""

from __future__ import annotations

from ._database import STORE_FILE, StoreError, new_token, token_hash
from ._records import StoreRecords
from ._retention import StoreRetention
from ._tokens import SessionTokens

__all__ = ["STORE_FILE", "SessionStore", "StoreError", "new_token", "token_hash"]


class SessionStore(SessionTokens, StoreRecords, StoreRetention):
    """Participants' whole conversations and model views. ``path`` None keeps everything
    in memory (tests, or users who opt out of durability).

    ``keep_history`` False erases records once compacted (only the model's view is
    kept). ``synchronous`` is SQLite's ``FULL`` (default: durable across power cuts) or
    ``NORMAL`` (durable across crashes of the process).
    """
