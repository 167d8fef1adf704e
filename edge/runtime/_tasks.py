"""A task group opened and closed by its owner's ``async with`` lifecycle."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.abc import TaskGroup

TaskFn = Callable[..., Awaitable[Any]]


class BackgroundTasks:
    """The background tasks of one component, alive between :meth:`open` and :meth:`close`.

    Components call ``open()`` in ``__aenter__`` and ``close()`` in ``__aexit__``; work
    they start in between with :meth:`start_soon` or :meth:`start` belongs to them, so
    leaving ``async with`` cancels it (or, with ``cancel=False``, waits for it).
    """

    def __init__(self, owner: str) -> None:
        self._owner = owner
        self._tg: TaskGroup | None = None

    @property
    def running(self) -> bool:
        return self._tg is not None

    async def open(self) -> None:
        if self._tg is not None:
            raise RuntimeError(f"{self._owner} is already running")
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg

    async def close(self, *, cancel: bool = True) -> None:
        """Cancel the tasks still running (or let them finish) and wait for them."""
        tg, self._tg = self._tg, None
        if tg is not None:
            if cancel:
                tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)

    def _group(self) -> TaskGroup:
        if self._tg is None:
            raise RuntimeError(f"{self._owner} is not running: use `async with`")
        return self._tg

    def start_soon(self, fn: TaskFn, *args: Any, name: object = None) -> None:
        self._group().start_soon(fn, *args, name=name)

    async def start(self, fn: TaskFn, *args: Any, name: object = None) -> Any:
        return await self._group().start(fn, *args, name=name)
