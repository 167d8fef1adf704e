"""When background context work runs: the next job (a participant's re-warm or the oldest
section waiting for compaction), the quiet each needs, and the worker that runs them."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from ._background import Quiet, Wakeup, Worker
from ._config import ContextConfig
from ._context import ParticipantContext, Section
from ._state import ContextState

log = logging.getLogger(__name__)

Job = tuple[str, ParticipantContext, Section | None]
"""``("warm", participant, None)`` or ``("compact", participant, section)``."""


class Scheduler:
    """Chooses and runs background jobs for ``state``'s participants one at a time, each
    after the device has been ``quiet`` long enough: a re-warm (``rewarm(part)``; None
    when the model cannot warm or ``config`` turns it off) after ``rewarm_quiet_s``, a
    compaction step (``compact(part, section)``) after ``compaction_quiet_s``. The worker
    waits on ``wakeup`` while there is nothing to do."""

    def __init__(
        self,
        state: ContextState,
        quiet: Quiet,
        wakeup: Wakeup,
        compact: Callable[[ParticipantContext, Section], Awaitable[None]],
        rewarm: Callable[[ParticipantContext], Awaitable[None]] | None,
        config: ContextConfig,
    ) -> None:
        self.state = state
        self.quiet = quiet
        self.wakeup = wakeup
        self.compact = compact
        self.rewarm = rewarm
        self.rewarm_on = config.rewarm
        self.rewarm_quiet_s = config.rewarm_after_s
        self.worker = Worker(
            quiet, wakeup, self.next_job, self.run_job, self.job_failed, self.quiet_for
        )
        self._warned_not_running = False

    async def open(self) -> None:
        """Run the worker in the owner's lifecycle (the manager's ``__aenter__``)."""
        worker = self.worker
        if worker.running and not worker.detached:
            raise RuntimeError("the context manager is already running")
        if self.state.closed:
            raise RuntimeError("the context manager is closed")
        await worker.open()

    async def close(self, close_owner: Callable[[], Awaitable[None]]) -> None:
        """``close_owner()``, then leave the worker's task group where :meth:`open`
        entered it (the manager's ``__aexit__``)."""
        try:
            await close_owner()
        finally:
            await self.worker.close()

    async def stop(self) -> None:
        """Stop the worker (cancelling the job it runs) and wait for it; idempotent."""
        await self.worker.stop()

    def rewarm_soon(self, part: ParticipantContext) -> None:
        """Re-warm ``part``'s prefix in the background (a returning participant's: after a
        restart the model's cache is cold)."""
        if part.system is not None and self.rewarm_on:
            self.state.mark_warm(part)
            self.start()
            self.wakeup.set()

    def start(self) -> None:
        """The spec's usage without ``async with``: start the worker on the first write."""
        worker = self.worker
        if worker.running or self.state.closed or worker.start_detached():
            return
        if not self._warned_not_running:
            self._warned_not_running = True
            log.warning(
                "the context manager cannot compact here (no asyncio loop); use "
                "`async with ContextManager(...)` to compact in the background"
            )

    def next_job(self) -> Job | None:
        if self.state.closed:
            return None
        best: tuple[tuple[int, int], ParticipantContext, Section] | None = None
        for part in self.state.idle():
            for section in part.sections.values():
                if section.needs_compaction():
                    key = section.oldest_key()
                    if best is None or key < best[0]:
                        best = (key, part, section)
        # re-warms before compactions (a turn during one then finds a warm prefix), except
        # for a participant between the steps of a compaction run: their prefix is in
        # flux, and the run's last step warms the one it leaves
        warm = self._warm_job(during_compaction=False)
        if warm is not None:
            return warm
        if best is not None:
            return ("compact", best[1], best[2])
        return self._warm_job(during_compaction=True)

    def _warm_job(self, *, during_compaction: bool) -> Job | None:
        if self.rewarm is None:
            return None
        for part in self.state.idle():
            if not self.state.wants_warm(part):
                continue
            if during_compaction or not self.state.compacting(part):
                return ("warm", part, None)
        return None

    async def run_job(self, job: Job) -> None:
        kind, part, section = job
        async with self.state.lock(part.participant_id):
            if not self.state.current(part):
                return
            if kind == "compact" and section is not None:
                await self.compact(part, section)
            elif self.rewarm is not None:
                await self.rewarm(part)

    def quiet_for(self, job: Job) -> float:
        """How long the device must be quiet before ``job`` runs: a re-warm (a fraction of
        a second at background priority, which any turn preempts) only briefly, so a
        follow-up a second or two later finds the prefix warm; a compaction the whole
        ``compaction_quiet_s``."""
        return self.rewarm_quiet_s if job[0] == "warm" else self.quiet.quiet_s

    def job_failed(self, job: Job) -> None:
        _, part, section = job
        if section is not None:
            section.fail()
        self.state.take_warm(part)
