"""Conversation as a routed destination, with a scripted model."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from functools import partial

import anyio
import pytest
from conversation_helpers import T0, Clock, eventually, is_compaction, manager, responder

from edge.conversation import (
    DEFAULT_STOP,
    DEFAULT_SYSTEM_PROMPT,
    Conversation,
    ConversationConfig,
)
from edge.interaction import TEXT_OUTPUT_TOPIC, Exchange, ResponseOutput
from edge.llm import ActivityTracker, GenerationError, Priority, ScriptedLLM, ScriptedReply
from edge.routing import AgentExchange, AgentTurn, RoutableAgent
from edge.runtime import Agent, AgentRuntime, HandlerContext, subscribe

pytestmark = pytest.mark.anyio


class Sink(Agent):
    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.frames: list[ResponseOutput] = []
        self.meta: list = []
        self.fail = fail

    @subscribe(TEXT_OUTPUT_TOPIC)
    async def on(self, message: ResponseOutput, ctx: HandlerContext) -> None:
        if self.fail:
            raise OSError("speaker unplugged")
        self.frames.append(message)
        self.meta.append(ctx.metadata)


class Started:
    def __init__(self, sink: Sink | None = None) -> None:
        self.calls = 0
        self.frames_before: list[int] = []
        self.sink = sink

    async def __call__(self) -> None:
        self.calls += 1
        self.frames_before.append(len(self.sink.frames) if self.sink else 0)


def setup(llm, fail: bool = False, **kwargs):
    clock = Clock()
    ctx = manager(llm, clock)
    runtime = AgentRuntime()
    sink = Sink(fail)
    runtime.register("sink", sink)
    conv = Conversation(
        llm,
        context=ctx,
        config=ConversationConfig(name="chat", **kwargs),
        runtime=runtime,
        output_topic=TEXT_OUTPUT_TOPIC,
        clock=clock,
    )
    return conv, ctx, runtime, sink


def turn(
    query: str = "When is the meeting?", history=(), pid: str = "p1", turn_id: str = "t1"
) -> AgentTurn:
    return AgentTurn(pid, turn_id, query, tuple(history), timestamp_us=T0)


async def test_is_a_routable_agent_that_accepts() -> None:
    conv, *_ = setup(ScriptedLLM())
    assert isinstance(conv, RoutableAgent)
    assert (await conv.admit(turn(), focused=False)).disposition == "accept"
    assert conv.routing_aid("p1").name == "chat"


async def test_streams_a_reply_to_the_turn_and_records_it() -> None:
    llm = ScriptedLLM(["It is at three o'clock."])
    conv, ctx, runtime, sink = setup(llm)
    started = Started(sink)
    async with runtime:
        result = await conv.answer(turn(), started=started)
    assert result.disposition == "answer" and result.text == "It is at three o'clock."
    assert started.calls == 1 and started.frames_before == [0]
    assert [f.sequence for f in sink.frames] == list(range(len(sink.frames)))
    assert all(
        f.request_id == "t1" and f.source == "chat" and f.timestamp_us == T0 for f in sink.frames
    )
    assert [f.final for f in sink.frames] == [False] * (len(sink.frames) - 1) + [True]
    assert "".join(f.text for f in sink.frames) == result.text
    assert all(m.participant_id == "p1" for m in sink.meta)
    (exchange,) = ctx.transcript("p1")
    assert exchange.user == "When is the meeting?" and exchange.timestamp_us == T0


async def test_request_layout_and_options() -> None:
    llm = ScriptedLLM()
    conv, _ctx, runtime, _ = setup(llm, instructions="Answer about the lab.")
    async with runtime:
        await conv.answer(turn("First?"), started=Started())
        await conv.answer(turn("Second?", turn_id="t2"), started=Started())
    first, second = llm.requests
    assert [m.role for m in second.messages] == ["system", "user", "user"]
    assert second.messages[0].content == DEFAULT_SYSTEM_PROMPT + "\n\nAnswer about the lab."
    assert first.messages[0] == second.messages[0]
    assert "First?" in second.messages[1].content
    assert second.messages[1].content.rstrip().splitlines()[-1].startswith("Current time:")
    assert second.messages[2].content == "Second?"
    assert second.cache_key == "p1" and second.priority is Priority.INTERACTIVE


async def test_system_prompt_replaces_the_default() -> None:
    llm = ScriptedLLM()
    conv, _ctx, runtime, _ = setup(llm, system_prompt="You are terse.")
    async with runtime:
        await conv.answer(turn("First?"), started=Started())
    (request,) = llm.requests
    assert request.messages[0].role == "system"
    assert request.messages[0].content == "You are terse."  # what the model is sent


async def test_model_failure_finalizes_the_partial_stream_and_propagates() -> None:
    llm = ScriptedLLM([ScriptedReply("one two three four", fail_after=2)])
    conv, ctx, runtime, sink = setup(llm)
    async with runtime:
        with pytest.raises(GenerationError):
            await conv.answer(turn(), started=Started())
    assert [f.text.strip() for f in sink.frames] == ["one", "two", ""]
    assert sink.frames[-1].final and ctx.transcript("p1") == []


async def test_failure_before_the_first_chunk_publishes_nothing() -> None:
    llm = ScriptedLLM([ScriptedReply("one", fail_after=0)])
    conv, _ctx, runtime, sink = setup(llm)
    started = Started()
    async with runtime:
        with pytest.raises(GenerationError):
            await conv.answer(turn(), started=started)
    assert sink.frames == [] and started.calls == 0


async def test_cancellation_drains_and_closes_the_open_stream() -> None:
    llm = ScriptedLLM([ScriptedReply("a b c d e f g h", delay_s=0.05)])
    conv, ctx, runtime, sink = setup(llm)
    async with runtime:
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(conv.answer, turn(), started=Started()))
            while len(sink.frames) < 2:  # noqa: ASYNC110
                await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    assert llm.requests[0].cancelled
    assert sink.frames[-1].final and sink.frames[-1].text == ""
    assert sum(1 for f in sink.frames if f.final) == 1
    assert ctx.transcript("p1") == []  # a cancelled answer records no exchange


async def test_cancellation_before_output_publishes_nothing() -> None:
    llm = ScriptedLLM([ScriptedReply("a b", first_delay_s=1.0)])
    conv, _ctx, runtime, sink = setup(llm)
    async with runtime:
        with anyio.move_on_after(0.05):
            await conv.answer(turn(), started=Started())
    assert sink.frames == [] and llm.requests[0].cancelled


async def test_publication_failure_propagates_and_drains_the_model() -> None:
    llm = ScriptedLLM(["a b c"])
    conv, ctx, runtime, _sink = setup(llm, fail=True)
    async with runtime:
        with pytest.raises(ExceptionGroup) as info:
            await conv.answer(turn(), started=Started())
    assert info.group_contains(OSError)
    assert ctx.transcript("p1") == []


async def test_close_stops_new_answers_only() -> None:
    conv, *_ = setup(ScriptedLLM())
    await conv.close()
    assert (await conv.admit(turn(), focused=False)).disposition == "decline"
    with pytest.raises(RuntimeError, match="closed"):
        await conv.answer(turn(), started=Started())


async def test_release_and_departure_keep_context() -> None:
    conv, ctx, runtime, _ = setup(ScriptedLLM())
    async with runtime:
        await conv.answer(turn(), started=Started())
    await conv.release("p1")
    await conv.participant_left("p1")
    assert len(ctx.transcript("p1")) == 1


async def test_an_exchange_is_recorded_once_under_its_turns_exchange_id() -> None:
    """The context owns the dialogue: the answer records its exchange under the turn's
    ``exchange_id`` (a second record of that id adds nothing), and the history a turn
    carries is the router's view, never replayed into the context."""
    llm = ScriptedLLM(["OK."])
    conv, ctx, runtime, _ = setup(llm)
    history = (AgentExchange("Note the rotor", "Noted."),)
    async with runtime:
        asked = replace(turn("And?", history), exchange_id="x2")
        result = await conv.answer(asked, started=Started())
        await conv.dialogue.record("p1", Exchange("And?", result.text, "x2", T0))
        await conv.dialogue.record("p1", Exchange("Note it", "Noted.", "x3", T0 + 1))
    assert [t.user for t in ctx.transcript("p1")] == ["And?", "Note it"]
    recent = conv.dialogue.recent("p1", 10_000)
    assert [(e.user, e.assistant, e.timestamp_us) for e in recent] == [
        ("And?", "OK.", T0),
        ("Note it", "Noted.", T0 + 1),
    ]
    assert [e.user for e in conv.dialogue.recent("p1", len("Note itNoted."))] == ["Note it"]
    assert conv.dialogue.recent("nobody", 10_000) == []


async def test_answer_without_runtime_returns_text() -> None:
    llm = ScriptedLLM(["Plain."])
    conv = Conversation(llm, context=manager(llm))
    started = Started()
    assert (await conv.answer(turn(), started=started)).text == "Plain."
    assert started.calls == 1
    with pytest.raises(ValueError, match="together"):
        Conversation(llm, context=manager(llm), runtime=AgentRuntime())


async def test_clear_while_streaming_records_as_new_context_close_drops() -> None:
    llm = ScriptedLLM([ScriptedReply("a b c", delay_s=0.05)] * 2)
    conv, ctx, runtime, _ = setup(llm)
    await ctx.record_exchange("p1", "old", "old answer")
    async with runtime:
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(conv.answer, turn(), started=Started()))
            await anyio.sleep(0.07)
            await ctx.clear("p1")
        assert [t.user for t in ctx.transcript("p1")] == ["When is the meeting?"]
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(conv.answer, turn(turn_id="t2"), started=Started()))
            await anyio.sleep(0.07)
            await ctx.close()
    assert ctx.transcript("p1") == []


async def test_compaction_waits_while_an_answer_streams() -> None:
    llm = ScriptedLLM(responder("S.", answer=ScriptedReply("a b c d e", delay_s=0.05)))
    llm.activity = ActivityTracker()  # a remote model: only the manager knows it is busy
    llm.activity.interactive = nullcontext  # type: ignore[method-assign]
    ctx = manager(
        llm, dialogue_budget_bytes=600, compaction_input_budget_bytes=600, compaction_quiet_s=0.05
    )
    conv = Conversation(llm, context=ctx)
    for i in range(6):
        await ctx.record_exchange("p1", f"q{i} " + "w" * 60, "a")
    async with ctx:
        await conv.answer(turn(), started=Started())
        answer = llm.requests[0]
        assert not any(is_compaction(r.messages) for r in llm.requests[:1])
        await eventually(lambda: len(llm.requests) > 1)
        assert is_compaction(llm.requests[1].messages) and answer.completed


class CountingLLM(ScriptedLLM):
    """A scripted model with a small context window that counts one token per 4 bytes."""

    context_length = 200
    default_max_tokens = 50

    def format_chat(self, messages, add_generation_prompt=True) -> str:
        return "".join(m.content for m in messages)

    def count_tokens(self, text: str) -> int:
        return len(text.encode()) // 4


async def test_the_conversation_specs_keyword_form_still_works() -> None:
    """``shared/spec/conversation.md`` builds ``Conversation(llm, context=...,
    instructions=..., runtime=..., output_topic=...)``: the keywords fold into the config."""
    llm = ScriptedLLM()
    ctx = manager(llm)
    runtime = AgentRuntime()
    conv = Conversation(
        llm,
        context=ctx,
        instructions="Answer general questions about the lab.",
        runtime=runtime,
        output_topic=TEXT_OUTPUT_TOPIC,
    )
    assert conv.config.instructions == "Answer general questions about the lab."
    assert conv.system_message.endswith("Answer general questions about the lab.")
    both = Conversation(
        llm, context=ctx, config=ConversationConfig(system_prompt="S"), instructions="I"
    )
    assert (both.config.system_prompt, both.config.instructions) == ("S", "I")
    with pytest.raises(TypeError, match="unknown conversation option"):
        Conversation(llm, context=ctx, instruction="typo")  # type: ignore[call-arg]


async def test_request_is_fitted_to_the_model_window_oldest_first(caplog) -> None:
    llm = CountingLLM()
    ctx = manager(llm)
    conv = Conversation(llm, context=ctx, config=ConversationConfig(system_prompt="S"))
    for i in range(20):
        await ctx.record_exchange("p1", f"question {i}", f"answer {i}")
    messages = conv.request_messages("p1", "Now?")
    assert llm.count_tokens(llm.format_chat(messages)) <= 150
    assert "answer 19" in messages[1].content and "answer 0" not in messages[1].content
    assert messages[2].content == "Now?" and "window" in caplog.text
    await ctx.record_exchange("p2", "x" * 2000, "y")
    assert conv.request_messages("p2", "Q" * 300)[2].content == "Q" * 300  # never clipped


async def test_a_request_fitted_to_the_window_keeps_its_recalled_block() -> None:
    llm = CountingLLM()
    ctx = manager(llm)
    conv = Conversation(llm, context=ctx, config=ConversationConfig(system_prompt="S"))
    await ctx.record_exchange("p", "My locker code is 4711.", "Okay.")
    for i in range(20):
        await ctx.record_exchange("p", f"question {i}", f"answer {i}")
    messages = conv.request_messages("p", "What is my locker code?")
    context = messages[1].content
    assert "question 0" not in context  # the oldest entries left out, the statement too
    assert context.endswith("\nMy locker code is 4711.")  # but recalled


async def test_an_answer_ends_where_the_model_starts_writing_the_next_turns() -> None:
    """Small models continue the transcript-like context with invented ``User:`` lines:
    the answer stops there, so they are neither streamed nor recorded."""
    llm = ScriptedLLM(["Your code is 4711.\n\nUser: thanks\nAssistant: You're welcome."])
    conv, ctx, runtime, sink = setup(llm)
    async with runtime:
        result = await conv.answer(turn("Read my code back."), started=Started(sink))
    assert result.text.strip() == "Your code is 4711."
    assert "thanks" not in "".join(f.text for f in sink.frames)
    assert llm.requests[0].options.stop == conv.stop == DEFAULT_STOP
    (exchange,) = ctx.transcript("p1")
    assert "thanks" not in exchange.assistant
