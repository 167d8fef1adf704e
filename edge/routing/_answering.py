"""One destination's answer: its preamble, an optional intention acknowledgment, and the
``started()`` signal that hands the turn's output over to the destination."""

from __future__ import annotations

from collections.abc import Mapping

import anyio

from ._acknowledge import Acknowledger, Acknowledgment
from ._output import ControlOutput
from ._started import StartSignal
from ._state import Run
from ._types import AgentTurn, DestinationResult, RoutableAgent


class Answerer:
    """Calls a destination's ``answer()`` with the turn's ``started()`` signal; with an
    ``acknowledger``, an acknowledgment runs beside it until the destination starts."""

    def __init__(
        self, destinations: Mapping[str, RoutableAgent], acknowledger: Acknowledger | None
    ) -> None:
        self._destinations = destinations
        self._acknowledger = acknowledger

    async def answer(
        self, run: Run, route: str, turn: AgentTurn, out: ControlOutput, preamble: str
    ) -> DestinationResult:
        """The destination's result (checked); its failure propagates once the
        acknowledgment is settled."""
        if preamble:
            await out.send(route, preamble)
        ack: Acknowledgment | None = None
        acknowledger = self._acknowledger
        if acknowledger is not None:
            aid = self._destinations[route].routing_aid(turn.participant_id)
            ack = Acknowledgment(acknowledger, turn, route, aid, lambda t: out.send(route, t))
        signal = StartSignal(acknowledger.times if acknowledger else None, run, route, ack)
        error: Exception | None = None
        result: object = None
        async with anyio.create_task_group() as tg:
            if ack is not None:
                tg.start_soon(ack.run)
            try:
                result = await self._destinations[route].answer(turn, started=signal)
            except Exception as exc:  # re-raised after the acknowledgment task is settled
                error = exc
            finally:
                signal.closed = True
                if ack is not None:
                    ack.suppress()
        if error is not None:
            raise error
        if not isinstance(result, DestinationResult):
            raise TypeError(f"destination {route!r} returned {result!r} from answer()")
        return result
