"""AgentRouter: admission, focus, rerouting, fallback, clarification, history, context."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest
from pydantic import ValidationError
from routing_helpers import Recorder, ScriptedAgent, turn

import edge
from edge.decisions import ChoiceAnswer, ScriptedDecisions
from edge.interaction import Exchange, UserQuery
from edge.routing import (
    Admission,
    AgentExchange,
    AgentRouter,
    DestinationResult,
    RouterConfig,
    current_turn_context,
)

pytestmark = pytest.mark.anyio


def make(*names: str, script=(), default="conversation", **kw):
    rec = Recorder()
    agents = {n: ScriptedAgent(n, rec) for n in names}
    decisions = ScriptedDecisions(list(script))
    config = RouterConfig(default_destination=default, **kw)
    router = AgentRouter(agents, decisions, config, output=rec.output)
    return router, agents, decisions, rec


async def test_accepted_route_speaks_preamble_then_answers() -> None:
    router, agents, decisions, rec = make("conversation", "notes", script=["notes"])
    agents["notes"].admissions = [Admission("accept", preamble="Sure.")]
    result = await router.handle(turn("take a note"))
    assert result == DestinationResult("answer", "notes reply")
    kinds = [e[0] for e in rec.events]
    assert kinds == ["admit", "out", "answer", "say"]
    assert rec.outputs() == [("notes", "Sure.")]
    assert [c.label for c in decisions.questions[0].criteria] == ["conversation", "notes"]


async def test_preamble_only_after_acceptance() -> None:
    router, agents, _, rec = make("conversation", "notes", script=["notes"])
    agents["notes"].admissions = [Admission("decline", preamble="never spoken")]
    await router.handle(turn("x"))
    assert ("notes", "never spoken") not in rec.outputs()


async def test_decline_reroutes_once_excluding_declined_route() -> None:
    router, agents, decisions, _rec = make(
        "conversation", "notes", "timer", script=["notes", "timer"]
    )
    agents["notes"].admissions = [Admission("decline")]
    result = await router.handle(turn("set it"))
    assert result.text == "timer reply"
    second = decisions.questions[1]
    assert [c.label for c in second.criteria] == ["conversation", "timer"]


async def test_exhausted_declines_fall_back_to_default_without_admission() -> None:
    router, agents, _, rec = make("conversation", "notes", "timer", script=["notes", "timer"])
    agents["notes"].admissions = [Admission("decline")]
    agents["timer"].admissions = [Admission("decline")]
    result = await router.handle(turn("hm"))
    assert result.text == "conversation reply"
    assert ("admit", "conversation", "hm", False) not in rec.events
    assert ("answer", "conversation", "hm") in rec.events


async def test_default_that_declined_is_not_retried_and_router_clarifies() -> None:
    router, agents, _, rec = make("conversation", "notes", script=["conversation", "notes"])
    agents["conversation"].admissions = [Admission("decline")]
    agents["notes"].admissions = [Admission("decline")]
    result = await router.handle(turn("hm"))
    assert result.disposition == "clarify"
    assert not rec.of("answer")
    assert rec.outputs()[-1][0] == "router"


async def test_unavailable_default_leads_to_clarification() -> None:
    router, agents, _, rec = make("conversation", "notes", "timer", script=["notes", "timer"])
    agents["conversation"].eligible = False
    agents["notes"].admissions = [Admission("decline")]
    agents["timer"].admissions = [Admission("decline")]
    result = await router.handle(turn("hm"))
    assert result.disposition == "clarify"
    assert not rec.of("answer")


async def test_unregistered_default_is_unavailable() -> None:
    router, agents, _, _ = make("notes", "timer", script=["notes", "timer"])
    agents["notes"].admissions = [Admission("decline")]
    agents["timer"].admissions = [Admission("decline")]
    assert (await router.handle(turn("x"))).disposition == "clarify"


async def test_single_eligible_destination_needs_no_decision() -> None:
    router, agents, decisions, _ = make("conversation", "notes")
    agents["notes"].eligible = False
    result = await router.handle(turn("hello"))
    assert result.text == "conversation reply"
    assert decisions.questions == []


async def test_nothing_eligible_asks_for_clarification() -> None:
    router, agents, decisions, rec = make("conversation", "notes")
    for agent in agents.values():
        agent.eligible = False
    result = await router.handle(turn("hello"))
    assert result.disposition == "clarify"
    assert rec.outputs() == [("router", result.text)]
    assert decisions.questions == []


async def test_uncertain_choice_with_scores_uses_highest_scoring_eligible() -> None:
    uncertain = ChoiceAnswer(None, 0.4, {"conversation": 0.4, "notes": 0.6}, source="scripted")
    router, _agents, _, rec = make("conversation", "notes", script=[uncertain])
    result = await router.handle(turn("hmm"))
    assert ("admit", "notes", "hmm", False) in rec.events  # through normal admission
    assert result.text == "notes reply"


async def test_uncertain_choice_without_scores_clarifies() -> None:
    router, _, _, rec = make("conversation", "notes", script=["clarify"])
    result = await router.handle(turn("hmm"))
    assert result.disposition == "clarify"
    assert "notes things" in result.text and "conversation things" in result.text
    assert not rec.of("admit")


async def test_invalid_decision_answer_is_not_trusted() -> None:
    bad = ChoiceAnswer("notes", 0.9, {"notes": 0.9, "conversation": 0.9}, source="scripted")
    router, _, _, rec = make("conversation", "notes", script=[bad])
    assert (await router.handle(turn("x"))).disposition == "clarify"
    assert not rec.of("admit")


async def test_admission_clarify_ends_routing_with_its_question() -> None:
    router, agents, _, rec = make("conversation", "notes", script=["notes"])
    agents["notes"].admissions = [Admission("clarify", text="Which note?")]
    result = await router.handle(turn("the note"))
    assert result == DestinationResult("clarify", "Which note?")
    assert rec.outputs() == [("notes", "Which note?")]
    assert not rec.of("answer")
    assert router.history("p1") == ()


async def test_focus_gets_next_turn_first() -> None:
    router, agents, decisions, rec = make("conversation", "notes", script=["notes"])
    agents["notes"].results = [DestinationResult("focus", "started")]
    await router.handle(turn("take a note"))
    assert router.focus("p1") == "notes"
    await router.handle(turn("buy milk"))
    assert len(decisions.questions) == 1  # the focused owner needed no decision
    assert ("admit", "notes", "buy milk", True) in rec.events


async def test_focused_decline_keeps_focus_without_release() -> None:
    router, agents, _, rec = make("conversation", "notes", script=["notes", "conversation"])
    agents["notes"].results = [DestinationResult("focus")]
    await router.handle(turn("take a note"))
    agents["notes"].admissions = [Admission("decline")]
    result = await router.handle(turn("what time is it"))
    assert result.text == "conversation reply"
    assert router.focus("p1") == "notes"
    assert not rec.of("release")
    await router.handle(turn("more"))
    assert ("admit", "notes", "more", True) in rec.events


async def test_focused_release_admission_clears_focus_and_reroutes_same_query() -> None:
    router, agents, _, rec = make("conversation", "notes", script=["notes", "conversation"])
    agents["notes"].results = [DestinationResult("focus")]
    await router.handle(turn("take a note"))
    agents["notes"].admissions = [Admission("release", text="Closing your note.")]
    result = await router.handle(turn("what's the weather"))
    assert router.focus("p1") is None
    assert ("release", "notes", "p1") in rec.events
    assert rec.outputs() == [("notes", "Closing your note.")]
    assert result.text == "conversation reply"
    i_release = rec.events.index(("release", "notes", "p1"))
    i_answer = rec.events.index(("answer", "conversation", "what's the weather"))
    assert i_release < i_answer


async def test_post_answer_release_consumes_turn_and_clears_focus() -> None:
    router, agents, _, rec = make("conversation", "notes", script=["notes"])
    agents["notes"].results = [DestinationResult("focus"), DestinationResult("release", "saved")]
    await router.handle(turn("take a note"))
    result = await router.handle(turn("done"))
    assert result == DestinationResult("release", "saved")
    assert router.focus("p1") is None
    assert len(rec.of("answer")) == 2  # not rerouted


async def test_taking_focus_releases_previous_owner() -> None:
    router, agents, _, rec = make("conversation", "notes", "timer", script=["notes", "timer"])
    agents["notes"].results = [DestinationResult("focus")]
    agents["timer"].results = [DestinationResult("focus")]
    await router.handle(turn("take a note"))
    agents["notes"].admissions = [Admission("decline")]
    await router.handle(turn("start a timer"))
    assert router.focus("p1") == "timer"
    assert rec.of("release") == [("release", "notes", "p1")]


async def test_ineligible_focus_owner_is_released() -> None:
    router, agents, _, rec = make("conversation", "notes", script=["notes"])
    agents["notes"].results = [DestinationResult("focus")]
    await router.handle(turn("take a note"))
    agents["notes"].eligible = False
    result = await router.handle(turn("hello"))
    assert router.focus("p1") is None
    assert ("release", "notes", "p1") in rec.events
    assert result.text == "conversation reply"


async def test_history_keeps_newest_whole_exchanges_within_utf8_budget() -> None:
    # each exchange: "q<i>" + "é"*10 (20 bytes) -> 2 + 20 = 22 bytes
    router, agents, _, _ = make("conversation", context_budget_bytes=50)
    agents["conversation"].answer_fn = None
    for i in range(4):
        agents["conversation"].results.append(DestinationResult("answer", "é" * 10))
        await router.handle(turn(f"q{i}"))
    last = agents["conversation"].turns[-1]
    assert [e.user for e in last.history] == ["q1", "q2"]
    assert [e.user for e in router.history("p1")] == ["q2", "q3"]


async def test_caller_history_seeds_only_when_router_has_none() -> None:
    router, agents, _, _ = make("conversation")
    seed = (AgentExchange("earlier", "answer"),)
    await router.handle(turn("first", history=seed))
    assert agents["conversation"].turns[0].history == seed
    await router.handle(turn("second", history=(AgentExchange("ignored", "x"),)))
    assert [e.user for e in agents["conversation"].turns[1].history] == ["earlier", "first"]


async def test_turn_context_identifies_exchange_and_history() -> None:
    router, agents, _, _ = make("conversation")
    assert current_turn_context().exchange_id is None
    await router.handle(turn("a", timestamp_us=100))
    await router.handle(turn("b", timestamp_us=200))
    await router.handle(turn("c", timestamp_us=300))
    first, second, third = agents["conversation"].contexts
    assert first.history_exchange_ids == ()
    assert second.history_exchange_ids == (first.exchange_id,)
    assert third.history_exchange_ids == (first.exchange_id, second.exchange_id)
    assert third.history_timestamps == (100, 200)
    assert [e.exchange_id for e in router.history("p1")][:2] == [
        first.exchange_id,
        second.exchange_id,
    ]
    assert current_turn_context().exchange_id is None


async def test_a_turns_history_is_the_dialogues_exchanges_unconverted() -> None:
    """One exchange type from the query to the dialogue: a turn's history holds the
    dialogue's exchanges themselves (with their ids and times, which
    current_turn_context() reports aligned), equal to the spec's AgentExchange by words."""
    router, agents, _, _ = make("conversation")
    await router.handle(turn("a", timestamp_us=100))
    await router.handle(turn("b", timestamp_us=200))
    (history,) = {t.history for t in agents["conversation"].turns[1:]}
    assert history == router.history("p1")[:1] == (AgentExchange("a", "conversation reply"),)
    assert history[0] is router.history("p1")[0]
    context = agents["conversation"].contexts[1]
    assert context.history_exchange_ids == (history[0].exchange_id,)
    assert context.history_timestamps == (history[0].timestamp_us,) == (100,)


def test_one_exchange_type_in_the_service() -> None:
    assert AgentExchange is Exchange
    query = UserQuery.model_validate({"text": "hi", "history": [{"user": "u", "assistant": "a"}]})
    assert type(query.history[0]) is Exchange and query.history == (Exchange("u", "a"),)
    with pytest.raises(ValidationError):
        UserQuery.model_validate(
            {"text": "hi", "history": [{"user": "u", "assistant": "a", "x": 1}]}
        )
    assert Exchange("u", "a", "id-1", 100) == Exchange("u", "a")
    defined = [
        name
        for path in Path(edge.__file__).parent.rglob("*.py")
        for name in re.findall(r"^class (\w*Exchange)\b", path.read_text(), re.MULTILINE)
    ]
    assert defined == ["Exchange"]


async def test_failure_before_started_is_reported_once_and_propagates() -> None:
    router, agents, _, rec = make("conversation")

    async def boom(t, started):
        raise ValueError("model down")

    agents["conversation"].answer_fn = boom
    with pytest.raises(ValueError, match="model down"):
        await router.handle(turn("hi"))
    assert [r for r, _ in rec.outputs()] == ["router"]


async def test_failure_after_started_is_left_to_destination() -> None:
    router, agents, _, rec = make("conversation")

    async def boom(t, started):
        await started()
        raise ValueError("mid-stream")

    agents["conversation"].answer_fn = boom
    with pytest.raises(ValueError):
        await router.handle(turn("hi"))
    assert rec.outputs() == []


async def test_admission_failure_is_reported() -> None:
    router, agents, _, rec = make("conversation", "notes", script=["notes"])

    def bad(t, focused):
        raise KeyError("admit broke")

    agents["notes"].admit_fn = bad
    with pytest.raises(KeyError):
        await router.handle(turn("x"))
    assert len(rec.outputs()) == 1


async def test_started_repeats_and_late_calls_are_harmless() -> None:
    router, agents, _, rec = make("conversation")
    kept = []

    async def answer(t, started):
        await started()
        await started()
        kept.append(started)
        return DestinationResult("answer", "ok")

    agents["conversation"].answer_fn = answer
    await router.handle(turn("hi"))
    assert [e[0] for e in rec.events] == ["admit", "answer"]
    before = list(rec.events)
    assert kept[0].closed
    await kept[0]()  # after answer() returned: no effect
    assert rec.events == before


async def test_bad_results_and_configuration_are_named() -> None:
    router, agents, _, _ = make("conversation")

    async def wrong(t, started):
        return "text"

    agents["conversation"].answer_fn = wrong
    with pytest.raises(TypeError, match="answer"):
        await router.handle(turn("hi"))
    with pytest.raises(ValueError, match="non-empty"):
        AgentRouter({}, ScriptedDecisions())
    with pytest.raises(ValueError, match="context_budget_bytes"):
        RouterConfig(context_budget_bytes=-1)
    no_output = AgentRouter(agents, ScriptedDecisions())
    with pytest.raises(RuntimeError, match="output"):
        await no_output.handle(turn("hi"))


async def test_caller_history_never_reseeds_after_router_exchanges() -> None:
    router, agents, _, _ = make("conversation", context_budget_bytes=0)
    await router.handle(turn("first"))
    await router.handle(turn("second", history=(AgentExchange("x", "y"),)))
    assert agents["conversation"].turns[1].history == ()
    assert router.history("p1") == ()


class Preparing(ScriptedDecisions):
    """Scripted decisions that record the questions they are asked to prepare for."""

    def __init__(self, script) -> None:  # type: ignore[no-untyped-def]
        super().__init__(script)
        self.prepared: list = []

    async def prepare(self, question):  # type: ignore[no-untyped-def]
        self.prepared.append(question)


def preparing_router(script: list[str], delay_s: float = 0.0) -> tuple[AgentRouter, Preparing]:
    rec = Recorder()
    agents = {n: ScriptedAgent(n, rec) for n in ("notes", "conversation")}
    decisions = Preparing(script)
    router = AgentRouter(
        agents, decisions, RouterConfig(prepare_delay_s=delay_s), output=rec.output
    )
    return router, decisions


async def test_a_newer_exchange_cancels_a_preparation_still_waiting_for_the_model() -> None:
    """On a busy machine a participant's preparation can still wait for the model (at
    background priority, behind their answers) when their next exchange completes: the
    newer one's preparation replaces it, so they never pile up in the model's queue."""

    class Stuck(Preparing):
        def __init__(self, script) -> None:  # type: ignore[no-untyped-def]
            super().__init__(script)
            self.waiting = 0
            self.cancelled = 0

        async def prepare(self, question):  # type: ignore[no-untyped-def]
            self.waiting += 1
            try:
                await anyio.sleep_forever()  # the model never gets to it
            except anyio.get_cancelled_exc_class():
                self.cancelled += 1
                raise

    rec = Recorder()
    agents = {n: ScriptedAgent(n, rec) for n in ("notes", "conversation")}
    decisions = Stuck(["conversation"] * 5)
    router = AgentRouter(agents, decisions, RouterConfig(prepare_delay_s=0), output=rec.output)
    async with router:
        for n in range(4):
            await router.handle(turn(f"line {n}"))
            with anyio.fail_after(30):  # a hang guard
                while decisions.waiting <= n:  # noqa: ASYNC110
                    await anyio.sleep(0.005)
            assert decisions.waiting - decisions.cancelled == 1  # one at a time
        await router.handle(turn("hello", pid="p2"))
        with anyio.fail_after(30):
            while decisions.waiting < 5:  # noqa: ASYNC110
                await anyio.sleep(0.005)
        assert decisions.waiting - decisions.cancelled == 2  # another participant's stays


async def test_the_next_decision_is_prepared_after_a_delay_for_the_newest_exchange() -> None:
    """The preparation waits ``prepare_delay_s`` (the conversation's re-warm goes first);
    an exchange completed meanwhile replaces it, and leaving the router cancels a wait."""
    router, decisions = preparing_router(["conversation"] * 3, delay_s=0.3)
    async with router:
        await router.handle(turn("hello there"))
        await anyio.sleep(0.1)
        await router.handle(turn("and again"))
        await anyio.sleep(0.25)
        assert decisions.prepared == []  # the first one's wait ended: superseded
        with anyio.fail_after(30):  # a hang guard: the delay is 0.3 s
            while not decisions.prepared:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        assert len(decisions.prepared) == 1
        assert "and again" in "\n".join(decisions.prepared[0].context)
    router, decisions = preparing_router(["conversation"], delay_s=3600)
    with anyio.fail_after(30):  # its wait was cancelled, not sat out (an hour)
        async with router:
            await router.handle(turn("one more"))
    assert decisions.prepared == []
    with pytest.raises(ValueError, match="prepare_delay_s"):
        preparing_router([], delay_s=-1)


async def test_prepare_decisions_hands_the_option_set_to_the_service() -> None:
    router, decisions = preparing_router(["notes"])
    await router.prepare_decisions()
    await router.handle(turn("x"))
    assert decisions.prepared[0].criteria == decisions.questions[0].criteria


async def test_after_an_exchange_the_next_decision_is_prepared_with_its_context() -> None:
    """The decision prefix a participant's next turn starts with (their recent
    conversation) is prepared in the background after each of their exchanges."""
    router, decisions = preparing_router(["conversation", "notes"])
    prepared = decisions.prepared
    async with router:
        await router.handle(turn("hello there"))
        assert prepared == []  # started in the background, after the exchange
        for _ in range(50):
            if prepared:
                break
            await anyio.sleep(0.01)
        assert prepared[0].text == ""
        assert prepared[0].criteria == decisions.questions[0].criteria
        assert "hello there" in "\n".join(prepared[0].context)
        assert prepared[0].asker == "p1"


async def test_the_likely_destination_passes_over_a_pick_that_would_decline_like_the_turn() -> None:
    """The decision picks the notes agent for a question; its admission declines and the
    turn goes to the conversation. The likely destination said "notes", so no answer was
    prepared in the pause for a turn that the conversation then answered."""
    router, agents, _, _ = make("conversation", "notes", script=["notes", "notes"])
    agents["notes"].admit_fn = lambda t, focused: Admission("decline")
    assert await router.likely_destination("p1", "What do bees make?") == "conversation"
    assert (await router.handle(turn("What do bees make?"))).text == "conversation reply"
    asking, agents, _, _ = make("conversation", "notes", script=["notes"])
    agents["notes"].admit_fn = lambda t, focused: Admission("clarify", text="Which note?")
    assert await asking.likely_destination("p1", "the note") is None  # nothing to prepare
