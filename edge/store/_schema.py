"""The store's schema and its migrations (``PRAGMA user_version`` is the schema version).

Each migration moves the database from version ``n`` to ``n + 1`` in one transaction and is
never edited once released: a later change is a new migration appended to
:data:`MIGRATIONS`. Another package extending the store (for example a full-text index of
the whole-conversation table ``records``) appends its own.
"""

from __future__ import annotations

import sqlite3

V1 = """
-- participants, the whole conversation, summaries and exchange identities
        CREATE TABLE participants (
            id TEXT PRIMARY KEY,
            token_hash TEXT,
            created_us INTEGER NOT NULL,
            last_seen_us INTEGER NOT NULL,
            system TEXT
        );
        CREATE TABLE records (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            participant TEXT NOT NULL REFERENCES participants(id) ON DELETE CASCADE,
            kind TEXT NOT NULL CHECK (kind IN ('exchange', 'update', 'state')),
            section TEXT NOT NULL,
            timestamp_us INTEGER NOT NULL,
            text TEXT NOT NULL DEFAULT '',
            user TEXT NOT NULL DEFAULT '',
            assistant TEXT NOT NULL DEFAULT '',
            exchange_key BLOB,
            in_view INTEGER NOT NULL DEFAULT 1,
            UNIQUE (participant, exchange_key)
        );
        CREATE TABLE sections (
            participant TEXT NOT NULL REFERENCES participants(id) ON DELETE CASCADE,
            name TEXT NOT NULL,
            summary TEXT NOT NULL DEFAULT '',
            span_start INTEGER,
            span_end INTEGER,
            stalled INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (participant, name)
        ) WITHOUT ROWID;
        CREATE TABLE identities (
            participant TEXT NOT NULL REFERENCES participants(id) ON DELETE CASCADE,
            key BLOB NOT NULL,
            PRIMARY KEY (participant, key)
        ) WITHOUT ROWID;
"""

V2 = """
-- compaction reports, and an index for loading the model's view
        CREATE TABLE compactions (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            participant TEXT NOT NULL REFERENCES participants(id) ON DELETE CASCADE,
            section TEXT NOT NULL,
            at_us INTEGER NOT NULL,
            report TEXT NOT NULL
        );
        CREATE INDEX compactions_participant ON compactions (participant, id);
        CREATE INDEX records_view ON records (participant, in_view, timestamp_us, id);
"""

V3 = """
-- full-text recall over the participant's statements (edge.conversation's recall): what
-- they said in each exchange and each topic update; kept in step with ``records`` by
-- triggers, so a statement is indexed in the transaction that records it and leaves the
-- index with its record (forget, retention)
        CREATE VIRTUAL TABLE recall USING fts5(
            body, tokenize = 'porter unicode61 remove_diacritics 2'
        );
        CREATE TRIGGER recall_add AFTER INSERT ON records
        WHEN new.kind IN ('exchange', 'update') BEGIN
            INSERT INTO recall (rowid, body)
            VALUES (new.id, CASE new.kind WHEN 'exchange' THEN new.user ELSE new.text END);
        END;
        CREATE TRIGGER recall_drop AFTER DELETE ON records BEGIN
            DELETE FROM recall WHERE rowid = old.id;
        END;
        INSERT INTO recall (rowid, body)
        SELECT id, CASE kind WHEN 'exchange' THEN user ELSE text END
        FROM records WHERE kind IN ('exchange', 'update');
"""

V4 = """
-- a participant's records newest first without a sort (recall's block chosen ahead reads
-- the newest statements before every warm)
        CREATE INDEX records_participant ON records (participant, id);
"""

V5 = """
-- recall's index keeps each statement's owner (a token made of the participant id), so a
-- search ranks only that participant's statements, not every participant's matches
-- (10 participants of 5,000 statements each: about 4 ms a search instead of 30-40 ms)
        DROP TRIGGER recall_add;
        DROP TRIGGER recall_drop;
        DROP TABLE recall;
        CREATE VIRTUAL TABLE recall USING fts5(
            body, owner, tokenize = 'porter unicode61 remove_diacritics 2'
        );
        CREATE TRIGGER recall_add AFTER INSERT ON records
        WHEN new.kind IN ('exchange', 'update') BEGIN
            INSERT INTO recall (rowid, body, owner)
            VALUES (
                new.id,
                CASE new.kind WHEN 'exchange' THEN new.user ELSE new.text END,
                'p' || hex(substr(new.participant, 1, 48))
            );
        END;
        CREATE TRIGGER recall_drop AFTER DELETE ON records BEGIN
            DELETE FROM recall WHERE rowid = old.id;
        END;
        INSERT INTO recall (rowid, body, owner)
        SELECT id, CASE kind WHEN 'exchange' THEN user ELSE text END,
            'p' || hex(substr(participant, 1, 48))
        FROM records WHERE kind IN ('exchange', 'update');
"""

V6 = """
-- what a participant was doing, kept with their session so a reconnect carries it on
-- (a note being dictated): small JSON values by key, erased with the participant
        CREATE TABLE session_state (
            participant TEXT NOT NULL REFERENCES participants(id) ON DELETE CASCADE,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            PRIMARY KEY (participant, key)
        ) WITHOUT ROWID;
"""

V7 = """
-- participants erased by another process (`edge sessions forget`) that a running service
-- may still hold in memory: the hash of the id only, removed once the service erased them
        CREATE TABLE forgotten (
            hash TEXT PRIMARY KEY,
            at_us INTEGER NOT NULL
        ) WITHOUT ROWID;
"""

MIGRATIONS: list[str] = [V1, V2, V3, V4, V5, V6, V7]
"""SQL scripts; ``MIGRATIONS[n]`` moves a database from version ``n`` to ``n + 1``."""
SCHEMA_VERSION = len(MIGRATIONS)


def version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def migrate(db: sqlite3.Connection, migrations: list[str] | None = None) -> int:
    """Apply the migrations the database lacks, each in its own transaction; returns the
    version reached. A database newer than this code is refused (never downgraded)."""
    steps = MIGRATIONS if migrations is None else migrations
    current = version(db)
    if current > len(steps):
        raise RuntimeError(
            f"the sessions store has schema version {current}; this version of edge "
            f"knows up to {len(steps)}: upgrade edge to open it"
        )
    for number in range(current, len(steps)):
        script = f"BEGIN IMMEDIATE;\n{steps[number]}\nPRAGMA user_version = {number + 1};\nCOMMIT;"
        try:  # one transaction per step: a crash or an error leaves the previous version
            db.executescript(script)
        except BaseException:
            if db.in_transaction:
                db.rollback()
            raise
    return len(steps)
