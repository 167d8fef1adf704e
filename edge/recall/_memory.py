"""What a participant's statement is made of: search terms, key details, corrections.

Shared by the recall indexes and, in ``edge.conversation``, by recall's choice, the
summary check and extractive summaries. Deterministic and language-light: it looks at
digits, capitalised words and a few English correction phrases; anything else is an
ordinary word.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[^\W_]+(?:[-'’.:][^\W_]+)*", re.UNICODE)
_TITLES = ("Dr.", "Mr.", "Mrs.", "Ms.", "St.", "Prof.")
_QUOTES = "\"'“”‘’«»(["
_REPAIRS = (
    r"actually|correction|i meant|i mean|sorry|scratch that|change of plans?|wait,?\s+no|"
    r"no,?\s+wait"
)
"""Phrases that take back what was said: corrections anywhere, repairs at the start."""
_CORRECTION = re.compile(
    rf"\b({_REPAIRS}|misspoke|not\s+[\w-]+|instead|changed|moved|switched|replaced|reset|"
    r"no longer|rather|update[sd]?|now|wrong|rerouted|rescheduled|postponed|pushed back|"
    r"brought forward|cancell?ed)\b",
    re.IGNORECASE,
)
_REQUEST_OPENERS = frozenset(
    """what where when who whom whose why how which is are am was were do does did can could
    would will should shall may tell give say show explain remind help list suggest thanks
    thank hi hello hey ok okay please""".split()
)

STOPWORDS = frozenset(
    """a an the and or but if of to in on at for from by with about as into onto over under
    is are was were be been being am do does did done have has had having will would shall
    should can could may might must i me my mine we us our you your yours he him his she her
    it its they them their this that these those there here what which who whom whose when
    where why how please tell remind know just so too very also again still then than now
    okay ok yes no not any some all each every one can't don't it's i'm i've let's say said
    right thanks thank hi hello hey many much more most
    get got give gave make made want need like""".split()
)
"""Words that carry no topic: left out of recall terms."""


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def stem(word: str) -> str:
    """A crude English stem so 'codes' finds 'code' and 'parked' finds 'park'."""
    w = word.lower().strip(".:'’-")
    for suffix in ("ing", "ed", "es", "s"):
        if len(w) > len(suffix) + 2 and w.endswith(suffix):
            return w[: -len(suffix)]
    return w


def terms(text: str) -> list[str]:
    """Search terms: stemmed words that are not stop words (digits kept)."""
    out = []
    for word in words(text):
        low = word.lower()
        if low in STOPWORDS:
            continue
        out.append(stem(low))
    return out


def key_details(text: str) -> set[str]:
    """Details a summary must not drop: numbers and codes (anything with a digit) and
    names (capitalised words that do not start a sentence, other than "I"), lower-cased."""
    found: set[str] = set()
    for match in _WORD.finditer(text):
        word = match.group().strip(".:'’-")
        before = text[: match.start()].rstrip(_QUOTES + " \t\n")
        starts_sentence = not before or (before[-1] in ".!?:;" and not before.endswith(_TITLES))
        if not word:
            continue
        if any(c.isdigit() for c in word):
            found.add(word.lower())
        elif not starts_sentence and word[0].isupper() and word.lower() not in STOPWORDS:
            found.add(word.lower())
    return found


def missing_details(summary: str, sources: list[str]) -> list[str]:
    """Key details of ``sources`` that ``summary`` lacks (sorted, case-insensitive)."""
    have = summary.lower()
    need: set[str] = set()
    for text in sources:
        need |= key_details(text)
    return sorted(d for d in need if d not in have)


def invented_details(summary: str, sources: list[str]) -> list[str]:
    """Key details of ``summary`` that none of ``sources`` contains: numbers and names a
    model made up (sorted, case-insensitive)."""
    have = " ".join(sources).lower()
    return sorted(d for d in key_details(summary) if d not in have)


SUMMARY_WORDS = frozenset(
    """user users assistant participant person conversation chat topic topics question
    questions answer answered answers asked asks ask discussed discuss discussion talked talk
    mentioned mention says told explained explain suggested suggest recommended recommend
    replied reply shared wanted wants noted note provided gave gives including include
    several various things thing information details earlier later first next both other
    well while during after before""".split()
)
"""Words a summary of a conversation uses without any source saying them ("the user asked
about ...", "the assistant suggested ...")."""
GROUNDING_SLACK = 3
GROUNDING_SHARE = 0.25
"""A summary may use this many words, or this share of its words if more, that no source
has (a paraphrase); beyond that it says things nobody said."""


def _root(word: str) -> str:
    """A word's crude stem, cut to five letters, so paraphrases of one word meet
    ("supplies" and "supply", "discussing" and "discussed")."""
    return stem(word)[:5]


_SUMMARY_ROOTS = frozenset(_root(w) for w in SUMMARY_WORDS)


def ungrounded_words(summary: str, sources: list[str]) -> list[str]:
    """The words of ``summary`` (not stop words, summary vocabulary or numbers: those
    :func:`invented_details` checks) that no source has in any form (sorted, distinct)."""
    have = {_root(w) for text in sources for w in words(text)} | _SUMMARY_ROOTS
    return sorted({w for w in _content(summary) if _root(w) not in have})


def _content(summary: str) -> set[str]:
    """Its words of three letters or more, lower-cased, that are not stop words or numbers."""
    lowered = (w.lower() for w in words(summary))
    return {
        w for w in lowered if len(w) > 2 and w not in STOPWORDS and not any(c.isdigit() for c in w)
    }


def invented_words(summary: str, sources: list[str]) -> list[str]:
    """The words ``summary`` has that no source has, when there are more than a paraphrase
    needs (:data:`GROUNDING_SLACK`, or :data:`GROUNDING_SHARE` of its words if more); else
    none. A small model's summary that goes on to invent a scene ("I'm going to bring my
    own bag of supplies ...") has them; a paraphrase does not."""
    ungrounded = ungrounded_words(summary, sources)
    allowed = max(GROUNDING_SLACK, GROUNDING_SHARE * len(_content(summary)))
    return ungrounded if len(ungrounded) > allowed else []


def is_correction(text: str) -> bool:
    """Whether a statement says an earlier one was wrong or has changed ("actually",
    "correction", "I meant", "changed", "now", "not X", "change of plan", "wait, no",
    "postponed", ...)."""
    return bool(_CORRECTION.search(text))


_TAKE_BACK = re.compile(
    rf"^\W*(?:(?:{_REPAIRS}|oops|i misspoke|i got it wrong|i was wrong|my mistake|make that)\b"
    r"|no,)",
    re.IGNORECASE,
)


def takes_back_what_went_before(text: str) -> bool:
    """Whether a statement opens by taking back what the participant just said ("Wait,
    no, ...", "Actually, ...", "Scratch that, ...", "Change of plan: ..."): a repair that
    refers to the utterance before it, unlike a change told on its own ("Sample rack 3 was
    moved to freezer A" is a correction word, not a repair of what came before)."""
    return bool(_TAKE_BACK.search(text))


def repairs(newer: str, older: str) -> bool:
    """Whether ``newer``, said right after ``older``, takes it back: it opens with a repair
    (:func:`takes_back_what_went_before`) and shares a word with it ("Wait, no, the
    driver's been rerouted to the south gate" after "The concrete truck is coming in
    through the north gate"), where a correction said later needs two (:func:`supersedes`).
    A change told on its own ("Sample rack 3 was moved to freezer A" after "Freezer B is
    set to minus 80 degrees") does not take back what came before; one told of "it"
    ("It moved to 11." after "The autoclave run is at 9.": :func:`refers_back`) does, and
    so does one naming only the new value ("Sorry, I meant 11:30.": :func:`is_value_only`)."""
    if is_request(newer) or is_request(older):
        return False
    if refers_back(newer):
        return True
    if not takes_back_what_went_before(newer):
        return False
    return bool(_parts(newer) & _parts(older)) or (
        is_value_only(newer) and bool(key_details(older))
    )


_TAKE_BACK_OPENING = re.compile(
    rf"^\W*(?:(?:{_REPAIRS}|oops|i misspoke|i got it wrong|i was wrong|my mistake|make that|"
    r"no)\b[\s,:;.!-]*)+",
    re.IGNORECASE,
)


def without_take_back(text: str) -> str:
    """``text`` without the words that open a repair ("Sorry, I meant", "Make that")."""
    return _TAKE_BACK_OPENING.sub("", text.strip())


def is_value_only(text: str) -> bool:
    """Whether a repair names only the new value ("Sorry, I meant 11:30.", "Make that
    Mira.", "No, 16:00."): past its opening words, numbers and names alone. Said right
    after a statement with a detail of its own, it replaces that detail
    (:func:`repairs`)."""
    said = [w.lower().strip(".:'’-") for w in words(without_take_back(text))]
    details = key_details(text)
    return 0 < len(said) <= 2 and all(w in details for w in said)


def _parts(text: str) -> set[str]:
    """Search terms, a hyphenated one also in its parts ("maple-otter-26": maple, otter,
    26), so a repair of one part of a code shares the rest with it."""
    out = set()
    for term in terms(text):
        out.add(term)
        out.update(p for p in re.split(r"[-.:'’]", term) if len(p) > 2 and p not in STOPWORDS)
    return out


_REFERENCE = re.compile(
    rf"^\W*(?:(?:{_REPAIRS}|oops|my mistake|and|so|oh|ok(?:ay)?)\W+)*"
    r"(?:it|that|this|they|she|he)(?:['’]s|['’]re)?\s",
    re.IGNORECASE,
)


def refers_back(text: str) -> bool:
    """Whether a statement is a change told of what was just said, named by a pronoun
    ("It moved to 11.", "Actually, that's at 16:00 now."): a correction whose subject is
    "it", "that", "they", ..., with a detail (a number, a name) of its own. Said right
    after a statement, it replaces it without sharing a word (:func:`repairs`)."""
    return _REFERENCE.search(text) is not None and is_correction(text) and bool(key_details(text))


_GREETING = re.compile(r"^(?:(?:hi|hello|hey)\b[\s,.!:;-]*)+", re.I)
"""A greeting a statement may open with."""


def is_request(text: str) -> bool:
    """Whether the participant asked for something rather than stated it: a question, or
    a request ("Tell me ...", "Thanks ...") without a number in it. A request states
    nothing to remember (its answer is the assistant's, which is shortened first)."""
    stripped = text.strip()
    if stripped.endswith("?"):
        return True
    greeted = _GREETING.sub("", stripped)
    if greeted:  # "Hi, my name is Dana." states a name; "Hi!" alone asks nothing
        stripped = greeted
    first = words(stripped[:40])
    opener = first[0].lower() if first else ""
    return opener in _REQUEST_OPENERS and not any(c.isdigit() for c in stripped)


def supersedes(newer: str, older: str) -> bool:
    """Whether ``newer`` (said later) replaces ``older``: a correction sharing two subject
    words with it ("Sorry, I meant 15 millilitres, not 12" after "The buffer needs 12
    millilitres"; not "Freezer A door seal replaced" after "Freezer B is at minus 80
    degrees": one shared word is too little to be the same thing), or an update
    repeating every word of it but its numbers, with a number of its own ("The door code
    is 4812 since this morning" after "The door code is 1234"; not "Sample C3 goes to the
    fridge" after "Sample B7 goes to the incubator": another subject); never one about
    another numbered thing (see :func:`_other_numbered_thing`)."""
    if is_request(newer) or is_request(older):
        return False
    new_terms, old_terms = set(terms(newer)), set(terms(older))
    if _other_numbered_thing(newer, older):
        return False
    if is_correction(newer):
        return len(new_terms & old_terms) >= 2
    numbers = {t for t in new_terms ^ old_terms if any(c.isdigit() for c in t)}
    subject = {t for t in old_terms if t not in numbers}
    return bool(subject) and subject <= new_terms and bool(numbers & new_terms)


def _other_numbered_thing(newer: str, older: str) -> bool:
    """Whether two statements are about different numbered things: the older has two
    numbers or more, and the newer's numbers, in the order said, differ from the older's
    at every place ("Sample 5 is in rack 6" does not replace "Sample 4 is in rack 5";
    "Sample 1 is in rack 4" replaces "Sample 1 is in rack 2", and "The meeting is at 4 in
    room 204" "The meeting is at 3 in room 204"). With one number each the two cannot be
    told apart from an update ("The door code is 4812" after "The door code is 1234"),
    and count as one."""
    old_numbers, new_numbers = _numbers(older), _numbers(newer)
    if len(old_numbers) < 2 or not new_numbers:
        return False
    return all(a != b for a, b in zip(old_numbers, new_numbers, strict=False))


def _numbers(text: str) -> list[str]:
    return list(dict.fromkeys(t for t in terms(text) if any(c.isdigit() for c in t)))


def importance(text: str) -> int:
    """How much a statement matters to keep: corrections, then key details, then other
    statements; questions and short pleasantries least."""
    score = 0
    if is_correction(text):
        score += 3
    score += min(len(key_details(text)), 3)
    if text.rstrip().endswith("?"):
        score -= 2
    if len(terms(text)) <= 1:
        score -= 1
    return score
