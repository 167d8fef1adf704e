"""Typed choice decisions (which destination should handle a request?), on the local
model or scripted for tests."""

from ._lexical import lexical_scores
from ._local import LocalDecisionService
from ._scripted import ScriptedChoice, ScriptedDecisions
from ._types import (
    ChoiceAnswer,
    ChoiceQuestion,
    Criterion,
    DecisionError,
    DecisionService,
    PrefetchDecisions,
    PreparingDecisions,
    answer_from_logits,
    validate_answer,
)

__all__ = [
    "ChoiceAnswer",
    "ChoiceQuestion",
    "Criterion",
    "DecisionError",
    "DecisionService",
    "LocalDecisionService",
    "PrefetchDecisions",
    "PreparingDecisions",
    "ScriptedChoice",
    "ScriptedDecisions",
    "answer_from_logits",
    "lexical_scores",
    "validate_answer",
]
