"""When the turn a piece of work belongs to began, so shared resources serve turns in order,
and when a participant's listener last got a reply's first piece of speech.

A turn's model work comes as several requests (a routing decision, then the answer): the
answer arrives at the model after other participants' requests that came in while the
decision ran. Ordered by its own arrival it would wait behind all of them; ordered by its
turn's start it keeps the place its turn took in line. :func:`turn_started` marks the work
of the calling task (and the tasks it starts) with that moment.
"""

from __future__ import annotations

import contextvars
import math
import time
from collections import OrderedDict
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


class FirstPieces:
    """When each participant's voice last took a reply's first piece of speech to
    synthesize (:meth:`spoken`): an answer begun before that has its first words out, and
    its later tokens need not go ahead of another listener's prompt (the model's
    scheduler asks :meth:`spoken_since`). Answers no voice speaks are never marked."""

    def __init__(self, keep: int = 4096) -> None:
        self._at: OrderedDict[str, float] = OrderedDict()
        self._keep = keep

    def spoken(self, participant_id: str) -> None:
        self._at[participant_id] = time.perf_counter()
        self._at.move_to_end(participant_id)
        while len(self._at) > self._keep:
            self._at.popitem(last=False)

    def spoken_since(self, participant_id: str, started: float) -> bool:
        """Whether ``participant_id``'s first piece went to synthesis at or after
        ``started`` (a ``perf_counter`` time: when their answer began)."""
        return self._at.get(participant_id, -math.inf) >= started


FIRST_PIECES = FirstPieces()
"""The process's record of first pieces spoken (one device, one voice pipeline)."""
