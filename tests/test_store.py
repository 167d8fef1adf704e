"""The sessions store: atomic writes, no duplicates, migrations, tokens, export/import,
retention (``edge.store``)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from edge.store import (
    MIGRATIONS,
    SCHEMA_VERSION,
    Record,
    Retention,
    SessionRefused,
    SessionStore,
    StoredSection,
    dumps,
    export_participant,
    import_participant,
    migrate,
)

SECOND = 1_000_000


def exchange(ts: int, n: int) -> Record:
    return Record("exchange", "dialogue", ts, user=f"question {n}", assistant=f"answer {n}")


def filled(store: SessionStore, pid: str = "alice", n: int = 5) -> list[Record]:
    out = []
    for i in range(n):
        rec = store.add_record(pid, exchange(i * SECOND, i), [f"{pid}-{i}".encode()])
        assert rec is not None
        out.append(rec)
    return out


def test_an_exchange_is_never_recorded_twice(tmp_path) -> None:
    store = SessionStore(tmp_path / "s.sqlite3")
    first = store.add_record("alice", exchange(1, 1), [b"id-1", b"content-1"])
    assert first is not None and first.id > 0
    assert store.add_record("alice", exchange(1, 1), [b"id-1"]) is None
    assert store.add_record("bob", exchange(1, 1), [b"id-1"]) is not None  # per participant
    with pytest.raises(sqlite3.IntegrityError):  # the schema itself refuses a second copy
        with store.transaction() as db:
            db.execute(
                "INSERT INTO records (participant, kind, section, timestamp_us, exchange_key) "
                "VALUES ('alice', 'exchange', 'dialogue', 1, ?)",
                (b"id-1",),
            )
    assert store.history("alice")[1] == 1


def test_writes_are_durable_across_reopening(tmp_path) -> None:
    path = tmp_path / "s.sqlite3"
    store = SessionStore(path)
    records = filled(store)
    store.apply_compaction(
        "alice",
        "dialogue",
        StoredSection("Earlier.", (0, 2 * SECOND)),
        [r.id for r in records[:3]],
        {"ok": True},
    )
    store.close()  # nothing is flushed at close: every call committed already
    again = SessionStore(path)
    loaded = again.load("alice")
    assert loaded is not None
    assert [r.user for r in loaded.view] == ["question 3", "question 4"]
    assert loaded.sections["dialogue"].summary == "Earlier."
    assert loaded.last_compaction == {"ok": True}
    assert again.history("alice")[1] == 5
    mode = again.connection.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_a_compaction_is_all_or_nothing() -> None:
    store = SessionStore()
    records = filled(store)
    with pytest.raises(TypeError):  # the report cannot be written: nothing of it is
        store.apply_compaction(
            "alice",
            "dialogue",
            StoredSection("S.", (0, SECOND)),
            [records[0].id],
            {"bad": object()},
        )
    loaded = store.load("alice")
    assert loaded is not None and len(loaded.view) == 5 and "dialogue" not in loaded.sections


def test_a_state_replaces_the_previous_one_in_the_view_only() -> None:
    store = SessionStore()
    for i, text in enumerate(["red door", "blue door"]):
        store.add_record("alice", Record("state", "scene", i, text=text))
    loaded = store.load("alice")
    assert loaded is not None and [r.text for r in loaded.view] == ["blue door"]
    assert [r.text for r in store.history("alice")[0]] == ["red door", "blue door"]


def test_migrations_from_every_older_version_keep_the_data(tmp_path) -> None:
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    assert migrate(db, MIGRATIONS[:1]) == 1  # a store written by schema version 1
    db.execute("INSERT INTO participants (id, created_us, last_seen_us) VALUES ('a', 1, 1)")
    db.execute(
        "INSERT INTO records (participant, kind, section, timestamp_us, user, assistant) "
        "VALUES ('a', 'exchange', 'dialogue', 5, 'hi', 'hello')"
    )
    db.close()
    store = SessionStore(path)
    assert store.schema_version == SCHEMA_VERSION >= 2
    assert [r.user for r in store.history("a")[0]] == ["hi"]
    store.apply_compaction("a", "dialogue", StoredSection("S.", (5, 5)), [], {"ok": False})
    assert store.compactions("a") == [{"ok": False}]


def test_a_newer_store_is_refused_and_a_failed_migration_rolls_back(tmp_path) -> None:
    path = tmp_path / "new.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(RuntimeError, match="upgrade edge"):
        SessionStore(path)
    db = sqlite3.connect(tmp_path / "broken.sqlite3", isolation_level=None)
    with pytest.raises(sqlite3.OperationalError):
        migrate(db, [*MIGRATIONS, "CREATE TABLE x (a); THIS IS NOT SQL;"])
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert not db.execute("SELECT name FROM sqlite_master WHERE name = 'x'").fetchall()


def test_session_tokens_are_checked_and_only_their_hash_is_stored() -> None:
    store = SessionStore()
    token, resumed = store.claim("alice", None)
    assert not resumed and len(token) >= 24
    with pytest.raises(SessionRefused, match="come back with the session token it was given"):
        store.claim("alice", None)
    with pytest.raises(SessionRefused, match="not it"):
        store.claim("alice", "wrong")
    assert store.claim("alice", token) == (token, True)
    stored = store.connection.execute("SELECT token_hash FROM participants").fetchone()[0]
    assert token not in stored and len(stored) == 64


def test_forget_erases_everything() -> None:
    store = SessionStore()
    filled(store)
    store.apply_compaction("alice", "dialogue", StoredSection("S.", (0, 1)), [1], {"ok": True})
    filled(store, "bob", 1)
    store.set_session_value("alice", "notes.draft", '["a draft"]')
    assert store.session_value("alice", "notes.draft") == '["a draft"]'
    assert store.forget("alice") and not store.forget("alice")
    tables = ("records", "sections", "identities", "compactions", "session_state")
    for table in (*tables, "participants"):
        column = "id" if table == "participants" else "participant"
        query = f"SELECT COUNT(*) FROM {table} WHERE {column} = 'alice'"
        rows = store.connection.execute(query).fetchone()[0]
        assert rows == 0, table
    assert store.load("bob") is not None


def test_export_import_round_trips_byte_for_byte(tmp_path) -> None:
    store = SessionStore(tmp_path / "a.sqlite3")
    records = filled(store)
    store.add_record("alice", Record("state", "scene", 7, text="A bench. Ünïcode ✓"))
    store.set_system("alice", "SYSTEM")
    store.apply_compaction(
        "alice", "dialogue", StoredSection("S.", (0, SECOND)), [records[0].id], {"ok": True}
    )
    text = dumps(export_participant(store, "alice"))
    other = SessionStore(tmp_path / "b.sqlite3")  # another device
    import_participant(other, json.loads(text))
    assert dumps(export_participant(other, "alice")) == text
    import_participant(other, json.loads(text), "alice-copy")
    copy = other.load("alice-copy")
    assert copy is not None and [r.user for r in copy.view if r.kind == "exchange"] == [
        r.user for r in records[1:]
    ]
    with pytest.raises(ValueError, match="exists"):
        import_participant(other, json.loads(text))
    with pytest.raises(ValueError, match="not an exported session"):
        import_participant(other, {"format": "something else"})


def test_retention_trims_history_and_idle_participants_never_the_view() -> None:
    now = [100 * SECOND]
    store = SessionStore(clock=lambda: now[0])
    records = filled(store, "alice", 10)
    store.apply_compaction(
        "alice",
        "dialogue",
        StoredSection("S.", (0, 7 * SECOND)),
        [r.id for r in records[:8]],
        None,
    )
    filled(store, "idle", 1)
    now[0] += 3600 * SECOND
    store.touch("alice")
    result = store.enforce(Retention(history_bytes=40, idle_expiry_s=600), active=[])
    assert result["participants_erased"] == 1 and not store.exists("idle")
    history = [r.user for r in store.history("alice")[0]]
    assert history[-2:] == ["question 8", "question 9"]  # the view: untouched
    assert len(history) < 10
    store.enforce(Retention(history_age_s=1), active=["alice"])
    assert [r.user for r in store.history("alice")[0]] == ["question 8", "question 9"]
    filled(store, "busy", 1)
    now[0] += 3600 * SECOND
    store.enforce(Retention(idle_expiry_s=600), active=["busy"])
    assert store.exists("busy") and not store.exists("alice")


def test_participants_the_service_named_have_a_default_retention() -> None:
    """Every one-off `edge client --text` (no --participant) is a participant whose id the
    service assigned; they are erased after `session_assigned_idle_days` (7 by default)
    of not being seen, named participants only when `session_idle_days` says so."""
    from edge.server import ServiceSettings
    from edge.server._protocol import new_participant_id

    assert ServiceSettings().session_assigned_idle_days == 7
    now = [100 * SECOND]
    store = SessionStore(clock=lambda: now[0])
    one_off, wyoming, busy = new_participant_id(), "wyoming:anon-0123456789ab", "p-00aa00aa00aa"
    for pid in ("alice", one_off, wyoming, busy, "p-named-by-hand"):
        filled(store, pid, 1)
    now[0] += 8 * 86_400 * SECOND
    week = Retention(assigned_idle_expiry_s=7 * 86_400)
    assert store.enforce(week, active=[busy])["participants_erased"] == 2
    assert not store.exists(one_off) and not store.exists(wyoming)
    assert all(store.exists(p) for p in ("alice", busy, "p-named-by-hand"))


def test_a_compaction_never_brings_back_an_erased_participant() -> None:
    store = SessionStore()
    records = filled(store)
    store.forget("alice")
    store.apply_compaction("alice", "dialogue", StoredSection("S.", (0, 1)), [records[0].id], {})
    assert not store.exists("alice") and store.load("alice") is None


def _bytes_of_every_file(directory) -> bytes:  # type: ignore[no-untyped-def]
    return b"".join(p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file())


def test_forget_leaves_the_words_in_no_file_on_disk(tmp_path) -> None:
    store = SessionStore(tmp_path / "s.sqlite3")
    secret = "zanzibar periwinkle"
    for i in range(30):  # several pages, the recall index's segments and the WAL
        store.add_record(
            "alice",
            Record("exchange", "dialogue", i, user=f"{secret} {i} " * 20, assistant="ok"),
            [f"a{i}".encode()],
        )
    filled(store, "bob", 3)
    assert b"periwinkle" in _bytes_of_every_file(tmp_path)
    assert store.forget("alice")
    on_disk = _bytes_of_every_file(tmp_path)
    assert b"periwinkle" not in on_disk and b"zanzibar" not in on_disk
    assert b"question 2" in on_disk  # bob is still there
    store.close()
    reopened = SessionStore(tmp_path / "s.sqlite3")
    assert not reopened.exists("alice") and reopened.history("bob")[1] == 3


def test_retention_leaves_the_erased_words_in_no_file(tmp_path) -> None:
    store = SessionStore(tmp_path / "s.sqlite3", clock=lambda: 100 * 86_400 * SECOND)
    store.add_record("old", Record("exchange", "dialogue", 1, user="quetzal " * 50, assistant="a"))
    store.add_record("new", Record("exchange", "dialogue", 2, user="kept words", assistant="a"))
    store.connection.execute("UPDATE participants SET last_seen_us = 0 WHERE id = 'old'")
    assert store.enforce(Retention(idle_expiry_s=86_400), active=["new"])["participants_erased"]
    assert b"quetzal" not in _bytes_of_every_file(tmp_path)


def test_the_store_files_are_private_to_the_user(tmp_path) -> None:
    import os
    import stat

    old = os.umask(0o022)
    try:
        path = tmp_path / "data" / "s.sqlite3"
        store = SessionStore(path)
        filled(store)
        store.close()
        loose = tmp_path / "loose.sqlite3"  # a store left readable by an older version
        loose.touch(mode=0o644)
        os.chmod(loose, 0o644)
        SessionStore(loose).close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    files = [*path.parent.iterdir(), loose]
    assert {p.name for p in files} >= {"s.sqlite3", "loose.sqlite3"}
    for p in files:
        if p.name.endswith(("sqlite3", "-wal", "-shm")):
            assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
