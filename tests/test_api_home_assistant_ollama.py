"""Home Assistant's Ollama conversation agent, as its integration calls our Ollama API,
on the real default model: over several turns, each request evaluates only what is new
in it, although every request's system prompt carries the time to the second and, past
``max_history`` rounds, the history loses its oldest round."""

from __future__ import annotations

import datetime
from typing import Any

import anyio
import pytest

from edge.llm import LlamaCppLLM, Priority
from tests.api_helpers import api_service, ollama_client, web_url
from tests.test_api_clock import home_assistant_system

pytestmark = [pytest.mark.model, pytest.mark.anyio]

QUESTIONS = [
    "What is the capital of France?",
    "How many legs does a spider have?",
    "What do bees make?",
    "Who wrote Hamlet?",
    "Why is the sky blue?",
    "What is the boiling point of water?",
]
MAX_HISTORY = 2  # Home Assistant's default is 20; 2 reaches its trimming in a short test


def trimmed(messages: list[dict[str, str]], max_rounds: int) -> list[dict[str, str]]:
    """Home Assistant's ``OllamaBaseLLMEntity._trim_history``: with ``max_rounds`` or more
    earlier rounds, the system prompt, the newest ``max_rounds`` rounds and the question."""
    earlier = sum(1 for x in messages if x["role"] == "user") - 1
    if earlier < max_rounds:
        return messages
    return [messages[0], *messages[len(messages) - (2 * max_rounds + 1) :]]


async def quiet(llm: LlamaCppLLM, count: int) -> None:
    """Until ``count`` background settles of the API's state have ended."""
    for _ in range(500):
        settles = [
            x
            for x in llm.metrics_log
            if x.priority is Priority.BACKGROUND and (x.cache_key or "").startswith("api:")
        ]
        if len(settles) >= count:
            return
        await anyio.sleep(0.02)
    raise AssertionError("the API's state was not settled")


async def test_home_assistants_ollama_agent_evaluates_only_each_turns_news() -> None:
    llm = LlamaCppLLM(n_ctx=4096, temperature=0.0, sequences=2)
    chat_log: list[dict[str, str]] = []
    evaluated: list[int] = []
    start = datetime.datetime(2026, 12, 5, 14, 3, 27)
    async with api_service(llm) as service, ollama_client(web_url(service)) as client:
        for turn, question in enumerate(QUESTIONS):
            now = start + datetime.timedelta(seconds=7 * turn)
            system = {"role": "system", "content": home_assistant_system(now)}
            messages = trimmed(
                [system, *chat_log, {"role": "user", "content": question}], MAX_HISTORY
            )
            parts: list[Any] = [
                part
                async for part in await client.chat(
                    model="edge",
                    messages=messages,
                    stream=True,
                    keep_alive=-1,
                    options={"num_ctx": 8192},
                )
            ]
            answer = "".join(p.message.content or "" for p in parts)
            assert parts[-1].done and answer.strip()
            asked = [x for x in llm.metrics_log if x.priority is Priority.INTERACTIVE][-1]
            evaluated.append(asked.evaluated_tokens)
            chat_log += [messages[-1], {"role": "assistant", "content": answer}]
            await quiet(llm, turn + 1)
        clock_line = home_assistant_system(start).splitlines()[-1]
        news = llm.count_tokens(f"{clock_line}\n{QUESTIONS[-1]}") + 16  # + the markers
    assert max(evaluated[1:]) <= news < evaluated[0], evaluated
