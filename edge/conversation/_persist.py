"""Saving and restoring a manager's context as JSON (a snapshot, not a database)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ._context import Entry, ParticipantContext, TranscriptEntry
from ._render import Renderer
from ._text import clip_middle

log = logging.getLogger(__name__)

FORMAT = "edge.conversation.context/1"


def _participant(part: ParticipantContext) -> dict[str, Any]:
    return {
        "system": part.system,
        "identities": sorted(i.hex() for i in part.identities),
        "transcript": None if part.transcript is None else [asdict(t) for t in part.transcript],
        "sections": {
            s.name: {
                "kind": s.kind,
                "summary": s.summary,
                "span": list(s.span) if s.span else None,
                "stalled": s.stalled,
                "entries": [
                    {
                        "timestamp_us": e.timestamp_us,
                        "text": e.text,
                        "user": e.user,
                        "assistant": e.assistant,
                    }
                    for e in s.entries
                ],
            }
            for s in part.sections.values()
        },
    }


def save(path: Path, participants: Iterable[ParticipantContext]) -> None:
    data = {
        "format": FORMAT,
        "participants": {p.participant_id: _participant(p) for p in participants},
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1), "utf-8")
    os.replace(tmp, path)


def read(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read saved context {path}: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a saved context ({FORMAT})")
    participants = data.get("participants")
    if not isinstance(participants, dict):
        raise ValueError(f"{path}: 'participants' must be an object")
    return participants


def restore(
    part: ParticipantContext, saved: dict[str, Any], renderer: Renderer, seq: Iterator[int]
) -> None:
    """Fill a fresh participant from ``saved``; the receiving manager's sections apply."""
    try:
        part.system = saved.get("system")
        part.identities = {bytes.fromhex(i) for i in saved.get("identities", ())}
        if part.transcript is not None and saved.get("transcript"):
            part.transcript = [TranscriptEntry(**t) for t in saved["transcript"]]
        for name, sec in saved.get("sections", {}).items():
            section = part.sections.get(name)
            if section is None or section.kind != sec.get("kind"):
                log.warning(
                    "saved context section %r of %r is not configured here; dropped",
                    name,
                    part.participant_id,
                )
                continue
            section.summary = clip_middle(sec.get("summary") or "", section.summary_limit)
            section.span = tuple(sec["span"]) if sec.get("span") else None  # type: ignore[assignment]
            for e in sec.get("entries", ()):
                ts = int(e["timestamp_us"])
                if section.kind == "dialogue":
                    rendered = renderer.exchange(ts, e["user"], e["assistant"])
                elif section.kind == "summary":
                    rendered = renderer.state(name, ts, e["text"])
                else:
                    rendered = renderer.update(name, ts, e["text"])
                section.add(
                    Entry(
                        next(seq),
                        ts,
                        rendered,
                        e.get("text", ""),
                        e.get("user", ""),
                        e.get("assistant", ""),
                    )
                )
            section.stalled = bool(sec.get("stalled", False))
            part.warm_pending |= bool(section.summary)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"saved context of {part.participant_id!r} is malformed: {exc}") from exc
