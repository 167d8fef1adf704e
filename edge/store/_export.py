"""A participant as a versioned JSON document: both views, summaries, topic states,
exchange identities and compaction reports. No configuration travels with it.

:func:`export_participant` and :func:`import_participant` are inverse: importing an export
and exporting again gives the same bytes (:func:`dumps` is canonical: sorted keys, no
volatile fields such as the export time).
"""

from __future__ import annotations

import json
from typing import Any

from ._store import SessionStore

EXPORT_FORMAT = "edge.session/1"
_RECORD_KEYS = ("kind", "section", "timestamp_us", "text", "user", "assistant", "in_view")


def dumps(document: dict[str, Any]) -> str:
    """The canonical text of an export (what files and the protocol carry)."""
    return json.dumps(document, ensure_ascii=False, sort_keys=True, indent=1) + "\n"


def export_participant(store: SessionStore, participant_id: str) -> dict[str, Any]:
    """The participant's document; ``KeyError`` when the store does not know them."""
    with store.lock:
        db = store.connection
        row = db.execute(
            "SELECT created_us, system FROM participants WHERE id = ?", (participant_id,)
        ).fetchone()
        if row is None:
            raise KeyError(f"no stored participant {participant_id!r}")
        records = db.execute(
            "SELECT kind, section, timestamp_us, text, user, assistant, in_view, exchange_key "
            "FROM records WHERE participant = ? ORDER BY id",
            (participant_id,),
        ).fetchall()
        sections = db.execute(
            "SELECT name, summary, span_start, span_end, stalled FROM sections "
            "WHERE participant = ? ORDER BY name",
            (participant_id,),
        ).fetchall()
        identities = db.execute(
            "SELECT key FROM identities WHERE participant = ? ORDER BY key", (participant_id,)
        ).fetchall()
        reports = db.execute(
            "SELECT section, at_us, report FROM compactions WHERE participant = ? ORDER BY id",
            (participant_id,),
        ).fetchall()
    return {
        "format": EXPORT_FORMAT,
        "participant_id": participant_id,
        "created_us": row[0],
        "system": row[1],
        "records": [
            {
                **dict(zip(_RECORD_KEYS, (*r[:6], bool(r[6])), strict=True)),
                "key": bytes(r[7]).hex() if r[7] is not None else None,
            }
            for r in records
        ],
        "sections": {
            name: {
                "summary": summary,
                "span": [start, end] if start is not None else None,
                "stalled": bool(stalled),
            }
            for name, summary, start, end, stalled in sections
        },
        "identities": [bytes(k).hex() for (k,) in identities],
        "compactions": [
            {"section": s, "at_us": at, "report": json.loads(rep)} for s, at, rep in reports
        ],
    }


def _check(document: Any) -> dict[str, Any]:
    if not isinstance(document, dict) or document.get("format") != EXPORT_FORMAT:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise ValueError(f"not an exported session ({EXPORT_FORMAT}); found {found!r}")
    for key, kind in (("records", list), ("sections", dict), ("identities", list)):
        if not isinstance(document.get(key), kind):
            raise ValueError(f"exported session: {key!r} must be a JSON {kind.__name__}")
    return document


def import_participant(
    store: SessionStore,
    document: Any,
    participant_id: str | None = None,
    *,
    replace: bool = False,
) -> str:
    """Store ``document`` under ``participant_id`` (default: the id it was exported
    under), in one transaction. An existing participant is refused unless ``replace``
    (then its conversation is replaced and its session token kept). Returns the id."""
    doc = _check(document)
    pid = participant_id or doc.get("participant_id")
    if not isinstance(pid, str) or not pid:
        raise ValueError("exported session has no participant_id; name one to import it as")
    try:
        with store.transaction() as db:
            row = db.execute("SELECT token_hash FROM participants WHERE id = ?", (pid,)).fetchone()
            if row is not None and not replace:
                raise ValueError(f"participant {pid!r} exists; import under another id")
            db.execute("DELETE FROM participants WHERE id = ?", (pid,))
            created = int(doc.get("created_us") or 0)
            db.execute(
                "INSERT INTO participants (id, token_hash, created_us, last_seen_us, system) "
                "VALUES (?, ?, ?, ?, ?)",
                (pid, row[0] if row else None, created, created, doc.get("system")),
            )
            _insert(db, pid, doc)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"exported session is malformed: {exc!r}") from exc
    store.touch(pid)
    return pid


def _insert(db: Any, pid: str, doc: dict[str, Any]) -> None:
    db.executemany(
        "INSERT INTO records (participant, kind, section, timestamp_us, text, user, "
        "assistant, in_view, exchange_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                pid,
                *(r[k] for k in _RECORD_KEYS[:6]),
                int(bool(r["in_view"])),
                bytes.fromhex(r["key"]) if r.get("key") else None,
            )
            for r in doc["records"]
        ],
    )
    db.executemany(
        "INSERT INTO sections (participant, name, summary, span_start, span_end, stalled) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [
            (pid, name, s["summary"], *(s["span"] or (None, None)), int(bool(s["stalled"])))
            for name, s in doc["sections"].items()
        ],
    )
    db.executemany(
        "INSERT INTO identities (participant, key) VALUES (?, ?)",
        [(pid, bytes.fromhex(k)) for k in doc["identities"]],
    )
    db.executemany(
        "INSERT INTO compactions (participant, section, at_us, report) VALUES (?, ?, ?, ?)",
        [
            (pid, c["section"], c["at_us"], json.dumps(c["report"], sort_keys=True))
            for c in doc.get("compactions", [])
        ],
    )
