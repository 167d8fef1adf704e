"""Shared helpers for the server tests."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from edge.interaction import PARTICIPANT_LEFT_TOPIC, ParticipantLeft
from edge.llm import ChatMessage, ScriptedReply
from edge.runtime import Agent, HandlerContext
from edge.server import ServiceSettings


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


def settings(**kw: object) -> ServiceSettings:
    base: dict[str, object] = {
        "host": "127.0.0.1",
        "port": 0,
        "wyoming_port": None,
        "mdns": False,
        "voice": False,
        "notes": False,
    }
    base.update(kw)
    return ServiceSettings(**base)  # type: ignore[arg-type]


def answer_for(messages: list[ChatMessage]) -> str | ScriptedReply:
    request = messages[-1].content
    if "Write plain text only" in messages[0].content:
        return "Summary."
    return ScriptedReply(f"You said: {request}. That is all.", delay_s=0.005)
