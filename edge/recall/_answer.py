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

from ._match import FRAME, canonical, expansions, has_kind, kind_asked, lemmas, named
from ._memory import is_request, is_value_only, key_details, without_take_back

_LEAD = r"^\W*(?:(?:so|and|ok(?:ay)?|hey|quick question|sorry|please)\W+)*"
_POLITE = (
    r"(?:(?:(?:can|could|would|will) you (?:please )?|please )?(?:tell|remind) me(?: again)?"
    r"(?: of)?,?\s+|(?:do|did) you (?:still )?(?:remember|know|recall),?\s+)"
)
"""A polite wrapper around a question: "Could you tell me ...", "Do you remember ...",
"Remind me ..."."""
_WH = re.compile(
    rf"{_LEAD}{_POLITE}?"
    r"(what(?:'s|’s| is| are| was)?|who(?:'s|’s)?|whom|whose|where(?:'s|’s)?|when(?:'s|’s)?|"
    r"which|how (?:many|much|long|old|far)|at what|in which|on which|to whom|from which)\b"
    rf"|{_LEAD}{_POLITE}(?=(?:my|our|the)\b)",
    re.IGNORECASE,
)
"""A question asking for a fact (not "how do I ...", "why ..."), or a polite request for
one of the participant's things or a named thing ("Do you remember my locker code?")."""
_OWN = re.compile(
    r"\b(?:my|our|mine|ours|me)\b|\b(?:am|did|do|was|have|should|will|must) i\b|"
    r"\bi (?:told|said|mentioned|gave|put|left|parked|booked|set)\b|\bnow\b|\bagain\b",
    re.IGNORECASE,
)
"""Marks of a question about the participant's own record: their things ("my"), what
they did or said ("did I", "I told you"), what concerns them ("who mentors me"), or a
value that changed ("now", "again"); looked for after a polite wrapper ("Remind me")."""
_CONTRACTED = re.compile(r"\b(what|who|where|when|how|that|it)['’]s\b", re.IGNORECASE)
_POSSESSIVE = re.compile(r"(\w)['’]s\b")
_MINE = re.compile(
    r"\b(?:my|our|mine|ours|did i)\b|\bi (?:told|said|mentioned|gave|put|left|parked|booked)\b",
    re.IGNORECASE,
)
OWN_COVERAGE = 2 / 3
"""Share of the subject's words a statement must have to answer a question about the
participant's own record; any other question needs all of them."""
KIND_COVERAGE = 1 / 2
"""Share enough for a statement that holds the kind of value asked for and every thing the
question names (:func:`~edge.recall._match.named`): "Who do I share my bench with?" for
"My bench partner is Tomasz."."""

NOT_STATED = "You haven't told me that yet."
"""The reply when a question about the participant's record finds nothing they stated."""


@dataclass(frozen=True)
class Asked:
    """A request asking for a stated fact: ``subject``, the lemmas a statement must share
    (:func:`~edge.recall._match.lemma`, a synonym set's first word for its others, frame
    words left out: :data:`~edge.recall._match.FRAME`), and ``own``: whether it asks about
    the participant's own record ("my", "did I", "now": a statement needs fewer of the
    subject's words)."""

    subject: frozenset[str]
    own: bool
    mine: bool = False
    """Whether it asks for one of the participant's things ("my", "our") or what they
    did or said ("did I", "I told you"): when they stated nothing about it, the reply
    says so (:data:`NOT_STATED`)."""
    query: str = ""
    """The request to search with, a possessive's "'s" left out, synonyms added."""
    kind: str | None = None
    """The kind of value asked for (:func:`~edge.recall._match.kind_asked`)."""
    named: frozenset[str] = frozenset()
    """The things it names ("my bench"): a statement matched on fewer words must have
    them."""
    said: frozenset[str] = frozenset()
    """Its subject's lemmas as said, before synonyms: a statement that uses the same
    words ranks above one that uses a synonym."""

    @property
    def needed(self) -> float:
        return OWN_COVERAGE if self.own else 1.0


def asked_of_record(request: str) -> Asked | None:
    """Whether ``request`` asks for a fact the participant may have stated (a wh-question
    for a value: what, who, where, when, which, how many, ...; or a polite request for one:
    "Do you remember my locker code?"), and about what; None for anything else (a
    statement, "how do I ...", "why ...", "tell me a joke")."""
    text = request.strip()
    if not text or not is_request(text) or (wh := _WH.search(text)) is None:
        return None
    rest = text[wh.end() :] if wh.group(1) is None else text[wh.start(1) :]
    plain = _plain(_CONTRACTED.sub(lambda m: m.group(1) + " is", rest))
    said = [w for w in lemmas(plain) if w not in FRAME] or lemmas(plain)
    subject = frozenset(canonical(w) for w in said)
    if not subject:
        return None
    return Asked(
        subject,
        _OWN.search(rest) is not None,
        _MINE.search(text) is not None,
        " ".join([plain, *expansions(subject)]),
        kind_asked(rest),
        named(plain) & subject,
        frozenset(said),
    )


def coverage(asked: Asked, statement: str) -> float:
    """The share of the question's subject words the statement has."""
    return len(asked.subject & _said(statement)) / len(asked.subject)


def rating(asked: Asked, statement: str) -> tuple[float, int] | None:
    """How well ``statement`` answers ``asked`` (its :func:`coverage`, then how many of the
    subject's words it has as they are, not by a synonym), or None when it does not:
    it has too few of the subject's words (:attr:`Asked.needed`), or a question asking for
    a kind of value (a time, a person, a place, a number) finds none in it. Holding that
    kind and every thing the question names, :data:`KIND_COVERAGE` of its words is
    enough."""
    said = _said(statement)
    share = len(asked.subject & said) / len(asked.subject)
    if asked.kind is not None and not has_kind(statement, asked.kind):
        return None
    enough = share >= asked.needed or (
        asked.kind is not None and share >= KIND_COVERAGE and asked.named <= said
    )
    if not enough:
        return None
    return share, len(asked.said & set(lemmas(_plain(statement))))


def _said(statement: str) -> set[str]:
    return {canonical(w) for w in lemmas(_plain(statement))}


def _plain(text: str) -> str:
    """``text`` with a possessive's "'s" left out ("my daughter's name": daughter)."""
    return _POSSESSIVE.sub(r"\1", text)


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
        about = [s for s in sentences if asked.subject & _said(s)]
        sentences = about or sentences
    text = " ".join(_OPENER.sub("", s) for s in sentences).strip()
    if replaced and is_value_only(statement):
        text = _with_value(_OPENER.sub("", replaced[0].strip()), without_take_back(statement))
    if replaced:
        text = _without_taken_back(text, replaced)
        text = _named_subject(text, replaced[0])
    text = _FILLER.sub("", text).strip(" ,;:")
    text = _second_person(text)
    if not text:
        return statement.strip()
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".!?" else text + "."


_DETAIL = re.compile(r"\b[^\W_]*\d[^\W_]*(?:[-'’.:][^\W_]+)*|(?<=\s)[A-Z][^\W_]+")


def _with_value(older: str, value: str) -> str:
    """``older`` with its last detail of ``value``'s shape (a time, a number, a name)
    replaced by ``value``, a repair that names only the new value ("The centrifuge is
    booked for 10:30." and "11:30": "The centrifuge is booked for 11:30.")."""
    value = value.strip(" .!,;:")
    found = list(_DETAIL.finditer(older))
    if not found or not value:
        return value
    alike = [m for m in found if _shape(m.group()) == _shape(value)]
    last = (alike or found)[-1]
    return older[: last.start()] + value + older[last.end() :]


def _shape(detail: str) -> str:
    if ":" in detail:
        return "time"
    return "number" if any(c.isdigit() for c in detail) else "name"


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
