"""Background work of the context manager: when it may run (:class:`Quiet`), cancelling a
participant's running jobs (:class:`Jobs`), and the compaction worker (:class:`Worker`).

The worker lives in the manager's :class:`edge.runtime.BackgroundTasks`. ``async with
ContextManager(...)`` opens them; used without ``async with`` (the spec's composition:
``ContextManager(llm)`` ... ``await context.close()``), the manager starts the worker on
its first write inside a running event loop, in a task of its own that ``close()`` stops.
The manager's ``close()`` stops the loop from any task (:meth:`Worker.stop`); only its
``__aexit__`` leaves the task group it entered (:meth:`Worker.close`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import anyio
import anyio.abc

from edge.llm import ActivityTracker, ReportsActivity
from edge.runtime import BackgroundTasks

log = logging.getLogger(__name__)

J = TypeVar("J")


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
        self._answered_at: float | None = None  # when the latest answer ended

    @property
    def own(self) -> ActivityTracker:
        if self._own is None:  # created lazily: anyio primitives need a running loop
            self._own = ActivityTracker()
        return self._own

    def touch(self) -> None:
        """Record participant activity now (restarts the quiet period)."""
        self.own.touch()

    @contextmanager
    def answering(self) -> Iterator[None]:
        """Mark an answer in flight: background compaction waits until it is over and
        the device has been quiet for ``compaction_quiet_s``."""
        try:
            with self.own.interactive():
                yield
        finally:
            self._answered_at = time.monotonic()

    def answers_close(self) -> bool:
        """Whether the latest answer ended less than ``quiet_s`` ago (answers too close
        together for a quiet period to come between them)."""
        answered = self._answered_at
        return answered is not None and time.monotonic() - answered < self.quiet_s

    @staticmethod
    def _quiet(tracker: ActivityTracker | None, quiet_s: float) -> bool:
        return tracker is None or (not tracker.busy and tracker.idle_for() >= quiet_s)

    async def wait(self, quiet_s: float | None = None) -> None:
        """Until both have been quiet for ``quiet_s`` (by default :attr:`quiet_s`)."""
        quiet_s = self.quiet_s if quiet_s is None else quiet_s
        while True:
            if self._llm_activity is not None:
                await self._llm_activity.wait_quiet(quiet_s)
            await self.own.wait_quiet(quiet_s)
            if self._quiet(self._llm_activity, quiet_s) and self._quiet(self.own, quiet_s):
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

    def any(self) -> bool:
        return bool(self._running)

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


class Wakeup:
    """Tells the worker waiting for work that there may be some (a write, a loaded
    backlog, a commit): made first and handed to each part that finds work, so none of
    them needs the worker."""

    def __init__(self) -> None:
        self._event: anyio.Event | None = None

    def set(self) -> None:
        if self._event is not None:
            self._event.set()

    async def wait(self) -> None:
        self._event = anyio.Event()
        await self._event.wait()


class Worker(Generic[J]):
    """One loop that takes the next job (``next_job()``; None when there is none), waits
    for a quiet device (``quiet_for(job)`` seconds; by default the quiet's own period),
    takes the job again (it may have changed) and runs it, unless the job it takes now
    needs a longer quiet. A failing job is logged and handed to ``failed``; the loop goes
    on."""

    def __init__(
        self,
        quiet: Quiet,
        wakeup: Wakeup,
        next_job: Callable[[], J | None],
        run_job: Callable[[J], Awaitable[None]],
        failed: Callable[[J], None],
        quiet_for: Callable[[J], float] | None = None,
    ) -> None:
        self._quiet = quiet
        self._quiet_for = quiet_for or (lambda job: quiet.quiet_s)
        self._next_job = next_job
        self._run_job = run_job
        self._failed = failed
        self._wakeup = wakeup
        self._tasks = BackgroundTasks("the context manager")
        self._stop: anyio.Event | None = None
        self._stopped: anyio.Event | None = None
        self._detached: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._tasks.running

    @property
    def detached(self) -> bool:
        """Whether the loop was started on first use and still runs on its own."""
        return self._detached is not None and not self._detached.done()

    async def open(self) -> None:
        """Start the loop in the owner's lifecycle (``__aenter__``); a loop started on
        first use (see :meth:`start_detached`) hands over to it."""
        await self._stop_detached()
        await self._start_loop()

    async def _start_loop(self) -> None:
        await self._tasks.open()
        await self._tasks.start(self._serve, name="context-compaction")

    async def stop(self) -> None:
        """Stop the loop (cancelling the job it runs) and wait for it: from any task and
        cancel scope (the manager's ``close()``). Idempotent."""
        await self._stop_detached()
        await self._tasks.stop()

    async def close(self) -> None:
        """:meth:`stop`, and leave the owner's lifecycle (its ``__aexit__``)."""
        await self._stop_detached()
        await self._tasks.close()

    async def _stop_detached(self) -> None:
        if self._stop is not None and self._detached is not None and not self._detached.done():
            self._stop.set()
            assert self._stopped is not None
            with anyio.CancelScope(shield=True):
                await self._stopped.wait()

    def start_detached(self) -> bool:
        """Start the loop in a task of its own (no ``async with``), unless it runs; False
        when that is not possible here (not on asyncio, or already stopped)."""
        if self._tasks.running or self._detached is not None:
            return self._detached is not None and not self._detached.done()

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        self._stop, self._stopped = anyio.Event(), anyio.Event()
        self._detached = loop.create_task(self._own_lifecycle(self._stop, self._stopped))
        return True

    async def _own_lifecycle(self, stop: anyio.Event, stopped: anyio.Event) -> None:
        try:
            if stop.is_set() or self._tasks.running:
                return  # the owner entered ``async with`` first: its loop serves
            await self._start_loop()
            try:
                await stop.wait()
            finally:
                await self._tasks.close()
        finally:
            stopped.set()

    async def _serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        task_status.started()
        while True:
            job = self._next_job()
            if job is None:
                await self._wakeup.wait()
                continue
            quiet_s = self._quiet_for(job)
            await self._quiet.wait(quiet_s)
            job = self._next_job()
            if job is None or self._quiet_for(job) > quiet_s:
                continue
            try:
                await self._run_job(job)
            except Exception:
                log.exception("background context job failed")
                self._failed(job)
