"""Scripted destinations and an output recorder for router tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from edge.routing import (
    Admission,
    AgentTurn,
    DestinationResult,
    RoutingAid,
    current_turn_context,
)

AdmitFn = Callable[[AgentTurn, bool], Admission]
AnswerFn = Callable[[AgentTurn, Callable[[], Awaitable[None]]], Awaitable[DestinationResult]]


@dataclass
class Recorder:
    """Collects (event, ...) tuples in order, shared by the router output and agents."""

    events: list[tuple[Any, ...]] = field(default_factory=list)

    async def output(self, turn: AgentTurn, route: str, text: str) -> None:
        self.events.append(("out", turn.turn_id, route, text))

    def outputs(self) -> list[tuple[str, str]]:
        return [(e[2], e[3]) for e in self.events if e[0] == "out"]

    def of(self, kind: str) -> list[tuple[Any, ...]]:
        return [e for e in self.events if e[0] == kind]


@dataclass(eq=False)
class ScriptedAgent:
    """A RoutableAgent driven by a script. Default: accept, call started(), say
    "<name> says hi", return an answer with "<name> reply" as history text."""

    name: str
    rec: Recorder
    description: str = ""
    eligible: bool = True
    admissions: list[Admission] = field(default_factory=list)
    admit_fn: AdmitFn | None = None
    results: list[DestinationResult] = field(default_factory=list)
    answer_fn: AnswerFn | None = None
    fail_release: int = 0
    contexts: list[Any] = field(default_factory=list)
    turns: list[AgentTurn] = field(default_factory=list)
    priority: int = 0

    def routing_aid(self, participant_id: str) -> RoutingAid:
        return RoutingAid(
            self.name,
            self.description or f"{self.name} things",
            priority=self.priority,
            eligible=self.eligible,
        )

    async def admit(self, turn: AgentTurn, *, focused: bool) -> Admission:
        self.rec.events.append(("admit", self.name, turn.query, focused))
        if self.admit_fn is not None:
            return self.admit_fn(turn, focused)
        if self.admissions:
            return self.admissions.pop(0)
        return Admission("accept")

    async def answer(
        self, turn: AgentTurn, *, started: Callable[[], Awaitable[None]]
    ) -> DestinationResult:
        self.rec.events.append(("answer", self.name, turn.query))
        self.turns.append(turn)
        self.contexts.append(current_turn_context())
        if self.answer_fn is not None:
            return await self.answer_fn(turn, started)
        await started()
        self.rec.events.append(("say", self.name, f"{self.name} says hi"))
        if self.results:
            return self.results.pop(0)
        return DestinationResult("answer", f"{self.name} reply")

    async def release(self, participant_id: str) -> None:
        self.rec.events.append(("release", self.name, participant_id))
        if self.fail_release > 0:
            self.fail_release -= 1
            raise RuntimeError(f"{self.name} release failed")


@dataclass(eq=False)
class HookedAgent(ScriptedAgent):
    """A ScriptedAgent with the optional participant_left() departure hook."""

    fail_left: int = 0
    left_delay: float = 0.0

    async def participant_left(self, participant_id: str) -> None:
        self.rec.events.append(("left", self.name, participant_id))
        await anyio.sleep(self.left_delay)
        if self.fail_left > 0:
            self.fail_left -= 1
            raise RuntimeError(f"{self.name} departure failed")


def turn(query: str, pid: str = "p1", turn_id: str | None = None, **kw: Any) -> AgentTurn:
    return AgentTurn(pid, turn_id or f"t-{query}", query, **kw)
