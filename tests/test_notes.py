"""The notes agent, alone and behind the router."""

from __future__ import annotations

import pytest

from edge.decisions import LocalDecisionService, ScriptedDecisions
from edge.interaction import VOICE_OUTPUT_TOPIC, ConversationContextUpdate, ResponseOutput
from edge.notes import NOTES_TOPIC, NotesAgent, note_start, split_done
from edge.routing import AgentRouter, AgentTurn, DestinationResult, RoutableAgent
from edge.runtime import Agent, AgentRuntime

pytestmark = pytest.mark.anyio


class Collector(Agent):
    def __init__(self) -> None:
        super().__init__()
        self.notes: list[tuple[str, str | None, str]] = []
        self.said: list[ResponseOutput] = []
        self.add_handler(NOTES_TOPIC, self.on_note)
        self.add_handler(VOICE_OUTPUT_TOPIC, self.on_output)

    async def on_note(self, message: ConversationContextUpdate, ctx) -> None:
        self.notes.append((message.text, ctx.metadata.participant_id, ctx.metadata.source))

    async def on_output(self, message: ResponseOutput, ctx) -> None:
        self.said.append(message)


class Conversation:
    """A stand-in default destination."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def routing_aid(self, participant_id):
        from edge.routing import RoutingAid

        return RoutingAid(
            "conversation",
            "Answers questions and chats about anything.",
            examples=("what is", "tell me about", "how do i"),
        )

    async def admit(self, turn, *, focused):
        from edge.routing import Admission

        return Admission("accept")

    async def answer(self, turn, *, started):
        await started()
        self.queries.append(turn.query)
        return DestinationResult("answer", "an answer")

    async def release(self, participant_id):
        pass


async def started() -> None:
    pass


def t(query: str, n: int = 0, pid: str = "p1") -> AgentTurn:
    return AgentTurn(pid, f"turn-{n}", query, timestamp_us=1000 + n)


def test_phrases() -> None:
    assert note_start("Take a note: the centrifuge needs a new rotor") == (
        "the centrifuge needs a new rotor"
    )
    assert note_start("please note that Bob calls at three") == "Bob calls at three"
    assert note_start("write this down") == ""
    assert note_start("What's the capital of France?") is None
    assert note_start("Do you have notes on that?") is None
    assert split_done("Buy milk. Done.") == ("Buy milk", True)
    assert split_done("That's all") == ("", True)
    assert split_done("the run is done") == ("the run is done", False)


async def test_dictation_takes_focus_until_done_and_publishes_note() -> None:
    runtime = AgentRuntime()
    sink = Collector()
    runtime.register("sink", sink)
    notes = NotesAgent(runtime)
    assert isinstance(notes, RoutableAgent)
    async with runtime:
        assert (await notes.admit(t("take a note"), focused=False)).disposition == "accept"
        r1 = await notes.answer(t("Take a note: the rotor is cracked", 1), started=started)
        assert r1.disposition == "focus"
        assert notes.dictating("p1")
        assert (await notes.admit(t("order a new one"), focused=True)).disposition == "accept"
        r2 = await notes.answer(t("order a new one", 2), started=started)
        assert r2.disposition == "focus"
        r3 = await notes.answer(t("from Beckman. That's all.", 3), started=started)
        assert r3.disposition == "release"
    assert sink.notes == [
        ("Note: the rotor is cracked order a new one from Beckman", "p1", "notes")
    ]
    assert notes.notes("p1") == ("the rotor is cracked order a new one from Beckman",)
    assert [s.request_id for s in sink.said] == ["turn-1", "turn-2", "turn-3"]
    assert {s.source for s in sink.said} == {"notes"}
    assert sink.said[-1].text == "Note saved." and sink.said[-1].timestamp_us == 1003


async def test_declines_unrelated_requests_unless_dictating() -> None:
    notes = NotesAgent(AgentRuntime())
    assert (await notes.admit(t("what's the weather"), focused=False)).disposition == "decline"


async def test_release_mid_note_saves_what_was_dictated() -> None:
    runtime = AgentRuntime()
    sink = Collector()
    runtime.register("sink", sink)
    notes = NotesAgent(runtime, notes_topic=NOTES_TOPIC)
    async with runtime:
        await notes.answer(t("take a note buy gloves", 1), started=started)
        await notes.release("p1")
        assert not notes.dictating("p1")
        await notes.participant_left("p1")
    assert [n[0] for n in sink.notes] == ["Note: buy gloves"]
    assert notes.notes("p1") == ()


async def test_a_kept_draft_survives_departure_and_resumes_with_focus() -> None:
    from edge.notes import StoredDrafts
    from edge.store import SessionStore

    store = SessionStore()
    runtime = AgentRuntime()
    sink = Collector()
    runtime.register("sink", sink)
    notes = NotesAgent(runtime, drafts=StoredDrafts(store))
    async with runtime:
        assert not await notes.resume("p1")  # nothing being dictated
        await notes.answer(t("take a note: buy gloves", 1), started=started)
        assert store.session_value("p1", "notes.draft") == '["buy gloves"]'
        await notes.participant_left("p1")
        again = NotesAgent(runtime, drafts=StoredDrafts(store))  # e.g. after a restart
        assert not again.dictating("p1") and await again.resume("p1")
        assert again.dictating("p1")
        assert (await again.admit(t("and masks", 2), focused=True)).disposition == "accept"
        await again.answer(t("and masks", 2), started=started)
        result = await again.answer(t("done", 3), started=started)
        assert result.disposition == "release"
        assert store.session_value("p1", "notes.draft") is None
        await again.answer(t("take a note: call Bob", 4), started=started)
        await again.release("p1")  # another destination took focus: saved, not kept
        assert store.session_value("p1", "notes.draft") is None
    assert [n[0] for n in sink.notes] == ["Note: buy gloves and masks", "Note: call Bob"]


async def test_empty_note_is_not_published() -> None:
    runtime = AgentRuntime()
    sink = Collector()
    runtime.register("sink", sink)
    notes = NotesAgent(runtime)
    async with runtime:
        await notes.answer(t("take a note", 1), started=started)
        result = await notes.answer(t("done", 2), started=started)
    assert result.disposition == "release" and sink.notes == []


async def test_notes_behind_router_with_lexical_decisions() -> None:
    """Routing is real: the local decision service with no model (lexical evidence)."""
    runtime = AgentRuntime()
    sink = Collector()
    runtime.register("sink", sink)
    notes = NotesAgent(runtime)
    conversation = Conversation()
    control: list[str] = []

    async def output(turn, route, text):
        control.append(text)

    router = AgentRouter(
        {"conversation": conversation, "notes": notes},
        LocalDecisionService(object()),
        output=output,
    )
    async with runtime, router:
        await router.handle(t("What's the capital of France?", 1))
        await router.handle(t("Take a note: the centrifuge needs a new rotor", 2))
        assert router.focus("p1") == "notes"
        await router.handle(t("and a new lid", 3))
        await router.handle(t("Done.", 4))
        assert router.focus("p1") is None
        await router.handle(t("How are you?", 5))
    assert conversation.queries == ["What's the capital of France?", "How are you?"]
    assert [n[0] for n in sink.notes] == ["Note: the centrifuge needs a new rotor and a new lid"]
    assert control == []


async def test_scripted_misroute_is_caught_by_admission() -> None:
    runtime = AgentRuntime()
    notes = NotesAgent(runtime)
    conversation = Conversation()

    async def output(turn, route, text):
        pass

    router = AgentRouter(
        {"conversation": conversation, "notes": notes},
        ScriptedDecisions(["notes"]),
        output=output,
    )
    async with runtime:
        result = await router.handle(t("What's the capital of France?", 1))
    assert result.text == "an answer"
    assert conversation.queries == ["What's the capital of France?"]


async def test_the_note_limit_counts_utf8_bytes_not_characters() -> None:
    """20 characters of "é" are 40 bytes: a limit of 21 bytes keeps 10 of them (a limit that
    counted characters would keep all 20), never half a character."""
    runtime = AgentRuntime()
    sink = Collector()
    runtime.register("sink", sink)
    notes = NotesAgent(runtime, max_note_bytes=21)
    async with runtime:
        await notes.answer(t("take a note: " + "é" * 20, 1), started=started)
        await notes.answer(t("done", 2), started=started)
    (saved,) = notes.notes("p1")
    assert saved == "é" * 10 and len(saved.encode("utf-8")) <= 21


async def test_a_draft_kept_while_dictating_stays_within_the_note_limit() -> None:
    """A participant who dictates on and on (each line within the text limit) never grows
    the kept draft past what the note keeps: the store holds at most ``max_note_bytes``."""

    class Kept:
        def __init__(self) -> None:
            self.saved: list[list[str] | None] = []

        async def load(self, participant_id: str) -> list[str] | None:
            return None

        async def save(self, participant_id: str, parts: list[str] | None) -> None:
            self.saved.append(None if parts is None else list(parts))

    kept = Kept()
    runtime = AgentRuntime()
    notes = NotesAgent(runtime, max_note_bytes=100, drafts=kept)
    async with runtime:
        await notes.answer(t("take a note: " + "a" * 60, 1), started=started)
        for n in range(2, 40):
            await notes.answer(t("b" * 60, n), started=started)
        await notes.answer(t("done", 40), started=started)
    assert all(sum(len(p.encode()) for p in s) <= 101 for s in kept.saved if s), kept.saved[-2]
    (saved,) = notes.notes("p1")
    assert saved == ("a" * 60 + " " + "b" * 60)[:100]


async def test_each_dictated_line_is_kept_before_it_is_acknowledged() -> None:
    """A line is durable before "Got it." goes out: a crash right after the confirmation
    never loses what the person heard acknowledged."""
    events: list[str] = []

    class Kept:
        async def load(self, participant_id: str) -> list[str] | None:
            return None

        async def save(self, participant_id: str, parts: list[str] | None) -> None:
            events.append(f"kept {parts}")

    class Said:  # the runtime, as the agent publishes to it
        async def publish(self, topic, message, **kw) -> None:  # type: ignore[no-untyped-def]
            if isinstance(message, ResponseOutput):
                events.append(f"said {message.text}")

    notes = NotesAgent(Said(), drafts=Kept())
    await notes.answer(t("take a note: buy gloves", 1), started=started)
    await notes.answer(t("and masks", 2), started=started)
    await notes.answer(t("done", 3), started=started)
    assert events == [
        "kept ['buy gloves']",
        "said Okay, I'm taking a note. Say done when you're finished.",
        "kept ['buy gloves', 'and masks']",
        "said Got it.",
        "kept None",
        "said Note saved.",
    ]
