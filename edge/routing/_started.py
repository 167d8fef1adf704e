"""The ``started()`` signal handed to one ``answer()`` call."""

from __future__ import annotations

import time

from ._acknowledge import Acknowledgment, FirstResponseTimes
from ._state import Run


class StartSignal:
    """Marks the turn started (no router failure output after it), records the
    first-response time, suppresses a pending acknowledgment and waits for a committed one.
    Calls after ``answer()`` returned (``closed``) do nothing."""

    def __init__(
        self,
        times: FirstResponseTimes | None,
        run: Run,
        route: str,
        ack: Acknowledgment | None,
    ) -> None:
        self._times = times
        self._run = run
        self._route = route
        self._ack = ack
        self._t0 = time.monotonic()
        self._fired = False
        self.closed = False

    async def __call__(self) -> None:
        if self.closed:
            return
        if not self._fired:
            self._fired = True
            self._run.started = True
            if self._times is not None:
                self._times.record(self._route, time.monotonic() - self._t0)
            if self._ack is not None:
                self._ack.suppress()
        if self._ack is not None:
            await self._ack.settle()
