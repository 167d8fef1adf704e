"""Live-model evaluations of the conversation (``edge eval conversation``): the harness
and its cases (stale summaries across sections, long sessions with corrections and
oversized exchanges; long-session recall, ``evals/recall_cases*.toml``; the long
multi-participant recall set, ``evals/long_cases.toml``)."""

from ._harness import CASES, MINUTE, CaseResult, run_case, run_eval, score, settle
from ._long import PARTICIPANTS, LongResult, run_long_eval
from ._long import summarize_long as long_summary
from ._recall import (
    ACK,
    FILLERS,
    HALVES,
    LATER_SETS,
    RECALL_CASES,
    T0,
    RecallCase,
    RecallResult,
    recall_session,
    run_recall_case,
    run_recall_eval,
)
from ._recall import profile_budgets as recall_budgets
from ._recall import summarize as recall_summary

__all__ = [
    "ACK",
    "CASES",
    "FILLERS",
    "HALVES",
    "LATER_SETS",
    "MINUTE",
    "PARTICIPANTS",
    "RECALL_CASES",
    "T0",
    "CaseResult",
    "LongResult",
    "RecallCase",
    "RecallResult",
    "long_summary",
    "recall_budgets",
    "recall_session",
    "recall_summary",
    "run_case",
    "run_eval",
    "run_long_eval",
    "run_recall_case",
    "run_recall_eval",
    "score",
    "settle",
]
