"""Where the router's own control text goes: a callback, or frames on a runtime topic."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ._types import AgentTurn

ROUTER_SOURCE = "router"
"""The ``source`` of every control frame the router publishes on its output topic."""

OutputCallback = Callable[[AgentTurn, str, str], Awaitable[None]]


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
        from edge.interaction import ResponseOutput

        self._runtime = runtime
        self._topic = topic
        self._turn = turn
        self._message = ResponseOutput
        self._sequence = 0

    async def send(self, route: str, text: str) -> None:
        frame = self._message(
            text=text,
            request_id=self._turn.turn_id,
            source=ROUTER_SOURCE,
            sequence=self._sequence,
            final=True,
            timestamp_us=self._turn.timestamp_us,
        )
        self._sequence += 1
        await self._runtime.publish(
            self._topic,
            frame,
            participant_id=self._turn.participant_id,
            source=ROUTER_SOURCE,
            correlation_id=self._turn.turn_id,
        )
