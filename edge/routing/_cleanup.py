"""Draining a participant's turns and releasing what it used (departure and stop)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from ._state import Participant
from ._types import LeaveAware, RoutableAgent

log = logging.getLogger(__name__)


async def drain(state: Participant) -> None:
    """Cancel the participant's turns (running or waiting) and wait until they finish."""
    runs = list(state.runs)
    for run in runs:
        run.scope.cancel()
    for run in runs:
        await run.done.wait()


async def release_participant(
    state: Participant,
    destinations: Mapping[str, RoutableAgent],
    cleanup: Callable[[str], Awaitable[None]] | None,
) -> None:
    """Drain, then release every destination the participant used (its
    ``participant_left()`` hook when present, else ``release()``), then the application
    cleanup. Every step is attempted; failures are raised together and stay tracked in
    ``state`` so a retry repeats only what failed."""
    pid = state.participant_id
    await drain(state)
    errors: list[Exception] = []
    for route in sorted(state.used):
        destination = destinations[route]
        try:
            if isinstance(destination, LeaveAware):
                await destination.participant_left(pid)
            else:
                await destination.release(pid)
        except Exception as exc:
            log.warning("releasing %s for %s failed: %r", route, pid, exc)
            errors.append(exc)
        else:
            state.used.discard(route)
            if state.focus == route:
                state.focus = None
    if cleanup is not None and not state.cleaned:
        try:
            await cleanup(pid)
            state.cleaned = True
        except Exception as exc:
            log.warning("cleanup of participant %s failed: %r", pid, exc)
            errors.append(exc)
    if errors:
        raise ExceptionGroup(f"releasing participant {pid!r}: {len(errors)} failed", errors)
