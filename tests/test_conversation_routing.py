"""Conversation as a destination of the real AgentRouter (scripted model and decisions)."""

from __future__ import annotations

import pytest
from conversation_helpers import manager
from routing_helpers import Recorder, ScriptedAgent, turn

from edge.conversation import Conversation
from edge.decisions import ScriptedDecisions
from edge.interaction import Exchange
from edge.llm import ScriptedLLM
from edge.routing import AgentExchange, AgentRouter, AgentTurn, DestinationResult

pytestmark = pytest.mark.anyio


async def test_router_history_from_other_destinations_is_recorded_once() -> None:
    llm = ScriptedLLM(["First answer.", "Second answer.", "Third answer."])
    rec = Recorder()
    notes = ScriptedAgent("notes", rec, results=[DestinationResult("answer", "Saved the note.")])
    context = manager(llm)
    conversation = Conversation(llm, context=context)
    router = AgentRouter(
        {"conversation": conversation, "notes": notes},
        ScriptedDecisions(["notes", "conversation", "conversation", "conversation"]),
        output=rec.output,
        dialogue=conversation.dialogue,  # the context owns the dialogue, as in the service
    )
    try:
        await router.handle(turn("Note: the rotor is cracked", turn_id="t1"))
        await router.handle(turn("Tell me more.", turn_id="t2"))
        await router.handle(turn("Anything else?", turn_id="t3"))
        await router.handle(turn("And now?", turn_id="t4"))
    finally:
        await router.stop()
    users = [t.user for t in context.transcript("p1")]
    assert users == ["Note: the rotor is cracked", "Tell me more.", "Anything else?", "And now?"]
    assert "Saved the note." in llm.requests[0].messages[1].content
    # the router's exchange ids were used: the conversation's own exchanges were not replayed
    assert llm.requests[2].messages[1].content.count("Tell me more.") == 1
    await context.clear("p1")  # what cleanup_participant does after the router's departure
    assert context.blocks("p1") == []


async def test_the_context_owns_the_dialogue_the_router_reads_and_records_through_it() -> None:
    """One owner: an exchange another destination answered is in the context as soon as
    its turn completes (not at the conversation's next answer), the router's history is
    the context's dialogue (a returning participant's included), and a turn's history
    seeds only a participant without any."""
    llm = ScriptedLLM(["Paris."])
    rec = Recorder()
    notes = ScriptedAgent("notes", rec, results=[DestinationResult("answer", "Saved.")])
    context = manager(llm)
    conversation = Conversation(llm, context=context)
    await context.record_exchange("p2", "earlier question", "earlier answer")
    router = AgentRouter(
        {"conversation": conversation, "notes": notes},
        ScriptedDecisions(["notes", "conversation", "conversation"]),
        output=rec.output,
        dialogue=conversation.dialogue,
    )
    try:
        await router.handle(turn("Note: the rotor is cracked", turn_id="t1"))
        assert [(t.user, t.assistant) for t in context.transcript("p1")] == [
            ("Note: the rotor is cracked", "Saved.")
        ]
        assert [e.user for e in router.history("p1")] == ["Note: the rotor is cracked"]
        await router.handle(turn("Capital of France?", turn_id="t2"))
        assert [t.user for t in context.transcript("p1")] == [
            "Note: the rotor is cracked",
            "Capital of France?",
        ]
        seeded = AgentTurn("p2", "t3", "And now?", (AgentExchange("ignored", "x"),))
        await router.handle(seeded)  # p2 has a dialogue already: the seed is not used
        assert [t.user for t in context.transcript("p2")] == ["earlier question", "And now?"]
    finally:
        await router.stop()
    assert notes.turns[0].exchange_id is not None


async def test_each_finished_exchange_is_recorded_once(monkeypatch) -> None:
    """The conversation that owns the router's dialogue records its own exchange; the
    router records only the other destinations' (before, every conversation exchange was
    written twice, the second write a no-op by id)."""
    llm = ScriptedLLM(["Paris.", "Rome."])
    rec = Recorder()
    notes = ScriptedAgent("notes", rec, results=[DestinationResult("answer", "Saved.")])
    context = manager(llm)
    conversation = Conversation(llm, context=context)
    writes: list[tuple[str, object]] = []
    record = context.writer.record

    async def counted(pid: str, exchange: Exchange) -> bool:
        writes.append((exchange.user, exchange.exchange_id))
        return await record(pid, exchange)

    monkeypatch.setattr(context.writer, "record", counted)
    router = AgentRouter(
        {"conversation": conversation, "notes": notes},
        ScriptedDecisions(["conversation", "notes", "conversation"]),
        output=rec.output,
        dialogue=conversation.dialogue,
    )
    try:
        for i, text in enumerate(["Capital of France?", "Note: cracked rotor", "Of Italy?"]):
            await router.handle(turn(text, turn_id=f"t{i}"))
    finally:
        await router.stop()
    assert [user for user, _ in writes] == [
        "Capital of France?",
        "Note: cracked rotor",
        "Of Italy?",
    ]
    assert all(isinstance(exchange_id, str) for _, exchange_id in writes)  # the turns' ids
    assert [(e.user, e.assistant) for e in router.history("p1")] == [
        ("Capital of France?", "Paris."),
        ("Note: cracked rotor", "Saved."),
        ("Of Italy?", "Rome."),
    ]
    assert [e.exchange_id for e in router.history("p1")] == [1, 2, 3]  # the store's records
