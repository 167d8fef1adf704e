"""Where the router's own control text goes: a callback, or frames on a runtime topic."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ._types import AgentTurn

if TYPE_CHECKING:
    from edge.interaction import ResponseOutput

ROUTER_SOURCE = "router"
"""The ``source`` of every control frame the router publishes on its output topic."""

OutputCallback = Callable[[AgentTurn, str, str], Awaitable[None]]


def reply_frame(
    turn: AgentTurn, source: str, text: str, sequence: int = 0, final: bool = True
) -> ResponseOutput:
    """Frame ``sequence`` of ``source``'s reply to ``turn``: the one builder of the
    :class:`~edge.interaction.ResponseOutput` frames the router, the conversation and the
    notes agent publish (``request_id`` the turn id, ``timestamp_us`` the turn's time)."""
    from edge.interaction import ResponseOutput  # the runtime extra (routing spec)

    return ResponseOutput(
        text=text,
        request_id=turn.turn_id,
        source=source,
        sequence=sequence,
        final=final,
        timestamp_us=turn.timestamp_us,
    )


class ControlOutput:
    """Control text of one turn: ``send`` delivers one finite message."""

    async def send(self, route: str, text: str) -> None:
        raise NotImplementedError


class CallbackOutput(ControlOutput):
    def __init__(self, callback: OutputCallback, turn: AgentTurn) -> None:
        self._callback = callback
        self._turn = turn

    async def send(self, route: str, text: str) -> None:
        await self._callback(self._turn, route, text)


class TopicOutput(ControlOutput):
    """Control messages of one turn as ``ResponseOutput`` frames on the output topic.

    Each message is complete in itself (``final=True``), so output layers speak it at once
    (an acknowledgment must not wait for text that may never follow); the frames of one turn
    carry increasing ``sequence`` numbers, ``request_id`` the turn id and source "router".
    """

    def __init__(self, runtime: Any, topic: Any, turn: AgentTurn) -> None:
        self._runtime = runtime
        self._topic = topic
        self._turn = turn
        self._sequence = 0

    async def send(self, route: str, text: str) -> None:
        frame = reply_frame(self._turn, ROUTER_SOURCE, text, self._sequence)
        self._sequence += 1
        await self._runtime.publish(
            self._topic,
            frame,
            participant_id=self._turn.participant_id,
            source=ROUTER_SOURCE,
            correlation_id=self._turn.turn_id,
        )
