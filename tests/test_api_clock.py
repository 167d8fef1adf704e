"""A stateless request's clock line (Home Assistant ends its system prompt with the time to
the second) moves before the newest message, so the model state of the system prompt and
the history is reused; where the model's template cannot take it there, nothing moves."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

from edge.api._clock import clock_lines_last, renders_late_system
from edge.llm import ChatMessage, Messages, Priority, RequestMetrics, ScriptedLLM, as_messages
from tests.api_helpers import api_service, ollama_client, web_url

pytestmark = pytest.mark.anyio

INSTRUCTIONS = (  # Home Assistant's default instructions (helpers/llm.py)
    "You are a voice assistant for Home Assistant.\n"
    "Answer questions about the world truthfully.\n"
    "Answer in plain text. Keep it simple and to the point.\n"
)


def home_assistant_system(now: datetime.datetime) -> str:
    """As Home Assistant's chat log renders it for an agent with no date-time tool."""
    return (
        INSTRUCTIONS + "\n" + f"Current time is {now:%H:%M:%S}. Today's date is {now:%Y-%m-%d}.\n"
    )


def m(role: Any, content: str) -> ChatMessage:
    return ChatMessage(role=role, content=content)


class ChatML:
    """A formatter whose template renders every role anywhere (SmolLM2's ChatML)."""

    def format_chat(self, messages: Messages, add_generation_prompt: bool = True) -> str:
        rendered = "".join(
            f"<|im_start|>{x.role}\n{x.content}<|im_end|>\n"
            for x in messages
            if isinstance(x, ChatMessage)
        )
        return rendered + ("<|im_start|>assistant\n" if add_generation_prompt else "")


class SystemFirstOnly:
    """A template that refuses a system message after the first (Gemma's, Mistral's)."""

    def format_chat(self, messages: Messages, add_generation_prompt: bool = True) -> str:
        if any(isinstance(x, ChatMessage) and x.role == "system" for x in messages[1:]):
            raise ValueError("System role only at the start")
        return "ok"


def test_the_clock_line_moves_before_the_newest_message() -> None:
    now = datetime.datetime(2026, 12, 5, 14, 3, 27)
    history = [m("user", "What is the capital of France?"), m("assistant", "Paris.")]
    sent = [m("system", home_assistant_system(now)), *history, m("user", "And of Italy?")]
    moved = clock_lines_last(sent, ChatML())
    assert moved == [
        m("system", INSTRUCTIONS.rstrip()),
        *history,
        m("system", "Current time is 14:03:27. Today's date is 2026-12-05."),
        m("user", "And of Italy?"),
    ]
    later = [m("system", home_assistant_system(now.replace(second=58))), *history, sent[-1]]
    assert clock_lines_last(later, ChatML())[: len(history) + 1] == moved[: len(history) + 1]


def test_prompts_without_a_clock_or_templates_without_room_for_it_go_as_sent() -> None:
    now = datetime.datetime(2026, 12, 5, 14, 3, 27)
    fact = [m("system", "Calibration happens every Tuesday at 10:00."), m("user", "When?")]
    assert clock_lines_last(fact, ChatML()) == fact
    ha = [m("system", home_assistant_system(now)), m("user", "Hi")]
    assert clock_lines_last(ha, SystemFirstOnly()) == ha
    assert clock_lines_last(ha, None) == ha  # a remote backend: its template is not ours
    user_first = [m("user", "It is now 14:03. Anything due?")]
    assert clock_lines_last(user_first, ChatML()) == user_first
    only_clock = [m("system", "Current time is 14:03:27."), m("user", "Hi")]
    assert clock_lines_last(only_clock, ChatML()) == [
        m("system", "Current time is 14:03:27."),
        m("user", "Hi"),
    ]
    assert renders_late_system(ChatML()) and not renders_late_system(SystemFirstOnly())


@dataclass
class FormattingLLM(ScriptedLLM):
    """A scripted model with ChatML's template, as the default model has, that records
    the states it is asked to warm."""

    warmed: list[tuple[list[ChatMessage], str, Priority]] = field(default_factory=list)

    def format_chat(self, messages: Messages, add_generation_prompt: bool = True) -> str:
        return ChatML().format_chat(messages, add_generation_prompt)

    async def warm(
        self, messages: Messages, *, cache_key: str, priority: Any = Priority.BACKGROUND, **_: Any
    ) -> RequestMetrics:
        self.warmed.append((as_messages(messages), cache_key, Priority(priority)))
        return RequestMetrics(priority=Priority(priority), cache_key=cache_key)


async def settles(llm: FormattingLLM, count: int) -> list[tuple[list[ChatMessage], str, Any]]:
    """The API's settles (its keys start with ``api:``) once there are ``count``."""
    for _ in range(250):
        found = [w for w in llm.warmed if w[1].startswith("api:")]
        if len(found) >= count:
            return found
        await anyio.sleep(0.02)
    raise AssertionError(f"{count} settles expected, {len(found)} came")


async def test_home_assistants_ollama_turns_a_second_apart_share_one_model_state() -> None:
    """Two turns of Home Assistant's Ollama agent, each with the time of its request, ask
    the model with the same cache key, the system prompt and history first; after each
    answer the state is settled as the next request starts: without the clock line, with
    the answer."""
    llm = FormattingLLM(replies=["Paris.", "Rome."])
    now = datetime.datetime(2026, 12, 5, 14, 3, 27)
    async with api_service(llm) as service:
        async with ollama_client(web_url(service)) as client:
            asked: list[Sequence[dict[str, str]]] = [
                [
                    {"role": "system", "content": home_assistant_system(now)},
                    {"role": "user", "content": "What is the capital of France?"},
                ]
            ]
            asked.append(
                [
                    {"role": "system", "content": home_assistant_system(now.replace(second=31))},
                    asked[0][1],
                    {"role": "assistant", "content": "Paris."},
                    {"role": "user", "content": "And of Italy?"},
                ]
            )
            for turn, messages in enumerate(asked, 1):
                await client.chat(model="edge", messages=list(messages))
                settled = await settles(llm, turn)  # once the device is quiet
    first, second = llm.requests[-2:]
    assert first.cache_key == second.cache_key is not None
    assert [x.role for x in second.messages] == ["system", "user", "assistant", "system", "user"]
    assert second.messages[3].content.startswith("Current time is 14:03:31.")
    assert "Current time" not in second.messages[0].content
    (exchange, key, priority), (later, _, _) = settled
    assert key == first.cache_key and priority is Priority.BACKGROUND
    assert exchange == [second.messages[0], *second.messages[1:3]]
    assert later[-1] == m("assistant", "Rome.")


async def test_a_request_supersedes_the_settle_still_pending_for_its_key() -> None:
    """Requests back to back: the second brings the state up to date itself, so the first
    answer's settle (still waiting for quiet) is dropped, and only the newest one runs."""
    llm = FormattingLLM(replies=["Paris.", "Rome."])
    now = datetime.datetime(2026, 12, 5, 14, 3, 27)
    first = [
        {"role": "system", "content": home_assistant_system(now)},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    second = [first[0], first[1], {"role": "assistant", "content": "Paris."}]
    second.append({"role": "user", "content": "And of Italy?"})
    async with api_service(llm) as service:
        service.llm.activity.touch()  # type: ignore[union-attr]  # keep the device busy
        async with ollama_client(web_url(service)) as client:
            await client.chat(model="edge", messages=first)
            await client.chat(model="edge", messages=second)
            await settles(llm, 1)
            await anyio.sleep(0.5)  # past the quiet the first one would have waited for
            (only,) = await settles(llm, 1)
    assert only[0][-1] == m("assistant", "Rome.")


class StuckWarm:
    """A model whose warm never finishes: its settles stay pending."""

    async def warm(self, messages: Messages, *, cache_key: str, **_: Any) -> RequestMetrics:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


async def test_pending_settles_are_bounded_per_model_and_dropped_when_the_service_closes() -> None:
    """A client sending ever new system prompts leaves at most MAX_SETTLING settles
    pending (the oldest dropped); closing drops the rest."""
    from edge.api._clock import _SETTLING, MAX_SETTLING, settle, unsettle

    llm = StuckWarm()
    asked = [m("system", "s"), m("system", "Current time is 14:03:27."), m("user", "Hi")]
    for n in range(MAX_SETTLING + 3):
        settle(llm, asked, "Hello.", f"api:prefix:{n}")
    pending = [key for (owner, key) in _SETTLING if owner == id(llm)]
    assert pending == [f"api:prefix:{n}" for n in range(3, MAX_SETTLING + 3)]
    unsettle(llm)
    assert not [slot for slot in _SETTLING if slot[0] == id(llm)]
