"""Bounds shared by both protocols: connection slots per client address, rate-limited
logging of repeated problems, escaping of client text before it reaches the log, and
giving freed memory back to the system."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable

import anyio

MAX_LOGGED_CHARS = 120


def printable(value: object, limit: int = MAX_LOGGED_CHARS) -> str:
    """Client-supplied text for a log line: quoted and escaped (no forged lines, no
    terminal control codes) and cut to ``limit`` characters."""
    text = repr(str(value))
    return text if len(text) <= limit else text[: limit - 1] + "…"


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc
        return None


def return_freed_memory() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing
    elsewhere). Blocking (milliseconds): call it in a worker thread. A recording's many
    per-chunk buffers are freed at close, but glibc otherwise keeps their pages resident."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


class ConnectionSlots:
    """At most ``total`` connections at once, and ``per_address`` from one client address."""

    def __init__(self, total: int, per_address: int) -> None:
        self.total = total
        self.per_address = per_address
        self._by_address: Counter[str] = Counter()

    @property
    def used(self) -> int:
        return sum(self._by_address.values())

    def acquire(self, address: str) -> str | None:
        """Take a slot; returns why not (a close reason) or None when granted."""
        if self.used >= self.total:
            return f"server full ({self.total} connections)"
        if self._by_address[address] >= self.per_address:
            return f"too many connections from this address ({self.per_address})"
        self._by_address[address] += 1
        return None

    def release(self, address: str) -> None:
        self._by_address[address] -= 1
        if self._by_address[address] <= 0:
            del self._by_address[address]


class LogLimiter:
    """Logs a repeated problem at most once per ``interval_s`` per key, then says how many
    were suppressed, so a client cannot flood the log (or the disk) with tracebacks."""

    def __init__(
        self,
        logger: logging.Logger,
        interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self._suppressed: Counter[str] = Counter()

    def allow(self, key: str) -> bool:
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._suppressed[key] += 1
            return False
        if len(self._last) > 1024:  # keys come from code paths, but stay bounded anyway
            self._last.clear()
        self._last[key] = now
        return True

    def log(self, level: int, key: str, msg: str, *args: object, exc_info: bool = False) -> None:
        if not self.allow(key):
            return
        skipped = self._suppressed.pop(key, 0)
        if skipped:
            msg += f" ({skipped} more like this suppressed)"
        self.logger.log(level, msg, *args, exc_info=exc_info)


class AudioPacer:
    """Rate cap on incoming audio: after ``burst_s`` seconds of audio, at most ``rate``
    seconds of audio per second of wall-clock time. :meth:`take` sleeps when a sender is
    ahead, and since the connection is not read meanwhile, TCP holds the sender back: one
    connection cannot take more than its share of the CPU (resampling, VAD)."""

    def __init__(
        self, burst_s: float = 30.0, rate: float = 2.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.burst_s = burst_s
        self.rate = rate
        self._clock = clock
        self.restart()

    def restart(self) -> None:
        self._since = self._clock()
        self._seconds = 0.0

    def delay(self, seconds: float) -> float:
        """Count ``seconds`` of audio; how long to wait before reading more."""
        self._seconds += seconds
        allowed = self.burst_s + self.rate * (self._clock() - self._since)
        return max(0.0, (self._seconds - allowed) / self.rate)

    async def take(self, seconds: float) -> None:
        wait = self.delay(seconds)
        if wait > 0:
            await anyio.sleep(wait)
