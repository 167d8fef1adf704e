"""LlamaCppLLM on the real default model (SmolLM2-135M)."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import anyio
import pytest

from edge.llm import (
    ContextOverflowError,
    LlamaCppLLM,
    LLMClosedError,
    LLMService,
    ModelLoadError,
    Priority,
)

pytestmark = [pytest.mark.anyio, pytest.mark.model]

SYSTEM = (
    "You are a concise assistant in a robotics lab. The lab has three rooms: the assembly "
    "room, the clean room and the test bay. Calibration happens every Tuesday at 10:00. "
    "Answer in one short sentence."
)


def ask(question: str, system: str = SYSTEM) -> list[dict[str, str]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def llm():  # type: ignore[no-untyped-def]
    model = LlamaCppLLM(n_ctx=2048, temperature=0.0)
    await model.load()
    yield model
    await model.close()


async def test_stream_answers_with_metrics(llm: LlamaCppLLM) -> None:
    assert isinstance(llm, LLMService)
    stream = llm.stream(ask("When is calibration?"), max_tokens=40, cache_key="p1")
    deltas = [d async for d in stream]
    assert len(deltas) > 1 and "".join(deltas).strip()
    assert stream.finish_reason in ("stop", "length")
    m = stream.metrics
    assert m.prompt_tokens > 40 and m.ttft_s is not None and m.ttft_s > 0
    assert m.generated_tokens >= 2 and m.tokens_per_s and m.tokens_per_s > 1
    assert m.queue_wait_s is not None


async def test_max_tokens_gives_length_and_stop_strings_cut(llm: LlamaCppLLM) -> None:
    r = await llm.chat(ask("List ten colours, comma separated."), max_tokens=3)
    assert r.finish_reason == "length" and r.metrics.generated_tokens == 3
    r = await llm.chat(ask("List ten colours, comma separated."), max_tokens=60, stop=[","])
    assert r.finish_reason == "stop" and "," not in r.content


async def test_prefix_reuse_across_interleaved_participants(llm: LlamaCppLLM) -> None:
    first = await llm.chat(ask("Which rooms does the lab have?"), max_tokens=20, cache_key="alice")
    other = [
        {"role": "system", "content": "You are a pirate. " * 30},
        {"role": "user", "content": "Say hello."},
    ]
    await llm.chat(other, max_tokens=10, cache_key="bob")
    follow = ask("Which rooms does the lab have?") + [
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": "And when is calibration?"},
    ]
    r = await llm.chat(follow, max_tokens=20, cache_key="alice")
    # Everything up to alice's first question is reused although bob ran in between.
    assert r.metrics.reused_tokens >= first.metrics.prompt_tokens - 1
    assert r.metrics.evaluated_tokens < r.metrics.prompt_tokens - first.metrics.prompt_tokens + 20
    assert "alice" in llm.cached_keys() or "bob" in llm.cached_keys()
    # the switch back to alice's saved state is timed apart from the prompt evaluation
    assert 0 < r.metrics.restore_s < r.metrics.total_s


async def test_background_is_preempted_by_interactive_and_resumes(llm: LlamaCppLLM) -> None:
    # A compaction-sized background prompt (~1,200 tokens) takes seconds to evaluate.
    notes = " ".join(f"Note {i}: the sample in rack {i % 7} was checked." for i in range(110))
    long_prompt = ask(f"Summarise these notes in one sentence.\n{notes}")
    results: dict[str, object] = {}

    async def background() -> None:
        results["bg"] = await llm.chat(
            long_prompt, max_tokens=40, priority=Priority.BACKGROUND, cache_key="compaction"
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(background)
        with anyio.fail_after(30):  # an event, not a guess: the background request holds
            while not llm.scheduler._busy:  # noqa: ASYNC110 (the model's slot)
                await anyio.sleep(0.01)
        assert llm.scheduler.queued == 0 and not llm.activity.busy
        results["int"] = await llm.chat(ask("Name one room."), max_tokens=8, cache_key="carol")
        assert "bg" not in results  # the interactive answer finished first
    bg, inter = results["bg"], results["int"]
    assert bg.metrics.preemptions >= 1  # type: ignore[attr-defined]
    assert bg.content.strip()  # type: ignore[attr-defined]
    # It resumed from its saved state instead of evaluating its prompt again.
    assert bg.metrics.prompt_tokens > 1000  # type: ignore[attr-defined]
    # The interactive request waited for one step of background work, not for the request
    # (a relative bound: absolute latency is measured in benchmarks/, not asserted here).
    assert inter.metrics.queue_wait_s < bg.metrics.total_s / 4  # type: ignore[attr-defined]


async def test_cancellation_stops_and_model_stays_usable(llm: LlamaCppLLM) -> None:
    stream = llm.stream(ask("Tell me a long story about a robot."), max_tokens=200)
    got = 0
    async for _ in stream:
        got += 1
        if got == 3:
            break
    await stream.aclose()
    assert stream.metrics.generated_tokens <= 4
    # cancelled wherever it is after 0.3 s (queued, evaluating or generating): any of them
    # must leave the model usable, so a slow machine does not make this pass vacuously
    with anyio.move_on_after(0.3):
        await llm.chat(ask("Tell me another long story."), max_tokens=200)
    r = await llm.chat(ask("Name one room."), max_tokens=10)
    assert r.content.strip() and llm.scheduler.queued == 0


async def test_prompt_larger_than_context_is_a_clear_error(llm: LlamaCppLLM) -> None:
    with pytest.raises(ContextOverflowError, match="context window is 2048 tokens"):
        await llm.chat(ask("word " * 3000))
    assert (await llm.chat(ask("Name one room."), max_tokens=5)).content


async def test_score_sums_to_a_distribution_and_reuses_prefix(llm: LlamaCppLLM) -> None:
    prompt = llm.format_chat(ask("Is the sky blue on a clear day? Answer yes or no.")) + ""
    result = await llm.score(prompt, ["yes", "no", "Yes", "No"], cache_key="decisions")
    probs = [math.exp(x) for x in result.logprobs]
    assert all(0 < p < 1 for p in probs) and sum(probs) < 1.0001
    again = await llm.score(prompt, ["yes", "no"], cache_key="decisions")
    assert again.metrics.reused_tokens >= again.metrics.prompt_tokens - 1


async def test_score_under_a_new_key_starts_from_its_seed(llm: LlamaCppLLM) -> None:
    """A per-participant key without state starts from the shared key's prefix (a copy),
    whoever held the live context last, and leaves the shared state as it was."""
    options = "Options: A) chat B) notes. " * 6
    shared = llm.format_chat(ask(options + "Request: N/A"))
    first = await llm.score(shared, ["A", "B"], cache_key="opts")
    await llm.chat(ask("x"), max_tokens=2, cache_key="frank")  # someone else's turn
    mine = llm.format_chat(ask(options + "Recent: we spoke of notes. Request: read them"))
    seeded = await llm.score(mine, ["A", "B"], cache_key="opts:p1", seed_key="opts")
    assert seeded.metrics.reused_tokens > first.metrics.prompt_tokens // 2
    again = await llm.score(shared, ["A", "B"], cache_key="opts")
    assert again.metrics.reused_tokens >= again.metrics.prompt_tokens - 1
    assert again.logprobs == pytest.approx(first.logprobs, abs=1e-4)


async def test_warm_fills_the_cache_for_the_next_request(llm: LlamaCppLLM) -> None:
    msgs = ask("What is in the test bay?", system=SYSTEM + " Be friendly.")
    warm = await llm.warm(msgs, cache_key="dave")
    assert warm.prompt_tokens > 0
    await llm.chat(ask("x"), max_tokens=2, cache_key="erin")
    r = await llm.chat(msgs, max_tokens=5, cache_key="dave")
    assert r.metrics.reused_tokens >= warm.prompt_tokens - 1


async def test_only_background_evaluations_run_with_the_abort_callback(
    llm: LlamaCppLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one-sequence engine sets llama.cpp's abort callback (which takes the GIL between
    graph nodes) only while a background evaluation may be aborted: its prompt's."""
    engine = llm._engine
    evaluated: list[bool] = []
    evaluate = engine.llama.eval

    def spy(tokens):  # type: ignore[no-untyped-def]
        evaluated.append(engine._abort_hook.armed)
        return evaluate(tokens)

    monkeypatch.setattr(engine.llama, "eval", spy)
    await llm.chat(ask("Name a room."), max_tokens=2, priority=Priority.BACKGROUND, cache_key="o")
    background, evaluated[:] = list(evaluated), []
    await llm.chat(ask("Name a day."), max_tokens=2, cache_key="p")
    assert background[0]  # the background prompt
    assert evaluated and not any(evaluated)


async def test_a_warm_ahead_of_the_users_message_leaves_only_its_text_to_evaluate(
    llm: LlamaCppLLM,
) -> None:
    """``user_next``: the warmed prefix ends where the next user message's text begins, so
    the request evaluates its own words and the generation prompt only; a warm ending with
    the generation prompt leaves the user message's role header to evaluate too."""
    context = ask("Context: Hana is in the clean room.", system=SYSTEM + " Ahead.")
    question = "Where is Hana?"
    msgs = [*context, {"role": "user", "content": question}]
    closed = await llm.warm(context, cache_key="kai")
    ahead = await llm.warm(context, cache_key="lea", user_next=True)
    assert ahead.prompt_tokens > closed.prompt_tokens - 3  # the header, not the answer's
    shut = await llm.chat(msgs, max_tokens=2, cache_key="kai")
    opened = await llm.chat(msgs, max_tokens=2, cache_key="lea")
    new = opened.metrics.prompt_tokens - opened.metrics.reused_tokens
    assert new < shut.metrics.prompt_tokens - shut.metrics.reused_tokens
    generation_prompt = 6  # <|im_end|> \n <|im_start|> ass istant \n
    assert new <= llm.count_tokens(question) + generation_prompt
    assert opened.content == shut.content  # the same prompt, evaluated in other pieces


async def test_a_warm_of_words_still_coming_leaves_only_the_last_words_to_evaluate(
    llm: LlamaCppLLM,
) -> None:
    """``open_last``: a partial transcript is evaluated up to the end of its words (no
    end-of-message token after them), so the whole utterance's request evaluates only
    its last words and the generation prompt."""
    context = ask("Context: Hana is in the clean room.", system=SYSTEM + " Words.")
    so_far, whole = "Where is Hana", "Where is Hana today?"
    partial = await llm.warm(
        [*context, {"role": "user", "content": so_far}], cache_key="mia", open_last=True
    )
    msgs = [*context, {"role": "user", "content": whole}]
    r = await llm.chat(msgs, max_tokens=2, cache_key="mia")
    assert r.metrics.reused_tokens >= partial.prompt_tokens - 1
    generation_prompt = 6
    rest = r.metrics.prompt_tokens - r.metrics.reused_tokens
    assert rest <= llm.count_tokens(" today?") + generation_prompt


async def test_a_new_participant_starts_from_the_seed_state(llm: LlamaCppLLM) -> None:
    """An answer (or a warm) for a key with no state yet starts from ``seed_key``'s: the
    shared system prompt is reused even when another prompt fills the live context; the
    seed itself is left as it was, and a key with a state of its own ignores the seed."""
    system = [{"role": "system", "content": SYSTEM + " Seeded."}]
    shared = await llm.warm(system, cache_key="sys")
    await llm.score("Completely unrelated words.", ["A"], cache_key="opts")  # live: other
    msgs = ask("Where is the test bay?", system=SYSTEM + " Seeded.")
    r = await llm.chat(msgs, max_tokens=3, cache_key="hana", seed_key="sys")
    assert r.metrics.reused_tokens >= shared.prompt_tokens - 4  # all but the template's end
    assert r.metrics.reused_tokens < r.metrics.prompt_tokens
    warm = await llm.warm(system, cache_key="ivan", seed_key="sys")
    assert warm.reused_tokens >= shared.prompt_tokens - 1  # a copy, nothing evaluated
    again = await llm.warm(system, cache_key="sys")
    assert again.reused_tokens >= shared.prompt_tokens - 1  # the seed is unchanged
    own = await llm.chat(msgs, max_tokens=3, cache_key="hana", seed_key="sys")
    assert own.metrics.reused_tokens > r.metrics.reused_tokens  # hana's own state now


async def test_move_cache_hands_a_warmed_state_to_another_key(llm: LlamaCppLLM) -> None:
    """A prefix warmed under one key serves another after ``move_cache``, whether the state
    is saved or is the live context; the source key is gone, the target's old state too."""
    old = ask("Where is calibration?", system=SYSTEM + " Old context.")
    new = ask("Where is calibration?", system=SYSTEM + " New context.")
    await llm.warm(old, cache_key="frank")
    warm = await llm.warm(new, cache_key="next:frank")  # the live context
    assert await llm.move_cache("next:frank", "frank")
    assert "next:frank" not in llm.cached_keys()
    r = await llm.chat(new, max_tokens=3, cache_key="frank")
    assert r.metrics.reused_tokens >= warm.prompt_tokens - 1
    await llm.warm(new, cache_key="next:gina")
    await llm.chat(ask("x"), max_tokens=2, cache_key="erin")  # now a saved state
    assert await llm.move_cache("next:gina", "gina")
    r = await llm.chat(new, max_tokens=3, cache_key="gina")
    assert r.metrics.reused_tokens >= warm.prompt_tokens - 1
    assert not await llm.move_cache("nobody", "gina")  # nothing to move: nothing changes
    with pytest.raises(ValueError, match="reserved"):
        await llm.move_cache("__job:1", "gina")


async def test_bad_model_files_give_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="does not exist"):
        await LlamaCppLLM(tmp_path / "missing.gguf").load()
    text = tmp_path / "notes.gguf"
    text.write_text("hello")
    with pytest.raises(ModelLoadError, match="not a GGUF file"):
        await LlamaCppLLM(text).chat(ask("hi"))
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 64)
    with pytest.raises(ModelLoadError, match="could not load"):
        await LlamaCppLLM(corrupt).load()


async def test_closed_service_refuses_requests() -> None:
    model = LlamaCppLLM(n_ctx=256)
    await model.close()
    with pytest.raises(LLMClosedError):
        model.stream(ask("hi"))
    with pytest.raises(LLMClosedError):
        await model.warm(ask("hi"), cache_key="a", user_next=True)
    health = await model.health()
    assert not health.ok


async def test_an_answers_prompt_and_first_words_go_first_in_the_compute_gate(
    llm: LlamaCppLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beside other participants' speech work, a turn waits for its answer's prompt and
    first words, not for the rest of it or background work: those steps are urgent in the
    compute gate (a sentence synthesized ahead held them 0.4 s when they queued in turn)."""
    from edge.llm import _serial
    from edge.llm._runner import FIRST_WORDS_TOKENS
    from edge.runtime import NORMAL, URGENT, current_urgency

    levels: list[int] = []
    real = _serial.gated

    def recording(fn, *args):  # type: ignore[no-untyped-def]
        levels.append(current_urgency())
        return real(fn, *args)

    monkeypatch.setattr(_serial, "gated", recording)
    stream = llm.stream(ask("Describe the three rooms."), max_tokens=30, cache_key="urgency")
    tokens = sum(1 for _ in [d async for d in stream])
    assert tokens > FIRST_WORDS_TOKENS and levels[0] == URGENT and levels[-1] == NORMAL
    assert levels.index(NORMAL) >= FIRST_WORDS_TOKENS  # the prompt and first words: urgent
    levels.clear()
    background = llm.stream(
        ask("Describe the rooms."), max_tokens=5, priority=Priority.BACKGROUND, cache_key="bg"
    )
    assert [d async for d in background] and set(levels) == {NORMAL}


async def test_home_assistants_clock_line_moved_last_keeps_its_history_reused(
    llm: LlamaCppLLM,
) -> None:
    """The default model's template renders a system message before the newest one, so
    the API moves Home Assistant's clock line there (edge.api._clock) and, after the
    answer, settles the state without it: a turn then evaluates its clock line and its
    question, not the whole history again as with the line left in the system prompt."""
    from edge.api._clock import _SETTLING, clock_lines_last, renders_late_system, settle
    from edge.llm import ChatMessage

    assert renders_late_system(llm)
    questions = [
        "What is the capital of France?",
        "Who wrote Hamlet?",
        "Why is the sky blue?",
        "How many legs does a spider have?",
        "What do bees make?",
        "What is the boiling point of water?",
    ]
    evaluated = {}
    for layout, key in (("moved", "ha-moved"), ("as sent", "ha-sent")):
        history: list[ChatMessage] = []
        for second, question in enumerate(questions):
            clock = f"Current time is 14:03:{27 + 4 * second:02d}. Today's date is 2026-12-05."
            system = ChatMessage(role="system", content=f"{SYSTEM}\n\n{clock}\n")
            sent = [system, *history, ChatMessage(role="user", content=question)]
            asked = clock_lines_last(sent, llm) if layout == "moved" else sent
            reply = await llm.chat(asked, max_tokens=16, cache_key=key)
            if layout == "moved":
                settle(llm, asked, reply.content, key)
                await asyncio.gather(*_SETTLING.values())
            history += [sent[-1], ChatMessage(role="assistant", content=reply.content)]
        evaluated[layout] = reply.metrics.evaluated_tokens
    clock_and_question = llm.count_tokens(f"{clock}\n{questions[-1]}") + 12  # + the markers
    assert evaluated["moved"] <= clock_and_question < evaluated["as sent"] / 3, evaluated
