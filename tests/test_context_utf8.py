"""Budgets are UTF-8 bytes, not characters: the same checks as the ASCII tests, with text
whose characters take two, three and four bytes (a byte budget counted in characters lets
such text run to several times its budget)."""

from __future__ import annotations

import pytest
from conversation_helpers import compactions, eventually, manager, responder

from edge.conversation import Conversation
from edge.llm import ScriptedLLM

pytestmark = pytest.mark.anyio

# two, three and four UTF-8 bytes a character
WIDE = {"latin": "é", "cjk": "東", "emoji": "🙂"}


def size(text: str) -> int:
    return len(text.encode("utf-8"))


@pytest.fixture(params=sorted(WIDE), ids=sorted(WIDE))
def wide(request: pytest.FixtureRequest) -> str:
    return WIDE[request.param]


async def test_dialogue_section_stays_within_its_byte_budget(wide: str) -> None:
    ctx = manager(ScriptedLLM(), dialogue_budget_bytes=400, compaction_input_budget_bytes=456)
    for i in range(8):
        await ctx.record_exchange("p", f"question {i} " + wide * 40, f"answer {i} {wide * 5}")
    blocks = ctx.blocks("p")
    assert sum(size(b.text) for b in blocks) <= 400
    assert "answer 7" in blocks[-1].text


async def test_one_huge_exchange_is_clipped_to_bytes(wide: str) -> None:
    ctx = manager(ScriptedLLM(), dialogue_budget_bytes=400, compaction_input_budget_bytes=456)
    await ctx.record_exchange("p", "BEGIN " + wide * 500, "FINISH")
    (block,) = ctx.blocks("p")
    assert block.clipped and size(block.text) <= 400
    assert "BEGIN" in block.text and "FINISH" in block.text


async def test_summary_topic_state_is_clipped_to_bytes(wide: str) -> None:
    ctx = manager(ScriptedLLM(), summary_context_topics=("window",), topic_budget_bytes=300)
    await ctx.update("p", "window", "START " + wide * 400 + " END")
    (block,) = ctx.blocks("p")
    assert size(block.text) <= 300
    assert "START" in block.text and "END" in block.text


async def test_compaction_input_and_summary_are_measured_in_bytes(wide: str) -> None:
    llm = ScriptedLLM(responder("Résumé: " + wide * 400))  # far over any summary limit
    async with manager(llm, dialogue_budget_bytes=1000, compaction_input_budget_bytes=800) as ctx:
        for i in range(6):
            await ctx.record_exchange("p", f"q{i} " + wide * 30, f"a{i}")
        await eventually(lambda: ctx.last_compaction("p") and ctx.summary("p"))
        report = ctx.last_compaction("p")
        limit = ctx._state.peek("p").sections["dialogue"].summary_limit
        assert size(ctx.summary("p")) <= limit  # the over-limit summary was clipped
        assert report.summary_bytes == size(ctx.summary("p"))
        assert sum(size(b.text) for b in ctx.blocks("p")) <= 1000
    first = compactions(llm)[0]
    assert size(first.messages[1].content) <= 800 + 300  # entries within the input budget
    assert report.input_bytes <= 800


async def test_conversation_request_fits_the_dialogue_budget(wide: str) -> None:
    llm = ScriptedLLM(default="OK " + wide)
    ctx = manager(llm, dialogue_budget_bytes=600, compaction_input_budget_bytes=556)
    conversation = Conversation(llm, context=ctx)
    for i in range(10):
        await ctx.record_exchange("p", f"Q{i} " + wide * 50, f"A{i} " + wide * 20)
    context = conversation.request_messages("p", "Where?")[1].content
    dialogue = context.split("Current time:")[0]
    assert size(dialogue) <= 600 + 200, size(dialogue)  # the budget plus headings
    assert "A9" in dialogue
