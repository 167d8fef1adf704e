"""Between the in-memory context and the durable store (:mod:`edge.store`).

The store is the truth: every write goes there first and the in-memory
:class:`ParticipantContext` is a cache of the model's view, rebuilt by :func:`restore`
when a participant is used again (after a reconnect, a restart, an import). The receiving
manager's configuration applies: sections it does not configure stay in the stored history
but are not in the model's view.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from edge.store import (
    Record,
    SessionStore,
    StoredParticipant,
    StoredSection,
    dumps,
    export_participant,
    import_participant,
)

from ._compaction import CompactionAttempt, CompactionReport
from ._context import Entry, ParticipantContext, Section, TranscriptEntry
from ._render import Renderer
from ._text import clip_middle, nbytes

log = logging.getLogger(__name__)

FORMAT = "edge.conversation.context/2"


def rendered(section: Section, record: Record, renderer: Renderer) -> Entry:
    """The in-memory entry of a stored record (a state is clipped to its budget)."""
    ts = record.timestamp_us
    if section.kind == "dialogue":
        text = renderer.exchange(ts, record.user, record.assistant)
        return Entry(record.id, ts, text, user=record.user, assistant=record.assistant)
    if section.kind == "summary":
        clipped = clip_state(section, record.text, ts, renderer)
        return Entry(record.id, ts, renderer.state(section.name, ts, clipped), text=clipped)
    return Entry(record.id, ts, renderer.update(section.name, ts, record.text), text=record.text)


def clip_state(section: Section, text: str, timestamp_us: int, renderer: Renderer) -> str:
    room = section.budget - nbytes(renderer.state(section.name, timestamp_us, ""))
    return clip_middle(text, max(room, 0))


def report_from(data: dict[str, Any] | None) -> CompactionReport | None:
    if data is None:
        return None
    try:
        attempts = [CompactionAttempt(**a) for a in data.get("attempts", ())]
        return CompactionReport(**{**data, "attempts": attempts})
    except TypeError:  # a report written by another version: not worth failing a load
        log.warning("stored compaction report not understood; ignored")
        return None


def report_data(report: CompactionReport) -> dict[str, Any]:
    return asdict(report)


def restore(part: ParticipantContext, stored: StoredParticipant, renderer: Renderer) -> None:
    """Fill a fresh participant from the store; unconfigured sections are left out."""
    part.system = stored.system
    part.identities = set(stored.identities)
    part.last_compaction = report_from(stored.last_compaction)
    skipped: set[str] = set()
    for name, saved in stored.sections.items():
        section = part.sections.get(name)
        if section is None or section.kind == "summary":
            skipped.add(name)
            continue
        section.summary = clip_middle(saved.summary, section.summary_limit)
        section.span = saved.span
        section.stalled = saved.stalled
    for record in stored.view:
        section = part.sections.get(record.section)
        if section is None:
            skipped.add(record.section)
            continue
        section.add(rendered(section, record, renderer))
    for name, saved in stored.sections.items():  # add() un-stalls; keep the stored state
        if name in part.sections:
            part.sections[name].stalled = saved.stalled
    if skipped:
        log.warning(
            "stored sections %s of %r are not configured here: kept in the history, left "
            "out of the model's view",
            sorted(skipped),
            part.participant_id,
        )


def section_state(section: Section) -> StoredSection:
    return StoredSection(section.summary, section.span, section.stalled)


def transcript_entry(record: Record) -> TranscriptEntry:
    return TranscriptEntry(
        record.kind, record.section, record.timestamp_us, record.text, record.user, record.assistant
    )


def save(path: Path, store: SessionStore, participant_ids: list[str]) -> None:
    """Every named participant's export in one JSON file (written atomically)."""
    data = {
        "format": FORMAT,
        "participants": {pid: export_participant(store, pid) for pid in participant_ids},
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(dumps(data), "utf-8")
    os.replace(tmp, path)


def load(path: Path, store: SessionStore) -> list[str]:
    """Import every participant of a :func:`save` file, replacing stored ones."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read saved context {path}: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a saved context ({FORMAT})")
    participants = data.get("participants")
    if not isinstance(participants, dict):
        raise ValueError(f"{path}: 'participants' must be an object")
    return [import_participant(store, doc, pid, replace=True) for pid, doc in participants.items()]
