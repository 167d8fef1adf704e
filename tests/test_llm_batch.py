"""Several participants at once on the real default model: continuous batching (one
context, a sequence per request) and the one-at-a-time path's fair hand-over."""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import pytest

from edge.llm import GenerationOptions, LlamaCppLLM, Priority
from edge.speculation import Guess, SpeculativeAnswers

pytestmark = [pytest.mark.anyio, pytest.mark.model]

SYSTEM = "You are a concise assistant in a robotics lab. Answer in one short sentence."
QUESTIONS = [
    "What is the sun?",
    "Name three colors.",
    "Why is the sky blue?",
    "Tell me a joke.",
    "What is a robot?",
]


def ask(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def alone() -> dict[str, str]:
    """Each question's greedy answer with the model to itself (the one-at-a-time path)."""
    model = LlamaCppLLM(n_ctx=1024, temperature=0.0)
    answers = {}
    for q in QUESTIONS:
        answers[q] = (await model.chat(ask(q), max_tokens=24)).content
    await model.close()
    return answers


@pytest.fixture(scope="module")
async def batched():  # type: ignore[no-untyped-def]
    model = LlamaCppLLM(n_ctx=1024, temperature=0.0, sequences=4)
    await model.load()
    yield model
    await model.close()


HOLD_S = 30.0


async def test_one_slow_reader_does_not_hold_the_model_for_others() -> None:
    """A paused speculative answer (16 deltas ahead, then waiting up to ``hold_s`` for
    its confirmation) used to keep the model's slot: another participant waited the
    whole hold. The bound is half the hold, not a speed: a loaded machine is slow, but
    it does not make b wait for a's confirmation."""
    llm = LlamaCppLLM(n_ctx=1024, temperature=0.0)
    async with SpeculativeAnswers(llm, hold_s=HOLD_S, ahead_deltas=4) as spec:
        story = ask("Tell me a long story about a robot.")
        spec.speculate("a", Guess("a", "story"), story, GenerationOptions(max_tokens=200))
        with anyio.fail_after(30):
            while len(spec._pending["a"].deltas) < 4:  # noqa: ASYNC110 (paused after 4)
                await anyio.sleep(0.01)
        started = time.perf_counter()
        r = await spec.chat(ask("Name one color."), max_tokens=8, cache_key="b")
        waited = time.perf_counter() - started
        assert r.content.strip() and spec.pending("a")
        assert waited < HOLD_S / 2, f"b waited {waited:.1f} s behind a's paused speculation"
    await llm.close()


async def answers_at_once(
    llm: LlamaCppLLM, questions: list[str], max_tokens: int = 24
) -> dict[str, str]:
    out: dict[str, str] = {}

    async def one(i: int, q: str) -> None:
        out[q] = (await llm.chat(ask(q), max_tokens=max_tokens, cache_key=f"p{i}")).content

    async with anyio.create_task_group() as tg:
        for i, q in enumerate(questions):
            tg.start_soon(one, i, q)
    return out


async def test_batched_greedy_answers_equal_each_alone(
    batched: LlamaCppLLM, alone: dict[str, str]
) -> None:
    steps = batched._runner.scheduler.steps  # type: ignore[attr-defined]
    # five at once on four sequences: the fifth waits for a free one
    assert await answers_at_once(batched, QUESTIONS) == alone
    taken = batched._runner.scheduler.steps - steps  # type: ignore[attr-defined]
    assert taken < 3 * 24  # decoded together, not one after another (5 x 24 tokens)
    # follow-ups reuse each participant's live (or restored) sequence
    r = await batched.chat(ask(QUESTIONS[1]), max_tokens=4, cache_key="p1")
    assert r.metrics.reused_tokens >= r.metrics.prompt_tokens - 1


async def test_a_request_joining_mid_batch(batched: LlamaCppLLM, alone: dict[str, str]) -> None:
    first, late = QUESTIONS[0], QUESTIONS[3]
    got: dict[str, str] = {}

    async def run_first() -> None:
        async with batched.stream(ask(first), max_tokens=24, cache_key="j1") as stream:
            async for delta in stream:
                got.setdefault(first, "")
                got[first] += delta
                if len(got[first]) > 10 and late not in got:
                    got[late] = ""
                    tg.start_soon(run_late)

    async def run_late() -> None:
        got[late] = (await batched.chat(ask(late), max_tokens=24, cache_key="j2")).content

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_first)
    assert got == {first: alone[first], late: alone[late]}


async def test_one_sequence_cancelled_while_others_finish(
    batched: LlamaCppLLM, alone: dict[str, str]
) -> None:
    out: dict[str, str] = {}

    async def cancelled() -> None:
        async with batched.stream(ask(QUESTIONS[4]), max_tokens=24, cache_key="c0") as s:
            async for _ in s:
                break  # barge-in: closed after its first delta

    async def finishes(i: int) -> None:
        q = QUESTIONS[i]
        out[q] = (await batched.chat(ask(q), max_tokens=24, cache_key=f"c{i}")).content

    async with anyio.create_task_group() as tg:
        tg.start_soon(cancelled)
        for i in (1, 2):
            tg.start_soon(finishes, i)
    assert out == {QUESTIONS[i]: alone[QUESTIONS[i]] for i in (1, 2)}
    assert not batched._runner.scheduler.active  # type: ignore[attr-defined]


async def test_compaction_is_preempted_by_answers_and_resumes(batched: LlamaCppLLM) -> None:
    notes = " ".join(f"Note {i}: the sample in rack {i % 7} was checked." for i in range(40))
    long_prompt = ask(f"Summarise these notes in one sentence.\n{notes}")
    reference = await batched.chat(long_prompt, max_tokens=16, cache_key="ref")
    done: list[str] = []
    results: dict[str, object] = {}

    async def background() -> None:
        results["bg"] = await batched.chat(
            long_prompt, max_tokens=16, priority=Priority.BACKGROUND, cache_key="compaction"
        )
        done.append("bg")

    async def answer(i: int) -> None:
        await batched.chat(ask(QUESTIONS[i]), max_tokens=8, cache_key=f"i{i}")
        done.append(f"i{i}")

    async with anyio.create_task_group() as tg:
        tg.start_soon(background)
        with anyio.fail_after(30):
            while not batched._runner.scheduler.steps_of(Priority.BACKGROUND):  # type: ignore[attr-defined]  # noqa: ASYNC110
                await anyio.sleep(0.005)
        for i in range(3):
            tg.start_soon(answer, i)
    assert done[-1] == "bg"
    bg = results["bg"]
    assert bg.metrics.preemptions >= 1  # type: ignore[attr-defined]
    assert bg.content == reference.content  # type: ignore[attr-defined]


async def test_only_background_steps_run_with_the_abort_callback(
    batched: LlamaCppLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama.cpp's abort callback takes the GIL between graph nodes (a busy event loop
    slows every step it is set for), so only steps that may be aborted, background work
    alone, run with it; any interactive work in a step runs it without."""
    ctx = batched._runner.scheduler.ctx  # type: ignore[attr-defined]
    steps: list[tuple[set[Priority], bool]] = []
    decode = ctx._decode

    def spy(entries):  # type: ignore[no-untyped-def]
        steps.append(({job.priority for job, _, _ in entries}, ctx._abort_hook.armed))
        return decode(entries)

    monkeypatch.setattr(ctx, "_decode", spy)
    await batched.chat(
        ask(QUESTIONS[0]), max_tokens=2, priority=Priority.BACKGROUND, cache_key="hook-bg"
    )
    await batched.chat(ask(QUESTIONS[1]), max_tokens=2, cache_key="hook-int")
    assert {armed for kinds, armed in steps if kinds == {Priority.BACKGROUND}} == {True}
    assert {armed for kinds, armed in steps if Priority.INTERACTIVE in kinds} == {False}
    assert not ctx._abort_hook.armed  # between steps


async def test_kv_memory_stays_within_the_sequences_and_the_store(batched: LlamaCppLLM) -> None:
    runner = batched._runner
    ctx = runner.scheduler.ctx  # type: ignore[attr-defined]
    for round_ in range(2):  # ten participants on four sequences, twice
        await answers_at_once(
            batched, [f"{q} ({round_}, {i})" for i in (1, 2) for q in QUESTIONS], 4
        )
    assert len(ctx.live_keys()) <= 4 and ctx.n_seq == 4
    # one KV stream of n_ctx cells per sequence, allocated once
    assert ctx.ctx.n_ctx() == 4 * 1024
    store = batched._engine.store
    assert store.used_bytes <= store.budget_bytes
    assert max(len(t) for t in ctx.tokens) < 1024
    stats = batched.cache_stats()  # what /health reports
    assert stats["sequences"] == 4 and stats["live_sequences"] == len(ctx.live_keys())
    assert stats["saved_states"] == len(store) and stats["evictions"] == store.evictions


async def test_a_question_asked_while_its_prefix_is_warmed_gets_the_same_answer(
    batched: LlamaCppLLM,
) -> None:
    """A participant asks while their prefix is still being warmed (they just joined): the
    warm-up ends where it is and the answer evaluates the rest, word for word the answer
    the same prompt gets with no warm-up."""
    notes = " ".join(f"Note {i}: rack {i % 7} was checked at {i}:00." for i in range(30))
    prefix = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": notes}]
    question = [*prefix, {"role": "user", "content": "Which rack was checked at 5:00?"}]
    reference = await batched.chat(question, max_tokens=16, cache_key="cold")
    steps = batched._runner.scheduler.steps_of(Priority.BACKGROUND)  # type: ignore[attr-defined]
    results: dict[str, object] = {}

    async def warm() -> None:
        results["warm"] = await batched.warm(prefix, cache_key="joiner")

    async with anyio.create_task_group() as tg:
        tg.start_soon(warm)
        with anyio.fail_after(30):
            while batched._runner.scheduler.steps_of(Priority.BACKGROUND) == steps:  # type: ignore[attr-defined]  # noqa: ASYNC110
                await anyio.sleep(0.001)
        results["answer"] = await batched.chat(question, max_tokens=16, cache_key="joiner")
    assert "warm" in results
    assert results["answer"].content == reference.content  # type: ignore[attr-defined]


async def test_every_model_step_runs_on_one_thread(
    batched: LlamaCppLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama.cpp keeps an OpenMP team per calling thread; steps spread over the event
    loop's shared worker threads (speech and the store use them too) left several teams,
    and a one-token step took 20 ms instead of 12, a two-sequence step 80 instead of 17.
    Every step of either model, with other work in worker threads between them, runs on
    the one model thread."""
    from edge.llm import _batch, _serial

    threads: set[int] = set()

    def recording(fn, *args):  # type: ignore[no-untyped-def]
        threads.add(threading.get_ident())
        return fn(*args)

    monkeypatch.setattr(_batch, "gated", recording)
    monkeypatch.setattr(_serial, "gated", recording)
    serial = LlamaCppLLM(n_ctx=512, temperature=0.0)

    async def other_work(pause_s: float) -> None:  # speech passes in worker threads
        while True:
            await anyio.to_thread.run_sync(time.sleep, pause_s)

    async with anyio.create_task_group() as tg:
        for i in range(4):
            tg.start_soon(other_work, 0.001 * (i + 1))
        answers = await answers_at_once(batched, ["Name a color.", "Name a fruit."], 6)
        r = await serial.chat(ask("Name an animal."), max_tokens=6, cache_key="s")
        tg.cancel_scope.cancel()
    await serial.close()
    assert all(answers.values()) and r.content
    assert len(threads) == 1 and threading.get_ident() not in threads


async def test_a_history_trimmed_by_its_client_is_reused_shifted(batched: LlamaCppLLM) -> None:
    """A client that drops its oldest round each turn (Home Assistant's ``max_history``)
    sends a prompt that differs from the held state right after the system prompt. With
    ``shift_reuse`` the dropped round's cells go and the rest is shifted back, so only the
    new question is evaluated, and the greedy answer is the exact evaluation's; without
    it, everything after the system prompt is evaluated again."""
    history: list[dict[str, str]] = []
    for question in QUESTIONS[:4]:
        sent = [*ask(question)[:1], *history, ask(question)[1]]
        for key in ("shifted", "exact"):
            await batched.chat(sent, max_tokens=16, cache_key=key, shift_reuse=key == "shifted")
        reply = await batched.chat(sent, max_tokens=16, cache_key=None)
        history += [sent[-1], {"role": "assistant", "content": reply.content}]
    trimmed = [*ask(QUESTIONS[4])[:1], *history[2:], ask(QUESTIONS[4])[1]]
    shifted = await batched.chat(trimmed, max_tokens=16, cache_key="shifted", shift_reuse=True)
    exact = await batched.chat(trimmed, max_tokens=16, cache_key="exact")
    fresh = await batched.chat(trimmed, max_tokens=16, cache_key=None)
    # evaluated: the new question and the end of the last answer (its state held the
    # tokens generated, cut at max_tokens, not the answer's text and end marker)
    assert shifted.metrics.evaluated_tokens <= batched.count_tokens(QUESTIONS[4]) + 24
    assert exact.metrics.evaluated_tokens > shifted.metrics.prompt_tokens // 2, exact.metrics
    assert shifted.content == exact.content == fresh.content
    # the kept cells sit right after the system prompt: positions 0..n-1, none left over
    from llama_cpp import llama_cpp as capi

    ctx = batched._runner.scheduler.ctx  # type: ignore[attr-defined]
    seq = ctx.seq_of("shifted")
    assert capi.llama_memory_seq_pos_min(ctx.mem, seq) == 0
    assert capi.llama_memory_seq_pos_max(ctx.mem, seq) == len(ctx.tokens[seq]) - 1
    # the shifted state goes on as any other: the next turn reuses all of it
    follow = [*trimmed, {"role": "assistant", "content": shifted.content}, ask("Thanks!")[1]]
    again = await batched.chat(follow, max_tokens=4, cache_key="shifted", shift_reuse=True)
    assert again.metrics.reused_tokens >= len(shifted.content) // 8 + shifted.metrics.prompt_tokens


async def test_a_shifted_state_saved_and_restored_goes_on_as_it_would_have(
    batched: LlamaCppLLM,
) -> None:
    """A shifted state handed from its sequence to the KV store (more keys than sequences)
    and back holds its cells at their new positions: its next turn reuses all of it and
    answers as the same state does when it stayed in its sequence."""

    async def trimmed_conversation(key: str) -> tuple[list[dict[str, str]], Any]:
        history: list[dict[str, str]] = []
        for question in QUESTIONS[:4]:
            sent = [*ask(question)[:1], *history, ask(question)[1]]
            reply = await batched.chat(sent, max_tokens=24, cache_key=key, shift_reuse=True)
            history += [sent[-1], {"role": "assistant", "content": reply.content}]
        trimmed = [*ask(QUESTIONS[4])[:1], *history[2:], ask(QUESTIONS[4])[1]]
        shifted = await batched.chat(trimmed, max_tokens=12, cache_key=key, shift_reuse=True)
        assert shifted.metrics.reused_tokens > shifted.metrics.prompt_tokens // 2
        follow = [*trimmed, {"role": "assistant", "content": shifted.content}]
        return [*follow, ask("Thanks!")[1]], shifted

    follow, _ = await trimmed_conversation("stays")
    stayed = await batched.chat(follow, max_tokens=16, cache_key="stays")
    again_follow, shifted = await trimmed_conversation("moves")
    assert again_follow == follow
    await answers_at_once(batched, [f"{q} (away)" for q in QUESTIONS], 4)  # push it out
    assert "moves" in batched._engine.store  # saved, not live
    moved = await batched.chat(follow, max_tokens=16, cache_key="moves")
    assert moved.metrics.reused_tokens >= shifted.metrics.prompt_tokens
    assert moved.content == stayed.content
