"""An operation owned by the object that started it: callers join it, and cancelling a
caller never abandons it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel


class OwnedOperation:
    """Runs ``work`` once, in the first caller's task, shielded from that caller's
    cancellation. Later callers wait for the same run. Every caller gets its outcome
    (the same exception, if it failed); a cancelled caller waits for the operation to
    finish, then its cancellation propagates.
    """

    def __init__(self, work: Callable[[], Awaitable[None]]) -> None:
        self._work = work
        self._started = False
        self._done = anyio.Event()
        self.error: BaseException | None = None

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    @property
    def failed(self) -> bool:
        return self.finished and self.error is not None

    async def join(self) -> None:
        with anyio.CancelScope(shield=True):
            if not self._started:
                self._started = True
                try:
                    await self._work()
                except BaseException as exc:  # kept for every caller, re-raised below
                    self.error = exc
                finally:
                    self._done.set()
            else:
                await self._done.wait()
        await anyio.lowlevel.checkpoint()  # a cancelled caller's cancellation lands here
        if self.error is not None:
            raise self.error
