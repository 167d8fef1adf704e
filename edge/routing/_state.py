"""Per-participant and per-turn state the router keeps."""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from ._types import AgentTurn


class TurnCancelled(RuntimeError):
    """The turn was cancelled before it completed: by :meth:`AgentRouter.interrupt`, a
    newer turn of the same participant, the participant's departure, or shutdown."""


@dataclass(eq=False)
class Run:
    """One turn from arrival until it has drained."""

    turn: AgentTurn
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)
    started: bool = False


@dataclass(eq=False)
class Participant:
    """What the router keeps for one participant: focus, the destinations it used
    (released on departure), lifecycle flags and its turns (serialized by ``lock``). Their
    completed exchanges live with the dialogue's owner (``DialogueHistory``)."""

    participant_id: str
    focus: str | None = None
    used: set[str] = field(default_factory=set)
    initialized: bool = False
    cleaned: bool = False
    completed: int = 0  # exchanges completed here; caller history never seeds after one
    runs: list[Run] = field(default_factory=list)
    lock: anyio.Lock = field(default_factory=anyio.Lock)
