"""Message payloads and the standard topics that carry them."""

from ._messages import (
    ConversationContextUpdate,
    Exchange,
    Interrupted,
    ParticipantJoined,
    ParticipantLeft,
    ResponseOutput,
    UserQuery,
)
from ._topics import (
    INTERRUPTED_TOPIC,
    PARTICIPANT_JOINED_TOPIC,
    PARTICIPANT_LEFT_TOPIC,
    TEXT_OUTPUT_TOPIC,
    USER_QUERY_TOPIC,
    VOICE_OUTPUT_TOPIC,
)

__all__ = [
    "INTERRUPTED_TOPIC",
    "PARTICIPANT_JOINED_TOPIC",
    "PARTICIPANT_LEFT_TOPIC",
    "TEXT_OUTPUT_TOPIC",
    "USER_QUERY_TOPIC",
    "VOICE_OUTPUT_TOPIC",
    "ConversationContextUpdate",
    "Exchange",
    "Interrupted",
    "ParticipantJoined",
    "ParticipantLeft",
    "ResponseOutput",
    "UserQuery",
]
