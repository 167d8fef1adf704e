"""AgentRouter: serialization, interruption, departure and shutdown."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest
from routing_helpers import HookedAgent, Recorder, ScriptedAgent, turn

from edge.decisions import ScriptedDecisions
from edge.routing import AgentRouter, DestinationResult, ParticipantHooks, TurnCancelled

pytestmark = pytest.mark.anyio


def slow_answer(rec: Recorder, name: str, *, started_first: bool = True):
    async def answer(t, started):
        if started_first:
            await started()
        try:
            await anyio.sleep(10)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.01)  # draining takes a moment
                rec.events.append(("drained", name, t.query))
        return DestinationResult("answer", "late")

    return answer


def make(**kw):
    rec = Recorder()
    conv = ScriptedAgent("conversation", rec)
    notes = HookedAgent("notes", rec)
    router = AgentRouter(
        {"conversation": conv, "notes": notes},
        ScriptedDecisions(default="conversation"),
        output=rec.output,
        hooks=ParticipantHooks(**kw),
    )
    return router, conv, notes, rec


async def test_new_turn_cancels_and_drains_previous_response() -> None:
    router, conv, _, rec = make()
    conv.answer_fn = slow_answer(rec, "conversation")
    outcomes: dict[str, object] = {}

    async def run(q: str) -> None:
        try:
            outcomes[q] = await router.handle(turn(q))
        except TurnCancelled as exc:
            outcomes[q] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, "first")
        await anyio.sleep(0.05)
        conv.answer_fn = None
        tg.start_soon(run, "second")
    assert isinstance(outcomes["first"], TurnCancelled)
    assert outcomes["second"] == DestinationResult("answer", "conversation reply")
    i_drained = rec.events.index(("drained", "conversation", "first"))
    i_second = rec.events.index(("answer", "conversation", "second"))
    assert i_drained < i_second
    assert [e.user for e in router.history("p1")] == ["second"]


async def test_other_participants_are_not_serialized() -> None:
    router, conv, _, _ = make()
    never = anyio.Event()

    async def endless(t, started):  # type: ignore[no-untyped-def]
        await started()
        await never.wait()

    conv.answer_fn = endless
    async with anyio.create_task_group() as tg:
        tg.start_soon(_swallow, router.handle(turn("slow", pid="a")))
        await anyio.sleep(0.05)
        conv.answer_fn = None
        with anyio.fail_after(30):  # a's answer never ends: only waiting for it fails
            await router.handle(turn("quick", pid="b"))
        await router.interrupt("a")
        tg.cancel_scope.cancel()


async def test_interrupt_drains_and_keeps_history_and_focus() -> None:
    router, _conv, notes, rec = make()
    router._selector._decisions = ScriptedDecisions(["notes"])
    notes.results = [DestinationResult("focus", "note started")]
    await router.handle(turn("take a note"))
    notes.answer_fn = slow_answer(rec, "notes")
    errors: list[BaseException] = []

    async def run() -> None:
        try:
            await router.handle(turn("dictating"))
        except TurnCancelled as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await anyio.sleep(0.05)
        await router.interrupt("p1")
        assert ("drained", "notes", "dictating") in rec.events  # drained before return
    assert errors and isinstance(errors[0], TurnCancelled)
    assert router.focus("p1") == "notes"
    assert [e.user for e in router.history("p1")] == ["take a note"]
    assert rec.outputs() == []  # no failure message for an interruption


async def test_interrupt_all_participants() -> None:
    router, conv, _, rec = make()
    conv.answer_fn = slow_answer(rec, "conversation")
    async with anyio.create_task_group() as tg:
        for pid in ("a", "b"):
            tg.start_soon(_swallow, router.handle(turn("q", pid=pid)))
        await anyio.sleep(0.05)
        await router.interrupt()
    assert len(rec.of("drained")) == 2


async def _swallow(coro) -> None:
    try:
        await coro
    except TurnCancelled:
        pass


async def test_interrupted_control_output_is_suppressed() -> None:
    router, conv, _notes, rec = make()

    async def slow_output(t, route, text):
        await anyio.sleep(10)
        rec.events.append(("out", t.turn_id, route, text))

    router._output = slow_output
    from edge.routing import Admission

    conv.admissions = [Admission("accept", preamble="One moment.")]
    async with anyio.create_task_group() as tg:
        tg.start_soon(_swallow, router.handle(turn("q")))
        await anyio.sleep(0.05)
        await router.interrupt("p1")
    assert rec.outputs() == [] and not rec.of("answer")


async def test_departure_uses_hook_else_release_and_clears_state() -> None:
    cleaned: list[str] = []

    async def cleanup(pid: str) -> None:
        cleaned.append(pid)

    router, _conv, notes, rec = make(cleanup=cleanup)
    router._selector._decisions = ScriptedDecisions(["notes", "conversation"])
    notes.results = [DestinationResult("focus")]
    await router.handle(turn("take a note"))
    from edge.routing import Admission

    notes.admissions = [Admission("decline")]
    await router.handle(turn("hello"))
    await router.participant_left("p1")
    assert ("left", "notes", "p1") in rec.events  # the hook, not release()
    assert ("release", "notes", "p1") not in rec.events
    assert ("release", "conversation", "p1") in rec.events
    assert cleaned == ["p1"]
    assert router.history("p1") == () and router.focus("p1") is None
    await router.handle(turn("fresh start"))  # no runtime topics: a fresh later turn
    assert router.focus("p1") is None


async def test_departure_drains_active_turn_first() -> None:
    router, conv, _, rec = make()
    conv.answer_fn = slow_answer(rec, "conversation")
    async with anyio.create_task_group() as tg:
        tg.start_soon(_swallow, router.handle(turn("q")))
        await anyio.sleep(0.05)
        await router.participant_left("p1")
    i_drained = rec.events.index(("drained", "conversation", "q"))
    i_release = rec.events.index(("release", "conversation", "p1"))
    assert i_drained < i_release


async def test_failed_departure_raises_group_blocks_turns_and_retries() -> None:
    router, conv, notes, rec = make()
    router._selector._decisions = ScriptedDecisions(["notes"])
    await router.handle(turn("take a note"))
    router._selector._decisions = ScriptedDecisions(["conversation"])
    await router.handle(turn("hello"))
    conv.fail_release = 1
    notes.fail_left = 1
    with pytest.raises(ExceptionGroup) as info:
        await router.participant_left("p1")
    assert len(info.value.exceptions) == 2
    with pytest.raises(RuntimeError, match="departure"):
        await router.handle(turn("again"))
    conv.fail_release = 0
    await router.participant_left("p1")  # retry releases only what failed
    assert rec.of("release").count(("release", "conversation", "p1")) == 2
    assert rec.of("left").count(("left", "notes", "p1")) == 2
    await router.handle(turn("again"))


async def test_partial_failure_retries_only_failed_release() -> None:
    router, conv, _notes, rec = make()
    router._selector._decisions = ScriptedDecisions(["notes"])
    await router.handle(turn("take a note"))
    router._selector._decisions = ScriptedDecisions(["conversation"])
    await router.handle(turn("hello"))
    conv.fail_release = 1
    with pytest.raises(ExceptionGroup):
        await router.participant_left("p1")
    await router.participant_left("p1")
    assert rec.of("left") == [("left", "notes", "p1")]


async def test_cancelled_departure_caller_does_not_abandon_operation() -> None:
    router, _conv, notes, rec = make()
    router._selector._decisions = ScriptedDecisions(["notes"])
    await router.handle(turn("take a note"))
    notes.left_delay = 0.2
    cancelled = []

    async def waiter() -> None:
        try:
            await router.participant_left("p1")
        except anyio.get_cancelled_exc_class():
            cancelled.append(("left", "notes", "p1") in rec.events and not router.history("p1"))
            raise

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.sleep(0.05)
        tg.cancel_scope.cancel()  # cancels the caller mid-operation
    assert cancelled == [True]  # cancellation arrived only after the departure completed
    assert router._participants._departures == {}


async def test_concurrent_departure_callers_join_one_operation() -> None:
    router, _conv, notes, rec = make()
    router._selector._decisions = ScriptedDecisions(["notes"])
    await router.handle(turn("take a note"))
    notes.left_delay = 0.2
    async with anyio.create_task_group() as tg:
        tg.start_soon(router.participant_left, "p1")
        await anyio.sleep(0.05)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await router.participant_left("p1")  # a cancelled joiner still waits
        assert router._participants.get("p1") is None
        await router.participant_left("p1")
    assert rec.of("left") == [("left", "notes", "p1")]  # ran once


async def test_initialize_participant_once_and_again_after_interrupted_init() -> None:
    calls: list[str] = []
    gate = anyio.Event()

    async def initialize(pid: str) -> None:
        calls.append(pid)
        if len(calls) == 1:
            await gate.wait()

    router, _conv, _, _rec = make(initialize=initialize)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_swallow, router.handle(turn("one")))
        await anyio.sleep(0.05)
        await router.interrupt("p1")
    await router.handle(turn("two"))
    await router.handle(turn("three"))
    assert calls == ["p1", "p1"]


async def test_cleanup_for_initialized_participant_without_route_and_retry() -> None:
    attempts: list[str] = []

    async def initialize(pid: str) -> None:
        raise_for = None
        del raise_for

    async def cleanup(pid: str) -> None:
        attempts.append(pid)
        if len(attempts) == 1:
            raise OSError("disk busy")

    router, conv, _, rec = make(initialize=initialize, cleanup=cleanup)
    for agent in (conv,):
        agent.eligible = False
    router._destinations["notes"].eligible = False  # type: ignore[attr-defined]
    await router.handle(turn("hello"))  # clarification only: no route selected
    with pytest.raises(ExceptionGroup):
        await router.participant_left("p1")
    await router.participant_left("p1")
    assert attempts == ["p1", "p1"]
    assert not rec.of("release")


async def test_stop_drains_releases_everyone_and_reopens() -> None:
    router, conv, _, rec = make()
    router._selector._decisions = ScriptedDecisions(default="conversation")
    conv.answer_fn = slow_answer(rec, "conversation")
    async with anyio.create_task_group() as tg:
        tg.start_soon(_swallow, router.handle(turn("q", pid="a")))
        await anyio.sleep(0.05)
        conv.answer_fn = None
        await router.stop()
    assert ("drained", "conversation", "q") in rec.events
    assert ("release", "conversation", "a") in rec.events
    assert router.history("a") == ()
    await router.handle(turn("later", pid="a"))  # a fresh lifecycle


async def test_stop_clears_history_only_participants() -> None:
    router, conv, _, _ = make()
    conv.eligible = False
    router._destinations["notes"].eligible = False  # type: ignore[attr-defined]
    await router.handle(turn("x", pid="ghost"))
    assert "ghost" in router._participants.states
    await router.stop()
    assert router._participants.states == {}


async def test_failed_stop_keeps_admission_closed_until_retry() -> None:
    router, conv, notes, _rec = make()
    await router.handle(turn("hi", pid="a"))
    router._selector._decisions = ScriptedDecisions(["notes"])
    await router.handle(turn("note", pid="b"))
    conv.fail_release = 1
    notes.fail_left = 1
    with pytest.raises(ExceptionGroup) as info:
        await router.stop()
    assert len(info.value.exceptions) == 2  # every participant attempted
    with pytest.raises(RuntimeError, match="shutting down"):
        await router.handle(turn("x", pid="c"))
    await router.stop()
    await router.handle(turn("x", pid="c"))


async def test_concurrent_stop_callers_join_and_cancelled_waiter_waits() -> None:
    router, _, notes, rec = make()
    router._selector._decisions = ScriptedDecisions(["notes"])
    await router.handle(turn("note"))
    notes.left_delay = 0.2
    async with anyio.create_task_group() as tg:
        tg.start_soon(router.stop)
        await anyio.sleep(0.02)
        with anyio.move_on_after(0.01):
            await router.stop()  # times out as a waiter, but waits for shutdown
    assert rec.of("left") == [("left", "notes", "p1")]


async def test_async_with_stops_on_exit() -> None:
    router, _conv, _, rec = make()
    async with router:
        await router.handle(turn("hi"))
    assert ("release", "conversation", "p1") in rec.events


async def test_rapid_turns_cancel_every_earlier_one_and_only_the_last_answers() -> None:
    router, conv, _, rec = make()
    conv.answer_fn = slow_answer(rec, "conversation")
    outcomes: dict[str, object] = {}

    async def run(q: str) -> None:
        try:
            outcomes[q] = await router.handle(turn(q))
        except TurnCancelled as exc:
            outcomes[q] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, "one")
        await anyio.sleep(0.03)
        tg.start_soon(run, "two")  # waits for "one" to drain
        await anyio.lowlevel.checkpoint()
        conv.answer_fn = None
        tg.start_soon(run, "three")  # cancels "two" while it still waits
    assert isinstance(outcomes["one"], TurnCancelled)
    assert isinstance(outcomes["two"], TurnCancelled)
    assert outcomes["three"] == DestinationResult("answer", "conversation reply")
    assert [e[2] for e in rec.of("answer")] == ["one", "three"]


async def test_bad_turns_are_rejected_with_clear_errors() -> None:
    router, _, _, _ = make()
    with pytest.raises(ValueError, match="participant_id"):
        await router.handle(turn("x", pid=""))
