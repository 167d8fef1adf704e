"""The provisional turn (``edge.speculation``), with scripted models: adopted by the
utterance it guessed when the words match, whatever the request's clock line; discarded
unseen otherwise; the wrappers expose their capabilities as explicit protocols."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from edge.conversation import Conversation
from edge.decisions import LocalDecisionService, PreparingDecisions, ScriptedDecisions
from edge.interaction import USER_QUERY_TOPIC, UserQuery
from edge.llm import LlamaCppLLM, ScriptedLLM, ScriptedReply, TokenCounter
from edge.runtime import AgentRuntime
from edge.speculation import (
    Guess,
    PrefetchingDecisions,
    SpeculativeAnswers,
    TurnSpeculator,
    prefetching,
    speculative_answers,
)
from edge.voice import SPECULATION_TOPIC, TRANSCRIPT_TOPIC, Speculation, Transcript
from tests.voice_helpers import wait_for

sys.path.insert(0, str(Path(__file__).resolve().parent))
import anyio.lowlevel
from conversation_helpers import T0, Clock, manager

pytestmark = pytest.mark.anyio


class Router:
    """``likely_destination`` that always picks one route."""

    def __init__(self, route: str = "conversation") -> None:
        self.route = route

    async def likely_destination(self, participant_id: str, text: str) -> str | None:
        return self.route


class Started:
    async def __call__(self) -> None:
        return None


def turn(query: str, pid: str = "p1"):  # type: ignore[no-untyped-def]
    from edge.routing import AgentTurn

    return AgentTurn(pid, "t1", query, (), timestamp_us=T0)


async def test_a_speculation_made_before_a_minute_boundary_is_adopted_by_its_turn() -> None:
    """No clock pin: the request built at 22:13:59.9 and the turn's at 22:14:00.9 differ in
    their time line, and the turn still adopts the answer its utterance was guessed with."""
    llm = ScriptedLLM(default=ScriptedReply("It is late.", delay_s=0.01))
    clock = Clock(T0 + 39_900_000)
    answers = SpeculativeAnswers(llm)
    conv = Conversation(answers, context=manager(llm, clock), clock=clock)
    guess = Guess("voice:0", "What time is it?")
    async with answers:
        early = conv.request_messages("p1", guess.text)
        answers.speculate("p1", guess, early, conv.answer_options("p1"))
        clock.advance(1.0)
        assert conv.request_messages("p1", guess.text) != early  # another minute
        assert answers.confirm("p1", guess)
        result = await conv.answer(turn(guess.text), started=Started())
    assert result.text == "It is late."
    assert len(llm.requests) == 1 and llm.requests[0].messages == early
    assert (answers.stats.adopted, answers.stats.discarded) == (1, 0)


@pytest.mark.parametrize(
    "endpoint", [Guess("voice:0", "What time is it now?"), Guess("voice:1", "What time is it?")]
)
async def test_other_words_or_another_utterance_discard_the_speculation(endpoint: Guess) -> None:
    llm = ScriptedLLM(default=ScriptedReply("one two three four", delay_s=0.05))
    async with SpeculativeAnswers(llm) as answers:
        answers.speculate("p1", Guess("voice:0", "What time is it?"), [_user("time?")])
        await wait_for(lambda: llm.requests)
        assert not answers.confirm("p1", endpoint)
        assert not answers.pending("p1")
        stream = answers.stream([_user(endpoint.text)], cache_key="p1")
        assert "".join([d async for d in stream]) == "one two three four"
    assert (answers.stats.adopted, answers.stats.discarded) == (0, 1)
    assert len(llm.requests) == 2 and llm.requests[0].cancelled


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


async def speculator_runtime(
    llm: ScriptedLLM | LlamaCppLLM,
) -> tuple[AgentRuntime, TurnSpeculator, Conversation]:
    clock = Clock()
    answers = SpeculativeAnswers(llm)
    conv = Conversation(answers, context=manager(llm, clock), clock=clock)
    runtime = AgentRuntime()
    speculator = TurnSpeculator(Router(), conv, answers)
    runtime.register("speculator", speculator)
    return runtime, speculator, conv


async def test_the_final_transcript_of_the_guessed_utterance_confirms_it() -> None:
    llm = ScriptedLLM(default=ScriptedReply("An answer.", delay_s=0.01))
    runtime, speculator, conv = await speculator_runtime(llm)
    async with speculator.answers, speculator, runtime:
        pub = _publisher(runtime)
        await pub(SPECULATION_TOPIC, Speculation(text="Hello there?", utterance=4))
        await wait_for(lambda: speculator.answers.pending("p1"))
        await pub(TRANSCRIPT_TOPIC, Transcript(text="Hello there?", utterance=4, final=True))
        await pub(USER_QUERY_TOPIC, UserQuery(text="Hello there?"))
        result = await conv.answer(turn("Hello there?"), started=Started())
    assert result.text == "An answer." and len(llm.requests) == 1
    assert speculator.answers.stats.adopted == 1


async def test_a_confirmed_answer_its_turn_did_not_take_is_dropped_by_the_next_query() -> None:
    """Confirmed, but the turn went elsewhere: a later typed question on the conversation
    gets its own answer, never the stale one."""
    llm = ScriptedLLM(default=ScriptedReply("Stale answer.", delay_s=0.01))
    runtime, speculator, conv = await speculator_runtime(llm)
    async with speculator.answers, speculator, runtime:
        pub = _publisher(runtime)
        await pub(SPECULATION_TOPIC, Speculation(text="Take a note", utterance=0))
        await wait_for(lambda: speculator.answers.pending("p1"))
        await pub(TRANSCRIPT_TOPIC, Transcript(text="Take a note", utterance=0, final=True))
        await pub(USER_QUERY_TOPIC, UserQuery(text="Take a note"))  # routed to notes
        await pub(USER_QUERY_TOPIC, UserQuery(text="What is new?"))  # typed, next turn
        assert not speculator.answers.pending("p1")
        llm.default = ScriptedReply("Fresh answer.")
        result = await conv.answer(turn("What is new?"), started=Started())
    assert result.text == "Fresh answer."
    assert speculator.answers.stats.adopted == 0


async def test_a_provisional_turn_confirmed_by_its_query_for_inputs_without_transcripts() -> None:
    llm = ScriptedLLM(default=ScriptedReply("Prepared.", delay_s=0.01))
    runtime, speculator, conv = await speculator_runtime(llm)
    async with speculator.answers, speculator, runtime:
        speculator.provisional("p1", Guess("wyoming:1", "Lights?"), by_query=True)
        await wait_for(lambda: speculator.answers.pending("p1"))
        await _publisher(runtime)(USER_QUERY_TOPIC, UserQuery(text="Lights?"))
        result = await conv.answer(turn("Lights?"), started=Started())
    assert result.text == "Prepared." and len(llm.requests) == 1


def _publisher(runtime: AgentRuntime):  # type: ignore[no-untyped-def]
    async def publish(topic, message) -> None:  # type: ignore[no-untyped-def]
        await runtime.publish(topic, message, participant_id="p1", source="test")
        await anyio.lowlevel.checkpoint()

    return publish


def test_the_wrappers_have_the_capabilities_of_what_they_wrap_and_no_more() -> None:
    scripted = ScriptedLLM()
    answers = speculative_answers(scripted)
    assert isinstance(answers, TokenCounter) == isinstance(scripted, TokenCounter)
    assert not hasattr(type(answers), "__getattr__")
    assert not isinstance(prefetching(ScriptedDecisions(default="x")), PreparingDecisions)
    local = prefetching(LocalDecisionService(scripted))
    assert isinstance(local, PreparingDecisions) and isinstance(local, PrefetchingDecisions)
    assert not hasattr(PrefetchingDecisions, "__getattr__")


class CountingLLM(ScriptedLLM):
    context_length = 64
    default_max_tokens = 16

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def format_chat(self, messages, add_generation_prompt: bool = True) -> str:  # type: ignore[no-untyped-def]
        return " ".join(m["content"] if isinstance(m, dict) else m.content for m in messages)


def test_over_a_token_counter_the_answers_count_with_it() -> None:
    answers = speculative_answers(CountingLLM())
    assert isinstance(answers, TokenCounter)
    assert (answers.context_length, answers.default_max_tokens) == (64, 16)
    assert answers.count_tokens("a b c") == 3
    assert answers.format_chat([_user("x y")]) == "x y"


async def test_a_reply_finishing_before_the_query_drops_the_provisional_turn() -> None:
    """An exchange completed after the guess was made may be missing from its answer's
    context: the turn then asks for its own answer."""
    from edge.interaction import VOICE_OUTPUT_TOPIC, ResponseOutput

    llm = ScriptedLLM(default=ScriptedReply("Early.", delay_s=0.01))
    runtime, speculator, conv = await speculator_runtime(llm)
    async with speculator.answers, speculator, runtime:
        pub = _publisher(runtime)
        await pub(SPECULATION_TOPIC, Speculation(text="And then?", utterance=2))
        await wait_for(lambda: speculator.answers.pending("p1"))
        end = ResponseOutput(text="", request_id="t0", source="conversation", final=True)
        await pub(VOICE_OUTPUT_TOPIC, end)  # the previous turn's reply ends now
        assert not speculator.answers.pending("p1")
        await pub(TRANSCRIPT_TOPIC, Transcript(text="And then?", utterance=2, final=True))
        await pub(USER_QUERY_TOPIC, UserQuery(text="And then?"))
        llm.default = ScriptedReply("Fresh.")
        result = await conv.answer(turn("And then?"), started=Started())
    assert result.text == "Fresh." and speculator.answers.stats.adopted == 0


async def test_a_partial_transcript_leaves_the_answer_only_its_last_words_to_evaluate() -> None:
    """With the real model: while the participant speaks, a partial transcript evaluates
    their answer request up to the words so far, so the answer to the whole utterance
    evaluates only its last words and the generation prompt."""
    llm = LlamaCppLLM(n_ctx=1024, temperature=0.0)
    runtime, speculator, conv = await speculator_runtime(llm)
    whole = "What is the capital of France?"
    async with llm, speculator.answers, speculator, runtime:
        pub = _publisher(runtime)
        await pub(TRANSCRIPT_TOPIC, Transcript(text="What is the capital of", utterance=0))
        await wait_for(lambda: any(m.cache_key == "p1" for m in llm.metrics_log))
        await conv.answer(turn(whole), started=Started())
        metrics = next(m for m in reversed(llm.metrics_log) if m.generated_tokens)
        rest = metrics.prompt_tokens - metrics.reused_tokens
        assert rest <= llm.count_tokens(" France?") + 6, metrics
