"""A stateless request's clock line (Home Assistant ends its system prompt with the time to
the second) moves before the newest message, so the model state of the system prompt and
the history is reused; where the model's template cannot take it there, nothing moves."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from edge.api._clock import clock_lines_last, renders_late_system
from edge.llm import ChatMessage, Messages, ScriptedLLM
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
    """A scripted model with ChatML's template, as the default model has."""

    def format_chat(self, messages: Messages, add_generation_prompt: bool = True) -> str:
        return ChatML().format_chat(messages, add_generation_prompt)


async def test_home_assistants_ollama_turns_a_second_apart_share_one_model_state() -> None:
    """Two turns of Home Assistant's Ollama agent, each with the time of its request, ask
    the model with the same cache key, and the system prompt and history come first."""
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
            for messages in asked:
                await client.chat(model="edge", messages=list(messages))
    first, second = llm.requests[-2:]
    assert first.cache_key == second.cache_key is not None
    assert [x.role for x in second.messages] == ["system", "user", "assistant", "system", "user"]
    assert second.messages[3].content.startswith("Current time is 14:03:31.")
    assert "Current time" not in second.messages[0].content
