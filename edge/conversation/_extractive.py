"""The summary check and the deterministic extractive summary that replaces a bad one.

A small model's summary often drops the participant's numbers and names, or fails
outright (echo, cut off). :func:`summary_gaps` finds what a summary lacks; when anything is
missing, :func:`extractive_summary` writes one from the participant's own statements,
verbatim, most important first within the limit, so nothing they said depends on the
model's summarising skill. The assistant's replies are left out: they are the first thing
to shorten.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ._context import Entry
from ._memory import importance, is_correction, key_details, missing_details, terms
from ._text import clip_middle, nbytes

PREFIX = "The user said:"
TOPIC_PREFIX = "Recorded:"
_QUOTED = re.compile(r'"([^"]+)"')
_SENTENCES = re.compile(r"(?<=[.!?])\s+")
SUPERSEDED_PENALTY = 4
"""Importance taken from a statement that a newer correction about the same thing
replaces: it is the first to go when the summary is full."""


def statements(entries: Sequence[Entry]) -> list[str]:
    """The participant's own words in ``entries``: what they said in an exchange, or the
    text of a topic update (a note, an observation)."""
    out = []
    for e in entries:
        text = (e.user if (e.user or e.assistant) else e.text).strip()
        if text:
            out.append(text)
    return out


def previous_items(summary: str) -> list[str]:
    """A previous summary as items: the quoted statements of an extractive one, else its
    sentences (a model-written one)."""
    if not summary.strip():
        return []
    quoted = _QUOTED.findall(summary)
    if quoted and summary.lstrip().startswith((PREFIX, TOPIC_PREFIX)):
        return [q.strip() for q in quoted if q.strip()]
    return [s.strip() for s in _SENTENCES.split(summary.strip()) if s.strip()]


def summary_gaps(summary: str, previous_summary: str, entries: Sequence[Entry]) -> list[str]:
    """The numbers, codes and names of the participant's statements (and of the previous
    summary) that ``summary`` does not contain; empty when it keeps them all."""
    return missing_details(summary, [previous_summary, *statements(entries)])


def bare_question(text: str) -> bool:
    """A question without numbers or names: it states nothing to keep (its answer is the
    assistant's, which is shortened first), and lists of them confuse a small model."""
    return text.rstrip().endswith("?") and not key_details(text)


def _ranked(items: list[str]) -> list[tuple[int, int]]:
    """(importance, index) of each item; an item a later correction shares a term with
    loses importance."""
    scores = [importance(t) for t in items]
    term_sets = [set(terms(t)) for t in items]
    for j, text in enumerate(items):
        if not is_correction(text):
            continue
        for i in range(j):
            if term_sets[i] & term_sets[j]:
                scores[i] -= SUPERSEDED_PENALTY
    return [(scores[i], i) for i in range(len(items))]


def extractive_summary(
    previous_summary: str, entries: Sequence[Entry], limit: int, *, dialogue: bool
) -> str:
    """A summary of ``limit`` bytes at most, made of the participant's statements verbatim:
    the most important first (corrections, then numbers and names, newest first among
    equals), shown in the order they were said."""
    prefix = PREFIX if dialogue else TOPIC_PREFIX
    said = [t.replace('"', "'") for t in previous_items(previous_summary) + statements(entries)]
    newest = {t.lower(): i for i, t in enumerate(said)}
    items = [t for i, t in enumerate(said) if newest[t.lower()] == i]  # a repeat keeps its last
    if not items:
        return ""
    room = limit - nbytes(prefix)
    chosen: list[int] = []
    for _, i in sorted(_ranked(items), key=lambda r: (-r[0], -r[1])):
        if bare_question(items[i]):
            continue
        cost = nbytes(items[i]) + 3  # space and quotes
        if cost <= room:
            chosen.append(i)
            room -= cost
    if not chosen:  # one statement bigger than the whole summary: keep its start and end
        i = max(_ranked(items), key=lambda r: (r[0], r[1]))[1]
        return clip_middle(f'{prefix} "{items[i]}"', limit)
    return prefix + "".join(f' "{items[i]}"' for i in sorted(chosen))
