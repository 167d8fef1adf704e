"""Recall indexes and memory heuristics: every statement a participant makes, kept and
searched with a request's words, what a statement is made of (search terms, key
details, corrections, which statement replaces which), and the reply that tells a stated
fact back (:func:`asked_of_record`, :func:`spoken`).

:class:`MemoryRecallIndex` keeps the index in memory (BM25 over stemmed terms);
:class:`StoreRecallIndex` reads a durable :class:`edge.store.SessionStore`'s FTS5 index.
The conversation (``edge.conversation``) chooses what to recall from them and renders
it into the prompt; its summary check and extractive summaries use the heuristics.
"""

from ._answer import NOT_STATED, Asked, asked_of_record, coverage, rating, spoken
from ._index import (
    MAX_STATEMENTS,
    MemoryRecallIndex,
    Pairs,
    RecallIndex,
    Statement,
    answers,
    replaces,
    superseded,
)
from ._match import lemma
from ._memory import (
    importance,
    invented_details,
    invented_words,
    is_correction,
    is_request,
    key_details,
    missing_details,
    refers_back,
    repairs,
    supersedes,
    takes_back_what_went_before,
    terms,
    words,
)
from ._store import StoreRecallIndex

__all__ = [
    "MAX_STATEMENTS",
    "NOT_STATED",
    "Asked",
    "MemoryRecallIndex",
    "Pairs",
    "RecallIndex",
    "Statement",
    "StoreRecallIndex",
    "answers",
    "asked_of_record",
    "coverage",
    "importance",
    "invented_details",
    "invented_words",
    "is_correction",
    "is_request",
    "key_details",
    "lemma",
    "missing_details",
    "rating",
    "refers_back",
    "repairs",
    "replaces",
    "spoken",
    "superseded",
    "supersedes",
    "takes_back_what_went_before",
    "terms",
    "words",
]
