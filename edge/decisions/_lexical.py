"""Cheap lexical evidence: how strongly a text matches each criterion's words and phrases.

Tiny models are poorly calibrated at choosing between labels; a destination's own words
("take a note", "remember that") are strong, nearly free evidence. Scores are additive
log-odds style numbers: 0 means no evidence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ._types import ChoiceQuestion, Criterion

_WORD = re.compile(r"[a-z0-9']+")

_STOPWORDS = frozenset(
    """a an the and or but if of to in on at by for with from as is are was were be been
    it its this that these those i me my we our you your he she they them their his her
    do does did so than then there here just very can could would should will shall may
    might must please about into up down out over also not no yes ok okay hey hi hello
    what which who whom whose when where why how""".split()
)
"""Function words carry no evidence about a destination; question words stay out too,
since a question can be for any destination ("what did I note?")."""

PHRASE_WEIGHT = 2.0
"""Evidence for a whole example phrase (two words or more) found in the text."""

WORD_WEIGHT = 1.0
"""Evidence for a content word shared with only this criterion (divided among sharers)."""

QUESTION_WEIGHT = 1.0
"""Evidence, for criteria that say they handle questions, that the text is a question."""

_QUESTION_OPENERS = frozenset(
    """what what's whats which who whom whose when where why how is are was were do does
    did can could would should will shall may might tell explain""".split()
)


def words(text: str) -> list[str]:
    """Lower-case word tokens with light stemming (notes -> note, noting -> note)."""
    return [_stem(w) for w in _WORD.findall(text.lower().replace("’", "'"))]


def _stem(word: str) -> str:
    word = word.removesuffix("'s")
    if len(word) > 5 and word.endswith("ing"):
        return word[:-3]
    if len(word) > 4 and word.endswith("ed"):
        return word[:-1] if word.endswith("ted") else word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def _contains(haystack: Sequence[str], needle: Sequence[str]) -> bool:
    n = len(needle)
    return any(list(haystack[i : i + n]) == list(needle) for i in range(len(haystack) - n + 1))


def _vocabulary(criterion: Criterion) -> set[str]:
    text = " ".join((criterion.label, criterion.description, *criterion.examples))
    return {w for w in words(text) if w not in _STOPWORDS}


def is_question(text: str) -> bool:
    """A question by its form: a question mark, or a question word first."""
    if text.rstrip().endswith("?"):
        return True
    first = _WORD.findall(text.lower().replace("’", "'"))[:1]
    return bool(first) and first[0] in _QUESTION_OPENERS


def lexical_scores(question: ChoiceQuestion) -> dict[str, float]:
    """Evidence per label for ``question.text``: whole example phrases found in it,
    content words it shares with the criterion's label, description and examples (a word
    shared by several criteria is split between them), and, when the text is a question,
    for criteria that say they handle questions."""
    text_words = words(question.text)
    asking = is_question(question.text)
    content = {w for w in text_words if w not in _STOPWORDS}
    vocabularies = {c.label: _vocabulary(c) for c in question.criteria}
    sharers: dict[str, int] = {}
    for vocab in vocabularies.values():
        for w in vocab:
            sharers[w] = sharers.get(w, 0) + 1
    scores: dict[str, float] = {}
    for criterion in question.criteria:
        vocab = vocabularies[criterion.label]
        score = sum(WORD_WEIGHT / sharers[w] for w in content & vocab)
        for example in criterion.examples:
            phrase = words(example)
            if len(phrase) >= 2 and _contains(text_words, phrase):
                score += PHRASE_WEIGHT
        if asking and "question" in vocab:
            score += QUESTION_WEIGHT
        scores[criterion.label] = score
    return scores
