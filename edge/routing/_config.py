"""The router's configuration: one frozen value, checked once when it is made."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Literal, TypedDict

if TYPE_CHECKING:
    from edge.interaction import (
        Interrupted,
        ParticipantJoined,
        ParticipantLeft,
        ResponseOutput,
        UserQuery,
    )
    from edge.runtime import Topic

DEFAULT_CONTEXT_BUDGET_BYTES = 8000
"""Bytes of completed history shown to destinations and routing per participant. About
2,400 tokens of a small model: a cold prompt of that size takes seconds on a 2-core CPU,
so device profiles usually pass a smaller budget (see ``edge device``)."""

PREPARE_DELAY_S = 0.5
"""Seconds after an exchange before the participant's next decision is prepared: their
conversation's re-warm (after 0.25 s of quiet, ``ContextConfig(rewarm_quiet_s=)``) takes
the model first, since every next answer uses it and only some decisions ask the model."""

StatusCallback = Callable[[Literal["processing", "idle"], str], Awaitable[None]]
ParticipantCallback = Callable[[str], Awaitable[None]]
FailureCallback = Callable[[str, str, Exception], Awaitable[None]]


def _payloads() -> dict[str, type]:
    from edge.interaction import (
        Interrupted,
        ParticipantJoined,
        ParticipantLeft,
        ResponseOutput,
        UserQuery,
    )

    return {
        "query": UserQuery,
        "output": ResponseOutput,
        "joined": ParticipantJoined,
        "left": ParticipantLeft,
        "interrupted": Interrupted,
    }


@dataclass(frozen=True)
class RouterTopics:
    """The runtime topics a router serves: turns arrive on ``query`` and its own control
    text leaves on ``output``; ``joined`` reopens admission after a departure on ``left``
    (so ``left`` needs ``joined``); ``interrupted`` cancels turns. A payload class other
    than the exact one (the routing spec's rule; a subclass passes the type checker)
    raises TypeError, a ``left`` without ``joined`` or two topics with one name
    ValueError."""

    query: Topic[UserQuery]
    output: Topic[ResponseOutput]
    joined: Topic[ParticipantJoined] | None = None
    left: Topic[ParticipantLeft] | None = None
    interrupted: Topic[Interrupted] | None = None

    def __post_init__(self) -> None:
        if self.left is not None and self.joined is None:
            raise ValueError(
                "the left topic requires a joined topic, so that a departed participant "
                "can be readmitted"
            )
        payloads = _payloads()
        given = {f.name: getattr(self, f.name) for f in fields(self)}
        supplied = {name: topic for name, topic in given.items() if topic is not None}
        for name, topic in supplied.items():
            if topic.payload is not payloads[name]:
                raise TypeError(
                    f"{name} topic {topic.name!r} carries {topic.payload.__name__}; "
                    f"it must carry exactly {payloads[name].__name__}"
                )
        names = [topic.name for topic in supplied.values()]
        if len(set(names)) != len(names):
            raise ValueError(f"configured topic names must be distinct, got {names}")


@dataclass(frozen=True)
class RouterConfig:
    """How a router behaves (device profiles derive ``context_budget_bytes``).

    ``default_destination`` answers once after the selected routes declined;
    ``context_budget_bytes`` bounds the completed history shown to destinations and
    routing; ``acknowledgment_delay_s`` (with an acknowledgment model on the router) is the
    silence before a brief intention acknowledgment; ``prepare_delay_s`` is how long after
    an exchange the participant's next decision is prepared; ``topics`` puts the router on
    a runtime (see :meth:`AgentRouter.runtime_subscriber`)."""

    default_destination: str = "conversation"
    context_budget_bytes: int = DEFAULT_CONTEXT_BUDGET_BYTES
    acknowledgment_delay_s: float | None = None
    prepare_delay_s: float = PREPARE_DELAY_S
    topics: RouterTopics | None = None

    def __post_init__(self) -> None:
        budget = self.context_budget_bytes
        if budget < 0:
            raise ValueError(f"context_budget_bytes must be >= 0, got {budget}")
        if not self.prepare_delay_s >= 0:
            raise ValueError(f"prepare_delay_s must be >= 0, got {self.prepare_delay_s!r}")


@dataclass(frozen=True)
class ParticipantHooks:
    """The application's callbacks around a participant's turns, all optional.

    ``initialize`` is awaited once before a participant's first turn (again after an
    interrupted one); ``cleanup`` runs after their destinations were released on departure
    (idempotent, retried after a failure); ``status`` receives ``processing`` / ``idle``
    around each runtime turn (its failures are logged); ``failed`` hears ``(participant,
    turn id, exception)`` of a runtime turn that ended with an error, before its ``idle``.
    They run on the delivery event loop and must not reenter the router."""

    initialize: ParticipantCallback | None = None
    cleanup: ParticipantCallback | None = None
    status: StatusCallback | None = None
    failed: FailureCallback | None = None


class SpecKeywords(TypedDict, total=False):
    """The routing spec's constructor keywords (``shared/spec/routing.md``), accepted by
    :meth:`AgentRouter.from_spec <edge.routing.AgentRouter.from_spec>` and folded into a
    config and hooks by :func:`fold_spec_keywords`."""

    default_destination: str
    context_budget_bytes: int
    acknowledgment_delay_secs: float | None
    query_topic: Topic[UserQuery] | None
    output_topic: Topic[ResponseOutput] | None
    participant_joined_topic: Topic[ParticipantJoined] | None
    participant_left_topic: Topic[ParticipantLeft] | None
    interrupted_topic: Topic[Interrupted] | None
    initialize_participant: ParticipantCallback | None
    cleanup_participant: ParticipantCallback | None
    set_status: StatusCallback | None


_SPEC_TOPICS = {
    "query_topic": "query",
    "output_topic": "output",
    "participant_joined_topic": "joined",
    "participant_left_topic": "left",
    "interrupted_topic": "interrupted",
}
_SPEC_HOOKS = {
    "initialize_participant": "initialize",
    "cleanup_participant": "cleanup",
    "set_status": "status",
}


def fold_spec_keywords(
    config: RouterConfig, hooks: ParticipantHooks, spec: SpecKeywords
) -> tuple[RouterConfig, ParticipantHooks]:
    """``config`` and ``hooks`` with the spec's keywords applied over them (the spec's
    names, checked as the config checks them: ``query_topic`` and ``output_topic`` come
    together, a left topic needs a joined one)."""
    unknown = set(spec) - set(SpecKeywords.__annotations__)
    if unknown:
        raise TypeError(f"AgentRouter got unexpected keyword(s): {', '.join(sorted(unknown))}")
    given: dict[str, Any] = dict(spec)
    changes: dict[str, Any] = {}
    for name in ("default_destination", "context_budget_bytes"):
        if name in given:
            changes[name] = given[name]
    if "acknowledgment_delay_secs" in given:
        changes["acknowledgment_delay_s"] = given["acknowledgment_delay_secs"]
    topics = {new: given[old] for old, new in _SPEC_TOPICS.items() if given.get(old) is not None}
    if topics:
        if "query" not in topics or "output" not in topics:
            raise ValueError("query_topic and output_topic must be supplied together")
        changes["topics"] = RouterTopics(**topics)
    callbacks = {new: given[old] for old, new in _SPEC_HOOKS.items() if old in given}
    return replace(config, **changes), replace(hooks, **callbacks)
