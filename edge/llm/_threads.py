"""How many threads llama.cpp uses for the next evaluation, given what else runs here.

llama.cpp splits each evaluation across its threads and makes them meet at a barrier after
every operation, spinning while they wait. When another process (the XR app's renderer)
keeps one of the cores busy, one of those threads is often off its core, and every other
thread spins until it is scheduled again: on two cores with two threads and one core
busy, generation fell from ~100 to under 2 tokens/s. With one thread fewer than the cores
other work leaves free, nothing waits at a barrier for a core.

:class:`ThreadPolicy` measures, at most every ``interval_s``, the CPU time other processes
took on the cores this process may use (``/proc/stat`` less this process's own time) and
sets llama.cpp's threads (``llama_set_n_threads``) to the configured count less the cores
they kept busy, never under one. Idle, it uses every thread it was given.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system irq softirq steal (not idle, iowait)
SLACK = 0.2  # of a core: less than this taken by others leaves every thread in use


def cpu_busy_s(allowed: set[int], stat: Path = Path("/proc/stat")) -> float | None:
    """CPU seconds all processes have used on the ``allowed`` cores since boot."""
    try:
        text = stat.read_text()
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0
    for line in text.splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in allowed:
            total += sum(int(fields[i]) for i in BUSY_FIELDS if i < len(fields))
    return total / tick


def own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


class ThreadPolicy:
    """``threads`` while the cores are free; fewer while other processes keep cores busy
    (``adaptive``); always ``threads`` when not adaptive."""

    def __init__(
        self,
        threads: int,
        *,
        adaptive: bool = True,
        interval_s: float = 0.25,
        busy: Callable[[], float | None] | None = None,
        own: Callable[[], float] = own_cpu_s,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.threads = threads
        self.adaptive = adaptive
        self.interval_s = interval_s
        allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else {0}
        self.cores = len(allowed)
        self._busy = busy or (lambda: cpu_busy_s(allowed))
        self._own, self._clock = own, clock
        self._last: tuple[float, float, float] | None = None
        self.current = threads
        self.others_busy = 0.0  # cores other processes kept busy in the last interval
        self._applied: dict[int, int] = {}  # id of a context -> the threads it was given
        busy0 = self._busy() if adaptive else None
        if busy0 is not None:  # the first evaluation already sees what ran meanwhile
            self._last = (clock(), busy0, own())

    def update(self) -> int:
        """The threads to use now (measured again once ``interval_s`` has passed)."""
        if not self.adaptive:
            return self.threads
        now, busy = self._clock(), self._busy()
        if busy is None:
            return self.threads
        own = self._own()
        if self._last is None:
            self._last = (now, busy, own)
            return self.current
        then, busy0, own0 = self._last
        if now - then < self.interval_s:
            return self.current
        self._last = (now, busy, own)
        self.others_busy = max(0.0, ((busy - busy0) - (own - own0)) / (now - then))
        taken = max(0, math.ceil(self.others_busy - SLACK))
        self.current = max(1, min(self.threads, self.cores - taken))
        return self.current

    def apply(self, ctx: Any) -> None:
        """Set ``ctx``'s (a ``llama_context`` pointer) threads to :meth:`update`'s count."""
        n = self.update()
        if self._applied.get(id(ctx)) != n:
            import llama_cpp

            llama_cpp.llama_set_n_threads(ctx, n, n)
            self._applied[id(ctx)] = n
