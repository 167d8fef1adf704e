"""The one thread that runs the model.

llama.cpp runs each evaluation on an OpenMP team: the calling thread and ``n_threads - 1``
workers that meet at a barrier after every operation. OpenMP keeps one team per calling
thread, and it counts the workers of every team it has made. Once they outnumber the cores,
a worker at a barrier spins only briefly before it sleeps, and each of the hundreds of
barriers in an evaluation then costs a wake-up.

Steps sent to the event loop's shared worker threads land on whichever is idle (the speech
models and the store use them too), so over time several threads each left an idle team
behind, and steps slowed by several times. :class:`ModelThread` sends every call to one thread
of its own, so there is one team. Every llama.cpp model of the process shares
:data:`MODEL_THREAD`: the compute gate runs one heavy step at a time anyway, and a second
model's team would count against the cores as well (a benchmark holds two services).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import anyio

T = TypeVar("T")


class ModelThread:
    """Runs blocking model calls on a single thread of its own, one at a time in the order
    they came."""

    def __init__(self, name: str = "llm") -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the model's thread. A caller cancelled meanwhile still waits
        for the call to end (the model is in use until then); the call sees the caller's
        context variables (a step's urgency), as with ``to_thread``."""
        future = self._executor.submit(contextvars.copy_context().run, fn, *args)
        with anyio.CancelScope(shield=True):
            result = await asyncio.wrap_future(future)
        return result


MODEL_THREAD = ModelThread()
