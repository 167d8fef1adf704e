"""How many threads llama.cpp uses for the next evaluation, given what else runs here.

llama.cpp splits each evaluation across its threads and makes them meet at a barrier after
every operation, spinning while they wait. When another process (the XR app's renderer)
keeps one of the cores busy, one of those threads is often off its core, and every other
thread spins until it is scheduled again: on two cores with two threads and one core
busy, generation fell from ~100 to under 2 tokens/s. With one thread fewer than the cores
other work leaves free, nothing waits at a barrier for a core.

:class:`ThreadPolicy` measures the CPU time other processes took on the cores this
process may use (``/proc/stat`` less this process's own time) over the last ``interval_s``
or so, and sets llama.cpp's threads (``llama_set_n_threads``) to the configured count less
the cores they kept busy, never under one. Idle, it uses every thread it was given.

Only the recent past counts. A renderer holding a core shows in every window; a short
burst that ended a second ago (another server's answer, an HTTP client building its
request) must not cost the next prompt a thread. Between evaluations nothing would
measure, so once :meth:`ThreadPolicy.start` is called a sampler thread records the
counters every ``interval_s``, and the first evaluation after an idle spell reads the
last interval instead of the whole spell.

Work in this process holds cores too (several people's speech coming in), and the counters
cannot tell it from the model's own. A step that decodes one token therefore goes by its
measured speed: :meth:`ThreadPolicy.one_token_threads` takes the faster, lately, of the
count above and one thread fewer, trying the other every ``PROBE_EVERY`` steps.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system irq softirq steal (not idle, iowait)
SLACK = 0.2  # of a core: less than this taken by others leaves every thread in use
FIRST_WINDOW_S = 0.1  # the shortest window measured (10 clock ticks a core)
PROBE_EVERY = 16  # one-token steps between tries of the thread count not in use
TOKEN_EWMA = 0.3  # weight of a slower one-token step in its thread count's average


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


Sample = tuple[float, float, float]  # (clock, CPU seconds of all, CPU seconds of this process)


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
        self._samples: deque[Sample] = deque(maxlen=8)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None
        self._measured_at: float | None = None  # clock of the sample last measured to
        self.current = threads
        self.others_busy = 0.0  # cores other processes kept busy in the last interval
        self._applied: dict[int, int] = {}  # id of a context -> the threads it was given
        self._token_s: dict[int, float] = {}  # threads -> recent seconds of a one-token step
        self._one_token_steps = 0
        if adaptive:  # the first evaluation already sees what ran meanwhile
            self.sample()

    def sample(self) -> Sample | None:
        """Record the counters now (the sampler thread calls this every ``interval_s``)."""
        busy = self._busy()
        if busy is None:
            return None
        s = (self._clock(), busy, self._own())
        with self._lock:
            self._samples.append(s)
        return s

    def start(self) -> None:
        """Sample in the background, so idle spells are measured by their last interval
        (once until :meth:`stop`: a sampler that found no counters is not started again)."""
        if self.adaptive and self._sampler is None:
            self._stop = threading.Event()
            self._sampler = threading.Thread(target=self._run, name="thread-policy", daemon=True)
            self._sampler.start()

    def stop(self) -> None:
        self._stop.set()
        self._sampler = None

    def _run(self) -> None:
        stop = self._stop
        while not stop.wait(self.interval_s):
            if self.sample() is None:
                return

    def update(self) -> int:
        """The threads to use now, from the newest interval measured (measured again here
        once ``interval_s`` has passed without a sample, or ``FIRST_WINDOW_S`` just after
        the policy was made)."""
        if not self.adaptive:
            return self.threads
        with self._lock:
            now = self._samples[-1] if self._samples else None
        if now is None or self._clock() - now[0] >= self._stale_after(now):
            now = self.sample()
            if now is None:
                return self.threads
        if now[0] == self._measured_at:
            return self.current
        then = self._window_start(now)
        if then is None:
            return self.current
        self._measured_at = now[0]
        elapsed = now[0] - then[0]
        self.others_busy = max(0.0, ((now[1] - then[1]) - (now[2] - then[2])) / elapsed)
        taken = max(0, math.ceil(self.others_busy - SLACK))
        self.current = max(1, min(self.threads, self.cores - taken))
        return self.current

    def _stale_after(self, newest: Sample) -> float:
        """Seconds after which ``newest`` is sampled again before measuring: an interval,
        or ``FIRST_WINDOW_S`` while the samples span less than one (just after loading)."""
        with self._lock:
            span = newest[0] - self._samples[0][0] if self._samples else 0.0
        return self.interval_s if span >= self.interval_s else FIRST_WINDOW_S

    def _window_start(self, now: Sample) -> Sample | None:
        """The sample to measure back to from ``now``: the newest at least ``interval_s``
        older; while there is none yet (the first evaluations after the model loaded, in
        the first quarter second), the oldest if at least ``FIRST_WINDOW_S`` older."""
        with self._lock:
            older = [s for s in self._samples if now[0] - s[0] >= self.interval_s]
            first = self._samples[0] if self._samples else now
        if older:
            return older[-1]
        return first if now[0] - first[0] >= FIRST_WINDOW_S else None

    def apply(self, ctx: Any, one_token: bool = False) -> int:
        """Set ``ctx``'s (a ``llama_context`` pointer) threads to :meth:`update`'s count, or
        for a step that decodes one token (``one_token``) to :meth:`one_token_threads`'.
        Returns the count."""
        self.start()  # measuring from the first evaluation on
        n = self.one_token_threads() if one_token else self.update()
        if self._applied.get(id(ctx)) != n:
            import llama_cpp

            llama_cpp.llama_set_n_threads(ctx, n, n)
            self._applied[id(ctx)] = n
        return n

    def one_token_threads(self) -> int:
        """Threads for a step that decodes one token: :meth:`update`'s count, or one fewer
        while that has decoded faster lately (:meth:`one_token_took`; the count not in use
        is tried again every ``PROBE_EVERY`` steps). Work in this process that the
        counters cannot tell from the model's own (a recognizer's or a voice's threads)
        can hold a core."""
        top = self.update()
        if not self.adaptive or top < 2:
            return top
        self._one_token_steps += 1
        fewer = top - 1
        if top not in self._token_s or fewer not in self._token_s:
            return top if top not in self._token_s else fewer  # try each once
        faster = top if self._token_s[top] <= self._token_s[fewer] else fewer
        if self._one_token_steps % PROBE_EVERY == 0:
            return fewer if faster == top else top  # try the other again
        return faster

    def one_token_took(self, threads: int, seconds: float) -> None:
        """A one-token step on ``threads`` threads took ``seconds``: a faster step than its
        count's average replaces it (the core it waited for is free again: go back at the
        first try), a slower one moves it by ``TOKEN_EWMA`` (a step or two of contention
        and the other count takes over)."""
        old = self._token_s.get(threads)
        if old is None or seconds < old:
            self._token_s[threads] = seconds
        else:
            self._token_s[threads] = old + TOKEN_EWMA * (seconds - old)
