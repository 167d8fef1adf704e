"""Rolling compaction with a scripted model: triggers, the situation table, idle batching,
re-warming, hooks, clear and close during compaction."""

from __future__ import annotations

import asyncio
from functools import partial

import anyio
import anyio.lowlevel
import pytest
from conversation_helpers import (
    Clock,
    MovingLLM,
    WarmingLLM,
    compactions,
    eventually,
    is_compaction,
    manager,
    responder,
)

from edge.conversation import SUCCESSOR_KEY, CompactionPrompts, CompactionReport, CompactionRequest
from edge.llm import Priority, ScriptedLLM, ScriptedReply

pytestmark = pytest.mark.anyio

SMALL = {"dialogue_budget_bytes": 1000, "compaction_input_budget_bytes": 800}


def label(i: int) -> str:
    """A letters-only label: digits in a statement are details a summary must keep."""
    return "q" + "".join(chr(97 + int(d)) for d in str(i))


async def fill(ctx, participant: str = "p", n: int = 6, size: int = 100, start: int = 0) -> None:
    for i in range(start, start + n):
        await ctx.record_exchange(participant, f"{label(i)} " + "w" * size, f"a{i}")


def idle(ctx) -> bool:
    return ctx.pending() == 0 and not ctx._jobs._running


async def test_compaction_starts_above_half_the_budget() -> None:
    llm = ScriptedLLM(responder("Short summary."))
    async with manager(llm, **SMALL) as ctx:
        await fill(ctx, n=4, size=80)  # 4 x 116 bytes: under 500
        await anyio.wait_all_tasks_blocked()  # the worker has looked and gone back to waiting
        assert compactions(llm) == []
        await fill(ctx, n=1, start=4, size=80)  # over half
        await eventually(lambda: idle(ctx) and compactions(llm))
        (request,) = compactions(llm)
        assert request.priority is Priority.BACKGROUND
        blocks = ctx.blocks("p")
        assert blocks[0].kind == "summary" and "Short summary." in blocks[0].text
        # the newest exchange always stays verbatim
        assert [b.kind for b in blocks] == ["summary", "exchange"] and "a4" in blocks[1].text
        report = ctx.last_compaction("p")
        assert report.ok and report.method == "llm" and report.entries_compacted == 4


async def test_summary_limit_and_prompt_additions() -> None:
    prompts = CompactionPrompts(dialogue="KEEP THE DOG'S NAME.")
    llm = ScriptedLLM(responder("S."))
    async with manager(llm, compaction_prompts=prompts, **SMALL) as ctx:
        await fill(ctx)
        await eventually(lambda: compactions(llm))
    system = compactions(llm)[0].messages[0].content
    assert system.startswith("KEEP THE DOG'S NAME.")
    assert "under 250 characters" in system and "plain text" in system


async def test_over_limit_summary_is_shortened_once() -> None:
    replies = iter(["long " * 100, "Shorter."])
    llm = ScriptedLLM(responder(lambda m: next(replies)))
    async with manager(llm, **SMALL) as ctx:
        await fill(ctx)
        await eventually(lambda: idle(ctx) and ctx.last_compaction("p"))
        assert len(compactions(llm)) == 2
        assert ctx.summary("p") == "Shorter."
        assert [a.outcome for a in ctx.last_compaction("p").attempts] == ["over_limit", "ok"]


@pytest.mark.parametrize("second", ["still long " * 60, ScriptedReply("x " * 40, "length")])
async def test_still_too_long_or_cut_off_shortening_clips(second) -> None:
    replies = iter(["START " + "long " * 100 + "end", second])  # no made-up name: see memory
    llm = ScriptedLLM(responder(lambda m: next(replies)))
    async with manager(llm, **SMALL) as ctx:
        await fill(ctx)
        await eventually(lambda: idle(ctx) and ctx.last_compaction("p"))
        summary = ctx.summary("p")
        assert ctx.last_compaction("p").method == "clip"
    assert len(summary.encode()) <= 250 and "[…]" in summary
    if isinstance(second, ScriptedReply):
        assert summary.startswith("START") and summary.endswith("end")


FAILURES = {
    "empty": "",
    "length": ScriptedReply("cut off", "length"),
    "error": ScriptedReply("a b c", fail_after=1),
}


@pytest.mark.parametrize("kind", FAILURES)
async def test_failed_summary_request_keeps_the_entries_until_the_next_one(kind) -> None:
    """The issue's reproduction: a failed request (empty, cut off, an error) deletes
    nothing; it is retried after the section's next entry."""
    llm = ScriptedLLM(lambda m: FAILURES[kind])
    sizes = {"dialogue_budget_bytes": 800, "compaction_input_budget_bytes": 1000}
    async with manager(llm, **sizes) as ctx:
        for i in range(3):
            await ctx.record_exchange("p", f"X{i:02d} " + "lorem ipsum " * 12, f"a{i}")
        await eventually(lambda: idle(ctx) and ctx.last_compaction("p"))
        report = ctx.last_compaction("p")
        assert not report.ok and report.method == "llm"
        assert report.reason == f"summary request: {kind}" and report.entries_compacted == 2
        assert ctx.summary("p") == ""
        blocks = ctx.blocks("p")
        assert [b.kind for b in blocks] == ["exchange"] * 3
        assert all(f"X{i:02d} lorem" in blocks[i].text for i in range(3))
        await anyio.wait_all_tasks_blocked()  # the worker has looked and gone back to waiting
        assert len(compactions(llm)) == 1  # not retried until the next entry
        await ctx.record_exchange("p", "X03 " + "lorem ipsum " * 12, "a3")
        await eventually(lambda: idle(ctx) and len(compactions(llm)) == 2)
        assert len(ctx.blocks("p")) == 4 and ctx.summary("p") == ""


async def test_the_limit_th_failed_request_in_a_row_gives_an_extractive_summary() -> None:
    replies = iter(FAILURES.values())  # empty, then cut off, then an error
    llm = ScriptedLLM(responder(lambda m: next(replies, "Chat.")))
    seen: list[CompactionReport] = []
    async with manager(llm, **SMALL) as ctx:
        ctx.add_hook("post_compact", seen.append)
        await ctx.record_exchange("p", "My locker code is 4711.", "Okay. " + "x" * 200)
        await fill(ctx, n=5, size=80)
        for n in (1, 2):
            await eventually(lambda n=n: idle(ctx) and len(seen) == n)
            assert not seen[-1].ok and ctx.summary("p") == ""
            await fill(ctx, n=1, start=4 + n, size=80)  # the next entry: retried
        await eventually(lambda: idle(ctx) and len(seen) >= 3)
        summary = ctx.summary("p")
    report = seen[2]
    assert report.ok and report.method == "extractive"
    assert report.reason == "3 failed summary requests in a row: empty, length, error"
    assert '"My locker code is 4711."' in summary and "xxxx" not in summary
    assert len(summary.encode()) <= SMALL["dialogue_budget_bytes"] // 4


async def test_a_summary_between_failures_starts_the_count_again() -> None:
    replies = iter(["", "", "Chat.", "", ""])
    llm = ScriptedLLM(responder(lambda m: next(replies)))
    seen: list[CompactionReport] = []
    async with manager(llm, **SMALL) as ctx:
        ctx.add_hook("post_compact", seen.append)
        for i in range(40):  # one entry at a time until five compactions have run
            await fill(ctx, n=1, start=i, size=80)
            await eventually(lambda: idle(ctx))
            if len(seen) == 5:
                break
        assert ctx.summary("p") == "Chat."
    assert [(r.ok, r.method) for r in seen] == [(False, "llm")] * 2 + [(True, "llm")] + [
        (False, "llm")
    ] * 2


@pytest.mark.parametrize("kind", FAILURES)
async def test_a_failure_limit_of_one_falls_back_at_once(kind) -> None:
    llm = ScriptedLLM(responder(lambda m: FAILURES[kind]))
    async with manager(llm, compaction_failure_limit=1, **SMALL) as ctx:
        await ctx.record_exchange("p", "My locker code is 4711.", "Okay.")
        await fill(ctx, n=5, size=80)
        await eventually(lambda: idle(ctx) and ctx.last_compaction("p"))
        report = ctx.last_compaction("p")
        assert report.ok and report.method == "extractive"
        assert report.reason == f"1 failed summary request in a row: {kind}"
        assert '"My locker code is 4711."' in ctx.summary("p")


@pytest.mark.parametrize("limit", [0, -1, 1.5, True])
def test_failure_limit_must_be_a_positive_int(limit) -> None:
    with pytest.raises(ValueError, match="compaction_failure_limit"):
        manager(ScriptedLLM(), compaction_failure_limit=limit)


async def test_skipped_compaction_keeps_entries_and_retries_after_next_entry() -> None:
    decisions = iter([False, None])
    llm = ScriptedLLM(responder("Recovered."))
    async with manager(llm, **SMALL) as ctx:
        ctx.add_hook("pre_compact", lambda request: next(decisions))
        await fill(ctx, size=80)
        await eventually(lambda: idle(ctx) and ctx.last_compaction("p"))
        assert not ctx.last_compaction("p").ok
        assert len(ctx.transcript("p")) == 6 and ctx.summary("p") == ""
        await anyio.wait_all_tasks_blocked()  # the worker has looked and gone back to waiting
        assert len(compactions(llm)) == 0  # skipped, not retried until the next entry
        await fill(ctx, n=1, start=6, size=80)
        await eventually(lambda: idle(ctx) and ctx.summary("p") == "Recovered.")
    assert len(compactions(llm)) == 1


async def test_oversized_entry_is_clipped_in_the_request_and_later_ones_compact() -> None:
    llm = ScriptedLLM(responder("S."))
    async with manager(llm, **SMALL) as ctx:
        await ctx.record_exchange("p", "HEAD " + "h" * 3000 + " TAIL", "big")
        await fill(ctx, n=3, start=1)
        await eventually(lambda: idle(ctx) and ctx.summary("p"))
        assert [b.kind for b in ctx.blocks("p")] == ["summary", "exchange"]
    first = compactions(llm)[0].messages[1].content
    assert "HEAD" in first and "TAIL" in first and "[…]" in first
    assert len(first.encode()) < 1200


async def test_large_backlog_compacts_oldest_first_in_several_requests() -> None:
    llm = ScriptedLLM(responder("S."))
    ctx = manager(llm, **SMALL)
    await fill(ctx, n=12, size=150)  # pending while the manager is not running
    async with ctx:
        await eventually(lambda: idle(ctx) and ctx.summary("p"))
    requests = compactions(llm)
    assert len(requests) >= 3
    assert all(len(r.messages[1].content.encode()) <= 800 + 300 for r in requests)
    assert f"{label(0)} " in requests[0].prompt
    assert label(11) not in "".join(r.prompt for r in requests)
    assert "Summary of the earlier conversation" in requests[1].prompt  # rolling


async def test_incremental_topic_compacts_all_its_entries() -> None:
    llm = ScriptedLLM(responder("Notes so far."))
    async with manager(
        llm,
        incremental_context_topics=("notes",),
        topic_budget_bytes=400,
        dialogue_budget_bytes=400,
        compaction_input_budget_bytes=456,
    ) as ctx:
        for i in range(5):
            await ctx.update("p", "notes", f"note {i} " + "n" * 40)
        await eventually(lambda: idle(ctx) and ctx.summary("p", "notes"))
        assert [b.kind for b in ctx.blocks("p")] == ["summary"]
    assert "these updates from notes" in compactions(llm)[0].prompt


async def test_summary_topics_never_compact() -> None:
    llm = ScriptedLLM(responder("S."))
    async with manager(
        llm,
        summary_context_topics=("w",),
        topic_budget_bytes=300,
        compaction_input_budget_bytes=900,
        dialogue_budget_bytes=1000,
    ) as ctx:
        for i in range(10):
            await ctx.update("p", "w", f"state {i} " + "s" * 200)
        await anyio.wait_all_tasks_blocked()  # the worker has looked and gone back to waiting
    assert compactions(llm) == []


async def test_compaction_waits_for_a_quiet_device() -> None:
    seen: list[tuple[bool, float]] = []  # the device's state when each compaction is asked for

    def summary(messages) -> str:
        own, model = ctx._parts.quiet.own, llm.activity
        seen.append((own.busy or model.busy, min(own.idle_for(), model.idle_for())))
        return "S."

    llm = ScriptedLLM(responder(summary))
    ctx = manager(llm, compaction_quiet_s=0.2, **SMALL)
    async with ctx:
        with ctx.answering():
            await fill(ctx)
            await anyio.wait_all_tasks_blocked()  # the worker waits instead of compacting
            assert compactions(llm) == []  # an answer is in flight
        with llm.activity.interactive():  # the model is busy with someone else
            await anyio.wait_all_tasks_blocked()
            assert compactions(llm) == []
        await eventually(lambda: compactions(llm))
    # checked when the request is made, so a slow machine cannot hide an early compaction
    assert seen and all(not busy and quiet >= 0.2 for busy, quiet in seen), seen


async def test_backlog_drains_across_participants_oldest_first() -> None:
    clock = Clock()
    llm = ScriptedLLM(responder("S."))
    ctx = manager(llm, clock, **SMALL)
    for i in range(6):
        clock.advance(1)
        await ctx.record_exchange("early", f"e{i} " + "w" * 100, "a")
    for i in range(6):
        clock.advance(1)
        await ctx.record_exchange("late", f"l{i} " + "w" * 100, "a")
    async with ctx:
        await eventually(lambda: idle(ctx) and ctx.summary("late") and ctx.summary("early"))
    order = ["early" if "e0" in r.prompt else "late" for r in compactions(llm)]
    assert order == ["early", "late"]


def rewarmed_with_summary(llm: WarmingLLM) -> bool:
    return bool(llm.warmed) and "Summary" in llm.warmed[-1][0][1].content


async def test_prefix_is_rewarmed_after_a_summary_changes() -> None:
    llm = WarmingLLM(responder("S."))
    async with manager(llm, **SMALL) as ctx:
        ctx.messages("p", system="SYSTEM", request="q")
        await fill(ctx)
        # a warm after an exchange may come before the compaction: wait for the one after it
        await eventually(lambda: idle(ctx) and ctx.summary("p") and rewarmed_with_summary(llm))
        (messages, key, priority) = llm.warmed[-1]
        assert key == "p" and priority is Priority.BACKGROUND
        assert messages[0].content == "SYSTEM" and "Summary" in messages[1].content
        answer = ctx.messages("p", system="SYSTEM", request="next")
        # the whole context message, current time included (same minute): a cached prefix
        assert "Current time" in messages[1].content
        assert answer[1].content == messages[1].content


async def test_prefix_is_rewarmed_after_each_exchange() -> None:
    llm = WarmingLLM(responder("S."))
    async with manager(llm) as ctx:
        ctx.messages("p", system="SYSTEM", request="q")  # the prompt an answer used
        await ctx.record_exchange("p", "What is the capital of France?", "Paris.")
        await eventually(lambda: idle(ctx) and llm.warmed)
        (messages, key, priority) = llm.warmed[-1]
        assert key == "p" and priority is Priority.BACKGROUND
        assert "capital of France" in messages[1].content  # the new exchange is in it
        answer = ctx.messages("p", system="SYSTEM", request="And of Italy?")
        assert answer[1].content.startswith(messages[1].content)  # a prefix of the next


async def test_a_rewarm_waits_only_a_short_quiet_and_a_compaction_the_whole() -> None:
    """A follow-up a second after the answer should find the prefix warm: the re-warm
    runs after ``rewarm_quiet_s``, while the compaction still waits its longer quiet."""
    llm = MovingLLM(responder("S."))
    async with manager(llm, compaction_quiet_s=30, rewarm_quiet_s=0.05, **SMALL) as ctx:
        ctx.messages("p", system="SYSTEM", request="q")
        await fill(ctx)
        assert ctx.pending()  # a compaction is due
        await eventually(lambda: ("warm", "p") in llm.events, limit_s=10)  # a third of 30 s
        await anyio.sleep(0.2)
        assert llm.events == [("warm", "p")] and ctx.pending()  # no compaction yet
    with pytest.raises(ValueError, match="rewarm_quiet_s"):
        manager(llm, rewarm_quiet_s=-1)


async def test_a_compaction_warms_the_next_prefix_aside_and_hands_it_over() -> None:
    """The participant's current prefix is warmed before their compaction starts (a turn
    during it finds it warm); the compaction warms the prefix its summary gives them under
    a key of its own and hands it over when it commits, so no re-warm follows."""
    llm = MovingLLM(responder("S."))
    async with manager(llm, **SMALL) as ctx:
        ctx.messages("p", system="SYSTEM", request="q")
        await fill(ctx)
        await eventually(lambda: idle(ctx) and ctx.summary("p"))
        successor = SUCCESSOR_KEY + "p"
        assert llm.events[0] == ("warm", "p")  # before the compaction
        assert llm.events[1:] == [
            ("compact", ""),
            ("warm", successor),
            ("move", f"{successor}->p"),
        ]
        assert "Summary" in llm.held["p"] and successor not in llm.held
        assert ctx.messages("p", system="SYSTEM", request="next")[1].content == llm.held["p"]


async def test_a_backlog_drains_without_warms_between_its_steps() -> None:
    """Only the last step of a compaction run warms the prefix it leaves: between steps the
    prefix is in flux, so neither a re-warm nor a successor warm runs there."""
    llm = MovingLLM(responder("S."))
    ctx = manager(llm, **SMALL)
    ctx.messages("p", system="SYSTEM", request="q")
    await fill(ctx, n=20)  # recorded before the worker starts: one run of several steps
    async with ctx:
        await eventually(lambda: idle(ctx) and ctx.summary("p"))
    kinds = [kind for kind, _ in llm.events]
    steps = kinds.count("compact")
    assert steps > 1
    assert kinds == ["warm", *["compact"] * steps, "warm", "move"], llm.events
    assert llm.events[-2] == ("warm", SUCCESSOR_KEY + "p")


async def test_a_clear_during_the_successor_warm_drops_it() -> None:
    llm = MovingLLM(responder("S."), hold=SUCCESSOR_KEY)
    async with manager(llm, **SMALL) as ctx:
        ctx.messages("p", system="SYSTEM", request="q")
        await fill(ctx)
        await eventually(lambda: SUCCESSOR_KEY + "p" in llm.held)
        await ctx.clear("p")
    assert llm.held == {} and not any(kind == "move" for kind, _ in llm.events)


async def test_an_exchange_during_the_compaction_is_warmed_after_the_handover() -> None:
    """A turn recorded while the compaction ran is not in the prefix warmed aside: the
    handover still happens (its start is reused), and what follows (a re-warm, or the next
    step of the drain and its handover) brings the turn into the participant's prefix."""
    llm = MovingLLM(responder("S."), hold=SUCCESSOR_KEY)
    async with manager(llm, **SMALL) as ctx:
        ctx.messages("p", system="SYSTEM", request="q")
        await fill(ctx)
        await eventually(lambda: SUCCESSOR_KEY + "p" in llm.held)
        await ctx.record_exchange("p", "A late question?", "A late answer.")
        llm.release.set()
        await eventually(lambda: idle(ctx) and "late question" in llm.held.get("p", ""))
    moved = llm.events.index(("move", f"{SUCCESSOR_KEY}p->p"))
    assert any(key in ("p", SUCCESSOR_KEY + "p") for kind, key in llm.events[moved + 1 :])


async def test_clear_during_compaction_cancels_it_and_forgets() -> None:
    llm = ScriptedLLM(responder(ScriptedReply("slow summary words", delay_s=0.2)))
    async with manager(llm, **SMALL) as ctx:
        await fill(ctx, "p")
        await fill(ctx, "other", n=1)
        await eventually(lambda: compactions(llm))
        await ctx.clear("p")
        assert compactions(llm)[0].cancelled and ctx.participants() == ["other"]
        assert ctx.blocks("p") == []
        await ctx.record_exchange("p", "new", "start")  # a fresh context
        assert len(ctx.blocks("p")) == 1


async def test_close_during_compaction_cancels_and_drops() -> None:
    llm = ScriptedLLM(responder(ScriptedReply("slow summary words", delay_s=0.2)))
    ctx = manager(llm, **SMALL)
    async with ctx:
        await fill(ctx)
        await eventually(lambda: compactions(llm))
        await ctx.close()
        assert compactions(llm)[0].cancelled and ctx.participants() == []
        assert not await ctx.record_exchange("p", "u", "a")


async def _in_a_task_group(call) -> None:
    async with anyio.create_task_group():
        await call()


async def _from_another_task(call) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(call)


async def _under_move_on_after(call) -> None:
    with anyio.move_on_after(5):
        await call()


async def _in_a_cancelled_scope(call) -> None:
    with anyio.CancelScope() as scope:
        scope.cancel()
        await call()


WHERE = [_in_a_task_group, _from_another_task, _under_move_on_after, _in_a_cancelled_scope]


async def test_close_in_a_task_group_inside_async_with() -> None:
    """The issue's reproduction: no "exit a cancel scope that isn't the current one"."""
    async with manager(ScriptedLLM()) as ctx:
        async with anyio.create_task_group():
            await ctx.close()
    assert ctx.closed


@pytest.mark.parametrize("where", WHERE, ids=lambda f: f.__name__.strip("_"))
async def test_close_works_from_any_task_and_cancel_scope(where) -> None:
    llm = ScriptedLLM(responder(ScriptedReply("slow summary words", delay_s=0.2)))
    async with manager(llm, **SMALL) as ctx:
        await fill(ctx)
        await eventually(lambda: compactions(llm))
        await where(ctx.close)
        assert compactions(llm)[0].cancelled and ctx.participants() == []
        assert not await ctx.record_exchange("p", "u", "a")  # the body goes on, uncancelled
        await anyio.lowlevel.checkpoint()
        await ctx.close()  # idempotent
    await ctx.close()  # and after the manager's own exit, which was a no-op
    assert ctx.closed and len(compactions(llm)) == 1


@pytest.mark.parametrize("where", WHERE, ids=lambda f: f.__name__.strip("_"))
async def test_clear_works_from_any_task_and_cancel_scope(where, tmp_path) -> None:
    from edge.store import SessionStore

    llm = ScriptedLLM(responder(ScriptedReply("slow summary words", delay_s=0.1)))
    store = SessionStore(tmp_path / "s.sqlite3")  # on disk: its writes run in a thread
    async with manager(llm, store=store, **SMALL) as ctx:
        await fill(ctx)
        await fill(ctx, "other", n=1)
        await eventually(lambda: compactions(llm))
        await where(partial(ctx.clear, "p"))
        assert compactions(llm)[0].cancelled and ctx.participants() == ["other"]
        assert not ctx.store.exists("p") and ctx.blocks("p") == []
        await where(partial(ctx.clear, "p"))  # idempotent
        await fill(ctx)  # compaction goes on for the new context
        await eventually(lambda: idle(ctx) and ctx.summary("p") == "slow summary words")


async def test_close_without_async_with_from_another_task() -> None:
    llm = ScriptedLLM(responder(ScriptedReply("slow summary words", delay_s=0.2)))
    ctx = manager(llm, **SMALL)
    await fill(ctx)
    await eventually(lambda: compactions(llm))
    await _from_another_task(ctx.close)
    assert compactions(llm)[0].cancelled and ctx.participants() == []
    await _in_a_task_group(ctx.close)


async def test_hooks_can_supply_or_skip_and_see_results() -> None:
    llm = ScriptedLLM(responder("model summary"))
    seen: list[CompactionReport] = []
    requests: list[CompactionRequest] = []
    decisions = iter([False, "hook summary"])

    async def pre(request: CompactionRequest):
        requests.append(request)
        return next(decisions)

    async with manager(llm, **SMALL) as ctx:
        ctx.add_hook("pre_compact", pre)
        ctx.add_hook("post_compact", seen.append)
        await fill(ctx)
        await eventually(lambda: idle(ctx) and seen)
        assert seen[0].method == "cancelled" and not seen[0].ok
        await fill(ctx, n=1, start=6)
        await eventually(lambda: idle(ctx) and len(seen) == 2)
        assert seen[1].method == "hook" and ctx.summary("p") == "hook summary"
    assert compactions(llm) == [] and requests[0].limit_bytes == 250
    with pytest.raises(ValueError, match="unknown hook event"):
        ctx.add_hook("later", pre)  # type: ignore[arg-type]


async def test_compact_on_demand() -> None:
    llm = ScriptedLLM(responder("On demand."))
    ctx = manager(llm, **SMALL)
    await fill(ctx, n=3)
    reports = await ctx.compact("p", keep_last=2)
    assert [r.entries_compacted for r in reports] == [1]
    assert ctx.summary("p") == "On demand." and len(ctx.transcript("p")) == 2
    await ctx.compact("p", summary="Mine.")
    assert ctx.summary("p") == "Mine." and ctx.last_compaction("p").method == "custom"
    assert len(ctx.transcript("p")) == 1  # the newest exchange stays
    with pytest.raises(ValueError, match="not a compacted section"):
        await ctx.compact("p", section="nope")


async def test_long_session_stays_within_every_budget() -> None:
    llm = ScriptedLLM(responder(lambda m: "Summary " + "s" * 300))
    async with manager(
        llm,
        incremental_context_topics=("notes",),
        topic_budget_bytes=1200,
        summary_context_topics=("w",),
        dialogue_budget_bytes=1000,
        compaction_input_budget_bytes=900,
    ) as ctx:
        for i in range(120):
            await ctx.record_exchange("p", f"q{i} " + "w" * (i % 7) * 20, f"a{i}")
            await ctx.update("p", "notes", f"note {i}")
            await ctx.update("p", "w", f"state {i} " + "x" * 500)
            await anyio.lowlevel.checkpoint()
            for section, budget in ctx.budgets.items():
                used = sum(len(b.text.encode()) for b in ctx.blocks("p") if b.section == section)
                assert used <= budget
        await eventually(lambda: idle(ctx))
        assert len(ctx.transcript("p")) < 20
    assert all(
        not is_compaction(r.messages) or r.priority is Priority.BACKGROUND for r in llm.requests
    )


async def test_failing_compaction_never_deletes_stored_entries() -> None:
    """The spec: entries left out of the prompt stay stored until compacted. Memory stays
    bounded (the oldest are only in the store); once the model works again they compact."""
    working = False
    llm = ScriptedLLM(responder("Recovered."))
    budgets = {"dialogue_budget_bytes": 400, "compaction_input_budget_bytes": 456}
    async with manager(llm, keep_transcript=True, **budgets) as ctx:
        ctx.add_hook("pre_compact", lambda request: None if working else False)
        for i in range(100):
            await ctx.record_exchange("p", f"question {i:03d}", f"answer {i:03d}")
            await anyio.lowlevel.checkpoint()
        await eventually(lambda: idle(ctx))
        stored = ctx.transcript("p")
        assert [t.user for t in stored] == [f"question {i:03d}" for i in range(100)]
        section = ctx._state.peek("p").sections["dialogue"]
        assert section.pending_bytes <= 8 * 400 and section.evicted > 0
        assert sum(len(b.text.encode()) for b in ctx.blocks("p")) <= 400
        working = True
        await ctx.record_exchange("p", "question 100", "answer 100")
        await eventually(lambda: idle(ctx) and not ctx.pending())
        view = ctx.store.load("p").view
        assert len(ctx.transcript("p")) == 101 and len(view) < 10
        assert ctx.summary("p") and ctx.last_compaction("p").ok and section.evicted == 0


async def test_spec_usage_without_async_with_compacts() -> None:
    llm = ScriptedLLM(responder("Without async with."))
    ctx = manager(llm, **SMALL)
    await fill(ctx)
    await eventually(lambda: ctx.summary("p") == "Without async with.")
    await ctx.close()
    assert compactions(llm)


@pytest.mark.parametrize("settle", [False, True])
async def test_async_with_after_first_use_takes_over_the_compaction_loop(settle) -> None:
    """Writes before ``async with`` start the loop on first use; entering ``async with``
    then (before or after that loop got going) hands over to it, with no error anywhere."""
    errors: list[BaseException] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: errors.append(context.get("exception")))
    llm = ScriptedLLM(responder("Handed over."))
    ctx = manager(llm, **SMALL)
    await ctx.record_exchange("p", "first words", "ok")
    if settle:
        await anyio.sleep(0.05)  # the first-use loop is running by now
    async with ctx:
        await fill(ctx)
        await eventually(lambda: ctx.summary("p") == "Handed over.")
    await anyio.sleep(0.01)
    assert errors == []
    loop.set_exception_handler(None)


async def test_a_resumed_participant_is_reloaded_from_the_store_and_rewarmed(tmp_path) -> None:
    """After a restart (a new manager on the same store) a returning participant's view
    comes back and their prompt prefix is warmed in the background before their turn."""
    from edge.store import SessionStore

    store = SessionStore(tmp_path / "s.sqlite3")
    first = manager(ScriptedLLM(responder("S.")), store=store)
    await first.record_exchange("p", "my badge is 7", "Noted.")
    first.messages("p", system="SYSTEM", request="q")
    before = first.render("p", now_us=0)
    await first.close()
    llm = WarmingLLM(responder("S."))
    async with manager(llm, store=store) as again:
        assert await again.resume("p") and not await again.resume("nobody")
        await eventually(lambda: llm.warmed)
        messages, key, _ = llm.warmed[0]
        assert key == "p" and messages[0].content == "SYSTEM"
        assert "my badge is 7" in messages[1].content
        assert again.render("p", now_us=0) == before
        await again.suspend("p")  # leaves memory, stays stored
        assert "p" not in again.participants() and "my badge is 7" in again.render("p")


async def test_a_busy_device_compacts_without_the_model_instead_of_shifting_the_view() -> None:
    """Turns back to back leave compaction no quiet period: when the dialogue overflows
    its budget, its older exchanges are compacted at once without the model (the
    participant's statements verbatim), instead of being left out of a view whose start
    then shifts, and is evaluated anew, on every turn."""
    llm = ScriptedLLM(responder("S."))
    async with manager(llm, compaction_quiet_s=30, **SMALL) as ctx:
        starts: list[str] = []
        for i in range(16):
            with ctx.answering():
                pass  # an answer just ended: the device is not quiet
            await ctx.record_exchange("p", f"{label(i)} is on shelf {i}. " + "w" * 80, "ok")
            view = ctx.render("p")
            assert len(view.encode()) <= 1000 + 200  # the budget, plus the time line
            assert all(not b.clipped for b in ctx.blocks("p"))
            starts.append(view[:60])
        assert compactions(llm) == []  # the model was never asked
        report = ctx.last_compaction("p")
        assert report.ok and report.method == "extractive"
        assert "shelf 15" in ctx.render("p") and ctx.summary("p").startswith("The user said:")
        # the view's start changed only when a compaction rewrote it, not on every turn
        assert len(set(starts)) <= 6, starts
