"""Admission and lifecycle: who the router serves, their turns, departure and shutdown."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from ._cleanup import drain, release_participant
from ._config import ParticipantCallback
from ._history import DialogueHistory
from ._owned import OwnedOperation
from ._state import Participant, Run, TurnCancelled
from ._types import AgentTurn, DestinationResult, RoutableAgent

log = logging.getLogger(__name__)

TurnWork = Callable[[Participant, Run], Awaitable[DestinationResult]]


class Participants:
    """The participants' state and admission: a turn is admitted unless the router is
    shutting down, the participant's departure is pending or failed, or (``rejoin``: with
    a participant-joined topic) they left and have not joined again. A new turn cancels
    the participant's earlier ones and runs once they have drained, one at a time.
    Departure and shutdown are owned operations (callers join them; a failed one is
    retried by the next caller)."""

    def __init__(
        self,
        destinations: Mapping[str, RoutableAgent],
        dialogue: DialogueHistory,
        cleanup: ParticipantCallback | None,
        *,
        rejoin: bool,
    ) -> None:
        self._destinations = destinations
        self._dialogue = dialogue
        self._cleanup = cleanup
        self._rejoin = rejoin
        self.states: dict[str, Participant] = {}
        self._departures: dict[str, OwnedOperation] = {}
        self._closed: set[str] = set()  # departed, awaiting a participant-joined event
        self._shutdown: OwnedOperation | None = None

    def get(self, participant_id: str) -> Participant | None:
        return self.states.get(participant_id)

    # ------------------------------------------------------------------ turns

    def check_open(self, participant_id: str) -> None:
        if self._shutdown is not None:
            state = "failed; retry stop()" if self._shutdown.failed else "in progress"
            raise RuntimeError(f"the router is shutting down ({state})")
        op = self._departures.get(participant_id)
        if op is not None:
            state = "failed; retry participant_left()" if op.failed else "in progress"
            raise RuntimeError(f"departure of participant {participant_id!r} is {state}")
        if participant_id in self._closed:
            raise RuntimeError(
                f"participant {participant_id!r} left; a participant-joined event readmits them"
            )

    def arrive(self, turn: AgentTurn) -> Run:
        """Register a turn (synchronously, so arrival order is kept) and cancel the
        participant's earlier turns; the new one runs once they have drained."""
        if not turn.participant_id:
            raise ValueError("a turn needs a non-empty participant_id")
        self.check_open(turn.participant_id)
        state = self.states.get(turn.participant_id)
        if state is None:
            state = self.states[turn.participant_id] = Participant(turn.participant_id)
        for earlier in state.runs:
            earlier.scope.cancel()
        run = Run(turn)
        state.runs.append(run)
        return run

    async def execute(self, run: Run, work: TurnWork) -> DestinationResult:
        """Run an arrived turn's ``work`` in its cancel scope, after the participant's
        earlier turns; :class:`TurnCancelled` when it was cancelled."""
        state = self.states[run.turn.participant_id]
        try:
            with run.scope:
                async with state.lock:
                    return await work(state, run)
            raise TurnCancelled(f"turn {run.turn.turn_id} was cancelled")
        finally:
            if run in state.runs:
                state.runs.remove(run)
            run.done.set()

    async def interrupt(self, participant_id: str | None = None) -> None:
        """Cancel active turns (one participant's, or everyone's) and wait until they
        have drained."""
        states = (
            list(self.states.values())
            if participant_id is None
            else [s for s in (self.states.get(participant_id),) if s is not None]
        )
        runs = [run for state in states for run in state.runs]
        for run in runs:
            run.scope.cancel()
        for run in runs:
            await run.done.wait()

    async def interrupted(self, participant_id: str | None, request_id: str | None) -> None:
        """An interruption event: of one turn (if it still runs), a participant or all."""
        if request_id is not None and participant_id is not None:
            state = self.states.get(participant_id)
            if state is None or not any(r.turn.turn_id == request_id for r in state.runs):
                return  # that turn already finished or was superseded
        await self.interrupt(participant_id)

    # ------------------------------------------------------------------ departure, stop

    async def participant_left(self, participant_id: str) -> None:
        op = self._departures.get(participant_id)
        if op is None or op.failed:
            op = OwnedOperation(lambda: self._depart(participant_id))
            self._departures[participant_id] = op
        try:
            await op.join()
        finally:
            if op.finished and not op.failed and self._departures.get(participant_id) is op:
                del self._departures[participant_id]

    async def joined(self, participant_id: str) -> None:
        """A participant (re)joined: a departure of theirs still running is waited for and
        a failed one retried, so it never lands after this arrival; admission reopens
        whatever its outcome (a release that keeps failing is logged, and never locks the
        participant out)."""
        if participant_id in self._departures:
            try:
                await self.participant_left(participant_id)
            except Exception:
                log.exception(
                    "departure of participant %s failed again; admitting them anyway",
                    participant_id,
                )
                self._departures.pop(participant_id, None)
        self._closed.discard(participant_id)

    async def stop(self) -> None:
        op = self._shutdown
        if op is None or op.failed:
            op = OwnedOperation(self._stop)
            self._shutdown = op
        try:
            await op.join()
        finally:
            if op.finished and not op.failed and self._shutdown is op:
                self._shutdown = None

    async def _release(self, state: Participant) -> None:
        await release_participant(state, self._destinations, self._cleanup)
        await self._dialogue.forget(state.participant_id)
        if self.states.get(state.participant_id) is state:
            del self.states[state.participant_id]

    async def _depart(self, participant_id: str) -> None:
        state = self.states.get(participant_id)
        if state is not None:
            await self._release(state)
        if self._rejoin:
            self._closed.add(participant_id)

    async def _stop(self) -> None:
        for op in list(self._departures.values()):
            if not op.finished:
                try:
                    await op.join()
                except Exception:
                    pass  # reported to that departure's callers; retried below
        errors: list[Exception] = []
        for state in list(self.states.values()):
            await drain(state)
        for state in list(self.states.values()):
            try:
                await self._release(state)
            except ExceptionGroup as group:
                errors.extend(group.exceptions)
        if errors:
            raise ExceptionGroup(f"router shutdown: {len(errors)} release(s) failed", errors)
        self.states.clear()
        self._departures.clear()
        self._closed.clear()
