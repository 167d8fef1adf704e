"""How a question's words meet a statement's, for the answers from the record.

A person asks in other words than they stated: "Who supervises me?" after "My supervisor
is Dr. Okafor.", "When does the autoclave run start?" after "The autoclave run is at 9.",
"What time is my centrifuge slot?" after "The centrifuge is booked for 10:30.". Four small,
deterministic pieces bring such a question and its statement together (English only, like
the rest of the heuristics; no model call):

* :func:`lemma`, a light lemmatizer: inflections ("runs", "booked", "briefing"), a few
  irregular forms ("held", "kept", "goes") and the agent noun of a verb ("supervisor",
  "manager", "teacher" meet "supervises", "manages", "teaches");
* :data:`SYNONYMS`, a few small sets of words people use for the same thing (a booking
  and a slot, an office and work, a code and a PIN); an exact word still ranks first;
* :data:`FRAME`, the words that frame a question rather than name its subject ("the
  *name* of the *person*", "what *time* does it *start*", "where is it *held*"): left out
  of the subject a statement must match, unless nothing else is left;
* :func:`kind_asked` and :func:`has_kind`: the kind of value a question word asks for
  (who: a person's name, when: a time, where: a place, how many: a number) and whether a
  statement holds one. A statement holding the kind asked for may miss the question's
  verb ("Who do I *share* my bench with?" for "My bench partner is Tomasz."), never the
  thing it names (:func:`named`: "my bench").
"""

from __future__ import annotations

import re

from ._memory import STOPWORDS, key_details, words

IRREGULAR = {
    "held": "hold",
    "kept": "keep",
    "left": "leave",
    "met": "meet",
    "went": "go",
    "gone": "go",
    "going": "go",
    "goes": "go",
    "ran": "run",
    "told": "tell",
    "sat": "sit",
    "bought": "buy",
    "brought": "bring",
    "sent": "send",
    "found": "find",
    "taught": "teach",
    "built": "build",
    "drove": "drive",
    "driven": "drive",
    "people": "person",
    "children": "child",
}
"""Irregular forms the suffix rules cannot undo."""
_SUFFIXES = (("ies", "y"), ("ied", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", ""))
_AGENT = ("or", "er")
AGENT_STEM = 5
"""Letters an agent noun keeps without its "-or"/"-er" ("supervis", "manag", "teach"; not
"numb" from "number" or "lock" from "locker")."""

SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("book", "booking", "slot", "reservation", "reserved", "appointment"),
    ("work", "office", "workplace", "job"),
    ("code", "pin", "password", "passcode", "combination"),
    ("live", "address", "flat", "apartment"),
    ("car", "vehicle"),
    ("supervisor", "boss"),
    ("doctor", "physician", "gp"),
    ("phone", "mobile", "cellphone"),
    ("birthday", "born"),
)
"""Words for the same thing, each set kept small: a question matches a statement that uses
another word of the set (an exact word ranks above it)."""
FRAME_WORDS = """name call named person place location time day date number exact exactly
current currently start begin end finish happen hold take locate keep turn show up arrive
come go schedule scheduled supposed again use""".split()
"""Words that frame a question (what kind of answer, when it happens) rather than name its
subject."""


def lemma(word: str) -> str:
    """``word``'s lemma, lower-cased: an irregular form's base, else without its
    inflection ("runs", "booked", "briefing", "parties"), a final "e" ("supervise") and an
    agent noun's "-or"/"-er" ("supervisor", "manager")."""
    w = word.lower().strip(".:'’-")
    if w in IRREGULAR:
        return IRREGULAR[w]
    if any(c.isdigit() for c in w):
        return w
    w = _uninflected(w)
    if w.endswith("ing"):  # "briefings": "briefing", then "brief"
        w = _uninflected(w)
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]
    for agent in _AGENT:
        if w.endswith(agent) and len(w) - len(agent) >= AGENT_STEM:
            return w[: -len(agent)]
    return w


def _uninflected(w: str) -> str:
    """``w`` without one inflection's suffix."""
    for suffix, replacement in _SUFFIXES:
        if len(w) > len(suffix) + 2 and w.endswith(suffix) and not w.endswith("ss"):
            w = w[: -len(suffix)] + replacement
            if suffix in ("ing", "ed") and len(w) > 3 and w[-1] == w[-2] not in "lsz":
                w = w[:-1]  # "runn", "stopp"
            break
    return w


_CANONICAL = {lemma(w): group[0] for group in SYNONYMS for w in group}
FRAME = frozenset(lemma(w) for w in FRAME_WORDS)


def canonical(word: str) -> str:
    """The word a set of :data:`SYNONYMS` is matched by, for a lemma (itself if in none)."""
    return _CANONICAL.get(word, word)


def lemmas(text: str) -> list[str]:
    """The lemmas of ``text``'s words that are not stop words (digits kept)."""
    return [lemma(w) for w in words(text) if w.lower() not in STOPWORDS]


def expansions(subject: frozenset[str]) -> list[str]:
    """Words to search the index with besides a question's own: the other words of a
    synonym set, and an agent noun's forms ("supervis": supervisor, superviser)."""
    out: list[str] = []
    for word in sorted(subject):
        out += [w for group in SYNONYMS if canonical(word) == group[0] for w in group]
        out += [word + "or", word + "er", word + "e"] if len(word) >= AGENT_STEM else []
    return out


_DETERMINER = frozenset("my our the your this that his her their".split())
_TOKEN = re.compile(r"[^\W_]+(?:[-'’.:][^\W_]+)*|[^\w\s]")


def named(question: str) -> frozenset[str]:
    """The lemmas of the things a question names by a determiner ("my *bench*", "the
    *safety briefing*"), :data:`FRAME` words left out: what a statement must have."""
    out: set[str] = set()
    tokens = _TOKEN.findall(question)
    for i, token in enumerate(tokens):
        if token.lower() not in _DETERMINER:
            continue
        for word in tokens[i + 1 :]:
            low = word.lower()
            if low in STOPWORDS or not word[0].isalnum():
                break
            if (lem := lemma(low)) not in FRAME:
                out.add(canonical(lem))
    return frozenset(out)


# -- the kind of value asked for ----------------------------------------------------------

_KINDS = (
    ("time", re.compile(r"\b(?:when|what time|which time|what day|which day|what date)\b")),
    ("person", re.compile(r"\b(?:who|whom|whose)\b")),
    ("place", re.compile(r"\b(?:where|in which|at which|on which)\b")),
    ("number", re.compile(r"\b(?:how many|how much|what number|which number)\b")),
)
_TIME = re.compile(
    r"\d[:.]\d\d|\d\s*(?:am|pm|a\.m\.|p\.m\.|h|o'clock)\b|\d(?:st|nd|rd|th)\b|"
    r"\b(?:at|by|until|till|from|to|before|after|around|for|since)\s+\d|"
    r"\b(?:noon|midnight|morning|afternoon|evening|tonight|today|tomorrow|yesterday|week|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend|january|february|"
    r"march|april|may|june|july|august|september|october|november|december)\b",
    re.IGNORECASE,
)
"""A time or a day: "14:00", "3 pm", "at 9", "moved to 11", "on Friday", "tomorrow"."""
_PLACE = re.compile(
    r"\b(?:in|on|at|to|into|onto|from|under|behind|beside|near|next to|inside|above|below|"
    r"by|outside|opposite|beneath|within)\s+(?!\d)\w|\b(?:upstairs|downstairs)\b|"
    r"\b(?!(?:at|by|until|till|from|to|before|after|around|for|since|is|are|was)\b)[a-z]+"
    r"\s+\d+[a-z]?\b(?![:.]\d)",
    re.IGNORECASE,
)
"""A place: "in drawer 6", "under the mat", "to the incubator", "room 204", "level 3";
not a time ("at 9", "to 11")."""
_NUMBER = re.compile(
    r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|"
    r"thirty|forty|fifty|hundred)\b",
    re.IGNORECASE,
)


def kind_asked(question: str) -> str | None:
    """The kind of value a question asks for: "time", "person", "place", "number", or
    None (what, which, ...: any)."""
    low = question.lower()
    return next((kind for kind, pattern in _KINDS if pattern.search(low)), None)


def has_kind(statement: str, kind: str) -> bool:
    """Whether ``statement`` holds a value of ``kind``: a time (a number, a day, "noon"),
    a person (a name: a capitalised word inside a sentence), a place (a number, a name,
    "in/at/on/under ... something") or a number."""
    if kind == "person":
        return any(not any(c.isdigit() for c in d) for d in key_details(statement))
    if kind == "place" and any(not any(c.isdigit() for c in d) for d in key_details(statement)):
        return True  # a name: "in Leeds", "Priya's desk"
    pattern = {"time": _TIME, "place": _PLACE, "number": _NUMBER}[kind]
    return pattern.search(statement) is not None
