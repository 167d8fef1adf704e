"""When background work may run, and how a participant's running jobs are cancelled."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import anyio

from edge.llm import ActivityTracker, ReportsActivity


class Quiet:
    """Device-idle detection: the model's own activity tracker (when the LLM has one) plus
    the manager's (answers in flight, turns arriving). Background work starts only after
    both have been quiet for ``quiet_s`` seconds."""

    def __init__(self, llm: object, quiet_s: float) -> None:
        if quiet_s < 0:
            raise ValueError("compaction_quiet_s must be >= 0")
        self.quiet_s = quiet_s
        self._llm_activity = llm.activity if isinstance(llm, ReportsActivity) else None
        self._own: ActivityTracker | None = None

    @property
    def own(self) -> ActivityTracker:
        if self._own is None:  # created lazily: anyio primitives need a running loop
            self._own = ActivityTracker()
        return self._own

    def _quiet(self, tracker: ActivityTracker | None) -> bool:
        return tracker is None or (not tracker.busy and tracker.idle_for() >= self.quiet_s)

    async def wait(self) -> None:
        while True:
            if self._llm_activity is not None:
                await self._llm_activity.wait_quiet(self.quiet_s)
            await self.own.wait_quiet(self.quiet_s)
            if self._quiet(self._llm_activity) and self._quiet(self.own):
                return


@dataclass(eq=False)
class _Job:
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)


class Jobs:
    """Running compaction and warm-up work per participant, so ``clear`` can cancel it
    and wait until it has stopped."""

    def __init__(self) -> None:
        self._running: dict[str, set[_Job]] = {}

    @contextmanager
    def track(self, participant_id: str) -> Iterator[None]:
        job = _Job()
        self._running.setdefault(participant_id, set()).add(job)
        try:
            with job.scope:
                yield
        finally:
            jobs = self._running.get(participant_id)
            if jobs is not None:
                jobs.discard(job)
                if not jobs:
                    del self._running[participant_id]
            job.done.set()

    def running(self, participant_id: str) -> bool:
        return bool(self._running.get(participant_id))

    async def cancel(self, participant_id: str) -> None:
        jobs = list(self._running.get(participant_id, ()))
        for job in jobs:
            job.scope.cancel()
        with anyio.CancelScope(shield=True):
            for job in jobs:
                await job.done.wait()

    async def cancel_all(self) -> None:
        for participant_id in list(self._running):
            await self.cancel(participant_id)
