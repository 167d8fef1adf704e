"""A notes destination: dictated notes published as conversation context."""

from ._agent import NOTES_TOPIC, NotesAgent
from ._drafts import DraftKeeper, StoredDrafts, kept_draft
from ._phrases import note_start, split_done

__all__ = [
    "NOTES_TOPIC",
    "DraftKeeper",
    "NotesAgent",
    "StoredDrafts",
    "kept_draft",
    "note_start",
    "split_done",
]
