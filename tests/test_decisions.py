"""Typed choice decisions: validation, lexical evidence, the local service's logic."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from edge.decisions import (
    ChoiceAnswer,
    ChoiceQuestion,
    Criterion,
    DecisionError,
    LocalDecisionService,
    ScriptedDecisions,
    answer_from_logits,
    lexical_scores,
    validate_answer,
)
from edge.llm import Priority, RequestMetrics

pytestmark = pytest.mark.anyio

CONV = Criterion("conversation", "Answers questions and chats about anything.")
NOTES = Criterion(
    "notes", "Takes dictated notes.", ("take a note", "write this down", "remember that")
)
TWO = (CONV, NOTES)


@dataclass
class Scored:
    logprobs: list[float]
    token_counts: list[int]
    metrics: RequestMetrics


@dataclass
class FakeScorer:
    """format_chat + score, with log-probabilities from a function of the prompt."""

    logprobs: object = None
    calls: list[tuple[str, list[str], str | None, Priority]] = field(default_factory=list)
    seeds: list[str | None] = field(default_factory=list)

    def format_chat(self, messages, add_generation_prompt=True):
        body = "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages)
        return body + ("<assistant>" if add_generation_prompt else "")

    async def score(
        self, prompt, continuations, *, cache_key=None, priority=Priority.INTERACTIVE, seed_key=None
    ):
        self.calls.append((prompt, list(continuations), cache_key, Priority(priority)))
        self.seeds.append(seed_key)
        values = self.logprobs(prompt) if callable(self.logprobs) else self.logprobs
        return Scored(list(values), [1] * len(continuations), RequestMetrics(cache_key=cache_key))


def test_question_and_answer_validation() -> None:
    with pytest.raises(DecisionError, match="at least one"):
        ChoiceQuestion("x", ())
    with pytest.raises(DecisionError, match="distinct"):
        ChoiceQuestion("x", (CONV, CONV))
    with pytest.raises(DecisionError, match="label"):
        Criterion("", "nothing")
    q = ChoiceQuestion("x", TWO)
    ok = ChoiceAnswer("notes", 0.7, {"conversation": 0.3, "notes": 0.7})
    assert validate_answer(q, ok) is ok
    with pytest.raises(DecisionError, match="sum"):
        validate_answer(q, ChoiceAnswer("notes", 0.7, {"conversation": 0.7, "notes": 0.7}))
    with pytest.raises(DecisionError, match="cover"):
        validate_answer(q, ChoiceAnswer("notes", 1.0, {"notes": 1.0}))
    with pytest.raises(DecisionError, match="not one of"):
        validate_answer(q, ChoiceAnswer("timer", 1.0, {"conversation": 0.0, "notes": 1.0}))
    with pytest.raises(DecisionError, match="must give probabilities"):
        validate_answer(q, ChoiceAnswer("notes", 1.0, {}))
    with pytest.raises(DecisionError, match="ChoiceAnswer"):
        validate_answer(q, "notes")
    abstain = ChoiceAnswer(None, 0.0, {})
    assert validate_answer(q, abstain).uncertain and not abstain.has_scores


def test_answer_from_logits_sums_to_one_and_marks_ties_uncertain() -> None:
    q = ChoiceQuestion("x", TWO)
    a = answer_from_logits(
        q, {"conversation": 0.2, "notes": 1.5}, uncertain_below=0.5, source="model"
    )
    assert a.label == "notes" and math.isclose(sum(a.probabilities.values()), 1.0)
    assert a.ranked()[0][0] == "notes"
    tie = answer_from_logits(
        q, {"conversation": 0.0, "notes": 0.0}, uncertain_below=0.0, source="lexical"
    )
    assert tie.label is None and tie.probabilities == {"conversation": 0.5, "notes": 0.5}
    low = answer_from_logits(
        q, {"conversation": 0.0, "notes": 0.1}, uncertain_below=0.9, source="model"
    )
    assert low.label is None and low.has_scores


def test_lexical_evidence() -> None:
    s = lexical_scores(ChoiceQuestion("Take a note: the rotor is cracked", TWO))
    assert s["notes"] > s["conversation"]
    s = lexical_scores(ChoiceQuestion("What's the capital of France?", TWO))
    assert s["conversation"] > s["notes"]  # a question, and only conversation takes those
    s = lexical_scores(ChoiceQuestion("bananas", TWO))
    assert s == {"conversation": 0.0, "notes": 0.0}


async def test_single_criterion_needs_no_model_call() -> None:
    llm = FakeScorer([0.0])
    answer = await LocalDecisionService(llm).decide(ChoiceQuestion("x", (NOTES,)))
    assert answer.label == "notes" and answer.probabilities == {"notes": 1.0}
    assert llm.calls == []


async def test_calibrated_model_scores_with_cached_prior() -> None:
    # The model always prefers A; on the content-free input even more so.
    def logprobs(prompt: str) -> list[float]:
        if "Request: N/A" in prompt:
            return [math.log(0.9), math.log(0.1)]
        if "rotor" in prompt:
            return [math.log(0.6), math.log(0.4)]
        return [math.log(0.95), math.log(0.05)]

    llm = FakeScorer(logprobs)
    service = LocalDecisionService(llm, lexical_weight=0.0)
    first = await service.decide(ChoiceQuestion("the rotor is cracked", TWO))
    assert first.label == "notes"  # 0.4/0.1 beats 0.6/0.9 once the prior is divided out
    assert len(llm.calls) == 2  # the decision and the prior
    second = await service.decide(ChoiceQuestion("hello there", TWO))
    assert second.label == "conversation"
    assert len(llm.calls) == 3  # the prior is cached per option set
    for _prompt, keys, cache_key, priority in llm.calls:
        assert keys == ["A", "B"] and cache_key == "decisions"
        assert priority is Priority.INTERACTIVE
    assert math.isclose(sum(first.probabilities.values()), 1.0)


async def test_prompt_keeps_options_as_a_stable_prefix() -> None:
    llm = FakeScorer([0.0, 0.0])
    service = LocalDecisionService(llm)
    a = service.prompt(ChoiceQuestion("first request", TWO))
    b = service.prompt(ChoiceQuestion("another one", TWO, context=("User: hi",)))
    n = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    prefix = a[:n]
    assert "take a note" in prefix and "B) notes" in prefix
    assert "Request" not in prefix.split("<user>")[0]


async def test_context_is_bounded_newest_first() -> None:
    llm = FakeScorer([0.0, 0.0])
    service = LocalDecisionService(llm, max_context_bytes=30)
    lines = ("User: old line that is long enough", "User: newer", "Assistant: newest")
    prompt = service.prompt(ChoiceQuestion("q", TWO, context=lines))
    assert "newest" in prompt and "newer" in prompt and "old line" not in prompt


async def test_the_context_budget_counts_utf8_bytes_not_characters() -> None:
    """The older line is 13 characters but 19 bytes with its newline: beside the newest
    (14 bytes) it fits 30 characters, not 30 bytes."""
    service = LocalDecisionService(FakeScorer([0.0, 0.0]), max_context_bytes=30)
    lines = ("User: éééééé", "Assistant: ok")
    prompt = service.prompt(ChoiceQuestion("q", TWO, context=lines))
    assert "Assistant: ok" in prompt and "é" not in prompt


async def test_lexical_evidence_combines_with_model() -> None:
    llm = FakeScorer([math.log(0.7), math.log(0.3)])  # mild, uncalibrated preference for A
    service = LocalDecisionService(llm, calibrate=False, model_cap=None)  # always asked
    answer = await service.decide(ChoiceQuestion("Take a note: buy gloves", TWO))
    assert answer.label == "notes" and answer.source == "model"


async def test_strong_lexical_evidence_decides_without_the_model() -> None:
    """With the model's evidence capped, a lexical lead it cannot overturn (nor make
    uncertain) decides alone: no prompt is evaluated."""
    llm = FakeScorer([math.log(0.999), math.log(0.001)])  # the model would say A
    service = LocalDecisionService(llm, calibrate=False)
    note = await service.decide(ChoiceQuestion("Take a note: buy gloves", TWO))
    assert note.label == "notes" and note.source == "lexical" and not llm.calls
    # without any evidence either way the model is asked, and its evidence is capped
    unclear = await service.decide(ChoiceQuestion("bananas", TWO))
    assert unclear.source == "model" and len(llm.calls) == 1
    cap = service.model_cap
    assert cap is not None
    assert math.isclose(unclear.probabilities["conversation"], 1 / (1 + math.exp(-2 * cap)))
    # the lead the capped model could just overturn: asked
    weak = LocalDecisionService(llm, calibrate=False, model_cap=1.5)
    lexical = {"conversation": 0.0, "notes": 2.0}
    assert not weak.settled(ChoiceQuestion("x", TWO), lexical)
    assert service.settled(ChoiceQuestion("x", TWO), lexical)
    with pytest.raises(ValueError, match="model_cap"):
        LocalDecisionService(llm, model_cap=-1)


async def test_without_score_the_service_is_lexical() -> None:
    service = LocalDecisionService(object())
    answer = await service.decide(ChoiceQuestion("write this down please", TWO))
    assert answer.label == "notes" and answer.source == "lexical"
    unclear = await service.decide(ChoiceQuestion("bananas", TWO))
    assert unclear.label is None and unclear.has_scores


async def test_malformed_model_output_is_rejected() -> None:
    service = LocalDecisionService(FakeScorer([0.0]))
    with pytest.raises(DecisionError, match="options"):
        await service.decide(ChoiceQuestion("x", TWO))
    service = LocalDecisionService(FakeScorer([float("nan"), 0.0]))
    with pytest.raises(DecisionError):
        await service.decide(ChoiceQuestion("x", TWO))
    with pytest.raises(ValueError):
        LocalDecisionService(object(), uncertain_below=2)


async def test_scripted_decisions() -> None:
    boom = RuntimeError("down")
    d = ScriptedDecisions(["notes", {"conversation": 3, "notes": 1}, None, boom])
    q = ChoiceQuestion("x", TWO)
    assert (await d.decide(q)).label == "notes"
    weighted = await d.decide(q)
    assert weighted.label == "conversation" and weighted.probabilities["conversation"] == 0.75
    assert (await d.decide(q)).label is None
    with pytest.raises(RuntimeError):
        await d.decide(q)
    assert len(d.questions) == 4
    fn = ScriptedDecisions(lambda question: question.labels[-1])
    assert (await fn.decide(q)).label == "notes"


async def test_prepare_computes_the_prior_in_the_background() -> None:
    llm = FakeScorer([0.0, 0.0])
    service = LocalDecisionService(llm)
    await service.prepare(ChoiceQuestion("", TWO))
    assert len(llm.calls) == 1 and llm.calls[0][3] is Priority.BACKGROUND
    await service.decide(ChoiceQuestion("x", TWO))
    assert len(llm.calls) == 2  # the prior was ready


async def test_prepare_with_context_evaluates_the_prompt_up_to_the_request() -> None:
    """A question carrying recent conversation is evaluated (in the background, into the
    asker's own key, started from the shared options prefix) up to its request, so the
    asker's next decision reuses that prefix."""
    llm = FakeScorer([0.0, 0.0])
    service = LocalDecisionService(llm)
    context = ("User: what's new?", "Assistant: nothing much")
    await service.prepare(ChoiceQuestion("", TWO, context=context, asker="p1"))
    assert [c[3] for c in llm.calls] == [Priority.BACKGROUND, Priority.BACKGROUND]
    warmed = llm.calls[1][0]
    asked = ChoiceQuestion("bananas", TWO, context=context, asker="p1")  # no lexical lead
    assert "nothing much" in warmed
    assert service.prompt(asked).startswith(warmed.split("Request:")[0] + "Request:")
    assert (llm.calls[1][2], llm.seeds[1]) == ("decisions:p1", "decisions")
    await service.decide(asked)
    assert (llm.calls[2][2], llm.seeds[2]) == ("decisions:p1", "decisions")
    await service.decide(ChoiceQuestion("bananas", TWO, asker="p1"))  # no context
    assert (llm.calls[3][2], llm.seeds[3]) == ("decisions:p1", "decisions")
    await service.decide(ChoiceQuestion("bananas", TWO))  # nobody asking: the shared state
    assert (llm.calls[4][2], llm.seeds[4]) == ("decisions", None)
    await service.prepare(ChoiceQuestion("", TWO))  # no context: the prior only, cached
    assert len(llm.calls) == 5


async def test_forget_cancels_a_prepare_still_running_for_its_asker() -> None:
    """A background prepare still running (or preempted, waiting to resume) when its asker
    is forgotten would save the erased participant's state again: ``forget`` cancels it
    before dropping the state, so none is left when ``forget`` returns."""
    import anyio

    started = anyio.Event()
    forgotten: list[tuple[str, ...]] = []
    scored: list[str] = []

    @dataclass
    class SlowScorer(FakeScorer):
        async def score(self, prompt, continuations, **kw):  # type: ignore[no-untyped-def]
            if kw.get("cache_key", "").startswith("decisions:"):
                started.set()
                await anyio.sleep_forever()
            scored.append(kw.get("cache_key", ""))
            return await super().score(prompt, continuations, **kw)

        async def forget_cache(self, *keys: str) -> None:
            forgotten.append(keys)

    service = LocalDecisionService(SlowScorer([0.0, 0.0]))
    question = ChoiceQuestion("", TWO, context=("User: hi",), asker="p1")
    other = ChoiceQuestion("", TWO, context=("User: hello",), asker="p2")
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(service.prepare, question)
            await started.wait()
            started = anyio.Event()
            tg.start_soon(service.prepare, other)
            await started.wait()
            await service.forget("p1")
            assert forgotten == [("decisions:p1",)]
            await anyio.wait_all_tasks_blocked()
            assert "p1" not in service._preparing and "p2" in service._preparing  # p2 runs on
            tg.cancel_scope.cancel()
    await service.forget("p1")  # nothing running: just the drop
    assert forgotten == [("decisions:p1",)] * 2


async def test_a_full_model_queue_degrades_a_decision_to_words_never_fails_it() -> None:
    """A person's turn is never dropped for a queue limit: when the model refuses the
    decision's evaluation (the participant's queue is full), the lexical evidence decides."""
    from edge.llm import QueueFullError

    class Full(FakeScorer):
        async def score(self, prompt, continuations, **kw):  # type: ignore[no-untyped-def]
            raise QueueFullError("'decisions:X' already has 4 requests waiting for the model")

    service = LocalDecisionService(Full(), model_cap=None)
    answer = await service.decide(
        ChoiceQuestion("take a note: the rotor is cracked", TWO, asker="X")
    )
    assert answer.label == "notes" and answer.source == "lexical"
