"""Recognizing note dictation: how a note starts, and how the participant ends it."""

from __future__ import annotations

import re

_START = re.compile(
    r"""(?ix)
    \b(?:
        (?:take|make|start|add|write|create|record|open)\s+(?:a\s+|another\s+|the\s+|new\s+)*
            (?:quick\s+)?note(?:s)?\b
      | note\s+(?:that|down|this)\b
      | (?:new|quick)\s+note\b
      | (?:write|jot|put)\s+(?:this|that|it|something)?\s*down\b
      | remember\s+(?:that|this)\b
    )
    [\s:,.;-]*(?:that\b[\s:,]*)?
    """
)

_DONE = re.compile(
    r"""(?ix)
    (?:^\s*|[,.;:!-]\s*)
    (?:
        done | i'?m\s+done | that'?s\s+(?:all|it) | that\s+is\s+(?:all|it)
      | (?:end|finish|finished|stop|close|save)\s+(?:of\s+)?(?:the\s+|my\s+)?note
    )
    [\s.!]*$
    """
)

ROUTE_EXAMPLES = (
    "take a note",
    "make a note",
    "note that",
    "write this down",
    "jot down",
    "remember that",
    "new note",
)
"""Phrases typical of note requests, offered to routing as lexical evidence."""


def note_start(text: str) -> str | None:
    """The dictated content after a note request ("take a note: X" -> "X"), "" when the
    request has no content yet, None when ``text`` is not a note request."""
    match = _START.search(text)
    if match is None:
        return None
    return text[match.end() :].strip()


def split_done(text: str) -> tuple[str, bool]:
    """Split a trailing end-of-dictation phrase off ``text``: ``(content, finished)``.

    The phrase must be the whole utterance or follow punctuation ("Buy milk. Done."), so
    "the run is done" stays dictation."""
    match = _DONE.search(text)
    if match is None:
        return text.strip(), False
    return text[: match.start()].strip(" ,;:-"), True
