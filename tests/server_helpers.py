"""Shared helpers for the server tests."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from edge.interaction import PARTICIPANT_LEFT_TOPIC, ParticipantLeft
from edge.runtime import Agent, HandlerContext


async def wait_for(condition: Callable[[], object], limit: float = 5.0) -> None:
    """Poll ``condition`` until true; fail after ``limit`` seconds."""
    with anyio.fail_after(limit):
        while not condition():  # noqa: ASYNC110 - polling test helper
            await anyio.sleep(0.01)


class Departures(Agent):
    """Records every ParticipantLeft: (participant, reason)."""

    def __init__(self) -> None:
        super().__init__()
        self.left: list[tuple[str | None, str]] = []
        self.add_handler(PARTICIPANT_LEFT_TOPIC, self.on_left)

    async def on_left(self, message: ParticipantLeft, ctx: HandlerContext) -> None:
        self.left.append((ctx.metadata.participant_id, message.reason))
