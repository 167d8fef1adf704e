"""Conversation and compaction on the real default model (SmolLM2-135M).

Budgets are small so the tiny model compacts often and the module stays fast.
"""

from __future__ import annotations

import os
import tracemalloc
from functools import partial

import anyio
import pytest
from conversation_helpers import Clock, eventually

from edge.conversation import (
    ContextConfig,
    ContextManager,
    Conversation,
    ConversationConfig,
    MemoryRecallIndex,
)
from edge.llm import LlamaCppLLM
from edge.routing import AgentTurn

pytestmark = [pytest.mark.anyio, pytest.mark.model]

# Most of the long session's time is compaction (about 4 s a summary request on 2 cores),
# so `make test` runs a short one and `make soak` a long one (EDGE_LONG_SESSION_EXCHANGES).
SESSION_EXCHANGES = int(os.environ.get("EDGE_LONG_SESSION_EXCHANGES", "30"))  # soak: 120
QUIET_EVERY = 6  # exchanges between quiet moments (a compaction pass and the checks)
RECALL_CAP = 10  # statements the recall index keeps (about one an exchange before the cap)
STEADY_FROM = 12  # the recall index is full (its statement cap) by here: memory is flat from here
SESSION_START_US = 1_790_000_000_000_000  # the pinned clock's first reading (1 ms a reading)

BUDGETS = {
    "dialogue_budget_bytes": 1_200,
    "topic_budget_bytes": {"notes": 600, "window": 300},
    "compaction_input_budget_bytes": 900,
}

EXCHANGES = (  # natural, short: the 135M model echoes terse list-like input instead
    ("Where did I leave sample {i}?", "Sample {i} is in rack {r}."),
    ("Start a timer for {r} minutes.", "Timer set for {r} minutes."),
    ("Who booked microscope {r}?", "Alex booked it for run {i}."),
    ("Log that plate {i} looks cloudy.", "Logged: plate {i} looks cloudy."),
)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def llm():  # type: ignore[no-untyped-def]
    model = LlamaCppLLM(n_ctx=2048, temperature=0.0, n_threads=2, background_chunk_tokens=64)
    await model.load()
    yield model
    await model.close()


def idle(ctx: ContextManager) -> bool:
    return ctx.pending() == 0 and not ctx._jobs._running


async def nothing() -> None:
    return None


async def test_long_session_compacts_within_budgets_and_window(llm: LlamaCppLLM) -> None:
    """SESSION_EXCHANGES exchanges (30 in `make test`, 120 in `make soak`) with a note each
    and a window update every 20, checked at a quiet moment every QUIET_EVERY: the budgets
    and the model's window hold, every section compacts, failed summaries never come three
    in a row, and memory is flat over the quiet moments after the recall index is full
    (three of them in `make test`). The clock is pinned, as in
    test_conversation_memory_model.py: the prompt shows the minute, and with the wall clock
    each run showed the model a different prompt (and took a different time)."""
    reports = []
    clock = Clock(SESSION_START_US, step_us=1_000)
    ctx = ContextManager(
        llm,
        ContextConfig(
            summary_context_topics=("window",),
            incremental_context_topics=("notes",),
            compaction_quiet_s=0,
            **BUDGETS,
        ),
        clock=clock,
        # the whole-conversation recall index is bounded by its statement cap, reached here
        # before STEADY_FROM, where the flatness check starts
        recall_index=MemoryRecallIndex(max_statements=RECALL_CAP),
    )
    ctx.add_hook("post_compact", reports.append)
    conversation = Conversation(
        llm, context=ctx, config=ConversationConfig(max_tokens=12), clock=clock
    )
    last_asked = (SESSION_EXCHANGES - 1) // len(EXCHANGES) * len(EXCHANGES)  # a "Where ...?"
    tracemalloc.start()
    samples = []
    try:
        async with ctx:
            for i in range(SESSION_EXCHANGES):
                user, assistant = EXCHANGES[i % len(EXCHANGES)]
                await ctx.record_exchange(
                    "p", user.format(i=i, r=i % 7), assistant.format(i=i, r=i % 7)
                )
                await ctx.update("p", "notes", f"Fridge {i % 4} at {i % 7} C.")
                if i % 20 == 0:
                    await ctx.update("p", "window", f"Panel {i} open.")
                if i % QUIET_EVERY == QUIET_EVERY - 1:
                    # a quiet moment: the backlog compacts (a failed summary request stalls
                    # its section until the next entry, so each pause retries it)
                    await eventually(lambda: idle(ctx), 240)
                    for section, budget in ctx.budgets.items():
                        used = sum(
                            len(b.text.encode()) for b in ctx.blocks("p") if b.section == section
                        )
                        assert used <= budget, section
                    messages = conversation.request_messages("p", "Where?")
                    tokens = llm.count_tokens(llm.format_chat(messages))
                    assert tokens + 12 <= llm.context_length
                    samples.append((i, manager_memory()))
            result = await conversation.answer(
                AgentTurn("p", "t", f"Where did I leave sample {last_asked}?"), started=nothing
            )
            assert result.text
            # compacted entries are gone; a failing backlog is capped at 8 budgets a section
            stored = ctx._state.peek("p").sections
            assert all(s.pending_bytes <= 8 * s.budget for s in stored.values())
    finally:
        tracemalloc.stop()
    # the budgets above held because compaction worked, not because entries were dropped:
    # every section compacted successfully, and a failed summary request (kept, retried)
    # never came more than `compaction_failure_limit` - 1 times in a row
    ok = [r for r in reports if r.ok]
    # (a summary topic such as "window" never compacts: each update replaces its state)
    assert {r.section for r in ok} >= {"dialogue", "notes"}, [r.reason for r in reports]
    for section in ("dialogue", "notes"):
        failed_in_a_row = 0
        for report in (r for r in reports if r.section == section):
            failed_in_a_row = 0 if report.ok else failed_in_a_row + 1
            assert failed_in_a_row < 3, [(r.section, r.reason) for r in reports]
    # flat: what the manager holds stops growing once sections reach steady state
    steady = [held for i, held in samples if i >= STEADY_FROM]
    assert len(steady) >= 3 and max(steady) - steady[0] < 64 * 1024, samples


def manager_memory() -> int:
    """Bytes allocated by edge.conversation code and still held (the KV store's states,
    bounded by its own budget, are excluded)."""
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(True, "*edge/conversation/*")]
    )
    return sum(stat.size for stat in snapshot.statistics("filename"))


async def test_answer_during_compaction_starts_without_waiting(llm: LlamaCppLLM) -> None:
    reports = []
    ctx = ContextManager(
        llm,
        ContextConfig(
            compaction_quiet_s=0, dialogue_budget_bytes=1_200, compaction_input_budget_bytes=900
        ),
    )
    ctx.add_hook("post_compact", reports.append)
    conversation = Conversation(llm, context=ctx, config=ConversationConfig(max_tokens=8))
    for i in range(9):
        await ctx.record_exchange(
            "a",
            f"Please remember that box {i} holds part {i * 3}.",
            f"Noted: box {i} holds part {i * 3}.",
        )
    async with ctx, anyio.create_task_group() as tg:
        await eventually(lambda: ctx._jobs.running("a") and llm.scheduler._busy, 30)
        assert not reports  # the compaction holds the model now
        tg.start_soon(
            partial(conversation.answer, AgentTurn("b", "t1", "Say hello."), started=nothing)
        )
        await eventually(
            lambda: (
                conversation.last_metrics("b") is not None
                and conversation.last_metrics("b").total_s is not None
            ),
            60,
        )
        metrics = conversation.last_metrics("b")
        await eventually(lambda: bool(reports), 240)
    # the answer preempted the compaction (an event), and waited for a small part of the
    # compaction's own duration (a ratio measured in this run, not an absolute time)
    attempt = reports[0].attempts[0]
    assert attempt.metrics is not None and attempt.metrics["preemptions"] >= 1
    assert metrics.queue_wait_s is not None
    assert metrics.queue_wait_s < reports[0].duration_s / 2, (metrics, reports[0].duration_s)
