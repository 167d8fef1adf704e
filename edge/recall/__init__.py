"""Recall indexes and memory heuristics: every statement a participant makes, kept and
searched with a request's words, and what a statement is made of (search terms, key
details, corrections, which statement replaces which).

:class:`MemoryRecallIndex` keeps the index in memory (BM25 over stemmed terms);
:class:`StoreRecallIndex` reads a durable :class:`edge.store.SessionStore`'s FTS5 index.
The conversation (``edge.conversation``) chooses what to recall from them and renders
it into the prompt; its summary check and extractive summaries use the heuristics.
"""

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
from ._memory import (
    importance,
    invented_details,
    invented_words,
    is_correction,
    is_request,
    key_details,
    missing_details,
    repairs,
    supersedes,
    takes_back_what_went_before,
    terms,
    words,
)
from ._store import StoreRecallIndex

__all__ = [
    "MAX_STATEMENTS",
    "MemoryRecallIndex",
    "Pairs",
    "RecallIndex",
    "Statement",
    "StoreRecallIndex",
    "answers",
    "importance",
    "invented_details",
    "invented_words",
    "is_correction",
    "is_request",
    "key_details",
    "missing_details",
    "repairs",
    "replaces",
    "superseded",
    "supersedes",
    "takes_back_what_went_before",
    "terms",
    "words",
]
