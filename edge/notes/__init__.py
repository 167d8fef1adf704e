"""A notes destination: dictated notes published as conversation context."""

from ._agent import NOTES_TOPIC, NotesAgent
from ._drafts import DraftKeeper, StoredDrafts
from ._phrases import note_start, split_done

__all__ = ["NOTES_TOPIC", "DraftKeeper", "NotesAgent", "StoredDrafts", "note_start", "split_done"]
