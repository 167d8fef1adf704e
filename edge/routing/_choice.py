"""Turning routing aids into a decision question, and an uncertain answer or nothing
into a route or a clarification."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from edge.decisions import ChoiceAnswer, ChoiceQuestion, Criterion, validate_answer
from edge.interaction import Exchange

from ._history import as_lines
from ._types import RoutableAgent, RoutingAid

UNAVAILABLE_TEXT = "Sorry, I can't help with that right now."
CLARIFY_TEXT = "Sorry, I'm not sure what you'd like me to do."


def routing_question(
    text: str,
    candidates: list[str],
    aids: Mapping[str, RoutingAid],
    history: Sequence[Exchange],
    asker: str = "",
) -> ChoiceQuestion:
    """The decision question for ``candidates``, options sorted by route name so the same
    destinations always give the same (cacheable) option prefix; ``asker`` is the
    participant whose turn it is."""
    return ChoiceQuestion(
        text=text,
        criteria=tuple(
            Criterion(name, aids[name].description, tuple(aids[name].examples))
            for name in sorted(candidates)
        ),
        context=as_lines(history),
        asker=asker,
    )


def best_scored(
    answer: ChoiceAnswer,
    candidates: list[str],
    aids: Mapping[str, RoutingAid],
    default: str,
) -> str | None:
    """The highest-probability candidate (ties: the default route, then the aid's
    priority); None without usable scores."""
    usable = {
        name: p
        for name, p in answer.probabilities.items()
        if name in candidates and math.isfinite(p)
    }
    if not usable:
        return None
    return max(usable, key=lambda n: (usable[n], n == default, aids[n].priority))


def picked(
    question: ChoiceQuestion,
    answer: ChoiceAnswer,
    candidates: list[str],
    aids: Mapping[str, RoutingAid],
    default: str,
) -> str | None:
    """The candidate a decision picks: its label, or for an uncertain one with usable
    scores the highest-scoring candidate; None when nothing can be chosen. Raises
    :class:`~edge.decisions.DecisionError` for an answer that does not fit ``question``."""
    answer = validate_answer(question, answer)
    if answer.label is not None:
        return answer.label
    return best_scored(answer, candidates, aids, default)


def open_candidates(aids: Mapping[str, RoutingAid], declined: set[str]) -> list[str]:
    """The eligible destinations a turn can still go to."""
    return [name for name, aid in aids.items() if aid.eligible and name not in declined]


def clarification(aids: Mapping[str, RoutingAid], declined: set[str]) -> str:
    """A clarification question naming what the eligible destinations can do."""
    options = [
        aid.description.strip().rstrip(".")
        for name, aid in sorted(aids.items())
        if aid.eligible and name not in declined and aid.description.strip()
    ]
    if not options:
        return UNAVAILABLE_TEXT
    if len(options) == 1:
        return f"{CLARIFY_TEXT} I can help with this: {options[0]}."
    return f"{CLARIFY_TEXT} I can help with these: {'; '.join(options)}."


def aids_of(
    destinations: Mapping[str, RoutableAgent], participant_id: str
) -> dict[str, RoutingAid]:
    """Every destination's routing aid for ``participant_id``, checked."""
    aids: dict[str, RoutingAid] = {}
    for name, destination in destinations.items():
        aid = destination.routing_aid(participant_id)
        if not isinstance(aid, RoutingAid):
            raise TypeError(f"destination {name!r} returned {aid!r} from routing_aid()")
        aids[name] = aid
    return aids
