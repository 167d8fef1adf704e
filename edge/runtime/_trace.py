"""Per-turn stage traces: where a spoken turn's time went, for finding stalls.

Off by default: set ``TRACES.enabled`` (``benchmarks/mixed_protocols.py`` does). Each
participant's latest turns keep their stages as ``(stage, perf_counter, info)`` marks,
started by :meth:`TurnTraces.start` (speech began) and added to by the voice (VAD end,
each Whisper pass queued/started/done, the final transcript, the query), the router (its
route), the reply (first token, first sentence) and the speaker (synthesis, first audio
out). The compute gate (:mod:`._compute`) keeps each step's wait, with the owner of the
work (:func:`owned_by`: ``voice:<participant>``, ``wyoming``; model steps ``llm``), so a
turn's trace also tells what it waited for there and whose work held the gate meanwhile.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

_OWNER: contextvars.ContextVar[str] = contextvars.ContextVar("compute_owner", default="")


@contextmanager
def owned_by(owner: str) -> Iterator[None]:
    """Work started in this context (its worker threads too) belongs to ``owner``."""
    token = _OWNER.set(owner)
    try:
        yield
    finally:
        _OWNER.reset(token)


def current_owner() -> str:
    return _OWNER.get()


@dataclass(frozen=True)
class GateHold:
    """One step at the compute gate: asked at ``asked``, got it at ``got``, gave it back
    at ``released`` (perf_counter seconds)."""

    kind: str
    owner: str
    asked: float
    got: float
    released: float
    urgent: bool = False  # it waited in line as urgent work (``_compute.URGENT``)

    @property
    def waited_s(self) -> float:
        return self.got - self.asked


@dataclass
class TurnTrace:
    participant_id: str
    marks: list[tuple[str, float, dict[str, Any]]] = field(default_factory=list)

    def at(self, stage: str) -> float | None:
        """When ``stage`` was first marked."""
        return next((t for s, t, _ in self.marks if s == stage), None)


class TurnTraces:
    """The latest turns' traces (``keep`` participants) and gate holds (``keep_holds``)."""

    def __init__(self, keep: int = 256, keep_holds: int = 20_000) -> None:
        self.enabled = False
        self._turns: OrderedDict[str, deque[TurnTrace]] = OrderedDict()
        self._keep = keep
        self.holds: deque[GateHold] = deque(maxlen=keep_holds)
        self._lock = threading.Lock()

    def start(self, participant_id: str, stage: str = "audio_in", **info: Any) -> None:
        """A new turn of ``participant_id`` begins (speech started)."""
        if not self.enabled:
            return
        with self._lock:
            turns = self._turns.pop(participant_id, None) or deque(maxlen=8)
            turns.append(TurnTrace(participant_id))
            self._turns[participant_id] = turns
            while len(self._turns) > self._keep:
                self._turns.popitem(last=False)
        self.mark(participant_id, stage, **info)

    def mark(
        self, participant_id: str | None, stage: str, *, once: bool = False, **info: Any
    ) -> None:
        """``stage`` of ``participant_id``'s current turn happened now (``once``: unless
        the turn has that stage already)."""
        if not self.enabled or participant_id is None:
            return
        now = time.perf_counter()
        with self._lock:
            turns = self._turns.get(participant_id)
            if turns and not (once and turns[-1].at(stage) is not None):
                turns[-1].marks.append((stage, now, info))

    def hold(self, hold: GateHold) -> None:
        if self.enabled:
            self.holds.append(hold)

    def turns(self, participant_id: str) -> list[TurnTrace]:
        with self._lock:
            return list(self._turns.get(participant_id, ()))

    def gate_during(self, start: float, end: float) -> list[GateHold]:
        """Gate holds that overlapped ``[start, end]``."""
        return [h for h in list(self.holds) if h.released >= start and h.asked <= end]

    def clear(self) -> None:
        with self._lock:
            self._turns.clear()
            self.holds.clear()


TRACES = TurnTraces()
"""The process's traces (the voice, the router, the reply and the gate mark into it)."""
