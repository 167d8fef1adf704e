"""AgentRouter in runtime mode, and intention acknowledgments."""

from __future__ import annotations

import anyio
import pytest
from routing_helpers import Recorder, ScriptedAgent, turn

from edge.decisions import ScriptedDecisions
from edge.interaction import (
    INTERRUPTED_TOPIC,
    PARTICIPANT_JOINED_TOPIC,
    PARTICIPANT_LEFT_TOPIC,
    TEXT_OUTPUT_TOPIC,
    USER_QUERY_TOPIC,
    Interrupted,
    ParticipantJoined,
    ParticipantLeft,
    ResponseOutput,
    UserQuery,
)
from edge.llm import ScriptedLLM, ScriptedReply
from edge.routing import (
    Admission,
    AgentRouter,
    DestinationResult,
    ParticipantHooks,
    RouterConfig,
    RouterTopics,
)
from edge.runtime import Agent, AgentRuntime, Topic

pytestmark = pytest.mark.anyio

TOPICS = RouterTopics(
    query=USER_QUERY_TOPIC,
    output=TEXT_OUTPUT_TOPIC,
    joined=PARTICIPANT_JOINED_TOPIC,
    left=PARTICIPANT_LEFT_TOPIC,
    interrupted=INTERRUPTED_TOPIC,
)
CONFIG = RouterConfig(topics=TOPICS)


class Sink(Agent):
    def __init__(self) -> None:
        super().__init__()
        self.frames: list[tuple[ResponseOutput, str | None]] = []
        self.add_handler(TEXT_OUTPUT_TOPIC, self.on)

    async def on(self, message: ResponseOutput, ctx) -> None:
        self.frames.append((message, ctx.metadata.participant_id))


def agents(rec: Recorder):
    return {name: ScriptedAgent(name, rec) for name in ("conversation", "notes")}


async def test_configuration_errors() -> None:
    rec = Recorder()
    dests = agents(rec)
    d = ScriptedDecisions()
    with pytest.raises(ValueError, match="joined"):
        RouterTopics(USER_QUERY_TOPIC, TEXT_OUTPUT_TOPIC, left=PARTICIPANT_LEFT_TOPIC)
    with pytest.raises(TypeError, match="UserQuery"):
        RouterTopics(Topic("q", ResponseOutput), TEXT_OUTPUT_TOPIC)
    with pytest.raises(ValueError, match="distinct"):
        RouterTopics(USER_QUERY_TOPIC, Topic(USER_QUERY_TOPIC.name, ResponseOutput))
    with pytest.raises(ValueError, match="together"):
        AgentRouter(dests, d, acknowledgment_llm=ScriptedLLM())
    with pytest.raises(ValueError, match="together"):
        AgentRouter(dests, d, RouterConfig(acknowledgment_delay_s=1.0))
    with pytest.raises(ValueError, match="positive"):
        AgentRouter(
            dests, d, RouterConfig(acknowledgment_delay_s=0), acknowledgment_llm=ScriptedLLM()
        )
    with pytest.raises(ValueError, match="positive"):
        AgentRouter(
            dests,
            d,
            RouterConfig(acknowledgment_delay_s=float("inf")),
            acknowledgment_llm=ScriptedLLM(),
        )
    with pytest.raises(ValueError, match="topics"):
        AgentRouter(dests, d).runtime_subscriber()


async def test_runtime_query_turn_publishes_router_control_frames() -> None:
    rec = Recorder()
    dests = agents(rec)
    dests["notes"].admissions = [Admission("accept", preamble="Okay.")]
    statuses: list[tuple[str, str]] = []

    async def status(s, pid):
        statuses.append((s, pid))

    router = AgentRouter(
        dests, ScriptedDecisions(["notes"]), config=CONFIG, hooks=ParticipantHooks(status=status)
    )
    runtime = AgentRuntime()
    sink = Sink()
    runtime.register("router", router.runtime_subscriber())
    runtime.register("sink", sink)
    async with runtime, router:
        meta = await runtime.publish(
            USER_QUERY_TOPIC, UserQuery(text="take a note", timestamp_us=42), participant_id="p1"
        )
        await _until(lambda: len(statuses) >= 2)
    frames = [f for f, _ in sink.frames]
    assert [f.text for f in frames] == ["Okay."]
    assert all(f.request_id == meta.message_id and f.source == "router" for f in frames)
    assert frames[0].sequence == 0 and frames[0].final
    assert all(f.timestamp_us == 42 for f in frames)
    assert {pid for _, pid in sink.frames} == {"p1"}
    assert statuses == [("processing", "p1"), ("idle", "p1")]
    assert dests["notes"].turns[0].turn_id == meta.message_id
    assert dests["notes"].turns[0].timestamp_us == 42


async def test_the_routing_specs_constructor_keywords_still_work() -> None:
    """``shared/spec/routing.md`` names the constructor's keywords; ``from_spec`` folds
    them into the config and hooks and a runtime turn runs as with ``config=CONFIG``."""
    rec = Recorder()
    statuses: list[tuple[str, str]] = []

    async def status(s, pid):
        statuses.append((s, pid))

    router = AgentRouter.from_spec(
        agents(rec),
        ScriptedDecisions(["conversation"]),
        default_destination="notes",
        context_budget_bytes=500,
        query_topic=USER_QUERY_TOPIC,
        output_topic=TEXT_OUTPUT_TOPIC,
        participant_joined_topic=PARTICIPANT_JOINED_TOPIC,
        participant_left_topic=PARTICIPANT_LEFT_TOPIC,
        interrupted_topic=INTERRUPTED_TOPIC,
        set_status=status,
    )
    assert router.config.topics == TOPICS and router.config.default_destination == "notes"
    assert router.config.context_budget_bytes == 500
    runtime = AgentRuntime()
    runtime.register("router", router.runtime_subscriber())
    async with runtime, router:
        await runtime.publish(USER_QUERY_TOPIC, UserQuery(text="hello"), participant_id="p1")
        await _until(lambda: len(statuses) >= 2)
    assert statuses == [("processing", "p1"), ("idle", "p1")]
    with pytest.raises(ValueError, match="together"):
        AgentRouter.from_spec(agents(rec), ScriptedDecisions(), query_topic=USER_QUERY_TOPIC)
    with pytest.raises(ValueError, match="joined"):
        AgentRouter.from_spec(
            agents(rec),
            ScriptedDecisions(),
            query_topic=USER_QUERY_TOPIC,
            output_topic=TEXT_OUTPUT_TOPIC,
            participant_left_topic=PARTICIPANT_LEFT_TOPIC,
        )
    with pytest.raises(TypeError, match="unexpected"):
        AgentRouter.from_spec(agents(rec), ScriptedDecisions(), query_topics=USER_QUERY_TOPIC)  # type: ignore[call-arg]
    with pytest.raises(TypeError):  # the constructor itself takes the config and hooks
        AgentRouter(agents(rec), ScriptedDecisions(), query_topic=USER_QUERY_TOPIC)  # type: ignore[call-arg]


async def test_runtime_turn_uses_publication_time_without_query_timestamp() -> None:
    rec = Recorder()
    dests = agents(rec)
    router = AgentRouter(dests, ScriptedDecisions(["conversation"]), config=CONFIG)
    runtime = AgentRuntime()
    runtime.register("router", router.runtime_subscriber())
    async with runtime, router:
        meta = await runtime.publish(
            USER_QUERY_TOPIC, UserQuery(text="hi"), participant_id="p1", timestamp_us=7
        )
        await _until(lambda: dests["conversation"].turns)
    assert dests["conversation"].turns[0].timestamp_us == 7
    assert meta.timestamp_us == 7


async def _until(cond, limit_s: float = 30.0) -> None:  # a hang guard
    with anyio.fail_after(limit_s):
        while not cond():  # noqa: ASYNC110 - polling state the test cannot await
            await anyio.sleep(0.01)


async def test_publisher_is_not_held_for_the_turn_and_stop_drains() -> None:
    rec = Recorder()
    dests = agents(rec)
    gate = anyio.Event()

    async def slow(t, started):
        await started()
        await gate.wait()
        return DestinationResult("answer", "done")

    dests["conversation"].answer_fn = slow
    router = AgentRouter(dests, ScriptedDecisions(default="conversation"), config=CONFIG)
    runtime = AgentRuntime()
    runtime.register("router", router.runtime_subscriber())
    async with runtime, router:
        with anyio.fail_after(30):  # the turn never ends by itself: only a hang fails
            await runtime.publish(USER_QUERY_TOPIC, UserQuery(text="hi"), participant_id="p1")
        await _until(lambda: rec.of("answer"))
        with anyio.fail_after(30):  # the turn never ends by itself: only a hang fails
            await router.stop()  # cancels and drains the running turn
    assert ("release", "conversation", "p1") in rec.events


async def test_runtime_failure_before_start_publishes_one_failure_frame() -> None:
    rec = Recorder()
    dests = agents(rec)

    async def boom(t, started):
        raise RuntimeError("broken")

    dests["conversation"].answer_fn = boom
    router = AgentRouter(dests, ScriptedDecisions(default="conversation"), config=CONFIG)
    runtime = AgentRuntime()
    sink = Sink()
    runtime.register("router", router.runtime_subscriber())
    runtime.register("sink", sink)
    async with runtime, router:
        await runtime.publish(USER_QUERY_TOPIC, UserQuery(text="hi"), participant_id="p1")
        await _until(lambda: sink.frames)
    texts = [f.text for f, _ in sink.frames]
    assert len(texts) == 1 and "wrong" in texts[0]


async def test_a_model_server_that_is_down_is_logged_once_without_a_traceback(caplog) -> None:  # type: ignore[no-untyped-def]
    """A model's server being down is an expected condition: each failed turn logs one
    line naming it (the participant's error frame says the same), not a chained traceback
    of the HTTP client's internals; an unexpected failure keeps its traceback."""
    import logging

    from edge.llm import LLMUnavailableError

    rec = Recorder()
    dests = agents(rec)
    failures = iter([LLMUnavailableError("the LLM server at http://box/v1 cannot be reached")])

    async def down(t, started):  # type: ignore[no-untyped-def]
        raise next(failures, RuntimeError("a bug"))

    dests["conversation"].answer_fn = down
    router = AgentRouter(dests, ScriptedDecisions(default="conversation"), config=CONFIG)
    runtime = AgentRuntime()
    sink = Sink()
    runtime.register("router", router.runtime_subscriber())
    runtime.register("sink", sink)
    with caplog.at_level(logging.INFO, logger="edge"):
        async with runtime, router:
            for n, text in enumerate(("hi", "again")):
                await runtime.publish(USER_QUERY_TOPIC, UserQuery(text=text), participant_id="p1")
                await _until(lambda n=n: len(sink.frames) > n)  # type: ignore[misc]
    failed = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failed) == 2, [r.getMessage() for r in failed]
    down_line, bug = failed
    assert "http://box/v1 cannot be reached" in down_line.getMessage()
    assert down_line.exc_info is None and bug.exc_info is not None


async def test_left_closes_admission_until_joined() -> None:
    rec = Recorder()
    dests = agents(rec)
    router = AgentRouter(
        dests, ScriptedDecisions(default="conversation"), output=rec.output, config=CONFIG
    )
    runtime = AgentRuntime()
    runtime.register("router", router.runtime_subscriber())
    async with runtime, router:
        await router.handle(turn("hi"))
        await runtime.publish(PARTICIPANT_LEFT_TOPIC, ParticipantLeft(), participant_id="p1")
        assert ("release", "conversation", "p1") in rec.events
        assert router.history("p1") == ()
        with pytest.raises(RuntimeError, match="left"):
            await router.handle(turn("again"))
        await runtime.publish(USER_QUERY_TOPIC, UserQuery(text="dropped"), participant_id="p1")
        await runtime.publish(PARTICIPANT_JOINED_TOPIC, ParticipantJoined(), participant_id="p1")
        await router.handle(turn("again"))
    assert [e[2] for e in rec.of("answer")] == ["hi", "again"]


async def test_a_join_reopens_admission_after_a_departure_that_is_running_or_failed() -> None:
    rec = Recorder()
    dests = agents(rec)
    router = AgentRouter(
        dests, ScriptedDecisions(default="conversation"), output=rec.output, config=CONFIG
    )
    runtime = AgentRuntime()
    runtime.register("router", router.runtime_subscriber())
    left = (PARTICIPANT_LEFT_TOPIC, ParticipantLeft())
    joined = (PARTICIPANT_JOINED_TOPIC, ParticipantJoined())
    async with runtime, router:
        await router.handle(turn("hi"))
        dests["conversation"].fail_release = 2  # the departure fails, and its retry too
        await runtime.publish(*left, participant_id="p1")  # logged by the subscriber
        with pytest.raises(RuntimeError, match="departure"):
            await router.handle(turn("locked out"))
        await runtime.publish(*joined, participant_id="p1")
        await router.handle(turn("back"))  # admitted although the release failed again

        release = dests["conversation"].release

        async def slow_release(pid: str) -> None:
            await anyio.sleep(0.2)
            await release(pid)

        dests["conversation"].release = slow_release  # type: ignore[method-assign]
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: runtime.publish(*left, participant_id="p1"))
            await anyio.sleep(0.05)  # the departure is running when the join comes
            await runtime.publish(*joined, participant_id="p1")
            await router.handle(turn("again"))  # the departure never lands after the join
        await router.handle(turn("still here"))
    answered = [e[2] for e in rec.of("answer")]
    assert answered == ["hi", "back", "again", "still here"]


async def test_interrupted_topic_cancels_participant_or_everyone() -> None:
    rec = Recorder()
    dests = agents(rec)
    drained: list[str] = []

    async def slow(t, started):
        await started()
        try:
            await anyio.sleep(10)
        finally:
            drained.append(t.participant_id)
        return DestinationResult()

    dests["conversation"].answer_fn = slow
    router = AgentRouter(dests, ScriptedDecisions(default="conversation"), config=CONFIG)
    runtime = AgentRuntime()
    runtime.register("router", router.runtime_subscriber())
    async with runtime, router:
        for pid in ("a", "b", "c"):
            await runtime.publish(USER_QUERY_TOPIC, UserQuery(text="q"), participant_id=pid)
        await _until(lambda: len(rec.of("answer")) == 3)
        await runtime.publish(
            INTERRUPTED_TOPIC, Interrupted(request_id="not-current"), participant_id="a"
        )
        assert drained == []  # names a turn that is not running
        await runtime.publish(INTERRUPTED_TOPIC, Interrupted(), participant_id="a")
        assert drained == ["a"]
        await runtime.publish(INTERRUPTED_TOPIC, Interrupted())
        assert sorted(drained) == ["a", "b", "c"]


async def test_new_runtime_query_supersedes_previous_turn() -> None:
    rec = Recorder()
    dests = agents(rec)

    async def slow(t, started):
        await anyio.sleep(10)
        return DestinationResult()

    dests["conversation"].answer_fn = slow
    router = AgentRouter(dests, ScriptedDecisions(default="conversation"), config=CONFIG)
    runtime = AgentRuntime()
    runtime.register("router", router.runtime_subscriber())
    async with runtime, router:
        await runtime.publish(USER_QUERY_TOPIC, UserQuery(text="one"), participant_id="p1")
        await _until(lambda: rec.of("answer"))
        dests["conversation"].answer_fn = None
        await runtime.publish(USER_QUERY_TOPIC, UserQuery(text="two"), participant_id="p1")
        await _until(lambda: router.history("p1"))
    assert [e.user for e in router.history("p1")] == []  # stop() cleared it
    assert [e[2] for e in rec.of("say")] == ["conversation says hi"]


# --------------------------------------------------------------- acknowledgments


def ack_router(rec: Recorder, llm: ScriptedLLM, delay: float, answer_fn):
    dests = agents(rec)
    dests["conversation"].answer_fn = answer_fn
    return AgentRouter(
        dests,
        ScriptedDecisions(default="conversation"),
        RouterConfig(acknowledgment_delay_s=delay),
        output=rec.output,
        acknowledgment_llm=llm,
    )


async def test_acknowledgment_after_delay_precedes_slow_answer() -> None:
    rec = Recorder()
    llm = ScriptedLLM(["On it, checking now."])

    async def slow(t, started):
        await _until(lambda: rec.of("out"))  # slow: still not started when the ack is out
        await started()
        rec.events.append(("say", "conversation", "answer"))
        return DestinationResult("answer", "answer")

    router = ack_router(rec, llm, 0.05, slow)
    await router.handle(turn("what is the tallest mountain"))
    assert rec.outputs() == [("conversation", "On it, checking now.")]
    assert rec.events.index(rec.of("out")[0]) < rec.events.index(rec.of("say")[0])
    request = llm.requests[0]
    assert request.max_tokens is not None and request.max_tokens <= 32
    assert "tallest mountain" in request.prompt
    assert [e.user for e in router.history("p1")] == ["what is the tallest mountain"]


async def test_started_before_delay_suppresses_acknowledgment() -> None:
    rec = Recorder()
    llm = ScriptedLLM(["On it."])
    router = ack_router(rec, llm, 0.2, None)
    await router.handle(turn("hi"))
    # No wait needed: the acknowledgment runs in the turn's task group, so once handle()
    # has returned it is over; had started() not suppressed it, handle() would have waited
    # for it and its output would be here.
    assert rec.outputs() == [] and llm.requests == []


async def test_started_cancels_acknowledgment_still_generating() -> None:
    rec = Recorder()
    llm = ScriptedLLM([ScriptedReply("Working on it.", first_delay_s=0.5)])

    async def answer(t, started):
        await _until(lambda: llm.requests)  # the acknowledgment is being generated
        await started()
        return DestinationResult("answer", "a")

    router = ack_router(rec, llm, 0.02, answer)
    await router.handle(turn("hi"))
    assert rec.outputs() == []
    assert llm.requests[0].cancelled


async def test_started_waits_for_committed_acknowledgment_delivery() -> None:
    rec = Recorder()
    llm = ScriptedLLM(["On it."])

    delivering = anyio.Event()

    async def slow_output(t, route, text):
        delivering.set()
        await anyio.sleep(0.2)
        rec.events.append(("out", t.turn_id, route, text))

    async def answer(t, started):
        await delivering.wait()  # the ack is committed and being delivered
        await started()
        rec.events.append(("say", "conversation", "first words"))
        return DestinationResult("answer", "a")

    router = ack_router(rec, llm, 0.02, answer)
    router._output = slow_output
    await router.handle(turn("hi"))
    kinds = [e[0] for e in rec.events if e[0] in ("out", "say")]
    assert kinds == ["out", "say"]


async def test_slow_first_answers_start_acknowledgment_early() -> None:
    rec = Recorder()
    llm = ScriptedLLM(default="On it.")
    times: list[float] = []

    async def slow(t, started):
        times.append(anyio.current_time())
        await anyio.sleep(0.6)  # well past the 0.2 s delay, even on a loaded machine
        await started()
        return DestinationResult("answer", "a")

    router = ack_router(rec, llm, 0.2, slow)
    for i in range(3):
        await router.handle(turn(f"q{i}"))
    before = len(rec.outputs())
    assert before == 3

    async def quick(t, started):
        await anyio.sleep(0.08)  # faster than the 0.2 s delay, but predicted slow
        await started()
        return DestinationResult("answer", "a")

    router._destinations["conversation"].answer_fn = quick  # type: ignore[attr-defined]
    # the prediction itself (a loaded machine could stretch the quick answer past the delay)
    assert router._selector._answerer._acknowledger.start_after("conversation") == 0.0
    await router.handle(turn("q3"))
    # Acknowledged although the answer started (0.08 s) before the 0.2 s delay: the
    # prediction started the acknowledgment at once.
    assert len(rec.outputs()) == 4


async def test_each_control_message_is_a_complete_frame_with_its_own_sequence() -> None:
    rec = Recorder()
    dests = agents(rec)
    dests["notes"].admissions = [Admission("release", text="Closing the note.")]
    dests["conversation"].admissions = [Admission("accept", preamble="Sure.")]
    router = AgentRouter(dests, ScriptedDecisions(["notes", "conversation"]), config=CONFIG)
    runtime = AgentRuntime()
    sink = Sink()
    runtime.register("router", router.runtime_subscriber())
    runtime.register("sink", sink)
    async with runtime, router:
        await runtime.publish(USER_QUERY_TOPIC, UserQuery(text="hm"), participant_id="p1")
        await _until(lambda: rec.of("say"))
    frames = [f for f, _ in sink.frames]
    assert [(f.text, f.sequence, f.final) for f in frames] == [
        ("Closing the note.", 0, True),
        ("Sure.", 1, True),
    ]


async def test_query_without_participant_is_dropped() -> None:
    rec = Recorder()
    dests = agents(rec)
    router = AgentRouter(dests, ScriptedDecisions(default="conversation"), config=CONFIG)
    runtime = AgentRuntime()
    runtime.register("router", router.runtime_subscriber())
    async with runtime, router:
        await runtime.publish(USER_QUERY_TOPIC, UserQuery(text="who am I?"))
    assert not rec.events


async def test_a_turn_that_replaces_one_is_processing_before_that_one_goes_idle() -> None:
    """A new query replaces the participant's running turn: the new turn counts as
    processing before the replaced one's end, so the participant is never ``idle`` between
    the new query and its answer (a client takes ``idle`` after a query as the end of that
    turn: a barge-in's turn ended with no reply)."""
    rec = Recorder()
    dests = agents(rec)
    release = anyio.Event()

    async def slow(t, started):
        await started()
        if t.query == "first":
            await anyio.sleep_forever()
        await release.wait()
        return DestinationResult("answer", "done")

    dests["conversation"].answer_fn = slow
    running: list[int] = []

    async def status(state, pid):
        running.append((running[-1] if running else 0) + (1 if state == "processing" else -1))

    router = AgentRouter(
        dests,
        ScriptedDecisions(default="conversation"),
        config=CONFIG,
        hooks=ParticipantHooks(status=status),
    )
    runtime = AgentRuntime()
    runtime.register("router", router.runtime_subscriber())
    async with runtime, router:
        await runtime.publish(USER_QUERY_TOPIC, UserQuery(text="first"), participant_id="p1")
        await _until(lambda: rec.of("answer"))
        await runtime.publish(USER_QUERY_TOPIC, UserQuery(text="second"), participant_id="p1")
        await _until(lambda: len(running) >= 3)
        release.set()
        await _until(lambda: len(running) >= 4)
    assert running == [1, 2, 1, 0]
