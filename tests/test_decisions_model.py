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
    model = LlamaCppLLM(n_ctx=2048)
    await model.load()
    yield model
    await model.close()


async def test_decisions_route_clear_requests_and_reuse_the_prefix(llm: LlamaCppLLM) -> None:
    service = LocalDecisionService(llm, cache_key="decisions-test")
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


async def test_model_scores_alone_form_a_distribution(llm: LlamaCppLLM) -> None:
    service = LocalDecisionService(llm, cache_key="decisions-test", lexical_weight=0.0)
    criteria = (CONVERSATION, notes_criterion(), Criterion("timer", "Sets kitchen timers."))
    answer = await service.decide(ChoiceQuestion("Jot this down: buffer pH 7.4", criteria))
    assert set(answer.probabilities) == {"conversation", "notes", "timer"}
    assert math.isclose(sum(answer.probabilities.values()), 1.0, abs_tol=1e-9)
    assert all(0.0 <= p <= 1.0 for p in answer.probabilities.values())
