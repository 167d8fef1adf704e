"""One slot in front of the local model: interactive work first, background preemptible.

A llama.cpp context does one thing at a time. Every request takes the slot with
:meth:`ModelScheduler.slot` and does its model work in small steps (a chunk of prompt
evaluation, one token). Between steps a background holder asks
:meth:`Slot.should_yield`; when interactive work waits it calls :meth:`Slot.yield_`,
which hands the slot over and queues it again ahead of later background work. A background
request therefore delays an interactive one by at most one step: one generated token, or
one small chunk of background prompt evaluation.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass, field

import anyio

from ._activity import ActivityTracker
from ._types import Priority, RequestMetrics

_RANK = {Priority.INTERACTIVE: 0, Priority.BACKGROUND: 1}


@dataclass(order=True)
class _Waiter:
    rank: int
    seq: int
    event: anyio.Event = field(compare=False, default_factory=anyio.Event)
    granted: bool = field(compare=False, default=False)


class Slot:
    """The right to use the model, held by one request."""

    def __init__(
        self, scheduler: ModelScheduler, priority: Priority, seq: int, metrics: RequestMetrics
    ) -> None:
        self._scheduler = scheduler
        self.priority = priority
        self._seq = seq
        self.metrics = metrics
        self.held = True

    def should_yield(self) -> bool:
        """True when this is background work and interactive work is waiting."""
        return self.priority is Priority.BACKGROUND and self._scheduler.interactive_waiting

    async def yield_(self) -> None:
        """Hand the slot to waiting interactive work, then take it back."""
        self.metrics.preemptions += 1
        self.held = False
        self._scheduler._release()
        await self._scheduler._acquire(_RANK[self.priority], self._seq)
        self.held = True

    async def lend(self) -> None:
        """Let interactive work use the model until :meth:`reclaim` (while the holder waits
        for something else, e.g. its reader): handed over now when some waits, else taken
        over by the next interactive request to arrive before the holder is back.
        Background work keeps waiting for the holder, as if it had not lent."""
        self.held = False
        scheduler = self._scheduler
        if scheduler.interactive_waiting:
            scheduler._release()
        else:
            scheduler._lent = self

    async def reclaim(self) -> None:
        """Take the model back after :meth:`lend`: at once unless it was taken over, else
        behind the interactive work that arrived meanwhile (streams take turns)."""
        scheduler = self._scheduler
        if scheduler._lent is self:
            scheduler._lent = None
        else:
            self._seq = next(scheduler._seq)
            await scheduler._acquire(_RANK[self.priority], self._seq)
        self.held = True

    async def checkpoint(self) -> bool:
        """Yield if interactive work waits; True when it did (the model state may have
        changed under the caller)."""
        if self.should_yield():
            await self.yield_()
            return True
        return False


class ModelScheduler:
    """A priority queue for the one model slot; FIFO within a priority."""

    def __init__(self, activity: ActivityTracker | None = None) -> None:
        self.activity = activity or ActivityTracker()
        self._busy = False
        self._waiters: list[_Waiter] = []
        self._seq = itertools.count()
        self._interactive_waiting = 0  # an int, so worker threads can read it safely
        self._lent: Slot | None = None  # a holder waiting for its reader (Slot.lend)

    @property
    def interactive_waiting(self) -> bool:
        """Whether interactive work waits for the slot (safe to read from any thread)."""
        return self._interactive_waiting > 0

    @property
    def queued(self) -> int:
        return len(self._waiters)

    @asynccontextmanager
    async def slot(self, priority: Priority, metrics: RequestMetrics) -> AsyncIterator[Slot]:
        """Hold the model for one request; interactive requests count as device activity."""
        priority = Priority(priority)
        seq = next(self._seq)
        busy = self.activity.interactive() if priority is Priority.INTERACTIVE else nullcontext()
        with busy:
            queued_at = time.perf_counter()
            await self._acquire(_RANK[priority], seq)
            metrics.queue_wait_s = time.perf_counter() - queued_at
            slot = Slot(self, priority, seq, metrics)
            try:
                yield slot
            finally:
                if self._lent is slot:
                    self._lent = None
                    self._release()
                elif slot.held:
                    self._release()

    async def _acquire(self, rank: int, seq: int) -> None:
        if not self._busy and not self._waiters:
            self._busy = True
            return
        if rank == 0 and self._lent is not None:
            self._lent = None  # taken over from a holder waiting for its reader
            return
        waiter = _Waiter(rank, seq)
        heapq.heappush(self._waiters, waiter)
        self._interactive_waiting += rank == 0
        try:
            await waiter.event.wait()
        except BaseException:
            if waiter.granted:
                self._release()  # granted while being cancelled: pass it on
            else:
                self._waiters.remove(waiter)
                heapq.heapify(self._waiters)
                self._interactive_waiting -= rank == 0
            raise

    def _release(self) -> None:
        if self._waiters:
            waiter = heapq.heappop(self._waiters)
            self._interactive_waiting -= waiter.rank == 0
            waiter.granted = True
            waiter.event.set()  # the slot stays busy: ownership moves to the waiter
        else:
            self._busy = False
