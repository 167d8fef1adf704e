"""Stateless requests that open with the same first message: each conversation keeps its
own model state (edge.api._slots), so two chats taking turns each evaluate only their
newest messages."""

from __future__ import annotations

from typing import Any

import pytest

from edge.api._front import conversations_per_prefix
from edge.api._slots import SLOTS_PER_PREFIX, ConversationSlots, Dialogue, held_run
from edge.device import load_device_config
from edge.llm import LlamaCppLLM, Priority, ScriptedLLM
from tests.api_helpers import api_service, openai_client, web_url

pytestmark = pytest.mark.anyio

SYSTEM = "You are a helpful lab assistant. Answer in two sentences."


def u(text: str) -> tuple[str, str]:
    return ("user", text)


def a(text: str) -> tuple[str, str]:
    return ("assistant", text)


def test_a_run_is_found_from_the_start_or_after_a_cut() -> None:
    held: Dialogue = (u("1"), a("one"), u("2"), a("two"))
    assert held_run(held, (u("1"), a("one"), u("2"), a("two"), u("3"))) == 4
    assert held_run(held, (u("2"), a("two"), u("3"))) == 2  # the oldest round dropped
    assert held_run(held, (u("x"),)) == 0


def test_each_conversation_goes_on_in_its_own_slot() -> None:
    slots = ConversationSlots(per_prefix=2)
    first, seed = slots.take("p", (u("hi A"),))
    assert (first.key, seed) == ("p", None)
    slots.done(first, (u("hi A"), a("A1")))
    other, seed = slots.take("p", (u("hi B"),))  # a new chat: a slot of its own
    assert (other.key, seed) == ("p:1", "p")  # its state starts as the system prompt's
    slots.done(other, (u("hi B"), a("B1")))
    again, _ = slots.take("p", (u("hi A"), a("A1"), u("more A")))
    assert again is first
    slots.done(again, (u("hi A"), a("A1"), u("more A"), a("A2")))
    trimmed, _ = slots.take("p", (u("more A"), a("A2"), u("A3")))  # oldest round cut
    assert trimmed is first
    slots.done(trimmed, None)  # failed: nothing is continued from it
    third, seed = slots.take("p", (u("hi C"),))  # every slot taken: the free, empty one
    assert third is first and seed is None


def test_a_busy_slot_is_left_to_its_request_and_the_oldest_makes_room() -> None:
    slots = ConversationSlots(per_prefix=2)
    one, _ = slots.take("p", (u("q"),))
    two, _ = slots.take("p", (u("q"),))  # the same question while the first runs
    assert two is not one  # batched beside it, not queued behind it
    slots.done(one, (u("q"), a("x")))
    slots.done(two, (u("q"), a("y")))
    newest, _ = slots.take("p", (u("new"),))
    assert newest is one  # the least recently used
    assert slots.take("q", ())[0].key == "q"  # another first message: its own keys


async def test_two_chats_with_one_system_prompt_get_two_keys() -> None:
    llm = ScriptedLLM(replies=["A1.", "B1.", "A2.", "B2."])
    async with api_service(llm) as service, openai_client(web_url(service)) as client:
        chats: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
        for _ in range(2):
            for name, history in chats.items():
                sent = [{"role": "system", "content": SYSTEM}, *history]
                sent.append({"role": "user", "content": f"Question for {name}"})
                reply = await client.chat.completions.create(model="edge", messages=sent)
                history += [
                    sent[-1],
                    {"role": "assistant", "content": reply.choices[0].message.content},
                ]
    keys = [r.cache_key for r in llm.requests]
    assert keys[0] == keys[2] != keys[1] == keys[3]
    assert all(k is not None and k.startswith("api:prefix:") for k in keys)


@pytest.mark.model
async def test_two_chats_taking_turns_each_evaluate_only_their_newest_messages() -> None:
    llm = LlamaCppLLM(n_ctx=2048, temperature=0.0, sequences=2)
    chats: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    evaluated: dict[str, list[int]] = {"A": [], "B": []}
    questions = ["What is a centrifuge?", "How fast does it spin?", "What is a pipette?"]
    async with api_service(llm) as service, openai_client(web_url(service)) as client:
        for question in questions:
            for name, history in chats.items():
                sent = [{"role": "system", "content": SYSTEM}, *history]
                sent.append({"role": "user", "content": f"{question} ({name})"})
                reply = await client.chat.completions.create(
                    model="edge", messages=sent, max_tokens=32
                )
                asked = [x for x in llm.metrics_log if x.priority is Priority.INTERACTIVE][-1]
                evaluated[name].append(asked.evaluated_tokens)
                content = reply.choices[0].message.content
                history += [sent[-1], {"role": "assistant", "content": content}]
        question_tokens = llm.count_tokens(f"{questions[-1]} (B)") + 12  # + the markers
    for name in chats:  # each later turn: its question and the end of its last answer
        assert max(evaluated[name][1:]) <= question_tokens + 8, evaluated


def test_ever_new_first_messages_do_not_grow_the_slots_without_bound() -> None:
    from edge.api._slots import MAX_PREFIXES

    slots = ConversationSlots()
    running, _ = slots.take("p-running", (u("q"),))  # a request still running
    for i in range(3 * MAX_PREFIXES):
        slot, _ = slots.take(f"p{i}", (u("q"),))
        slots.done(slot, (u("q"), a("x")))
    assert len(slots._slots) == MAX_PREFIXES
    assert "p-running" in slots._slots and f"p{3 * MAX_PREFIXES - 1}" in slots._slots
    slots.done(running, None)


async def test_an_answer_its_client_never_read_releases_its_slot() -> None:
    """A client gone before its reply streamed: the reply is never read, and its slot is
    not left marked busy (which would keep its first message remembered for good)."""
    import gc

    from edge.api._stateless import stateless
    from edge.llm import ChatMessage, GenerationOptions

    slots = ConversationSlots()
    async with api_service(ScriptedLLM(replies=["Paris."])) as service:
        sent = [ChatMessage(role="system", content=SYSTEM), ChatMessage(role="user", content="Hi")]
        answer = stateless(service.gateway, sent, GenerationOptions(), slots)
        (slot,) = next(iter(slots._slots.values()))
        assert slot.busy == 1
        del answer
        gc.collect()
        assert slot.busy == 0


def test_conversations_per_system_prompt_follow_the_devices_warm_states() -> None:
    agx = load_device_config("jetson-agx-orin-64gb", detect=False)
    headset = load_device_config("snapdragon-xr2-gen2-headset", detect=False)
    assert agx.budgets.warm_participants == 8 and conversations_per_prefix(agx) == 8
    assert headset.budgets.warm_participants < SLOTS_PER_PREFIX  # never under the floor
    assert conversations_per_prefix(headset) == SLOTS_PER_PREFIX
    assert conversations_per_prefix(None) == SLOTS_PER_PREFIX  # a remote LLM: no budget
