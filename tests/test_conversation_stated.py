"""What you told it, it tells you back (issue 41), with a scripted model: a question about
what the participant said is answered from their statements, the latest winning; no
scaffolding reaches a reply; corrections supersede in recall and in summaries."""

from __future__ import annotations

import re

import pytest
from conversation_helpers import Clock, manager, responder

from edge.conversation import Conversation, ConversationConfig, has_scaffolding
from edge.conversation._context import Entry
from edge.conversation._extractive import extractive_summary, summary_gaps
from edge.conversation._reply import ReplyFilter
from edge.interaction import TEXT_OUTPUT_TOPIC, ResponseOutput
from edge.llm import ScriptedLLM
from edge.recall import NOT_STATED, asked_of_record, lemma, refers_back, repairs, spoken
from edge.routing import AgentTurn
from edge.runtime import Agent, AgentRuntime, HandlerContext, subscribe
from edge.store import SessionStore

pytestmark = pytest.mark.anyio

MODEL = "The model's own answer."


async def nothing() -> None:
    return None


def test_which_requests_ask_for_a_stated_fact() -> None:
    for q in (
        "What is my locker code?",
        "Who is my supervisor?",
        "When is the autoclave run now?",
        "Which room is the seminar in now?",
        "Who's my bench partner?",
        "Remind me, what code opens my locker?",
        "On which level of the garage did I park?",
    ):
        assert asked_of_record(q) is not None, q
    for q in (
        "How do I spell centrifuge?",
        "Tell me a fun fact.",
        "Why is the sky blue?",
        "My locker code is 4711.",
        "What should I do now?",
        "Where am I right now?",
    ):
        assert asked_of_record(q) is None, q
    asked = asked_of_record("What is my name?")
    assert asked is not None and asked.subject == {lemma("name")}  # the kind is all it names
    asked = asked_of_record("What's the name of my supervisor?")
    assert asked is not None and asked.subject == {"supervisor"} and asked.own and asked.mine
    assert asked.kind is None and asked.named == {"supervisor"}


def test_a_statement_is_told_back_in_the_second_person_without_what_it_took_back() -> None:
    assert spoken("My locker code is 4711.") == "Your locker code is 4711."
    assert spoken("Just so you know, I am allergic to penicillin.") == (
        "You are allergic to penicillin."
    )
    assert spoken("Correction: the seminar moved to room 310.", None, ("The seminar is in 204.",))
    said = spoken("Actually it moved from 9 to 11.", None, ("The autoclave run is at 9.",))
    assert said == "The autoclave run moved to 11."
    said = spoken("Sorry, I misspoke: my name is actually Mira, not Dana.", None, ("I'm Dana.",))
    assert said == "Your name is Mira."
    said = spoken(
        "The safety briefing isn't at 14:00 anymore, it's at 16:00.",
        None,
        ("The safety briefing is at 14:00.",),
    )
    assert "16:00" in said and "14:00" not in said


def test_a_change_told_of_it_takes_back_what_was_just_said() -> None:
    assert refers_back("It moved to 11.") and refers_back("Actually, that's at 16:00 now.")
    assert not refers_back("It is sunny.")  # no change, no detail
    assert repairs("Actually it moved from 9 to 11.", "The autoclave run is at 9.")
    assert not repairs("Sample rack 3 was moved to freezer A.", "Freezer B is at minus 80.")
    # a repair of one part of a code shares the rest of it
    said = "The workshop wifi password is maple-otter-62."
    assert repairs("Actually, I read it backwards, it's maple-otter-26.", said)


def test_a_greeting_does_not_make_a_statement_a_request() -> None:
    from edge.recall import is_request

    assert not is_request("Hi, my name is Dana.") and is_request("Hi!")
    assert is_request("Hello, how are you?") and is_request("Thanks, that helps.")


def test_a_possessive_is_the_word_itself() -> None:
    asked = asked_of_record("What is my daughter's name?")
    assert asked is not None and asked.subject == {lemma("daughter")}
    assert asked.query.startswith("What is my daughter name?")


class Sink(Agent):
    def __init__(self) -> None:
        super().__init__()
        self.frames: list[ResponseOutput] = []

    @subscribe(TEXT_OUTPUT_TOPIC)
    async def on(self, message: ResponseOutput, ctx: HandlerContext) -> None:
        self.frames.append(message)


def setup(llm, store: SessionStore | None = None, **options):
    clock = Clock(step_us=1_000)
    ctx = manager(llm, clock, store=store, **options)
    runtime = AgentRuntime()
    conv = Conversation(
        llm,
        context=ctx,
        config=ConversationConfig(name="chat"),
        runtime=runtime,
        output_topic=TEXT_OUTPUT_TOPIC,
        clock=clock,
    )
    return conv, ctx, runtime


async def say(ctx, pid: str, *texts: str) -> None:
    for text in texts:
        await ctx.record_exchange(pid, text, "Okay, noted.")


async def test_a_question_about_a_stated_fact_is_answered_from_the_record() -> None:
    llm = ScriptedLLM(responder("S.", answer=MODEL))
    conv, ctx, runtime = setup(llm)
    sink = Sink()
    runtime.register("sink", sink)
    frames = sink.frames
    async with runtime:
        await say(ctx, "ann", "My locker code is 4711.", "The autoclave run is at 9.")
        await say(ctx, "ann", "Actually it moved from 9 to 11.", "My supervisor is Dr. Okafor.")
        await say(ctx, "bob", "My locker code is 1234.", "My supervisor is Dr. Lindqvist.")
        result = await conv.answer(
            AgentTurn("ann", "t1", "What is my locker code?"), started=nothing
        )
        assert result.text == "Your locker code is 4711."
        assert [f.text for f in frames] == ["Your locker code is 4711.", ""]  # one frame, final
        assert frames[-1].final and frames[0].source == "chat"
        assert llm.requests == []  # no model call
        assert ctx.transcript("ann")[-1].assistant == "Your locker code is 4711."  # recorded
        assert await conv.reply("ann", "When is the autoclave run now?") == (
            "The autoclave run moved to 11."
        )
        assert (
            await conv.reply("bob", "Who is my supervisor?") == "Your supervisor is Dr. Lindqvist."
        )
        # nothing bob said answers it: he is told so, not given ann's
        bob = await conv.reply("bob", "What is my bench partner's name?")
        assert bob == NOT_STATED
        # a request that asks for no stated fact goes to the model
        assert await conv.reply("ann", "Tell me a fun fact.") == MODEL
        metrics = conv.last_metrics("ann")
        assert metrics is not None and metrics.ttft_s is not None


async def test_other_participants_records_never_answer() -> None:
    llm = ScriptedLLM(responder("S.", answer=MODEL))
    conv, ctx, runtime = setup(llm)
    async with runtime:
        await say(ctx, "bob", "The autoclave run is at 9.")
        reply = await conv.reply("ann", "When is the autoclave run now?")
        assert "9" not in reply
        assert await conv.reply("ann", "What is my locker code?") == NOT_STATED


async def test_recall_off_means_the_model_answers() -> None:
    llm = ScriptedLLM(responder("S.", answer=MODEL))
    conv, ctx, runtime = setup(llm, recall_budget_bytes=0)
    async with runtime:
        await say(ctx, "ann", "My locker code is 4711.")
        assert await conv.reply("ann", "What is my locker code?") == MODEL


def test_the_filter_removes_every_label_the_prompt_has() -> None:
    scaffolded = {
        "The user (earlier): The user is my supervisor.": "The user is my supervisor.",
        "User: User: I'm looking for a new car.": "I'm looking for a new car.",
        "User: 2718": "2718",
        "User: My locker code is 4711.": "My locker code is 4711.",
        'The user said: "My code is 5."': '"My code is 5."',
        "[14:02] notes: Note: buy ethanol.": "Note: buy ethanol.",
        "[14:02] scene (latest): A red toolbox.": "A red toolbox.",
        "Summary of the earlier conversation (14:13 to 14:43): The user said: 4.": "4.",
        "Earlier, newest first:\nMy code is 5.": "My code is 5.",
        "Current time: Thursday 03 December 2026, 14:05\nIt is late.": "It is late.",
    }
    for pieces in (r"\s*\S+", r"(?s).", r"(?s).{1,5}"):
        for text, clean in scaffolded.items():
            reply = ReplyFilter()
            out = "".join(reply.feed(p) for p in re.findall(pieces, text)) + reply.flush()
            assert out == clean, (text, pieces)
            assert has_scaffolding(text) and not has_scaffolding(out)
    for text in ("The user manual is on shelf 2.", "Users can log in.", "Summary: all good."):
        assert ReplyFilter().feed(text) + ReplyFilter().flush() == text
        assert not has_scaffolding(text)


async def test_the_recalled_block_has_no_label_to_copy() -> None:
    llm = ScriptedLLM(responder("S.", answer=MODEL))
    _, ctx, _ = setup(llm, dialogue_budget_bytes=600, compaction_input_budget_bytes=600)
    async with ctx:
        await say(ctx, "ann", "The guest wifi password is tulip42.")
        for i in range(12):
            await say(ctx, "ann", f"Tell me something nice, take {'x' * i}.")
        block = ctx.recalled("ann", "Tell me about the guest wifi password")
    assert block is not None and block.text == "The guest wifi password is tulip42."


def entry(seq: int, user: str) -> Entry:
    return Entry(seq, seq * 1_000_000, f"User: {user}\nAssistant: Okay.", "", user, "Okay.")


def test_a_summary_keeps_the_correction_not_what_it_corrects() -> None:
    entries = [
        entry(0, "The autoclave run is at 9."),
        entry(1, "Actually it moved from 9 to 11."),
        entry(2, "Correction: the briefing is at 16:00, not 14:00."),
    ]
    summary = extractive_summary(
        "", [entry(0, "The briefing is at 14:00."), *entries], 400, dialogue=True
    )
    assert "autoclave run is at 9" not in summary and "11" in summary
    assert "The briefing is at 14:00." not in summary
    gaps = summary_gaps("The autoclave run is at 9 and moved to 11.", "", entries[:2])
    assert "keeps replaced 9" not in gaps  # 9 is still said in the correction itself
    gaps = summary_gaps(
        "The seminar is in room 204, then room 310.",
        "",
        [
            entry(0, "The seminar is in room 204."),
            entry(1, "Correction: the seminar moved to room 310."),
        ],
    )
    assert "keeps replaced 204" in gaps


async def test_a_correction_survives_compaction_and_a_restart_both_stay_in_the_transcript(
    tmp_path,
) -> None:
    path = tmp_path / "sessions.db"
    llm = ScriptedLLM(responder("The user chatted.", answer=MODEL))
    small = {"dialogue_budget_bytes": 600, "compaction_input_budget_bytes": 600}
    store = SessionStore(path)
    _, ctx, _ = setup(llm, store=store, **small)
    async with ctx:
        await say(ctx, "ann", "The safety briefing is at 14:00.", "Actually it moved to 16:00.")
        for i in range(12):
            await say(ctx, "ann", f"Tell me something nice, take {'x' * i}.")
        await ctx.compact("ann")
        assert "14:00" not in ctx.summary("ann", "dialogue")
    await ctx.close()
    store.close()
    store = SessionStore(path)
    conv, ctx, _ = setup(llm, store=store, **small)
    async with ctx:
        reply = await conv.reply("ann", "When is the safety briefing now?")
        said = [e.user for e in ctx.transcript("ann")]
    store.close()
    assert "16:00" in reply and "14:00" not in reply
    assert "The safety briefing is at 14:00." in said and "Actually it moved to 16:00." in said


async def test_a_correction_that_names_the_old_value_is_told_without_it() -> None:
    llm = ScriptedLLM(responder("S.", answer=MODEL))
    conv, ctx, runtime = setup(llm)
    async with runtime:
        said = ("The safety briefing is at 10:30.", "Correction: it's at 11:15, not 10:30.")
        await say(ctx, "ann", *said)
        assert await conv.reply("ann", "What time is the safety briefing?") == (
            "The safety briefing is at 11:15."
        )
        await say(
            ctx,
            "bob",
            "The seminar is at 10:30.",
            "Correction: the seminar is at 11:15, not 10:30.",
        )
        assert await conv.reply("bob", "When is the seminar?") == "The seminar is at 11:15."
