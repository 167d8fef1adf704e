"""When background context work runs: the next job (a participant's re-warm or the oldest
section waiting for compaction), the quiet each needs, and the worker that runs them."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from ._background import Quiet, Worker
from ._compacting import Compaction
from ._context import ParticipantContext, Section
from ._prefixes import Prefixes
from ._views import Views

log = logging.getLogger(__name__)

Job = tuple[str, ParticipantContext, Section | None]
"""``("warm", participant, None)`` or ``("compact", participant, section)``."""


class Scheduler:
    """Chooses and runs background jobs one at a time, each after the device has been
    quiet long enough: a re-warm after ``rewarm_quiet_s``, a compaction after
    ``compaction_quiet_s``."""

    def __init__(
        self, views: Views, compaction: Compaction, prefixes: Prefixes, quiet: Quiet
    ) -> None:
        self.views = views
        self.compaction = compaction
        self.prefixes = prefixes
        self.quiet = quiet
        self.rewarm_quiet_s = views.config.rewarm_after_s
        self.worker = Worker(quiet, self.next_job, self.run_job, self.job_failed, self.quiet_for)
        self._warned_not_running = False

    def wake(self) -> None:
        self.worker.wake()

    async def open(self) -> None:
        """Run the worker in the owner's lifecycle (the manager's ``__aenter__``)."""
        worker = self.worker
        if worker.running and not worker.detached:
            raise RuntimeError("the context manager is already running")
        if self.views.closed:
            raise RuntimeError("the context manager is closed")
        await worker.open()

    async def close(self, close_owner: Callable[[], Awaitable[None]]) -> None:
        """``close_owner()``, then leave the worker's task group where :meth:`open`
        entered it (the manager's ``__aexit__``)."""
        try:
            await close_owner()
        finally:
            await self.worker.close()

    def rewarm_soon(self, part: ParticipantContext) -> None:
        """Re-warm ``part``'s prefix in the background (a returning participant's: after a
        restart the model's cache is cold)."""
        if part.system is not None and self.views.config.rewarm:
            part.warm_pending = True
            self.start()
            self.wake()

    def start(self) -> None:
        """The spec's usage without ``async with``: start the worker on the first write."""
        worker = self.worker
        if worker.running or self.views.closed or worker.start_detached():
            return
        if not self._warned_not_running:
            self._warned_not_running = True
            log.warning(
                "the context manager cannot compact here (no asyncio loop); use "
                "`async with ContextManager(...)` to compact in the background"
            )

    def next_job(self) -> Job | None:
        views = self.views
        if views.closed:
            return None
        best: tuple[tuple[int, int], ParticipantContext, Section] | None = None
        for pid, part in views.participants.items():
            if views.lock(pid).locked():
                continue
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
        if not self.prefixes.can_rewarm:
            return None
        for pid, part in self.views.participants.items():
            if not part.warm_pending or self.views.lock(pid).locked():
                continue
            if during_compaction or not part.compacting:
                return ("warm", part, None)
        return None

    async def run_job(self, job: Job) -> None:
        kind, part, section = job
        async with self.views.lock(part.participant_id):
            if not self.views.current(part):
                return
            if kind == "compact" and section is not None:
                await self.compaction.run(part, section)
            else:
                await self.prefixes.rewarm(part)

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
        part.warm_pending = False
