"""Focus and choice: which destination answers a turn, and the focus it leaves behind."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from edge.decisions import DecisionError, DecisionService
from edge.interaction import Exchange
from edge.runtime import TRACES

from ._answering import Answerer
from ._choice import (
    CLARIFY_TEXT,
    aids_of,
    clarification,
    open_candidates,
    picked,
    routing_question,
)
from ._output import ROUTER_SOURCE, ControlOutput
from ._state import Participant, Run
from ._types import Admission, AgentTurn, DestinationResult, Resumable, RoutableAgent, RoutingAid

log = logging.getLogger(__name__)

MAX_SELECTED_ATTEMPTS = 2
"""Routing choices per turn: the first choice and one reroute after a decline."""

Outcome = tuple[str | None, DestinationResult]
"""The route that answered (None: the router asked for clarification) and its result."""


class Selector:
    """A focused destination gets the participant's turn first; otherwise the decision
    service picks among eligible destinations, the pick is admitted before it speaks, a
    decline gets one reroute that excludes declined routes, then the eligible default
    answers once without admission (unless it declined); when nothing can be chosen the
    router asks for clarification. A destination's ``focus`` / ``release`` result moves
    the participant's focus."""

    def __init__(
        self,
        destinations: Mapping[str, RoutableAgent],
        decisions: DecisionService,
        default_destination: str,
        answerer: Answerer,
    ) -> None:
        self._destinations = destinations
        self._decisions = decisions
        self._default = default_destination
        self._answerer = answerer

    async def select_and_answer(
        self,
        state: Participant,
        run: Run,
        turn: AgentTurn,
        history: Sequence[Exchange],
        out: ControlOutput,
    ) -> Outcome:
        declined: set[str] = set()
        aids = aids_of(self._destinations, turn.participant_id)
        if state.focus is not None:
            done = await self._focused(state, run, turn, out, aids, declined)
            if done is not None:
                return done
            aids = aids_of(self._destinations, turn.participant_id)
        for _ in range(MAX_SELECTED_ATTEMPTS):
            candidates = open_candidates(aids, declined)
            if not candidates:
                break
            route = await self._choose(turn, candidates, aids, history)
            TRACES.mark(turn.participant_id, "routed", once=True, route=route)
            if route is None:
                return None, await self._clarify(out, None, clarification(aids, declined))
            admission = await self._admit(state, route, turn, focused=state.focus == route)
            if admission.disposition == "accept":
                return route, await self._answer(state, run, route, turn, out, admission)
            if admission.disposition == "clarify":
                return None, await self._clarify(out, route, admission.text)
            if admission.disposition == "release":
                await (self._clear_focus if state.focus == route else self._release)(state, route)
                if admission.text:
                    await out.send(route, admission.text)
                aids = aids_of(self._destinations, turn.participant_id)
            else:
                declined.add(route)
        default = self._default
        if default in self._destinations and default not in declined and aids[default].eligible:
            return default, await self._answer(state, run, default, turn, out, None)
        return None, await self._clarify(out, None, clarification(aids, declined))

    async def _focused(
        self,
        state: Participant,
        run: Run,
        turn: AgentTurn,
        out: ControlOutput,
        aids: Mapping[str, RoutingAid],
        declined: set[str],
    ) -> Outcome | None:
        """The focused destination's admission: its outcome, or None to route the turn
        (it was ineligible or released focus, or it declined: then in ``declined``)."""
        owner = state.focus
        assert owner is not None
        if not aids[owner].eligible:
            await self._clear_focus(state, owner)
            return None
        admission = await self._admit(state, owner, turn, focused=True)
        if admission.disposition == "accept":
            return owner, await self._answer(state, run, owner, turn, out, admission)
        if admission.disposition == "clarify":
            return None, await self._clarify(out, owner, admission.text)
        if admission.disposition == "release":
            await self._clear_focus(state, owner)
            if admission.text:
                await out.send(owner, admission.text)
        else:
            declined.add(owner)
        return None

    async def resume(self, state: Participant) -> None:
        """A participant's first turn since they (re)joined: a :class:`Resumable`
        destination that kept what they were doing takes their focus back."""
        if state.focus is not None:
            return
        for name, destination in self._destinations.items():
            if isinstance(destination, Resumable) and await destination.resume(
                state.participant_id
            ):
                state.focus = name
                state.used.add(name)
                return

    async def _choose(
        self,
        turn: AgentTurn,
        candidates: list[str],
        aids: Mapping[str, RoutingAid],
        history: Sequence[Exchange],
    ) -> str | None:
        """The decision service's pick among ``candidates`` (no call for a single one);
        an uncertain pick with usable scores takes the highest-scoring candidate; None
        when nothing can be chosen."""
        if len(candidates) == 1:
            return candidates[0]
        question = routing_question(turn.query, candidates, aids, history, turn.participant_id)
        answer = await self._decisions.decide(question)
        try:
            return picked(question, answer, candidates, aids, self._default)
        except DecisionError as exc:
            log.warning("ignoring an invalid routing decision for %s: %s", turn.turn_id, exc)
            return None

    async def _admit(
        self, state: Participant, route: str, turn: AgentTurn, *, focused: bool
    ) -> Admission:
        state.used.add(route)
        admission = await self._destinations[route].admit(turn, focused=focused)
        if not isinstance(admission, Admission):
            raise TypeError(f"destination {route!r} returned {admission!r} from admit()")
        return admission

    async def _answer(
        self,
        state: Participant,
        run: Run,
        route: str,
        turn: AgentTurn,
        out: ControlOutput,
        admission: Admission | None,
    ) -> DestinationResult:
        state.used.add(route)
        preamble = admission.preamble if admission is not None else ""
        result = await self._answerer.answer(run, route, turn, out, preamble)
        if result.disposition == "focus":
            previous = state.focus
            state.focus = route
            if previous is not None and previous != route:
                await self._release(state, previous)
        elif result.disposition == "release" and state.focus == route:
            await self._clear_focus(state, route)
        return result

    @staticmethod
    async def _clarify(out: ControlOutput, route: str | None, text: str) -> DestinationResult:
        text = text or CLARIFY_TEXT
        await out.send(route or ROUTER_SOURCE, text)
        return DestinationResult("clarify", text)

    async def _clear_focus(self, state: Participant, route: str) -> None:
        if state.focus == route:
            state.focus = None
        await self._release(state, route)

    async def _release(self, state: Participant, route: str) -> None:
        await self._destinations[route].release(state.participant_id)
