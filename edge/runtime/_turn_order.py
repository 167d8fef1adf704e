"""When the turn a piece of work belongs to began, so shared resources serve turns in order.

A turn's model work comes as several requests (a routing decision, then the answer): the
answer arrives at the model after other participants' requests that came in while the
decision ran. Ordered by its own arrival it would wait behind all of them; ordered by its
turn's start it keeps the place its turn took in line. :func:`turn_started` marks the work
of the calling task (and the tasks it starts) with that moment.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator
from contextlib import contextmanager

_ORIGIN: contextvars.ContextVar[float | None] = contextvars.ContextVar("turn_origin", default=None)


@contextmanager
def turn_started(at: float | None = None) -> Iterator[float]:
    """Work in this context belongs to a turn that began at ``at`` (``time.perf_counter()``
    seconds; default now). Yields that moment."""
    origin = time.perf_counter() if at is None else at
    token = _ORIGIN.set(origin)
    try:
        yield origin
    finally:
        _ORIGIN.reset(token)


def place_in_line() -> float:
    """Where work started now stands in line: its turn's start, or now outside a turn."""
    origin = _ORIGIN.get()
    return time.perf_counter() if origin is None else origin
