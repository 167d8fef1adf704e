"""The local decision service on the real default model (SmolLM2-135M)."""

from __future__ import annotations

import math

import pytest

from edge.decisions import ChoiceQuestion, Criterion, LocalDecisionService
from edge.llm import LlamaCppLLM
from edge.notes import NotesAgent

pytestmark = [pytest.mark.anyio, pytest.mark.model]

CONVERSATION = Criterion(
    "conversation",
    "General conversation: answers questions from general knowledge and follows up on "
    "earlier dialogue and background context.",
)


def notes_criterion() -> Criterion:
    aid = NotesAgent(runtime=None).routing_aid("p1")
    return Criterion(aid.name, aid.description, aid.examples)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def llm():  # type: ignore[no-untyped-def]
    # One thread: these tests check behaviour, and a single thread is far less hurt when
    # the test machine's cores are oversubscribed (llama.cpp threads spin at barriers).
    model = LlamaCppLLM(n_ctx=1024, n_threads=1)
    await model.load()
    yield model
    await model.close()


async def test_decisions_route_clear_requests_and_reuse_the_prefix(llm: LlamaCppLLM) -> None:
    # model_cap=None: the model is asked even where lexical evidence decides alone
    service = LocalDecisionService(llm, cache_key="decisions-test", model_cap=None)
    criteria = (CONVERSATION, notes_criterion())
    note = await service.decide(
        ChoiceQuestion("Take a note: the centrifuge needs a new rotor", criteria)
    )
    assert note.source == "model"
    assert note.label == "notes"
    assert math.isclose(sum(note.probabilities.values()), 1.0, abs_tol=1e-9)
    question = await service.decide(ChoiceQuestion("What's the capital of France?", criteria))
    assert max(question.probabilities, key=question.probabilities.get) == "conversation"
    assert math.isclose(sum(question.probabilities.values()), 1.0, abs_tol=1e-9)
    # The options prefix was evaluated by the first decision: the second reuses it.
    assert question.metrics is not None
    assert question.metrics.reused_tokens > 0
    assert question.metrics.evaluated_tokens < question.metrics.prompt_tokens / 2
    # with the model's evidence capped (the default) these clear requests need no model
    capped = LocalDecisionService(llm, cache_key="decisions-test")
    for text, label in (
        ("Take a note: buy gloves", "notes"),
        ("Who wrote Hamlet?", "conversation"),
    ):
        answer = await capped.decide(ChoiceQuestion(text, criteria))
        assert answer.source == "lexical" and answer.metrics is None and answer.label == label


async def test_model_scores_alone_form_a_distribution(llm: LlamaCppLLM) -> None:
    service = LocalDecisionService(llm, cache_key="decisions-test", lexical_weight=0.0)
    criteria = (CONVERSATION, notes_criterion(), Criterion("timer", "Sets kitchen timers."))
    answer = await service.decide(ChoiceQuestion("Jot this down: buffer pH 7.4", criteria))
    assert set(answer.probabilities) == {"conversation", "notes", "timer"}
    assert math.isclose(sum(answer.probabilities.values()), 1.0, abs_tol=1e-9)
    assert all(0.0 <= p <= 1.0 for p in answer.probabilities.values())


async def test_router_with_model_decisions_and_notes(llm: LlamaCppLLM) -> None:
    from edge.routing import Admission, AgentRouter, DestinationResult, RoutingAid
    from edge.runtime import AgentRuntime

    class Conversation:
        def __init__(self) -> None:
            self.queries: list[str] = []

        def routing_aid(self, participant_id: str) -> RoutingAid:
            return RoutingAid("conversation", CONVERSATION.description)

        async def admit(self, turn, *, focused):  # type: ignore[no-untyped-def]
            return Admission("accept")

        async def answer(self, turn, *, started):  # type: ignore[no-untyped-def]
            await started()
            self.queries.append(turn.query)
            return DestinationResult("answer", "ok")

        async def release(self, participant_id: str) -> None:
            pass

    from edge.routing import AgentTurn

    async def output(turn, route, text):  # type: ignore[no-untyped-def]
        pass

    runtime = AgentRuntime()
    notes = NotesAgent(runtime)
    conversation = Conversation()
    router = AgentRouter(
        {"conversation": conversation, "notes": notes},
        LocalDecisionService(llm, cache_key="decisions-router-test"),
        output=output,
    )
    async with runtime, router:
        await router.prepare_decisions("p1")
        await router.handle(AgentTurn("p1", "1", "Please take a note: order more gloves"))
        assert router.focus("p1") == "notes"
        await router.handle(AgentTurn("p1", "2", "That's all."))
        await router.handle(AgentTurn("p1", "3", "How does PCR work?"))
        assert notes.notes("p1") == ("order more gloves",)
    assert conversation.queries == ["How does PCR work?"]
