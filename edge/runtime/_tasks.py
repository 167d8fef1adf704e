"""A task group opened and closed by its owner's ``async with`` lifecycle."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

TaskFn = Callable[..., Awaitable[Any]]


class BackgroundTasks:
    """The background tasks of one component, alive between :meth:`open` and :meth:`close`.

    Components call ``open()`` in ``__aenter__`` and ``close()`` in ``__aexit__``; work
    they start in between with :meth:`start_soon` or :meth:`start` belongs to them, so
    leaving ``async with`` cancels it (or, with ``cancel=False``, waits for it).
    :meth:`stop` ends that work earlier, from any task and inside any cancel scope (a
    component's own ``close()``); the task group itself is left by ``close()`` in the
    owner's ``__aexit__``, the one place where anyio allows it.

    Each task runs in a cancel scope of its own, so stopping cancels the tasks, not the
    owner's ``async with`` body that the group's scope encloses.
    """

    def __init__(self, owner: str) -> None:
        self._owner = owner
        self._tg: TaskGroup | None = None
        self._accepting = False
        self._scopes: set[anyio.CancelScope] = set()
        self._task_ids: set[int] = set()
        self._drained: anyio.Event | None = None

    @property
    def running(self) -> bool:
        """Whether new tasks are accepted: opened, and not yet stopped."""
        return self._accepting

    async def open(self) -> None:
        if self._tg is not None:
            raise RuntimeError(f"{self._owner} is already running")
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg, self._accepting = tg, True

    async def stop(self, *, cancel: bool = True) -> None:
        """Take no new tasks; cancel the running ones (or, with ``cancel=False``, let them
        finish) and wait until they have ended. Works from any task and cancel scope and is
        idempotent; a caller cancelled while waiting cancels the tasks and still waits.
        Called from one of the tasks themselves, it does not wait (the caller is one)."""
        self._accepting = False
        if cancel:
            self._cancel_all()
        if anyio.get_current_task().id in self._task_ids:
            return
        try:
            await self._wait_drained()
        finally:
            if self._scopes:  # the wait was cancelled: cancel them, and wait anyway
                self._cancel_all()
                with anyio.CancelScope(shield=True):
                    await self._wait_drained()

    async def close(self, *, cancel: bool = True) -> None:
        """Take no new tasks, cancel the running ones (or let them finish), wait for them
        and leave the task group: in the owner's ``__aexit__`` (the task and cancel scope
        that called :meth:`open`). Idempotent; after :meth:`stop` it only leaves."""
        self._accepting = False
        tg, self._tg = self._tg, None
        if tg is not None:
            if cancel:
                tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)

    def _cancel_all(self) -> None:
        for scope in self._scopes:
            scope.cancel()

    async def _wait_drained(self) -> None:
        while self._scopes:
            if self._drained is None:
                self._drained = anyio.Event()
            await self._drained.wait()

    def _group(self) -> TaskGroup:
        if self._tg is None or not self._accepting:
            raise RuntimeError(f"{self._owner} is not running: use `async with`")
        return self._tg

    def _admit(self) -> anyio.CancelScope:
        """The cancel scope of a task about to start, registered before it runs, so a
        :meth:`stop` between now and its first step still cancels and awaits it."""
        scope = anyio.CancelScope()
        self._scopes.add(scope)
        return scope

    def _ended(self, scope: anyio.CancelScope, task_id: int | None = None) -> None:
        self._scopes.discard(scope)
        if task_id is not None:
            self._task_ids.discard(task_id)
        if not self._scopes and self._drained is not None:
            self._drained.set()
            self._drained = None

    async def _run(
        self,
        scope: anyio.CancelScope,
        fn: TaskFn,
        args: tuple[Any, ...],
        *,
        task_status: TaskStatus[Any] | None = None,
    ) -> None:
        """``fn`` in its own cancel scope; ``task_status`` is given by :meth:`start`."""
        task_id = anyio.get_current_task().id
        self._task_ids.add(task_id)
        try:
            with scope:
                if task_status is None:
                    await fn(*args)
                else:
                    await fn(*args, task_status=task_status)
        finally:
            self._ended(scope, task_id)

    def start_soon(self, fn: TaskFn, *args: Any, name: object = None) -> None:
        group = self._group()
        scope = self._admit()
        try:
            group.start_soon(self._run, scope, fn, args, name=_name(fn, name))
        except BaseException:
            self._ended(scope)
            raise

    async def start(self, fn: TaskFn, *args: Any, name: object = None) -> Any:
        group = self._group()
        scope = self._admit()
        try:
            return await group.start(self._run, scope, fn, args, name=_name(fn, name))
        except BaseException:
            if scope in self._scopes:  # the task never ran (cancelled before its first step)
                self._ended(scope)
            raise


def _name(fn: TaskFn, name: object) -> object:
    """The task's name as anyio would give ``fn`` (the wrapper's would hide it)."""
    if name is not None:
        return name
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None)
    return f"{module}.{qualname}" if module else qualname
