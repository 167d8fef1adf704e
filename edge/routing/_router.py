"""The AgentRouter: admission before speech, explicit focus, bounded rerouting."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import anyio

from edge.decisions import (
    DecisionError,
    DecisionService,
    PrefetchDecisions,
    PreparingDecisions,
    validate_answer,
)
from edge.runtime import BackgroundTasks

from ._acknowledge import Acknowledger, Acknowledgment, validate_acknowledgment_config
from ._choice import CLARIFY_TEXT, best_scored, clarification, routing_question
from ._cleanup import drain, release_participant
from ._config import validate_runtime_topics
from ._history import Exchange, newest_within
from ._output import ROUTER_SOURCE, CallbackOutput, ControlOutput, OutputCallback, TopicOutput
from ._owned import OwnedOperation
from ._started import StartSignal
from ._state import Participant, Run, TurnCancelled
from ._types import (
    _TURN_CONTEXT,
    Admission,
    AgentTurn,
    DestinationResult,
    Resumable,
    RoutableAgent,
    RoutingAid,
    RoutingTurnContext,
)

if TYPE_CHECKING:
    from edge.llm import LLMService
    from edge.runtime import Agent, Topic

log = logging.getLogger(__name__)

_DEFAULT_CONTEXT_BUDGET_BYTES = 8000
"""Bytes of completed history kept per participant and shown to destinations and routing.
About 2,400 tokens of a small model: a cold prompt of that size takes seconds on a 2-core
CPU, so device profiles usually pass a smaller budget (see ``edge device``)."""

PREPARE_DELAY_S = 0.5
"""Seconds after an exchange before the participant's next decision is prepared: their
conversation's re-warm (after 0.25 s of quiet, ``ContextManager(rewarm_quiet_s=)``) takes
the model first, since every next answer uses it and only some decisions ask the model."""

MAX_SELECTED_ATTEMPTS = 2
"""Routing choices per turn: the first choice and one reroute after a decline."""

FAILURE_TEXT = "Sorry, something went wrong while handling that. Please try again."

StatusCallback = Callable[[Literal["processing", "idle"], str], Awaitable[None]]
ParticipantCallback = Callable[[str], Awaitable[None]]


class AgentRouter:
    """Route a turn, check admission before speech, and retain explicit focus.

    See ``docs/routing.md`` for the full behaviour; in short: a focused destination gets
    the participant's next turn first; otherwise the decision service picks among eligible
    destinations, the pick is admitted before it speaks, a decline gets one reroute that
    excludes declined routes, then the eligible default answers once without admission
    (unless it declined); when nothing can be chosen the router asks for clarification.
    Use ``async with router:`` (or :meth:`stop`) for its lifecycle: runtime turns run in
    the router's own task group, drained by :meth:`stop`.
    """

    def __init__(
        self,
        destinations: Mapping[str, RoutableAgent],
        decisions: DecisionService,
        *,
        output: OutputCallback | None = None,
        default_destination: str = "conversation",
        context_budget_bytes: int = _DEFAULT_CONTEXT_BUDGET_BYTES,
        acknowledgment_llm: LLMService | None = None,
        acknowledgment_delay_secs: float | None = None,
        query_topic: Topic[Any] | None = None,
        output_topic: Topic[Any] | None = None,
        participant_joined_topic: Topic[Any] | None = None,
        participant_left_topic: Topic[Any] | None = None,
        interrupted_topic: Topic[Any] | None = None,
        initialize_participant: ParticipantCallback | None = None,
        cleanup_participant: ParticipantCallback | None = None,
        set_status: StatusCallback | None = None,
        prepare_delay_s: float = PREPARE_DELAY_S,
    ) -> None:
        if not isinstance(destinations, Mapping) or not destinations:
            raise ValueError("the router needs a non-empty mapping of route name to destination")
        for name, destination in destinations.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"route names must be non-empty strings, got {name!r}")
            if name == ROUTER_SOURCE:
                raise ValueError(f"{ROUTER_SOURCE!r} is reserved for the router's own output")
            if not isinstance(destination, RoutableAgent):
                raise TypeError(
                    f"destination {name!r} ({type(destination).__name__}) does not implement "
                    "RoutableAgent (routing_aid, admit, answer, release)"
                )
        if not isinstance(decisions, DecisionService):
            raise TypeError("decisions must be a DecisionService with an async decide()")
        if isinstance(context_budget_bytes, bool) or not isinstance(context_budget_bytes, int):
            raise TypeError("context_budget_bytes must be an int")
        if context_budget_bytes < 0:
            raise ValueError(f"context_budget_bytes must be >= 0, got {context_budget_bytes}")
        if not prepare_delay_s >= 0:
            raise ValueError(f"prepare_delay_s must be >= 0, got {prepare_delay_s!r}")
        if output is not None and not callable(output):
            raise TypeError("output must be an async callable (turn, route, text)")
        validate_acknowledgment_config(acknowledgment_llm, acknowledgment_delay_secs)
        self._runtime_mode = validate_runtime_topics(
            query_topic=query_topic,
            output_topic=output_topic,
            participant_joined_topic=participant_joined_topic,
            participant_left_topic=participant_left_topic,
            interrupted_topic=interrupted_topic,
        )
        self._destinations = dict(destinations)
        self._decisions = decisions
        self._output = output
        self.default_destination = default_destination
        self.context_budget_bytes = context_budget_bytes
        self.prepare_delay_s = prepare_delay_s
        self._acknowledger = (
            Acknowledger(acknowledgment_llm, acknowledgment_delay_secs)
            if acknowledgment_llm is not None and acknowledgment_delay_secs is not None
            else None
        )
        self._query_topic = query_topic
        self._output_topic = output_topic
        self._joined_topic = participant_joined_topic
        self._left_topic = participant_left_topic
        self._interrupted_topic = interrupted_topic
        self._initialize = initialize_participant
        self._cleanup = cleanup_participant
        self._set_status = set_status
        self._participants: dict[str, Participant] = {}
        self._departures: dict[str, OwnedOperation] = {}
        self._closed: set[str] = set()  # departed, awaiting a participant-joined event
        self._shutdown: OwnedOperation | None = None
        self._tasks = BackgroundTasks("the router")
        self._preparing: set[anyio.CancelScope] = set()
        self._subscriber: Agent | None = None
        self._warned_inline = False

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
            for scope in self._preparing:  # preparations are best effort: not waited for
                scope.cancel()
            await self._tasks.close(cancel=False)

    # ------------------------------------------------------------------ public API

    @property
    def destinations(self) -> Mapping[str, RoutableAgent]:
        return dict(self._destinations)

    def focus(self, participant_id: str) -> str | None:
        """The route holding the participant's focus, if any."""
        state = self._participants.get(participant_id)
        return state.focus if state else None

    def history(self, participant_id: str) -> tuple[Exchange, ...]:
        """The participant's retained completed exchanges, oldest first."""
        state = self._participants.get(participant_id)
        return tuple(state.history) if state else ()

    async def prepare_decisions(self, participant_id: str = "") -> None:
        """Let the decision service prepare for the options a turn of ``participant_id``
        would see (all eligible destinations), e.g. evaluate the local model's option prefix
        at start-up so the first real decision is warm. A no-op for services without
        ``prepare()`` or with fewer than two eligible destinations.

        With the participant's completed history, the question carries their recent
        conversation, so the prepared prefix is the one their next decision starts with
        (the router does this in the background after each of their exchanges)."""
        if not isinstance(self._decisions, PreparingDecisions):
            return
        aids = self._aids(participant_id)
        eligible = sorted(name for name, aid in aids.items() if aid.eligible)
        if len(eligible) > 1:
            state = self._participants.get(participant_id)
            history = newest_within(list(state.history), self.context_budget_bytes) if state else []
            question = routing_question("", eligible, aids, history, participant_id)
            await self._decisions.prepare(question)

    async def _prepare_next_decision(self, participant_id: str, completed: int) -> None:
        """After an exchange (the participant's ``completed``-th): prepare their next
        decision once :attr:`prepare_delay_s` has passed, unless their focus skips it or
        another exchange of theirs completed meanwhile (its own preparation follows). Best
        effort (a closing model, a failed evaluation): logged, never raised; leaving the
        router cancels it."""
        with anyio.CancelScope() as scope:
            self._preparing.add(scope)
            try:
                await anyio.sleep(self.prepare_delay_s)
                state = self._participants.get(participant_id)
                if state is None or state.completed != completed:
                    return
                if self.focus(participant_id) is None:
                    await self.prepare_decisions(participant_id)
            except Exception as exc:  # warming only: the turn decides anyway
                log.debug("preparing the next decision of %r failed: %s", participant_id, exc)
            finally:
                self._preparing.discard(scope)

    async def likely_destination(self, participant_id: str, text: str) -> str | None:
        """Where a turn saying ``text`` would most likely go now, without running it or
        recording anything: the focused destination, the only eligible one, or the
        decision service's pick for the question the turn would ask first. A decision
        service that can ``prefetch`` (``edge.decisions.PrefetchingDecisions``) keeps that
        decision and answers the turn itself with it when the turn asks the same
        question, so routing leaves the turn's critical path without changing its
        outcome. None when nothing can be chosen."""
        state = self._participants.get(participant_id)
        aids = self._aids(participant_id)
        if state is not None and state.focus in aids and aids[state.focus].eligible:
            return state.focus
        candidates = [name for name, aid in aids.items() if aid.eligible]
        if len(candidates) < 2:
            return candidates[0] if candidates else None
        history = newest_within(list(state.history), self.context_budget_bytes) if state else []
        question = routing_question(text, candidates, aids, history, participant_id)
        decisions = self._decisions
        ask = decisions.prefetch if isinstance(decisions, PrefetchDecisions) else decisions.decide
        try:
            answer = validate_answer(question, await ask(question))
        except DecisionError:
            return None
        if answer.label is not None:
            return answer.label
        return best_scored(answer, candidates, aids, self.default_destination)

    async def handle(self, turn: AgentTurn) -> DestinationResult:
        """Route one turn while emitting only router-owned control text.

        Raises :class:`TurnCancelled` when the turn is cancelled by :meth:`interrupt`, a
        newer turn, departure or shutdown; RuntimeError while departure or shutdown is
        pending, after a failed cleanup until it is retried successfully, or without an
        ``output`` callback.
        """
        if self._output is None:
            raise RuntimeError("configure output= on the router before calling handle()")
        run = self._arrive(turn)
        return await self._execute(run, CallbackOutput(self._output, turn))

    async def interrupt(self, participant_id: str | None = None) -> None:
        """Cancel active response work (one participant's, or everyone's) and wait until
        it has drained. Completed history and focus are kept."""
        states = (
            list(self._participants.values())
            if participant_id is None
            else [s for s in (self._participants.get(participant_id),) if s is not None]
        )
        runs = [run for state in states for run in state.runs]
        for run in runs:
            run.scope.cancel()
        for run in runs:
            await run.done.wait()

    async def participant_left(self, participant_id: str) -> None:
        """Release one participant's state and history (see the class docs)."""
        op = self._departures.get(participant_id)
        if op is None or op.failed:
            op = OwnedOperation(lambda: self._depart(participant_id))
            self._departures[participant_id] = op
        try:
            await op.join()
        finally:
            if op.finished and not op.failed and self._departures.get(participant_id) is op:
                del self._departures[participant_id]

    async def stop(self) -> None:
        """Drain responses and release all participant state in one owned operation."""
        op = self._shutdown
        if op is None or op.failed:
            op = OwnedOperation(self._stop)
            self._shutdown = op
        try:
            await op.join()
        finally:
            if op.finished and not op.failed and self._shutdown is op:
                self._shutdown = None

    def runtime_subscriber(self) -> Agent:
        """The runtime agent delivering the configured topics to this router (register it
        once with the application's AgentRuntime)."""
        if not self._runtime_mode:
            raise ValueError(
                "runtime_subscriber() needs query_topic and output_topic on the constructor"
            )
        if self._subscriber is None:
            from ._subscriber import build_subscriber

            self._subscriber = build_subscriber(self)
        return self._subscriber

    # ------------------------------------------------------------------ admission

    def _check_open(self, participant_id: str) -> None:
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

    def _arrive(self, turn: AgentTurn) -> Run:
        """Register a turn (synchronously, so arrival order is kept) and cancel the
        participant's earlier turns; the new one runs once they have drained."""
        if not isinstance(turn, AgentTurn):
            raise TypeError(f"handle() takes an AgentTurn, got {type(turn).__name__}")
        if not isinstance(turn.participant_id, str) or not turn.participant_id:
            raise ValueError("a turn needs a non-empty participant_id")
        if not isinstance(turn.query, str):
            raise TypeError("a turn's query must be a string")
        self._check_open(turn.participant_id)
        state = self._participants.get(turn.participant_id)
        if state is None:
            state = self._participants[turn.participant_id] = Participant(turn.participant_id)
        for earlier in state.runs:
            earlier.scope.cancel()
        run = Run(turn)
        state.runs.append(run)
        return run

    async def _execute(self, run: Run, out: ControlOutput) -> DestinationResult:
        state = self._participants[run.turn.participant_id]
        try:
            with run.scope:
                async with state.lock:
                    return await self._guarded(state, run, out)
            raise TurnCancelled(f"turn {run.turn.turn_id} was cancelled")
        finally:
            if run in state.runs:
                state.runs.remove(run)
            run.done.set()

    async def _guarded(self, state: Participant, run: Run, out: ControlOutput) -> DestinationResult:
        """Run the turn; a failure before the destination started gets one failure
        message, then propagates."""
        try:
            result = await self._route(state, run, out)
        except Exception:
            if not run.started:
                try:
                    await out.send(ROUTER_SOURCE, FAILURE_TEXT)
                except Exception:
                    log.exception("could not deliver the failure message of %s", run.turn.turn_id)
            raise
        return result

    # ------------------------------------------------------------------ routing

    async def _route(self, state: Participant, run: Run, out: ControlOutput) -> DestinationResult:
        turn = run.turn
        pid = turn.participant_id
        if not state.initialized:
            await self._resume(state)
            if self._initialize is not None:
                await self._initialize(pid)
            state.initialized = True
        if not state.history and not state.completed and turn.history:
            state.history = [Exchange(self._new_id(), e.user, e.assistant) for e in turn.history]
        state.history = newest_within(state.history, self.context_budget_bytes)
        history = list(state.history)
        routed = AgentTurn(
            participant_id=pid,
            turn_id=turn.turn_id,
            query=turn.query,
            history=tuple(e.public() for e in history),
            timestamp_us=turn.timestamp_us,
        )
        exchange_id = self._new_id()
        token = _TURN_CONTEXT.set(
            RoutingTurnContext(
                exchange_id=exchange_id,
                history_exchange_ids=tuple(e.exchange_id for e in history),
                history_timestamps=tuple(e.timestamp_us for e in history),
            )
        )
        try:
            route, result = await self._select_and_answer(state, run, routed, history, out)
        finally:
            _TURN_CONTEXT.reset(token)
        if route is not None and result.disposition != "clarify":
            state.completed += 1
            state.history.append(Exchange(exchange_id, turn.query, result.text, turn.timestamp_us))
            state.history = newest_within(state.history, self.context_budget_bytes)
            if self._tasks.running and isinstance(self._decisions, PreparingDecisions):
                self._tasks.start_soon(self._prepare_next_decision, pid, state.completed)
        return result

    async def _select_and_answer(
        self,
        state: Participant,
        run: Run,
        turn: AgentTurn,
        history: list[Exchange],
        out: ControlOutput,
    ) -> tuple[str | None, DestinationResult]:
        pid = turn.participant_id
        declined: set[str] = set()
        aids = self._aids(pid)

        if state.focus is not None:
            owner = state.focus
            if not aids[owner].eligible:
                await self._clear_focus(state, owner)
            else:
                admission = await self._admit(state, owner, turn, focused=True)
                if admission.disposition == "accept":
                    return owner, await self._answer(state, run, owner, turn, out, admission)
                if admission.disposition == "clarify":
                    return None, await self._clarify(out, owner, admission.text)
                if admission.disposition == "release":
                    await self._clear_focus(state, owner)
                    if admission.text:
                        await out.send(owner, admission.text)
                    aids = self._aids(pid)
                else:
                    declined.add(owner)

        for _ in range(MAX_SELECTED_ATTEMPTS):
            candidates = [n for n, a in aids.items() if a.eligible and n not in declined]
            if not candidates:
                break
            route = await self._choose(turn, candidates, aids, history)
            if route is None:
                return None, await self._clarify(out, None, clarification(aids, declined))
            admission = await self._admit(state, route, turn, focused=state.focus == route)
            if admission.disposition == "accept":
                return route, await self._answer(state, run, route, turn, out, admission)
            if admission.disposition == "clarify":
                return None, await self._clarify(out, route, admission.text)
            if admission.disposition == "release":
                if state.focus == route:
                    await self._clear_focus(state, route)
                else:
                    await self._release(state, route)
                if admission.text:
                    await out.send(route, admission.text)
                aids = self._aids(pid)
            else:
                declined.add(route)

        default = self.default_destination
        if default in self._destinations and default not in declined and aids[default].eligible:
            return default, await self._answer(state, run, default, turn, out, None)
        return None, await self._clarify(out, None, clarification(aids, declined))

    async def _resume(self, state: Participant) -> None:
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

    def _aids(self, participant_id: str) -> dict[str, RoutingAid]:
        aids: dict[str, RoutingAid] = {}
        for name, destination in self._destinations.items():
            aid = destination.routing_aid(participant_id)
            if not isinstance(aid, RoutingAid):
                raise TypeError(f"destination {name!r} returned {aid!r} from routing_aid()")
            aids[name] = aid
        return aids

    async def _choose(
        self,
        turn: AgentTurn,
        candidates: list[str],
        aids: Mapping[str, RoutingAid],
        history: list[Exchange],
    ) -> str | None:
        """The decision service's pick among ``candidates`` (no call for a single one);
        an uncertain pick with usable scores takes the highest-scoring candidate; None
        when nothing can be chosen."""
        if len(candidates) == 1:
            return candidates[0]
        question = routing_question(turn.query, candidates, aids, history, turn.participant_id)
        answer = await self._decisions.decide(question)
        try:
            answer = validate_answer(question, answer)
        except DecisionError as exc:
            log.warning("ignoring an invalid routing decision for %s: %s", turn.turn_id, exc)
            return None
        if answer.label is not None:
            return answer.label
        return best_scored(answer, candidates, aids, self.default_destination)

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
        if admission is not None and admission.preamble:
            await out.send(route, admission.preamble)
        ack: Acknowledgment | None = None
        if self._acknowledger is not None:
            aid = self._destinations[route].routing_aid(turn.participant_id)
            ack = Acknowledgment(
                self._acknowledger, turn, route, aid, lambda text: out.send(route, text)
            )
        times = self._acknowledger.times if self._acknowledger is not None else None
        signal = StartSignal(times, run, route, ack)
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
        if result.disposition == "focus":
            previous = state.focus
            state.focus = route
            if previous is not None and previous != route:
                await self._release(state, previous)
        elif result.disposition == "release" and state.focus == route:
            await self._clear_focus(state, route)
        return result

    async def _clarify(self, out: ControlOutput, route: str | None, text: str) -> DestinationResult:
        text = text or CLARIFY_TEXT
        await out.send(route or ROUTER_SOURCE, text)
        return DestinationResult("clarify", text)

    async def _clear_focus(self, state: Participant, route: str) -> None:
        if state.focus == route:
            state.focus = None
        await self._release(state, route)

    async def _release(self, state: Participant, route: str) -> None:
        await self._destinations[route].release(state.participant_id)

    @staticmethod
    def _new_id() -> str:
        from uuid import uuid4

        return uuid4().hex

    # ------------------------------------------------------------------ departure, stop

    async def _release_participant(self, state: Participant) -> None:
        await release_participant(state, self._destinations, self._cleanup)
        if self._participants.get(state.participant_id) is state:
            del self._participants[state.participant_id]

    async def _depart(self, participant_id: str) -> None:
        state = self._participants.get(participant_id)
        if state is not None:
            await self._release_participant(state)
        if self._joined_topic is not None:
            self._closed.add(participant_id)

    async def _stop(self) -> None:
        for op in list(self._departures.values()):
            if not op.finished:
                try:
                    await op.join()
                except Exception:
                    pass  # reported to that departure's callers; retried below
        errors: list[Exception] = []
        for state in list(self._participants.values()):
            await drain(state)
        for state in list(self._participants.values()):
            try:
                await self._release_participant(state)
            except ExceptionGroup as group:
                errors.extend(group.exceptions)
        if errors:
            raise ExceptionGroup(f"router shutdown: {len(errors)} release(s) failed", errors)
        self._participants.clear()
        self._departures.clear()
        self._closed.clear()

    # ------------------------------------------------------------------ runtime mode

    def _spawn_runtime_turn(self, turn: AgentTurn, runtime: Any) -> Awaitable[None] | None:
        """Register a runtime turn and start it in the router's task group; returns the
        coroutine to await inline when the router was not entered."""
        try:
            run = self._arrive(turn)
        except (RuntimeError, ValueError, TypeError) as exc:
            log.warning("dropping query %s: %s", turn.turn_id, exc)
            return None
        out = TopicOutput(runtime, self._output_topic, turn)
        if self._tasks.running:
            self._tasks.start_soon(self._runtime_turn, run, out)
            return None
        if not self._warned_inline:
            self._warned_inline = True
            log.warning(
                "router used by a runtime without `async with router`: turns run inline and "
                "hold up their publisher"
            )
        return self._runtime_turn(run, out)

    async def _runtime_turn(self, run: Run, out: ControlOutput) -> None:
        pid = run.turn.participant_id
        await self._status("processing", pid)
        try:
            await self._execute(run, out)
        except TurnCancelled:
            pass
        except Exception:
            log.exception("turn %s of participant %s failed", run.turn.turn_id, pid)
        finally:
            with anyio.CancelScope(shield=True):
                await self._status("idle", pid)

    async def _status(self, status: Literal["processing", "idle"], participant_id: str) -> None:
        if self._set_status is None:
            return
        try:
            await self._set_status(status, participant_id)
        except Exception:
            log.exception("set_status(%r, %r) failed", status, participant_id)

    async def _joined(self, participant_id: str) -> None:
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

    async def _interrupted(self, participant_id: str | None, request_id: str | None) -> None:
        if request_id is not None and participant_id is not None:
            state = self._participants.get(participant_id)
            if state is None or not any(r.turn.turn_id == request_id for r in state.runs):
                return  # that turn already finished or was superseded
        await self.interrupt(participant_id)
