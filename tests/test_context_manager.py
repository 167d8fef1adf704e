"""ContextManager without compaction: configuration, rendering, identity, lifecycle."""

from __future__ import annotations

import hashlib
import itertools
import logging
import time
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from conversation_helpers import SECOND, T0, Clock, eventually, manager

import edge.conversation._context as context_module
from edge.conversation import ContextConfig, ContextManager, ConversationContextUpdate
from edge.interaction import ConversationContextUpdate as InteractionUpdate
from edge.llm import ScriptedLLM
from edge.routing import AgentExchange
from edge.runtime import Agent, AgentRuntime, Topic
from edge.store import Record, SessionStore

pytestmark = pytest.mark.anyio


def test_reexports_the_interaction_update() -> None:
    assert ConversationContextUpdate is InteractionUpdate


def test_defaults_follow_the_spec() -> None:
    ctx = ContextManager(ScriptedLLM(), incremental_context_topics=("notes",))
    assert ctx.budgets == {"dialogue": 8000, "notes": 4000}
    assert ctx.compaction_input_budget_bytes == 12000


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"compaction_input_budget_bytes": 4255}, "at least half the largest section budget"),
        ({"dialogue_budget_bytes": 0}, "dialogue_budget_bytes"),
        ({"incremental_context_topics": ("a",), "topic_budget_bytes": {"b": 10}}, "missing"),
        ({"summary_context_topics": ("a",), "incremental_context_topics": ("a",)}, "both"),
        ({"summary_context_topics": ("dialogue",)}, "reserved"),
        ({"summary_context_topics": ("a", "a")}, "twice"),
    ],
)
def test_bad_configuration_is_named(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ContextManager(ScriptedLLM(), ContextConfig(**kwargs))


def test_input_budget_rule_uses_the_largest_compacted_section() -> None:
    ContextConfig(dialogue_budget_bytes=8000, compaction_input_budget_bytes=4256)
    with pytest.raises(ValueError, match="5256"):
        ContextConfig(
            incremental_context_topics=("n",),
            topic_budget_bytes={"n": 10_000},
            compaction_input_budget_bytes=5000,
        )


def test_a_single_topic_name_string_is_refused() -> None:
    with pytest.raises(TypeError, match="not one string"):
        ContextManager(ScriptedLLM(), summary_context_topics="window")


async def test_layout_summaries_first_entries_in_time_order_time_last() -> None:
    clock = Clock()
    ctx = manager(
        ScriptedLLM(),
        clock,
        summary_context_topics=("window",),
        incremental_context_topics=("notes",),
    )
    await ctx.record_exchange("p", "Hi", "Hello", timestamp_us=T0 + 10 * SECOND)
    await ctx.update("p", "notes", "rotor ordered", timestamp_us=T0 + 5 * SECOND)
    await ctx.update("p", "window", "centrifuge open", timestamp_us=T0 + 20 * SECOND)
    part = ctx._state.peek("p")
    part.sections["dialogue"].summary = "They met."
    part.sections["dialogue"].span = (T0 - 100 * SECOND, T0 - 50 * SECOND)
    blocks = ctx.blocks("p")
    assert [b.kind for b in blocks] == ["summary", "update", "exchange", "state"]
    assert blocks[0].text.startswith("Summary of the earlier conversation (22:11 to 22:12)")
    assert blocks[1].text == "[22:13] notes: rotor ordered"
    assert blocks[2].text == "[22:13] User: Hi\nAssistant: Hello"
    assert blocks[3].text == "[22:13] window (latest): centrifuge open"
    clock.advance(60)
    text = ctx.render("p")
    assert text.endswith("Current time: Tuesday 14 November 2023, 22:14")
    assert text.index("Summary") < text.index("rotor") < text.index("Hello") < text.index("open")


async def test_messages_are_three_with_a_stable_system_prompt() -> None:
    clock = Clock()
    ctx = manager(ScriptedLLM(), clock)
    first = ctx.messages("p", system="SYS", request="Q1")
    await ctx.record_exchange("p", "Q1", "A1")
    clock.advance(5)
    second = ctx.messages("p", system="SYS", request="Q2")
    assert [m.role for m in first] == ["system", "user", "user"]
    assert first[0] == second[0]
    assert second[2].content == "Q2"
    assert "A1" in second[1].content and "Current time" in second[1].content


async def test_summary_topic_replaces_and_leaves_other_topics() -> None:
    ctx = manager(
        ScriptedLLM(),
        summary_context_topics=("window", "door"),
        incremental_context_topics=("notes",),
    )
    await ctx.update("p", "notes", "n1")
    await ctx.update("p", "door", "closed")
    await ctx.update("p", "window", "w1")
    await ctx.update("p", "window", "w2")
    texts = [b.text for b in ctx.blocks("p")]
    assert any("w2" in t for t in texts) and not any("w1" in t for t in texts)
    assert any("closed" in t for t in texts) and any("n1" in t for t in texts)


async def test_oversized_summary_update_keeps_start_and_end_within_budget() -> None:
    ctx = manager(ScriptedLLM(), summary_context_topics=("window",), topic_budget_bytes=300)
    await ctx.update("p", "window", "START " + "x" * 2000 + " END")
    (block,) = ctx.blocks("p")
    assert len(block.text.encode()) <= 300
    assert "START" in block.text and "END" in block.text and "[…]" in block.text


async def test_unknown_topic_and_bad_input_are_named() -> None:
    ctx = manager(ScriptedLLM(), incremental_context_topics=("notes",))
    with pytest.raises(ValueError, match="unknown context topic 'nope'"):
        await ctx.update("p", "nope", "x")
    with pytest.raises(ValueError, match="participant_id"):
        await ctx.record_exchange("", "u", "a")


async def test_over_budget_section_leaves_out_oldest_and_warns(caplog) -> None:
    ctx = manager(ScriptedLLM(), dialogue_budget_bytes=400, compaction_input_budget_bytes=456)
    for i in range(8):
        await ctx.record_exchange("p", f"question {i} " + "q" * 40, f"answer {i}")
    with caplog.at_level(logging.WARNING):
        blocks = ctx.blocks("p")
    assert sum(len(b.text.encode()) for b in blocks) <= 400
    assert "answer 7" in blocks[-1].text and "answer 0" not in "".join(b.text for b in blocks)
    assert "over its 400-byte budget" in caplog.text
    assert len(ctx.transcript("p")) == 8  # still stored until compacted


async def test_one_huge_exchange_keeps_its_start_and_end() -> None:
    ctx = manager(ScriptedLLM(), dialogue_budget_bytes=400, compaction_input_budget_bytes=456)
    await ctx.record_exchange("p", "BEGIN " + "z" * 5000, "FINISH")
    (block,) = ctx.blocks("p")
    assert block.clipped and len(block.text.encode()) <= 400
    assert "BEGIN" in block.text and "FINISH" in block.text


async def test_other_sections_unaffected_by_an_over_budget_one() -> None:
    ctx = manager(
        ScriptedLLM(),
        dialogue_budget_bytes=300,
        compaction_input_budget_bytes=406,
        incremental_context_topics=("notes",),
        topic_budget_bytes=300,
    )
    await ctx.update("p", "notes", "keep me")
    for i in range(10):
        await ctx.record_exchange("p", f"q{i} " + "y" * 60, "a")
    assert any(b.text.endswith("keep me") for b in ctx.blocks("p"))


async def test_exchange_identity_is_remembered() -> None:
    ctx = manager(ScriptedLLM())
    assert await ctx.record_exchange("p", "u", "a", exchange_id=1)
    assert not await ctx.record_exchange("p", "u", "a", exchange_id=1)
    assert await ctx.record_exchange("p", "u", "a", exchange_id=2)  # same words, new turn
    assert not await ctx.record_exchange("p", "u", "a", exchange_id=1)


async def test_reconcile_records_only_the_unknown_contiguous_tail() -> None:
    ctx = manager(ScriptedLLM())
    history = [AgentExchange("a", "1"), AgentExchange("b", "2"), AgentExchange("c", "3")]
    assert await ctx.reconcile("p", history[:2], exchange_ids=(10, 11)) == 2
    assert await ctx.reconcile("p", history, exchange_ids=(10, 11, 12)) == 1
    assert await ctx.reconcile("p", history, exchange_ids=(10, 11, 12)) == 0
    # an unknown exchange before a known one is not replayed
    gap = [AgentExchange("x", "?"), AgentExchange("c", "3"), AgentExchange("d", "4")]
    assert await ctx.reconcile("p", gap, exchange_ids=(99, 12, 13)) == 1
    users = [t.user for t in ctx.transcript("p")]
    assert users == ["a", "b", "c", "d"]


async def test_reconcile_without_ids_matches_content() -> None:
    ctx = manager(ScriptedLLM())
    await ctx.record_exchange("p", "u1", "a1", timestamp_us=T0)
    history = [AgentExchange("u1", "a1"), AgentExchange("u2", "a2")]
    assert await ctx.reconcile("p", history) == 1
    assert await ctx.reconcile("p", history) == 0


async def test_a_write_computes_nothing_from_an_exchanges_words(monkeypatch) -> None:
    """Only an exchange's id is kept as its identity: a write hashes the id, never the
    words, and an exchange without an id is recorded each time it is recorded."""
    hashed: list[bytes] = []
    real = context_module.hashlib.blake2b

    def counting(data: bytes, **kw: Any) -> Any:
        hashed.append(data)
        return real(data, **kw)

    monkeypatch.setattr(context_module, "hashlib", SimpleNamespace(blake2b=counting))
    ctx = manager(ScriptedLLM())
    for _ in range(2):
        assert await ctx.record_exchange("p", "secret words", "more words", timestamp_us=T0)
    assert hashed == []
    assert await ctx.record_exchange("p", "secret words", "more words", exchange_id="turn-1")
    assert len(hashed) == 1 and b"words" not in hashed[0]
    assert [t.user for t in ctx.transcript("p")] == ["secret words"] * 3


async def test_a_store_written_by_an_earlier_version_keeps_its_exchanges_known(
    tmp_path,
) -> None:
    """The identity of an exchange id is the same bytes as earlier versions stored, so an
    existing store's exchanges stay known; the content keys they stored beside it are
    simply never looked up."""
    path = tmp_path / "sessions.sqlite3"
    old = SessionStore(path)
    key = hashlib.blake2b(repr(("id", "turn-1")).encode(), digest_size=8).digest()
    content = hashlib.blake2b(repr(("exchange", "u", "a", T0)).encode(), digest_size=8).digest()
    exchange = Record("exchange", "dialogue", T0, user="u", assistant="a")
    assert old.add_record("p", exchange, [key, content]) is not None
    old.close()
    store = SessionStore(path)
    ctx = manager(ScriptedLLM(), store=store)
    assert not await ctx.record_exchange("p", "u", "a", exchange_id="turn-1")
    history = [AgentExchange("u", "a"), AgentExchange("v", "b")]
    assert await ctx.reconcile("p", history, exchange_ids=("turn-1", "turn-2")) == 1
    assert [t.user for t in ctx.transcript("p")] == ["u", "v"]
    await ctx.close()
    store.close()


async def test_reconcile_knows_a_suspended_participants_exchanges_from_the_store() -> None:
    ctx = manager(ScriptedLLM())
    await ctx.record_exchange("p", "a", "1", exchange_id=10)
    await ctx.suspend("p")
    history = [AgentExchange("a", "1"), AgentExchange("b", "2")]
    assert await ctx.reconcile("p", history, exchange_ids=(10, 11)) == 1
    assert [t.user for t in ctx.transcript("p")] == ["a", "b"]


async def test_subscriber_applies_participant_and_global_updates() -> None:
    ctx = manager(
        ScriptedLLM(), summary_context_topics=("window",), incremental_context_topics=("notes",)
    )
    runtime = AgentRuntime()
    sub = ctx.subscriber()
    assert isinstance(sub, Agent)
    runtime.register("context", sub)
    notes = Topic("notes", ConversationContextUpdate)
    window = Topic("window", ConversationContextUpdate)
    async with runtime:
        await runtime.publish(
            notes,
            ConversationContextUpdate(text="n1"),
            participant_id="p1",
            timestamp_us=T0 + SECOND,
        )
        await ctx.record_exchange("p2", "hi", "hello")
        await runtime.publish(window, {"text": "everyone"})
    assert [b.timestamp_us for b in ctx.blocks("p1") if b.section == "notes"] == [T0 + SECOND]
    assert any("everyone" in b.text for b in ctx.blocks("p1"))
    assert any("everyone" in b.text for b in ctx.blocks("p2"))


async def test_activity_topics_restart_the_quiet_period_background_work_waits_for() -> None:
    llm = ScriptedLLM(lambda m: "S.")
    ctx = manager(llm, compaction_quiet_s=0.4, dialogue_budget_bytes=400)
    runtime = AgentRuntime()
    speech = Topic("speech", ConversationContextUpdate)
    runtime.register("context", ctx.subscriber(activity_topics=(speech,)))
    async with runtime, ctx:
        for i in range(12):  # a compaction is due: it waits for 0.4 s of quiet
            await ctx.record_exchange("p", f"question {i} " + "x" * 30, "answer")
        for _ in range(10):  # someone talking: a message every 0.1 s
            before = time.monotonic()
            await runtime.publish(speech, {"text": "partial"}, participant_id="q")
            assert ctx._parts.quiet.own.idle_for() <= time.monotonic() - before  # restarted by it
            await anyio.sleep(0.1)
        assert not llm.requests  # nothing started while they talked
        await eventually(lambda: bool(llm.requests), limit_s=5)  # then it runs


async def test_clear_is_idempotent_and_leaves_others() -> None:
    ctx = manager(ScriptedLLM())
    await ctx.record_exchange("p1", "u", "a")
    await ctx.record_exchange("p2", "u", "a")
    await ctx.clear("p1")
    await ctx.clear("p1")
    assert ctx.blocks("p1") == [] and len(ctx.blocks("p2")) == 1
    # a reused id starts fresh, and may record the same exchange again
    assert await ctx.record_exchange("p1", "u", "a")


async def test_close_drops_later_writes() -> None:
    ctx = manager(ScriptedLLM(), incremental_context_topics=("notes",))
    await ctx.record_exchange("p", "u", "a")
    await ctx.close()
    assert not await ctx.record_exchange("p", "u2", "a2")
    await ctx.update("p", "notes", "late")
    assert ctx.blocks("p") == [] and ctx.participants() == []


async def test_save_and_load_round_trip(tmp_path) -> None:
    clock = Clock()
    ctx = manager(ScriptedLLM(), clock, incremental_context_topics=("notes",), keep_transcript=True)
    await ctx.record_exchange("p", "u0", "a0", exchange_id="turn-0")
    await ctx.record_exchange("p", "u", "a", exchange_id="turn-1")
    await ctx.update("p", "notes", "n")
    await ctx.compact("p", section="dialogue", summary="Earlier.")
    ctx.messages("p", system="SYS", request="q")
    path = tmp_path / "ctx.json"
    ctx.save(path)
    other = manager(
        ScriptedLLM(), clock, incremental_context_topics=("notes",), keep_transcript=True
    )
    assert await other.load(path) == ["p"]
    assert other.render("p") == ctx.render("p")
    assert len(other.transcript("p")) == 3
    assert not await other.record_exchange("p", "u", "a", exchange_id="turn-1")
    # a manager without the topic drops it
    plain = manager(ScriptedLLM(), clock)
    await plain.load(path)
    assert all(b.section == "dialogue" for b in plain.blocks("p"))
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="not a saved context"):
        await plain.load(bad)


async def test_over_budget_prefix_stays_stable_for_several_turns() -> None:
    ctx = manager(ScriptedLLM(), dialogue_budget_bytes=800, compaction_input_budget_bytes=656)
    firsts = []
    for i in range(40):
        await ctx.record_exchange("p", f"question {i:02d}", f"answer {i:02d}")
        blocks = ctx.blocks("p")
        assert sum(len(b.text.encode()) for b in blocks) <= 800
        firsts.append(blocks[0].text)
    over = firsts[20:]
    changes = sum(1 for a, b in itertools.pairwise(over) if a != b)
    assert changes <= len(over) // 3  # not a new prefix on every turn


class ForgettingLLM(ScriptedLLM):
    """A scripted model that records the cache keys it is told to forget."""

    def __init__(self) -> None:
        super().__init__()
        self.forgotten: list[str] = []

    async def forget_cache(self, *keys: str) -> None:
        self.forgotten.extend(keys)


async def test_clear_drops_the_participants_model_state_and_suspend_keeps_it() -> None:
    from edge.decisions import LocalDecisionService

    llm = ForgettingLLM()
    ctx = ContextManager(llm)
    await ctx.record_exchange("p", "My locker code is 4711.", "Noted.")
    await ctx.suspend("p")
    assert llm.forgotten == []  # a reconnect reuses the warm prefix
    await ctx.clear("p")
    await LocalDecisionService(llm).forget("p")
    assert llm.forgotten == ["p", "decisions:p"]


def test_the_configuration_is_one_frozen_checked_value() -> None:
    from dataclasses import FrozenInstanceError

    config = ContextConfig(incremental_context_topics=["notes"], topic_budget_bytes={"notes": 3000})
    assert config.incremental_context_topics == ("notes",)
    assert config.budgets == {"dialogue": 8000, "notes": 3000}
    with pytest.raises(FrozenInstanceError):
        config.dialogue_budget_bytes = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.topic_budget_bytes["notes"] = 1  # type: ignore[index]
    with pytest.raises(ValueError, match="at least half the largest section budget"):
        config.with_options(compaction_input_budget_bytes=100)
    with pytest.raises(TypeError, match="unknown context manager option"):
        ContextManager(ScriptedLLM(), config, dialogue_bytes=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unknown context manager option"):
        config.with_options(dialogue_bytes=1)
    with pytest.raises(TypeError, match="set the other fields in its ContextConfig"):
        ContextManager(ScriptedLLM(), dialogue_budget_bytes=6000)  # type: ignore[call-arg]
    # the spec's keywords (the topic lists) apply over the configuration, which is unchanged
    ctx = ContextManager(
        ScriptedLLM(),
        config.with_options(topic_budget_bytes=3000),
        summary_context_topics=("window",),
    )
    assert ctx.budgets == {"dialogue": 8000, "window": 3000, "notes": 3000} and ctx.config.rewarm
    assert config.summary_context_topics == ()


def test_the_compaction_input_rule_is_one_function_for_the_device_and_the_manager() -> None:
    from edge.conversation import COMPACTION_RESERVE_BYTES, least_compaction_input
    from edge.device import BudgetError, derive_for_profile, load_profiles

    assert least_compaction_input(8000) == 4000 + COMPACTION_RESERVE_BYTES == 4256
    profile = next(iter(load_profiles().values()))
    budgets = derive_for_profile(profile)
    largest = max(budgets.dialogue_budget_bytes, budgets.topic_budget_bytes)
    least = least_compaction_input(largest)
    low = profile.model_copy(
        update={
            "budgets": profile.budgets.model_copy(
                update={"compaction_input_budget_bytes": least - 1}
            )
        }
    )
    with pytest.raises(BudgetError, match=f"plus {COMPACTION_RESERVE_BYTES} \\({least} bytes\\)"):
        derive_for_profile(low)


async def test_the_join_warmer_warms_through_the_managers_prefix_owner() -> None:
    from conversation_helpers import WarmingLLM

    from edge.conversation import SYSTEM_PROMPT_KEY
    from edge.interaction import PARTICIPANT_JOINED_TOPIC, ParticipantJoined

    llm = WarmingLLM()
    ctx = manager(llm)
    warmer = ctx.prefix_warmer(lambda: "You are helpful.")
    runtime = AgentRuntime()
    runtime.register("warmer", warmer)
    async with warmer, runtime:
        await warmer.warm_shared()
        await runtime.publish(PARTICIPANT_JOINED_TOPIC, ParticipantJoined(), participant_id="p")
        await eventually(lambda: warmer.warmed == ["p"])
    assert [(m[0].content, key) for m, key, _ in llm.warmed] == [
        ("You are helpful.", SYSTEM_PROMPT_KEY),
        ("You are helpful.", "p"),
        ("You are helpful.", "p"),  # then their context and the time on top
    ]
    on_top = llm.warmed[2][0]
    assert len(on_top) == 2 and on_top[1].content.startswith("Context:")
    assert "Current time:" in on_top[1].content
    await ctx.close()
