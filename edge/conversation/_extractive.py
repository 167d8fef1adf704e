"""The summary check and the deterministic extractive summary that replaces a bad one.

A small model's summary often drops the participant's numbers and names, makes up a
statement nobody made, or fails outright (echo, cut off). :func:`summary_gaps` finds what
a summary lacks or invents; when anything is wrong, :func:`extractive_summary` writes one
from the participant's own statements, verbatim, most important first within the limit,
so nothing they said depends on the model's summarising skill. The assistant's replies
are left out: they are the first thing to shorten.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from edge.recall import (
    importance,
    invented_details,
    invented_words,
    is_request,
    key_details,
    missing_details,
    repairs,
    supersedes,
)

from ._context import Entry
from ._text import clip_middle, nbytes

PREFIX = "The user said:"
TOPIC_PREFIX = "Recorded:"
NOTHING = "The user only asked questions."
"""The extractive summary of dialogue in which the participant stated nothing."""
_QUOTED = re.compile(r'"([^"]+)"')
_SENTENCES = re.compile(r"(?<=[.!?])[\"']?\s+")
_LABEL = re.compile(r"^\s*(?:(?:the\s+)?user(?:\s+said)?|assistant)\s*:\s*", re.IGNORECASE)
"""A speaker label a model-written summary sometimes starts a sentence with (``User: "..."``)."""
_TRANSCRIPT = re.compile(r"(?im)^\s*(?:\[\d{1,2}:\d{2}\]\s*)?(?:user|assistant)\s*:")
"""A dialogue line as the model was shown it: a summary that has one copied the transcript
(``User: ... Assistant: ...``) instead of summarising it, and shows the answering model a
transcript to continue. (A topic update's line, ``[14:02] notes: ...``, copied whole is a
faithful record, and passes.)"""


def statements(entries: Sequence[Entry]) -> list[str]:
    """The participant's own words in ``entries``: what they stated in an exchange (not
    what they asked for, see :func:`~edge.recall.is_request`), or the text
    of a topic update (a note, an observation)."""
    out = []
    for e in entries:
        said = bool(e.user or e.assistant)
        text = (e.user if said else e.text).strip()
        if text and not (said and is_request(text)):
            out.append(text)
    return out


def previous_items(summary: str) -> list[str]:
    """A previous summary as items: the quoted statements of an extractive one, else its
    sentences (a model-written one), without a speaker label or quotes around them."""
    if not summary.strip() or summary.strip() == NOTHING:
        return []
    quoted = _QUOTED.findall(summary)
    if quoted and summary.lstrip().startswith((PREFIX, TOPIC_PREFIX)):
        return [q.strip() for q in quoted if q.strip()]
    items = (_LABEL.sub("", s).strip(" \"'") for s in _SENTENCES.split(summary.strip()))
    return [item for item in items if item]


def current(items: list[str]) -> list[str]:
    """``items`` (oldest first) without those a later one replaces (a correction, an
    update of the same thing: :func:`~edge.recall.supersedes`), the next one
    takes back (:func:`~edge.recall.repairs`), or repeats."""
    kept = []
    for i, text in enumerate(items):
        later = items[i + 1 :]
        if later and repairs(later[0], text):
            continue
        if any(t.lower() == text.lower() or supersedes(t, text) for t in later):
            continue
        kept.append(text)
    return kept


def summary_gaps(summary: str, previous_summary: str, entries: Sequence[Entry]) -> list[str]:
    """What is wrong with a model's ``summary``: the numbers, codes and names of the
    participant's current statements (and of the previous summary) that it does not
    contain, those it has that no source does (``"invented X"``), more words than a
    paraphrase needs that no source has (it tells what nobody said:
    :func:`~edge.recall.invented_words`), and transcript lines copied instead of
    summarised (``User: ...``), and details only a replaced statement had (a summary
    keeps the correction, not what it corrects); empty when none."""
    items = [*previous_items(previous_summary), *statements(entries)]
    said = current(items)
    sources = [previous_summary, *(e.rendered for e in entries)]
    invented = [f"invented {d}" for d in invented_details(summary, sources)]
    if words := invented_words(summary, sources):
        invented.append("words no source has: " + " ".join(words))
    echo = ["echoes the transcript"] if _TRANSCRIPT.search(summary) else []
    return missing_details(summary, said) + invented + echo + _replaced(summary, items, said)


def _replaced(summary: str, items: list[str], said: list[str]) -> list[str]:
    """``"keeps replaced X"`` for each detail only a replaced statement had (the "9" of
    "The autoclave run is at 9." after "It moved to 11.") that ``summary`` still has: a
    summary keeps the correction, not what it corrects."""
    kept = set(said)
    old: set[str] = set()
    for text in items:
        if text not in kept:
            old |= key_details(text)
    for text in said:
        old -= key_details(text)
    have = summary.lower()
    return [
        f"keeps replaced {d}"
        for d in sorted(old)
        if re.search(rf"(?<!\w){re.escape(d)}(?!\w)", have)
    ]


def extractive_summary(
    previous_summary: str, entries: Sequence[Entry], limit: int, *, dialogue: bool
) -> str:
    """A summary of ``limit`` bytes at most, made of the participant's current statements
    verbatim (what a later correction replaces is left out): the most important first
    (corrections, then numbers and names, newest first among equals), shown in the order
    they were said. :data:`NOTHING` when nothing was stated (only requests)."""
    prefix = PREFIX if dialogue else TOPIC_PREFIX
    said = [t.replace('"', "'") for t in previous_items(previous_summary) + statements(entries)]
    items = current(said)
    if not items:
        return clip_middle(NOTHING, limit) if entries else ""
    room = limit - nbytes(prefix)
    ranked = sorted(((importance(t), i) for i, t in enumerate(items)), key=lambda r: (-r[0], -r[1]))
    chosen: list[int] = []
    for _, i in ranked:
        cost = nbytes(items[i]) + 3  # space and quotes
        if cost <= room:
            chosen.append(i)
            room -= cost
    if not chosen:  # one statement bigger than the whole summary: keep its start and end
        return clip_middle(f'{prefix} "{items[ranked[0][1]]}"', limit)
    return prefix + "".join(f' "{items[i]}"' for i in sorted(chosen))
