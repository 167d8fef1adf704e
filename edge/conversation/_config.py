"""Validation of the manager's configuration: topic names, budgets, participant ids."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ._render import DIALOGUE


def check_participant(participant_id: object) -> None:
    if not isinstance(participant_id, str) or not participant_id:
        raise ValueError(f"participant_id must be a non-empty string, got {participant_id!r}")


def positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def topic_names(topics: Iterable[str], option: str) -> tuple[str, ...]:
    if isinstance(topics, str):
        raise TypeError(f"{option} takes a sequence of topic names, not one string")
    names = tuple(topics)
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{option}: topic names must be non-empty strings, got {name!r}")
        if name == DIALOGUE:
            raise ValueError(f"{option}: {DIALOGUE!r} is reserved for the dialogue section")
    if len(set(names)) != len(names):
        raise ValueError(f"{option} names a topic twice")
    return names


def section_budgets(
    dialogue: int, topics: int | Mapping[str, int], names: tuple[str, ...]
) -> dict[str, int]:
    if not positive_int(dialogue):
        raise ValueError(f"dialogue_budget_bytes must be a positive int, got {dialogue!r}")
    out = {DIALOGUE: dialogue}
    if isinstance(topics, Mapping):
        missing = [n for n in names if n not in topics]
        extra = [n for n in topics if n not in names]
        if missing or extra:
            raise ValueError(
                "topic_budget_bytes must name every configured topic and no other"
                + (f"; missing {missing}" if missing else "")
                + (f"; not configured {extra}" if extra else "")
            )
        for name in names:
            out[name] = topics[name]
    else:
        out.update({n: topics for n in names})
    for name, value in out.items():
        if name != DIALOGUE and not positive_int(value):
            raise ValueError(
                f"topic_budget_bytes for {name!r} must be a positive int, got {value!r}"
            )
    return out
