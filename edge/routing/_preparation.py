"""Decisions ahead of their turn: a participant's next question prepared after an
exchange, and where a turn would most likely go before it runs."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import anyio

from edge.decisions import (
    DecisionError,
    DecisionService,
    PrefetchDecisions,
    PreparingDecisions,
)
from edge.interaction import Exchange

from ._choice import aids_of, open_candidates, picked, routing_question
from ._config import RouterConfig
from ._history import DialogueHistory
from ._selection import MAX_SELECTED_ATTEMPTS
from ._state import Participant
from ._types import AgentTurn, RoutableAgent, RoutingAid

log = logging.getLogger(__name__)


class DecisionPreparer:
    """Asks the decision service ahead of a turn, with the question the turn would ask
    (the participant's recent exchanges from ``dialogue`` included)."""

    def __init__(
        self,
        destinations: Mapping[str, RoutableAgent],
        decisions: DecisionService,
        dialogue: DialogueHistory,
        config: RouterConfig,
        state_of: Callable[[str], Participant | None],
    ) -> None:
        self._destinations = destinations
        self._decisions = decisions
        self._dialogue = dialogue
        self._config = config
        self._state_of = state_of
        self.scopes: set[anyio.CancelScope] = set()  # cancelled when the router closes
        self._newest: dict[str, anyio.CancelScope] = {}  # each participant's latest

    @property
    def enabled(self) -> bool:
        return isinstance(self._decisions, PreparingDecisions)

    def _history(self, participant_id: str) -> list[Exchange]:
        """The history the participant's next turn would see."""
        return list(self._dialogue.recent(participant_id, self._config.context_budget_bytes))

    async def prepare(self, participant_id: str) -> None:
        """See :meth:`AgentRouter.prepare_decisions`."""
        if not isinstance(self._decisions, PreparingDecisions):
            return
        aids = aids_of(self._destinations, participant_id)
        eligible = sorted(name for name, aid in aids.items() if aid.eligible)
        if len(eligible) > 1:
            history = self._history(participant_id)
            question = routing_question("", eligible, aids, history, participant_id)
            await self._decisions.prepare(question)

    async def prepare_next(self, participant_id: str, completed: int) -> None:
        """After an exchange (the participant's ``completed``-th): prepare their next
        decision once ``prepare_delay_s`` has passed, unless their focus skips it or
        another exchange of theirs completed meanwhile (its own preparation follows, and
        cancels this one wherever it is: on a busy machine it may still wait for the model
        behind their answers). Best effort (a closing model, a failed evaluation): logged,
        never raised; closing the router cancels it."""
        with anyio.CancelScope() as scope:
            self.scopes.add(scope)
            earlier = self._newest.get(participant_id)
            if earlier is not None:
                earlier.cancel()
            self._newest[participant_id] = scope
            try:
                await anyio.sleep(self._config.prepare_delay_s)
                state = self._state_of(participant_id)
                if state is None or state.completed != completed:
                    return
                if state.focus is None:
                    await self.prepare(participant_id)
            except Exception as exc:  # warming only: the turn decides anyway
                log.debug("preparing the next decision of %r failed: %s", participant_id, exc)
            finally:
                self.scopes.discard(scope)
                if self._newest.get(participant_id) is scope:
                    del self._newest[participant_id]

    def cancel(self) -> None:
        for scope in self.scopes:  # preparations are best effort: not waited for
            scope.cancel()

    async def likely_destination(self, participant_id: str, text: str) -> str | None:
        """See :meth:`AgentRouter.likely_destination`: the destination the turn's
        selection would reach, a pick that would decline the turn passed over as the
        selection passes over it (the notes agent picked for a question, say)."""
        state = self._state_of(participant_id)
        aids = aids_of(self._destinations, participant_id)
        if state is not None and state.focus in aids and aids[state.focus].eligible:
            return state.focus
        turn = AgentTurn(participant_id, "likely", text)
        declined: set[str] = set()
        for _ in range(MAX_SELECTED_ATTEMPTS):
            candidates = open_candidates(aids, declined)
            if not candidates:
                break
            route = await self._pick(participant_id, text, candidates, aids)
            if route is None:
                return None
            disposition = (await self._destinations[route].admit(turn, focused=False)).disposition
            if disposition != "decline":
                return route if disposition == "accept" else None
            declined.add(route)
        default = self._config.default_destination
        if default in aids and default not in declined and aids[default].eligible:
            return default
        return None

    async def _pick(
        self, participant_id: str, text: str, candidates: list[str], aids: Mapping[str, RoutingAid]
    ) -> str | None:
        if len(candidates) < 2:
            return candidates[0] if candidates else None
        history = self._history(participant_id)
        question = routing_question(text, candidates, aids, history, participant_id)
        decisions = self._decisions
        ask = decisions.prefetch if isinstance(decisions, PrefetchDecisions) else decisions.decide
        try:
            return picked(
                question, await ask(question), candidates, aids, self._config.default_destination
            )
        except DecisionError:
            return None
