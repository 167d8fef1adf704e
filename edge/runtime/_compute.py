"""One gate for the CPU-heavy model steps of a small device.

A llama.cpp evaluation step and a Whisper pass each spread over every core, each with its
own OpenMP team. Run at once on two cores their threads wait at each other's barriers
and both slow down many times over: beside a streaming answer, a 65 ms Whisper pass took
2-10 s (benchmarks/README.md, "versus_chain"). Holding the gate for one step at a time
keeps each at full speed: a Whisper pass waits for at most one llama.cpp step (a token,
or one prompt batch), and the model for at most one pass.

The gate is handed over in order (:class:`OrderedLock`): the waiter of the most urgent
kind first; among urgent work, the work of the turn that began first (its place in line,
:func:`~edge.runtime.place_in_line`: an answer's steps, the first sentence of a listener
who has waited longest), then the one that waited longest. A plain lock lets the thread that just
released it take it again before a waiter wakes, so a model stepping token after token
could keep a Whisper pass out for many steps. A pass that may end a turn (someone finished
speaking and waits for the answer) and the sentence a listener waits for in silence are
:data:`URGENT`: they go before the others' steps, partial passes and sentences
synthesized ahead (:func:`urgency` marks the work of the calling thread).
"""

from __future__ import annotations

import contextvars
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ._trace import TRACES, GateHold, current_owner
from ._turn_order import place_in_line

URGENT = 0
"""Someone waits for this step alone: a Whisper pass that may end a turn (final, or
speculative at a pause), the sentence a listener waits for in silence."""
NORMAL = 1
"""Every other step: model tokens, sentences synthesized ahead, partial passes."""

_URGENCY: contextvars.ContextVar[int] = contextvars.ContextVar("compute_urgency", default=NORMAL)
_YIELDS: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar(
    "compute_yields", default=None
)


FIRST_SENTENCE = "tts first"
"""The gate's kind for a sentence a listener waits for in silence."""


class YieldedToUrgentError(RuntimeError):
    """Work that gives way (:func:`yielding`) met urgent work at the gate: not run."""


@contextmanager
def urgency(level: int) -> Iterator[None]:
    """Steps taken in this context (thread) wait in the gates at ``level``."""
    token = _URGENCY.set(level)
    try:
        yield
    finally:
        _URGENCY.reset(token)


def current_urgency() -> int:
    return _URGENCY.get()


@contextmanager
def yielding(still: Callable[[], bool] | None = None) -> Iterator[None]:
    """Ordinary steps taken in this context give way to urgent work: where urgent work
    holds the gate, waits for it or is in its grace, they raise
    :class:`YieldedToUrgentError` instead of waiting. For work worth doing only when it
    costs nobody anything (a partial transcription: while it waits for the gate it holds
    the recognizer, and a pass that may end someone's turn would queue behind it).
    ``still``: whether the work still gives way (it may become awaited meanwhile)."""
    token = _YIELDS.set(still or _always)
    try:
        yield
    finally:
        _YIELDS.reset(token)


def _always() -> bool:
    return True


def gives_way() -> bool:
    """Whether the work of this context (thread) gives way to urgent work now
    (:func:`yielding`)."""
    still = _YIELDS.get()
    return still is not None and still()


@dataclass
class GateStats:
    """Per kind of step: how many took the gate, how long they waited for it and the
    longest any held it (seconds)."""

    count: dict[str, int] = field(default_factory=dict)
    waited_s: dict[str, float] = field(default_factory=dict)
    max_wait_s: dict[str, float] = field(default_factory=dict)
    max_held_s: dict[str, float] = field(default_factory=dict)

    def add(self, kind: str, wait: float, held: float) -> None:
        self.count[kind] = self.count.get(kind, 0) + 1
        self.waited_s[kind] = self.waited_s.get(kind, 0.0) + wait
        self.max_wait_s[kind] = max(self.max_wait_s.get(kind, 0.0), wait)
        self.max_held_s[kind] = max(self.max_held_s.get(kind, 0.0), held)


class OrderedLock:
    """A lock handed to its waiters by urgency (lowest first), then (urgent work) place in
    line, then arrival order; never
    re-taken by a releasing thread while others wait. Blocking: worker threads only.

    ``urgent_grace_s``: after an :data:`URGENT` holder releases it, only urgent work may
    take it for that long. Urgent work often comes as a run of short steps (an answer's
    first tokens, each asked for by the event loop after the last): between two of them
    nobody urgent is waiting yet, and a waiting ordinary step (a long sentence synthesized
    ahead: 0.5 s) would take the lock and hold the run up. For ``turn_grace_s`` (shorter:
    urgent work waits, and the run may be over) urgent work of a turn that began after the
    run's waits too, so another speaker's pass at a pause cannot take the gap between two
    of an earlier answer's first tokens. Such a waiter, once kept out, sleeps until the
    run's whole grace lapses unless the lock changes hands first (waking it when the turn
    grace ends measured worse for four people speaking at once). A run that ends its turn's
    urgent work (``ends_run``: a first sentence) leaves no such grace."""

    def __init__(self, urgent_grace_s: float = 0.0, turn_grace_s: float = 0.0) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._held = False
        self._waiting: list[tuple[int, int]] = []
        self._arrivals = 0
        self._grace_s = urgent_grace_s
        self._turn_grace_s = turn_grace_s
        self._turn_until = 0.0
        self._holder = NORMAL
        self._holder_place = 0.0
        self._urgent_until = 0.0
        self._grace_place = 0.0  # the place in line of the urgent run in its grace
        self._places: dict[tuple[int, int], float] = {}  # urgent waiters' places in line

    def locked(self) -> bool:
        return self._held

    @contextmanager
    def hold(
        self,
        level: int | None = None,
        *,
        graceless: bool = False,
        yields: bool = False,
        place: float | None = None,
        ends_run: bool = False,
    ) -> Iterator[float]:
        """Hold the lock; yields how long the caller waited for it (seconds).
        ``graceless``: work never held back by an urgent run's grace. ``yields``:
        ordinary work that raises :class:`YieldedToUrgentError` rather than wait while
        urgent work holds, waits for or is in its grace. ``place``: urgent work's place in
        line (its turn's start, perf_counter seconds; default: now). ``ends_run``: the last
        of its turn's urgent work (a first sentence): no turn grace after it."""
        level = current_urgency() if level is None else level
        where = time.perf_counter() if place is None else place
        wait = self._acquire(level, graceless, yields and level > URGENT, where)
        try:
            yield wait
        finally:
            self._release(ends_run)

    def _acquire(
        self,
        level: int,
        graceless: bool = False,
        yields: bool = False,
        place: float = 0.0,
    ) -> float:
        started = time.perf_counter()
        with self._cond:
            self._arrivals += 1
            ticket = (level, self._arrivals)
            self._waiting.append(ticket)
            self._places[ticket] = place if level <= URGENT else 0.0
            if level <= URGENT:
                self._cond.notify_all()  # a waiter that gives way to urgent work
            while self._held or self._next() != ticket or self._in_grace(level, graceless, place):
                if yields and self._urgent_present():
                    self._waiting.remove(ticket)
                    del self._places[ticket]
                    self._cond.notify_all()  # the next in line may be free to go now
                    raise YieldedToUrgentError("urgent work holds or waits for the gate")
                grace = self._urgent_until - time.perf_counter()
                self._cond.wait(grace if not self._held and grace > 0 else None)
            self._waiting.remove(ticket)
            self._held, self._holder = True, level
            self._holder_place = self._places.pop(ticket)
        return time.perf_counter() - started

    def urgent_waiting(self) -> bool:
        """Whether urgent work waits for the lock now."""
        with self._cond:
            return self._urgent_in_line()

    def _urgent_in_line(self) -> bool:
        return any(level <= URGENT for level, _ in self._waiting)

    def _next(self) -> tuple[int, int]:
        """The waiter next in line: by urgency, then (urgent) place, then arrival."""
        return min(self._waiting, key=lambda t: (t[0], self._places[t], t[1]))

    def _urgent_present(self) -> bool:
        return (
            (self._held and self._holder <= URGENT)
            or self._urgent_in_line()
            or time.perf_counter() < self._urgent_until
        )

    def _in_grace(self, level: int, graceless: bool, place: float) -> bool:
        """Whether an urgent run's grace keeps this waiter out (never a ``graceless``
        one): ordinary work, and urgent work of a turn that began after the run's."""
        now = time.perf_counter()
        if graceless or now >= self._urgent_until:
            return False
        return level > URGENT or (now < self._turn_until and place > self._grace_place)

    def _release(self, ends_run: bool = False) -> None:
        with self._cond:
            self._held = False
            if self._holder <= URGENT:
                now = time.perf_counter()
                self._urgent_until = now + self._grace_s
                self._turn_until = now if ends_run else now + self._turn_grace_s
                self._grace_place = self._holder_place
            self._cond.notify_all()


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class ComputeGate:
    """An :class:`OrderedLock` held around each heavy model step, when ``enabled`` (by
    default on devices with at most ``SMALL_DEVICE_CORES`` cores; ``EDGE_COMPUTE_GATE=0``
    or ``1`` decides). ``stats`` counts the steps and their waits by kind."""

    SMALL_DEVICE_CORES = 4
    URGENT_GRACE_S = 0.03
    TURN_GRACE_S = 0.01

    def __init__(self, enabled: bool | None = None) -> None:
        if enabled is None:
            setting = os.environ.get("EDGE_COMPUTE_GATE")
            enabled = setting != "0" if setting else _cores() <= self.SMALL_DEVICE_CORES
        self.enabled = enabled
        self._lock = OrderedLock(urgent_grace_s=self.URGENT_GRACE_S, turn_grace_s=self.TURN_GRACE_S)
        self.stats = GateStats()

    @contextmanager
    def hold(self, kind: str = "step") -> Iterator[None]:
        """Run the enclosed step alone among gated steps (blocking: call it in a worker
        thread, never on the event loop)."""
        if not self.enabled:
            yield
            return
        # The model's own steps need no grace from each other: its scheduler orders them,
        # and a background request holding the model would keep an answer waiting. A first
        # sentence ends a turn (its listener's own answer may be the run going on).
        level = current_urgency()
        graceless = kind in ("llm", FIRST_SENTENCE)
        place = place_in_line()
        with self._lock.hold(
            level,
            graceless=graceless,
            yields=gives_way(),
            place=place,
            ends_run=kind == FIRST_SENTENCE,
        ) as wait:
            started = time.perf_counter()
            try:
                yield
            finally:
                released = time.perf_counter()
                self.stats.add(kind, wait, released - started)
                owner = "llm" if kind == "llm" else current_owner()  # its scheduler's, else
                hold = GateHold(kind, owner, started - wait, started, released, level <= URGENT)
                TRACES.hold(hold)

    def urgent_waiting(self) -> bool:
        """Whether urgent work waits for the gate now (never when it is off)."""
        return self.enabled and self._lock.urgent_waiting()

    def take_stats(self) -> GateStats:
        """The counts since the last call (or start), starting new ones."""
        stats, self.stats = self.stats, GateStats()
        return stats


COMPUTE_GATE = ComputeGate()
"""The process's gate, shared by the LLM, the speech recognizer and the voice."""
