"""Validation of the router's runtime configuration (topics and their payloads)."""

from __future__ import annotations

from typing import Any


def validate_runtime_topics(
    *,
    query_topic: Any,
    output_topic: Any,
    participant_joined_topic: Any,
    participant_left_topic: Any,
    interrupted_topic: Any,
) -> bool:
    """Check the runtime topics; True when runtime mode is configured.

    Incomplete configuration raises ValueError, a wrong payload class or a non-topic
    TypeError, and a missing runtime package ImportError.
    """
    given = {
        "query_topic": query_topic,
        "output_topic": output_topic,
        "participant_joined_topic": participant_joined_topic,
        "participant_left_topic": participant_left_topic,
        "interrupted_topic": interrupted_topic,
    }
    supplied = {name: topic for name, topic in given.items() if topic is not None}
    if not supplied:
        return False
    if (query_topic is None) != (output_topic is None):
        raise ValueError("query_topic and output_topic must be supplied together")
    if query_topic is None:
        names = ", ".join(sorted(supplied))
        raise ValueError(f"{names} need query_topic and output_topic as well")
    if participant_left_topic is not None and participant_joined_topic is None:
        raise ValueError(
            "participant_left_topic requires participant_joined_topic, so that a departed "
            "participant can be readmitted"
        )
    try:
        from edge.interaction import (
            Interrupted,
            ParticipantJoined,
            ParticipantLeft,
            ResponseOutput,
            UserQuery,
        )
        from edge.runtime import Topic
    except ImportError as exc:  # pragma: no cover - the runtime ships with the package
        raise ImportError(f"runtime topics need edge.runtime and edge.interaction: {exc}") from exc
    payloads = {
        "query_topic": UserQuery,
        "output_topic": ResponseOutput,
        "participant_joined_topic": ParticipantJoined,
        "participant_left_topic": ParticipantLeft,
        "interrupted_topic": Interrupted,
    }
    for name, topic in supplied.items():
        if not isinstance(topic, Topic):
            raise TypeError(f"{name} must be an edge.runtime.Topic, got {type(topic).__name__}")
        expected = payloads[name]
        if topic.payload is not expected:
            raise TypeError(
                f"{name} {topic.name!r} carries {topic.payload.__name__}; "
                f"it must carry exactly {expected.__name__}"
            )
    names = [topic.name for topic in supplied.values()]
    if len(set(names)) != len(names):
        raise ValueError(f"configured topic names must be distinct, got {names}")
    return True
