"""The AgentRouter: admission before speech, explicit focus, bounded rerouting.

It composes parts with one job each: :class:`Participants` (admission and lifecycle),
:class:`Selector` (focus and choice), :class:`Answerer` (a destination's answer and the
acknowledgment beside it), :class:`DecisionPreparer` (decisions ahead of a turn) and
:class:`RouterSubscriber` (runtime delivery). Completed exchanges belong to the dialogue's
owner, read and added to through :class:`DialogueHistory`."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Unpack
from uuid import uuid4

import anyio

from edge.decisions import DecisionService
from edge.interaction import Exchange
from edge.runtime import BackgroundTasks, turn_started

from ._acknowledge import Acknowledger, validate_acknowledgment_config
from ._answering import Answerer
from ._config import ParticipantHooks, RouterConfig, SpecKeywords, fold_spec_keywords
from ._history import DialogueHistory, RecentExchanges, records_itself
from ._output import ROUTER_SOURCE, CallbackOutput, ControlOutput, OutputCallback
from ._participants import Participants
from ._preparation import DecisionPreparer
from ._selection import Selector
from ._state import Participant, Run
from ._turn_context import routed_turn
from ._types import AgentTurn, DestinationResult, RoutableAgent

if TYPE_CHECKING:
    from edge.llm import LLMService
    from edge.runtime import Agent

log = logging.getLogger(__name__)


FAILURE_TEXT = "Sorry, something went wrong while handling that. Please try again."


def _check_destinations(destinations: Mapping[str, RoutableAgent]) -> None:
    if not destinations:
        raise ValueError("the router needs a non-empty mapping of route name to destination")
    for name in destinations:
        if not name:
            raise ValueError(f"route names must be non-empty strings, got {name!r}")
        if name == ROUTER_SOURCE:
            raise ValueError(f"{ROUTER_SOURCE!r} is reserved for the router's own output")


class AgentRouter:
    """Route a turn, check admission before speech, and retain explicit focus.

    See ``docs/routing.md`` for the full behaviour; in short: a focused destination gets
    the participant's next turn first; otherwise the decision service picks among eligible
    destinations, the pick is admitted before it speaks, a decline gets one reroute that
    excludes declined routes, then the eligible default answers once without admission
    (unless it declined); when nothing can be chosen the router asks for clarification.

    ``output`` receives the router's own control text for :meth:`handle` (runtime turns
    publish it on ``config.topics.output``); ``dialogue`` owns the completed exchanges
    (default: the router keeps the newest within ``config.context_budget_bytes`` in
    memory); ``acknowledgment_llm`` (with ``config.acknowledgment_delay_s``) makes brief
    intention acknowledgments; ``hooks`` are the application's participant callbacks.
    :meth:`from_spec` takes the routing spec's keywords instead (``query_topic=``,
    ``default_destination=``, ``cleanup_participant=`` …, :class:`SpecKeywords`).
    Use ``async with router:`` (or :meth:`stop`) for its lifecycle: runtime turns run in
    the router's own task group, drained by :meth:`stop`.
    """

    def __init__(
        self,
        destinations: Mapping[str, RoutableAgent],
        decisions: DecisionService,
        config: RouterConfig | None = None,
        *,
        output: OutputCallback | None = None,
        dialogue: DialogueHistory | None = None,
        acknowledgment_llm: LLMService | None = None,
        hooks: ParticipantHooks | None = None,
    ) -> None:
        _check_destinations(destinations)
        config = config if config is not None else RouterConfig()
        validate_acknowledgment_config(acknowledgment_llm, config.acknowledgment_delay_s)
        self.config = config
        self._destinations = dict(destinations)
        self._output = output
        self._hooks = hooks if hooks is not None else ParticipantHooks()
        self._dialogue = dialogue or RecentExchanges(config.context_budget_bytes)
        acknowledger = None
        if acknowledgment_llm is not None and config.acknowledgment_delay_s is not None:
            acknowledger = Acknowledger(acknowledgment_llm, config.acknowledgment_delay_s)
        topics = config.topics
        self._participants = Participants(
            self._destinations,
            self._dialogue,
            self._hooks.cleanup,
            rejoin=topics is not None and topics.joined is not None,
        )
        answerer = Answerer(self._destinations, acknowledger)
        self._selector = Selector(
            self._destinations, decisions, config.default_destination, answerer
        )
        self._preparer = DecisionPreparer(
            self._destinations, decisions, self._dialogue, config, self._participants.get
        )
        self._tasks = BackgroundTasks("the router")
        self._subscriber: Agent | None = None

    @classmethod
    def from_spec(
        cls,
        destinations: Mapping[str, RoutableAgent],
        decisions: DecisionService,
        *,
        output: OutputCallback | None = None,
        acknowledgment_llm: LLMService | None = None,
        **spec: Unpack[SpecKeywords],
    ) -> AgentRouter:
        """A router made with the routing spec's constructor keywords
        (``shared/spec/routing.md``), folded into a :class:`RouterConfig` and
        :class:`ParticipantHooks` by :func:`fold_spec_keywords` (an unknown keyword raises
        TypeError, a query topic without an output topic ValueError)."""
        config, hooks = fold_spec_keywords(RouterConfig(), ParticipantHooks(), spec)
        return cls(
            destinations,
            decisions,
            config,
            output=output,
            acknowledgment_llm=acknowledgment_llm,
            hooks=hooks,
        )

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> AgentRouter:
        if self._tasks.running:
            raise RuntimeError("the router is already entered")
        await self._tasks.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await self.stop()
        finally:  # turns arriving from now on run inline; the router's own ones finish
            self._preparer.cancel()
            await self._tasks.close(cancel=False)

    # ------------------------------------------------------------------ public API

    @property
    def destinations(self) -> Mapping[str, RoutableAgent]:
        return dict(self._destinations)

    @property
    def default_destination(self) -> str:
        return self.config.default_destination

    @property
    def context_budget_bytes(self) -> int:
        return self.config.context_budget_bytes

    def focus(self, participant_id: str) -> str | None:
        """The route holding the participant's focus, if any."""
        state = self._participants.get(participant_id)
        return state.focus if state else None

    def history(self, participant_id: str) -> tuple[Exchange, ...]:
        """The participant's completed exchanges the router sees (the newest within
        ``context_budget_bytes``), oldest first (the router's own memory forgets them on
        departure; a context that keeps them shows them to a returning participant)."""
        return tuple(self._dialogue.recent(participant_id, self.config.context_budget_bytes))

    async def prepare_decisions(self, participant_id: str = "") -> None:
        """Let the decision service prepare for the options a turn of ``participant_id``
        would see (all eligible destinations), e.g. evaluate the local model's option prefix
        at start-up so the first real decision is warm. A no-op for services without
        ``prepare()`` or with fewer than two eligible destinations.

        With the participant's completed history, the question carries their recent
        conversation, so the prepared prefix is the one their next decision starts with
        (the router does this in the background after each of their exchanges)."""
        await self._preparer.prepare(participant_id)

    async def likely_destination(self, participant_id: str, text: str) -> str | None:
        """Where a turn saying ``text`` would most likely go now, without running it or
        recording anything: the focused destination, the only eligible one, or the
        decision service's pick for the question the turn would ask first. A decision
        service that can ``prefetch`` (``edge.speculation.PrefetchingDecisions``) keeps that
        decision and answers the turn itself with it when the turn asks the same
        question, so routing leaves the turn's critical path without changing its
        outcome. None when nothing can be chosen."""
        return await self._preparer.likely_destination(participant_id, text)

    async def handle(self, turn: AgentTurn) -> DestinationResult:
        """Route one turn while emitting only router-owned control text.

        Raises :class:`TurnCancelled` when the turn is cancelled by :meth:`interrupt`, a
        newer turn, departure or shutdown; RuntimeError while departure or shutdown is
        pending, after a failed cleanup until it is retried successfully, or without an
        ``output`` callback.
        """
        if self._output is None:
            raise RuntimeError("configure output= on the router before calling handle()")
        run = self._participants.arrive(turn)
        return await self._execute(run, CallbackOutput(self._output, turn))

    async def interrupt(self, participant_id: str | None = None) -> None:
        """Cancel active response work (one participant's, or everyone's) and wait until
        it has drained. Completed history and focus are kept."""
        await self._participants.interrupt(participant_id)

    async def participant_left(self, participant_id: str) -> None:
        """Release one participant's state (see the class docs); the dialogue's owner is
        told they left (the router's own memory forgets their history)."""
        await self._participants.participant_left(participant_id)

    async def stop(self) -> None:
        """Drain responses and release all participant state in one owned operation."""
        await self._participants.stop()

    def runtime_subscriber(self) -> Agent:
        """The runtime agent delivering the configured topics to this router (register it
        once with the application's AgentRuntime)."""
        topics = self.config.topics
        if topics is None:
            raise ValueError("runtime_subscriber() needs RouterConfig(topics=...)")
        if self._subscriber is None:
            from ._subscriber import RouterSubscriber

            self._subscriber = RouterSubscriber(self, topics, self._hooks)
        return self._subscriber

    # ------------------------------------------------------------------ a turn

    async def _execute(self, run: Run, out: ControlOutput) -> DestinationResult:
        async def work(state: Participant, run: Run) -> DestinationResult:
            try:
                return await self._route(state, run, out)
            except Exception:  # before the destination started: one failure message
                if not run.started:
                    try:
                        await out.send(ROUTER_SOURCE, FAILURE_TEXT)
                    except Exception:
                        log.exception(
                            "could not deliver the failure message of %s", run.turn.turn_id
                        )
                raise

        with turn_started():  # its decision and answer keep the turn's place in line
            return await self._participants.execute(run, work)

    async def _route(self, state: Participant, run: Run, out: ControlOutput) -> DestinationResult:
        turn = run.turn
        pid = turn.participant_id
        if not state.initialized:
            await self._selector.resume(state)
            if self._hooks.initialize is not None:
                await self._hooks.initialize(pid)
            state.initialized = True
        budget = self.config.context_budget_bytes
        history = tuple(self._dialogue.recent(pid, budget))
        if not history and not state.completed and turn.history:
            for e in turn.history:  # a caller's history seeds a participant without any
                await self._dialogue.record(pid, replace(e, exchange_id=uuid4().hex))
            history = tuple(self._dialogue.recent(pid, budget))
        routed = replace(turn, history=history, exchange_id=uuid4().hex)
        with routed_turn(routed):
            route, result = await self._selector.select_and_answer(state, run, routed, history, out)
        if route is not None and result.disposition != "clarify":
            state.completed += 1
            if not records_itself(self._destinations[route], self._dialogue):
                exchange = Exchange(turn.query, result.text, routed.exchange_id, turn.timestamp_us)
                with anyio.CancelScope(shield=True):  # a completed exchange is never lost
                    await self._dialogue.record(pid, exchange)
            if self._tasks.running and self._preparer.enabled:
                self._tasks.start_soon(self._preparer.prepare_next, pid, state.completed)
        return result
