"""A notes destination: dictated notes published as conversation context."""

from ._agent import NOTES_TOPIC, NotesAgent
from ._phrases import note_start, split_done

__all__ = ["NOTES_TOPIC", "NotesAgent", "note_start", "split_done"]
