"""Intention acknowledgments written by the real default model (SmolLM2-135M)."""

from __future__ import annotations

import anyio
import pytest
from routing_helpers import Recorder, ScriptedAgent, turn

from edge.decisions import ScriptedDecisions
from edge.llm import LlamaCppLLM
from edge.routing import AgentRouter, DestinationResult, RouterConfig
from edge.routing._acknowledge import MAX_ACK_WORDS

pytestmark = [pytest.mark.anyio, pytest.mark.model]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def llm():  # type: ignore[no-untyped-def]
    model = LlamaCppLLM(n_ctx=2048, temperature=0.0, n_threads=1)
    await model.load()
    yield model
    await model.close()


async def test_slow_answer_is_acknowledged_first_in_one_short_line(llm: LlamaCppLLM) -> None:
    rec = Recorder()
    dests = {name: ScriptedAgent(name, rec) for name in ("conversation", "notes")}

    async def slow(t, started):  # type: ignore[no-untyped-def]
        with anyio.fail_after(120):  # still not started when the acknowledgment is out
            while not rec.of("out"):  # noqa: ASYNC110 (polling the recorder)
                await anyio.sleep(0.01)
        await started()
        rec.events.append(("say", "conversation", "The tallest mountain is Everest."))
        return DestinationResult("answer", "The tallest mountain is Everest.")

    dests["conversation"].answer_fn = slow
    router = AgentRouter(
        dests,
        ScriptedDecisions(default="conversation"),
        RouterConfig(acknowledgment_delay_s=0.05),
        output=rec.output,
        acknowledgment_llm=llm,
    )
    await router.handle(turn("what is the tallest mountain in the world"))
    ((route, ack),) = rec.outputs()
    kinds = [e[0] for e in rec.events if e[0] in ("out", "say")]
    assert kinds == ["out", "say"]  # the acknowledgment came before the answer
    assert route == "conversation"
    # the model's own line, cleaned: one short line, no reasoning tags or quotes
    assert ack.strip() and "\n" not in ack and "<think>" not in ack
    assert len(ack.split()) <= MAX_ACK_WORDS
    assert not ack.startswith('"')
