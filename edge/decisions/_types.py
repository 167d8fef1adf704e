"""Typed choice decisions: a question with labelled criteria, and a validated answer."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from edge.llm import RequestMetrics

AnswerSource = Literal["model", "lexical", "single", "scripted", "none"]

_SUM_TOLERANCE = 1e-6


class DecisionError(ValueError):
    """A malformed question or answer; the message names the problem."""


@dataclass(frozen=True)
class Criterion:
    """One option of a choice: a stable ``label`` and what makes it the right choice.

    ``examples`` are short phrases typical of requests for this option; the local
    service uses them as cheap lexical evidence next to the model's scores.
    """

    label: str
    description: str
    examples: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not self.label.strip():
            raise DecisionError("a criterion needs a non-empty label")
        if not isinstance(self.description, str):
            raise DecisionError(f"criterion {self.label!r}: description must be a string")
        object.__setattr__(self, "examples", tuple(self.examples))


@dataclass(frozen=True)
class ChoiceQuestion:
    """Which of ``criteria`` fits ``text``?

    ``instruction`` says what is being decided (kept in the stable prompt prefix);
    ``context`` holds recent lines of the conversation, oldest first, that may help;
    ``asker`` says whose (a participant id; "" for nobody in particular), so a service
    may keep per-asker state such as the local model's prompt prefix.
    """

    text: str
    criteria: tuple[Criterion, ...]
    instruction: str = "Choose the destination that should handle the user's request."
    context: tuple[str, ...] = ()
    asker: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "criteria", tuple(self.criteria))
        object.__setattr__(self, "context", tuple(self.context))
        if not isinstance(self.text, str):
            raise DecisionError("a choice question needs text")
        if not self.criteria:
            raise DecisionError("a choice question needs at least one criterion")
        labels = [c.label for c in self.criteria]
        if len(set(labels)) != len(labels):
            raise DecisionError(f"criterion labels must be distinct, got {labels}")

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(c.label for c in self.criteria)


@dataclass(frozen=True)
class ChoiceAnswer:
    """The outcome of a choice decision.

    ``label`` is the chosen criterion, or None when the service is not confident enough
    (a "clarify" outcome). ``probabilities`` gives every label a probability and sums to
    1; it is empty only for an abstention without usable scores (then ``label`` is None).
    ``confidence`` is the chosen (or best) label's probability.
    """

    label: str | None
    confidence: float
    probabilities: Mapping[str, float] = field(default_factory=dict)
    source: AnswerSource = "model"
    metrics: RequestMetrics | None = None

    @property
    def uncertain(self) -> bool:
        return self.label is None

    @property
    def has_scores(self) -> bool:
        return bool(self.probabilities)

    def ranked(self) -> list[tuple[str, float]]:
        """Labels with their probabilities, most probable first."""
        return sorted(self.probabilities.items(), key=lambda kv: -kv[1])


def validate_answer(question: ChoiceQuestion, answer: object) -> ChoiceAnswer:
    """Return ``answer`` if it is a consistent answer to ``question``; else raise
    :class:`DecisionError` naming what is wrong."""
    if not isinstance(answer, ChoiceAnswer):
        kind = type(answer).__name__
        raise DecisionError(f"a decision service returned {kind}, not ChoiceAnswer")
    labels = set(question.labels)
    probs = dict(answer.probabilities)
    if answer.label is not None and answer.label not in labels:
        raise DecisionError(f"answer label {answer.label!r} is not one of {sorted(labels)}")
    if not (isinstance(answer.confidence, int | float) and 0.0 <= answer.confidence <= 1.0):
        raise DecisionError(f"confidence {answer.confidence!r} is not within [0, 1]")
    if not probs:
        if answer.label is not None:
            raise DecisionError("an answer that chooses a label must give probabilities")
        return answer
    if set(probs) != labels:
        raise DecisionError(
            f"probabilities cover {sorted(probs)}, the question's labels are {sorted(labels)}"
        )
    for label, p in probs.items():
        if not (isinstance(p, int | float) and math.isfinite(p) and 0.0 <= p <= 1.0):
            raise DecisionError(f"probability of {label!r} is {p!r}, not within [0, 1]")
    total = math.fsum(probs.values())
    if abs(total - 1.0) > _SUM_TOLERANCE:
        raise DecisionError(f"probabilities sum to {total:.6f}, not 1")
    return answer


def answer_from_logits(
    question: ChoiceQuestion,
    logits: Mapping[str, float],
    *,
    uncertain_below: float,
    source: AnswerSource,
    metrics: RequestMetrics | None = None,
) -> ChoiceAnswer:
    """Softmax ``logits`` (one per label) into a validated answer; the best label is
    chosen unless its probability is below ``uncertain_below`` or it ties with another."""
    labels = question.labels
    values = [float(logits[label]) for label in labels]
    top = max(values)
    weights = [math.exp(v - top) for v in values]
    total = math.fsum(weights)
    probs = {label: w / total for label, w in zip(labels, weights, strict=True)}
    # Renormalize the rounding error into the largest entry so the sum is exactly 1.
    best = max(labels, key=lambda lb: (probs[lb], -labels.index(lb)))
    probs[best] = max(0.0, 1.0 - math.fsum(p for lb, p in probs.items() if lb != best))
    confidence = probs[best]
    tied = sum(1 for v in values if v == top) > 1
    label = best if confidence >= uncertain_below and not tied else None
    return validate_answer(
        question, ChoiceAnswer(label, confidence, probs, source=source, metrics=metrics)
    )


@runtime_checkable
class DecisionService(Protocol):
    """Answers typed choice questions; the router depends only on this."""

    async def decide(self, question: ChoiceQuestion) -> ChoiceAnswer: ...


@runtime_checkable
class PreparingDecisions(Protocol):
    """A decision service that can get ready for the questions a turn will ask (e.g.
    evaluate the local model's option prefix at start-up)."""

    async def prepare(self, question: ChoiceQuestion) -> None: ...


@runtime_checkable
class PrefetchDecisions(Protocol):
    """A decision service that can answer a question ahead of the turn that will ask it,
    and give the turn that same answer (:class:`~edge.speculation.PrefetchingDecisions`)."""

    async def prefetch(self, question: ChoiceQuestion) -> ChoiceAnswer: ...
