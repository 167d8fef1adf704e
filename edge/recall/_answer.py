"""Questions about what the participant said, and the reply composed from their record.

"What is my locker code?", "Who is my supervisor?", "When is the briefing now?" ask for
something the participant stated. A 135M model shown the statement often fails to copy
it (it answers with a neighbouring line, or with the prompt's own labels), so the value
comes from the record: :func:`asked_of_record` says whether a request asks for a stated
fact and with which words, :func:`coverage` how well a statement matches it, and
:func:`spoken` turns the statement that answers it (the newest one, when a correction
replaced the first) into the reply, deterministically: the participant's own words, told
back in the second person, without what the correction takes back ("from 9", "not
Dana"). Deterministic, no model call; English only, like the rest of the heuristics.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ._memory import is_request, key_details, terms

_WH = re.compile(
    r"^\W*(?:(?:so|and|ok(?:ay)?|hey|remind me|quick question|sorry)\W+)*"
    r"(?:(?:can|could|would) you (?:tell|remind) me,?\s+|do you (?:remember|know),?\s+|"
    r"tell me,?\s+)?"
    r"(what(?:'s|’s| is| are| was)?|who(?:'s|’s)?|whom|whose|where(?:'s|’s)?|when(?:'s|’s)?|"
    r"which|how (?:many|much|long|old|far)|at what|in which|on which|to whom|from which)\b",
    re.IGNORECASE,
)
"""A question asking for a fact (not "how do I ...", "why ...")."""
_OWN = re.compile(
    r"\b(?:my|our|mine|ours)\b|\b(?:am|did|do|was|have|should|will|must) i\b|"
    r"\bi (?:told|said|mentioned|gave|put|left|parked|booked|set)\b|\bnow\b|\bagain\b",
    re.IGNORECASE,
)
"""Marks of a question about the participant's own record: their things ("my"), what
they did or said ("did I", "I told you"), or a value that changed ("now", "again")."""
_CONTRACTED = re.compile(r"\b(what|who|where|when|how|that|it)['’]s\b", re.IGNORECASE)
_POSSESSIVE = re.compile(r"(\w)['’]s\b")
_MINE = re.compile(r"\b(?:my|our|mine|ours)\b", re.IGNORECASE)
GENERIC = frozenset("name time day date number exact exactly current currently".split())
"""Question words that name the kind of answer, not its subject ("the *name* of my
supervisor"): left out of the subject a statement must match, unless nothing else is
("What is my name?")."""
OWN_COVERAGE = 2 / 3
"""Share of the subject's words a statement must have to answer a question about the
participant's own record; any other question needs all of them."""

NOT_STATED = "You haven't told me that yet."
"""The reply when a question about the participant's record finds nothing they stated."""


@dataclass(frozen=True)
class Asked:
    """A request asking for a stated fact: ``subject``, the search terms a statement must
    share (:data:`GENERIC` words left out), and ``own``: whether it asks about the
    participant's own record ("my", "did I", "now": a statement needs fewer of the
    subject's words)."""

    subject: frozenset[str]
    own: bool
    mine: bool = False
    """Whether it asks for one of the participant's things ("my", "our"): when they
    stated nothing about it, the reply says so (:data:`NOT_STATED`)."""
    query: str = ""
    """The request to search with, a possessive's "'s" left out."""

    @property
    def needed(self) -> float:
        return OWN_COVERAGE if self.own else 1.0


def asked_of_record(request: str) -> Asked | None:
    """Whether ``request`` asks for a fact the participant may have stated (a wh-question
    for a value: what, who, where, when, which, how many, ...), and about what; None for
    anything else (a statement, "how do I ...", "why ...", "tell me a joke")."""
    text = request.strip()
    if not text or not is_request(text) or _WH.search(text) is None:
        return None
    plain = _CONTRACTED.sub(lambda m: m.group(1) + " is", text)
    said = _terms(plain)
    subject = frozenset(t for t in said if t not in GENERIC) or frozenset(said)
    if not subject:
        return None
    return Asked(
        subject, _OWN.search(text) is not None, _MINE.search(text) is not None, _plain(plain)
    )


def coverage(asked: Asked, statement: str) -> float:
    """The share of the question's subject words the statement has."""
    said = set(_terms(statement))
    return len(asked.subject & said) / len(asked.subject)


def _plain(text: str) -> str:
    """``text`` with a possessive's "'s" left out ("my daughter's name": daughter)."""
    return _POSSESSIVE.sub(r"\1", text)


def _terms(text: str) -> list[str]:
    return terms(_plain(text))


# -- the reply ---------------------------------------------------------------------------

_OPENER = re.compile(
    r"^\W*(?:(?:hi|hello|hey|ok(?:ay)?|so|well|oh|right|also|and|btw|by the way|"
    r"just so you know|just to let you know|fyi|for the record|for your information|"
    r"remember(?: that)?|please note(?: that)?|note(?: that)?|correction|update|actually|"
    r"sorry|i meant|i mean|scratch that|change of plans?|wait,?\s+no|no,?\s+wait|"
    r"i misspoke|i got it wrong|i was wrong|my mistake|oops|no)\b[\s,:;.!-]*)+",
    re.IGNORECASE,
)
"""Words a statement opens with that are not its content."""
_FILLER = re.compile(r",?\s*\b(?:actually|now)\b(?=[\s,.;!?])", re.IGNORECASE)
_TAKEN_BACK = re.compile(
    r",?\s*\b(?:from|not|instead of|rather than|no longer|isn't|wasn't|aren't)\s+"
    r"(?:at\s+|in\s+|on\s+|room\s+|the\s+)?([^\s,.;!?]+(?:\.\d+)?)"
    r"(?:\s+(?:any ?more|any longer))?",
    re.IGNORECASE,
)
"""A phrase naming the value a correction takes back ("from 9", "not Dana")."""
_SENTENCE = re.compile(
    r"(?<!\bDr\.)(?<!\bMr\.)(?<!\bMs\.)(?<!\bMrs\.)(?<!\bSt\.)(?<!\bProf\.)(?<!\b[A-Z]\.)"
    r"(?<=[.!?])\s+"
)
"""A sentence's end ("Dr. Okafor" and "J. Smith" go on)."""
_CLAUSE = re.compile(r"\s*(?:[,;]|\bbut\b)\s*")
_PRONOUN = re.compile(r"^(?:it|that|this|they)(?:'s|’s)?\b", re.IGNORECASE)
_VERB = re.compile(
    r"\s(?:is|are|was|were|will|starts|begins|leaves|goes|has|happens|takes)\s", re.IGNORECASE
)
_SWAP = {
    "i": "you",
    "me": "you",
    "my": "your",
    "mine": "yours",
    "myself": "yourself",
    "i'm": "you're",
    "i've": "you've",
    "i'll": "you'll",
    "i'd": "you'd",
    "we": "you",
    "us": "you",
    "our": "your",
    "ours": "yours",
    "we're": "you're",
    "we've": "you've",
    "we'll": "you'll",
}
_PERSON = re.compile(
    r"\b(?:i am|i was|i['’](?:m|ve|ll|d)|we['’](?:re|ve|ll)|i|me|my|mine|"
    r"myself|we|us|our|ours)\b",
    re.IGNORECASE,
)


def spoken(statement: str, asked: Asked | None = None, replaced: tuple[str, ...] = ()) -> str:
    """The reply telling ``statement`` back: the sentences about the question's subject,
    without opening words ("Correction:", "Actually,", "By the way,"), without what the
    statements it ``replaced`` said that it takes back ("from 9", ", not Dana"), in the
    second person ("My locker code is 4711." -> "Your locker code is 4711."). A
    correction that names its subject by a pronoun ("it moved to 11") gets the replaced
    statement's subject ("The autoclave run moved to 11.")."""
    sentences = [s for s in _SENTENCE.split(statement.strip()) if s.strip()]
    if asked is not None and len(sentences) > 1:
        about = [s for s in sentences if asked.subject & set(terms(s))]
        sentences = about or sentences
    text = " ".join(_OPENER.sub("", s) for s in sentences).strip()
    if replaced:
        text = _without_taken_back(text, replaced)
        text = _named_subject(text, replaced[0])
    text = _FILLER.sub("", text).strip(" ,;:")
    text = _second_person(text)
    if not text:
        return statement.strip()
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".!?" else text + "."


def _without_taken_back(text: str, replaced: tuple[str, ...]) -> str:
    old: set[str] = set()
    for r in replaced:
        old |= key_details(r)
    stale = old - _restated(text, old)

    def drop(match: re.Match[str]) -> str:
        return "" if match.group(1).strip(".").lower() in stale else match.group()

    text = _TAKEN_BACK.sub(drop, text)
    if not any(d in stale for d in key_details(text)):
        return text
    clauses = [c for c in _CLAUSE.split(text) if c.strip()]
    kept = [c for c in clauses if not key_details(c) & stale]
    if kept and any(key_details(c) for c in kept):
        return ", ".join(kept)
    return text


def _restated(text: str, old: set[str]) -> set[str]:
    """Details of the replaced statements that ``text`` keeps outside a taken-back phrase
    (a correction that repeats the subject's name: "Dr. Lindqvist, not Dr. Okafor")."""
    return old & key_details(_TAKEN_BACK.sub("", text))


def _named_subject(text: str, replaced: str) -> str:
    """``text`` with a leading pronoun replaced by ``replaced``'s subject (the words
    before its first verb, six at most), when it has one."""
    if _PRONOUN.match(text) is None:
        return text
    older = _OPENER.sub("", replaced.strip())
    verb = _VERB.search(older)
    if verb is None or len(older[: verb.start()].split()) > 6:
        return text
    subject = older[: verb.start()].strip()
    pronoun = _PRONOUN.match(text)
    assert pronoun is not None
    rest = text[pronoun.end() :]
    if pronoun.group().lower().endswith(("'s", "’s")):
        rest = " is" + rest
    return subject + rest


def _second_person(text: str) -> str:
    def swap(match: re.Match[str]) -> str:
        word = match.group()
        low = word.lower().replace("’", "'")
        if low == "i am":
            out = "you are"
        elif low == "i was":
            out = "you were"
        else:
            out = _SWAP.get(low, word)
        return out

    return _PERSON.sub(swap, text)
