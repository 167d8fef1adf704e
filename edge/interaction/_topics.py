"""The service's standard topics."""

from edge.runtime import Topic

from ._messages import (
    Interrupted,
    ParticipantJoined,
    ParticipantLeft,
    ResponseOutput,
    UserQuery,
)

USER_QUERY_TOPIC: Topic[UserQuery] = Topic("user.query", UserQuery)
"""Participants' turns, typed or transcribed; the router consumes them."""

VOICE_OUTPUT_TOPIC: Topic[ResponseOutput] = Topic("voice.output", ResponseOutput)
"""Replies to be spoken: the voice pipeline synthesizes them sentence by sentence."""

TEXT_OUTPUT_TOPIC: Topic[ResponseOutput] = Topic("text.output", ResponseOutput)
"""Replies for text front ends (chat panels, logs): never synthesized."""

PARTICIPANT_JOINED_TOPIC: Topic[ParticipantJoined] = Topic("participant.joined", ParticipantJoined)
PARTICIPANT_LEFT_TOPIC: Topic[ParticipantLeft] = Topic("participant.left", ParticipantLeft)
INTERRUPTED_TOPIC: Topic[Interrupted] = Topic("participant.interrupted", Interrupted)
