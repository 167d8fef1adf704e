"""Keeping a note being dictated with the participant's session, line by line."""

from __future__ import annotations

import json
from typing import Protocol

from edge.store import SessionStore

DRAFT_KEY = "notes.draft"


class DraftKeeper(Protocol):
    """Where a participant's note draft is kept while it is dictated."""

    async def load(self, participant_id: str) -> list[str] | None: ...

    async def save(self, participant_id: str, parts: list[str] | None) -> None:
        """Keep ``parts`` (the lines dictated so far); None: no note is being dictated."""


def kept_draft(store: SessionStore, participant_id: str) -> list[str] | None:
    """The lines of the participant's note being dictated (None: none is); blocking."""
    value = store.session_value(participant_id, DRAFT_KEY)
    if value is None:
        return None
    parts = json.loads(value)
    return [str(p) for p in parts] if isinstance(parts, list) else None


class StoredDrafts:
    """Drafts in the sessions store: each dictated line is durable before it is
    acknowledged, survives a dropped link and a restart, and is erased with the
    participant (``forget``, retention)."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store

    async def load(self, participant_id: str) -> list[str] | None:
        return await self.store.run(kept_draft, self.store, participant_id)

    async def save(self, participant_id: str, parts: list[str] | None) -> None:
        value = None if parts is None else json.dumps(parts, ensure_ascii=False)
        await self.store.run(self.store.set_session_value, participant_id, DRAFT_KEY, value)
