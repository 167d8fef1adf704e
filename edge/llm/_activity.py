"""Knowing when the device is idle, so background work can wait for a quiet moment."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import anyio


class ActivityTracker:
    """Counts interactive work in flight and remembers when the last one ended.

    Backends mark each interactive request with :meth:`interactive`; background workers
    (compaction) call :meth:`wait_quiet` to start only after the device has been idle for
    a while. Anything else that means "a participant is active" (speech starting, a turn
    arriving) can call :meth:`touch`.
    """

    def __init__(self) -> None:
        self._active = 0
        self._last = time.monotonic()
        self._changed = anyio.Event()

    @property
    def busy(self) -> bool:
        return self._active > 0

    def idle_for(self) -> float:
        """Seconds since interactive work last ended (0 while some is running)."""
        return 0.0 if self._active else time.monotonic() - self._last

    def touch(self) -> None:
        """Record activity now (restarts the quiet period)."""
        self._last = time.monotonic()
        self._notify()

    @contextmanager
    def interactive(self) -> Iterator[None]:
        self._active += 1
        self._notify()
        try:
            yield
        finally:
            self._active -= 1
            self._last = time.monotonic()
            self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_quiet(self, quiet_s: float) -> None:
        """Return once no interactive work has run for ``quiet_s`` seconds."""
        while True:
            if not self._active:
                remaining = quiet_s - (time.monotonic() - self._last)
                if remaining <= 0:
                    return
                with anyio.move_on_after(remaining):
                    await self._changed.wait()
            else:
                await self._changed.wait()
