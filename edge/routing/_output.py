"""Where the router's own control text goes: a callback, or frames on a runtime topic."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ._types import AgentTurn

ROUTER_SOURCE = "router"
"""The ``source`` of every control frame the router publishes on its output topic."""

OutputCallback = Callable[[AgentTurn, str, str], Awaitable[None]]


class ControlOutput:
    """Control text of one turn. ``send`` delivers one finite message; ``finish`` marks
    the end of the router's output for the turn (before the destination's starts)."""

    async def send(self, route: str, text: str) -> None:
        raise NotImplementedError

    async def finish(self) -> None:
        """Nothing by default."""


class CallbackOutput(ControlOutput):
    def __init__(self, callback: OutputCallback, turn: AgentTurn) -> None:
        self._callback = callback
        self._turn = turn

    async def send(self, route: str, text: str) -> None:
        await self._callback(self._turn, route, text)


class TopicOutput(ControlOutput):
    """Frames of one ``(turn_id, "router")`` reply stream: each message is a frame with
    the next sequence number; ``finish`` closes the stream with an empty final frame (only
    when a frame was sent)."""

    def __init__(self, runtime: Any, topic: Any, turn: AgentTurn) -> None:
        from edge.interaction import ResponseOutput

        self._runtime = runtime
        self._topic = topic
        self._turn = turn
        self._message = ResponseOutput
        self._sequence = 0
        self._finished = False

    async def _publish(self, text: str, final: bool) -> None:
        frame = self._message(
            text=text,
            request_id=self._turn.turn_id,
            source=ROUTER_SOURCE,
            sequence=self._sequence,
            final=final,
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

    async def send(self, route: str, text: str) -> None:
        if self._finished:
            raise RuntimeError("the router's output for this turn is already finished")
        await self._publish(text, final=False)

    async def finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        if self._sequence:
            await self._publish("", final=True)
