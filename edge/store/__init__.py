"""Durable sessions: every participant's whole conversation and the model's view of it.

:class:`SessionStore` is SQLite (stdlib ``sqlite3``), one file in WAL mode under the
service's data directory, or in memory. Per participant it keeps every exchange, topic
update and state ever recorded (the whole conversation), which of them are still in the
model's view, each compacted section's rolling summary, exchange identities (no exchange
is recorded twice), compaction reports and a SHA-256 of the session token. Writes are
durable when the call returns; a compaction is one transaction.

Privacy: :func:`private_dir` makes the data directory private to the service's user (0700,
every file in it 0600); the store creates its files 0600, zeroes what it deletes
(``secure_delete``) and, after erasing (forget, retention), merges the recall index and
checkpoints the WAL, so erased words are in no file's bytes.

Example::

    store = SessionStore(data_dir / STORE_FILE)
    token, resumed = store.claim("alice", resume=None)
    page, total = store.history("alice", offset=0, limit=50)
    text = dumps(export_participant(store, "alice"))
"""

from ._export import EXPORT_FORMAT, dumps, export_participant, import_participant
from ._private import PrivacyError, private_dir
from ._schema import MIGRATIONS, SCHEMA_VERSION, migrate
from ._store import STORE_FILE, SessionStore, StoreError, new_token, token_hash
from ._types import (
    ParticipantInfo,
    Record,
    RecordKind,
    Retention,
    SessionRefused,
    StoredParticipant,
    StoredSection,
)

__all__ = [
    "EXPORT_FORMAT",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "STORE_FILE",
    "ParticipantInfo",
    "PrivacyError",
    "Record",
    "RecordKind",
    "Retention",
    "SessionRefused",
    "SessionStore",
    "StoreError",
    "StoredParticipant",
    "StoredSection",
    "dumps",
    "export_participant",
    "import_participant",
    "migrate",
    "new_token",
    "private_dir",
    "token_hash",
]
