"""Shared helpers for the conversation and context manager tests."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC

import anyio

from edge.conversation import ContextConfig, ContextManager
from edge.llm import ChatMessage, Priority, RequestMetrics, ScriptedLLM, ScriptedReply

T0 = 1_700_000_000_000_000  # 2023-11-14 22:13:20 UTC
SECOND = 1_000_000


class Clock:
    """A settable clock in Unix microseconds; with ``step_us``, each reading is that much
    later than the one before (entries keep their order, the shown minute stays put)."""

    def __init__(self, start: int = T0, step_us: int = 0) -> None:
        self.now = start
        self.step_us = step_us

    def __call__(self) -> int:
        now = self.now
        self.now += self.step_us
        return now

    def advance(self, seconds: float = 1.0) -> int:
        self.now += int(seconds * SECOND)
        return self.now


def is_compaction(messages: list[ChatMessage]) -> bool:
    return "Write plain text only" in messages[0].content


def responder(
    summary: str | Callable[[list[ChatMessage]], str | ScriptedReply] = "S.",
    answer: str = "The answer.",
) -> Callable[[list[ChatMessage]], str | ScriptedReply]:
    """Replies ``summary`` to compaction requests and ``answer`` to everything else."""

    def reply(messages: list[ChatMessage]) -> str | ScriptedReply:
        if is_compaction(messages):
            return summary(messages) if callable(summary) else summary
        return answer

    return reply


class WarmingLLM(ScriptedLLM):
    """A scripted LLM that also records ``warm`` calls (like the local backend's)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.warmed: list[tuple[list[ChatMessage], str, Priority]] = []

    async def warm(
        self, messages, *, cache_key, priority=Priority.BACKGROUND, seed_key=None, user_next=False
    ) -> RequestMetrics:
        self.warmed.append((list(messages), cache_key, Priority(priority)))
        return RequestMetrics(priority=Priority(priority), cache_key=cache_key)


class MovingLLM(WarmingLLM):
    """A warming scripted LLM that keeps which context each cache key holds and can hand a
    key's state to another (``move_cache``) and forget keys, like the local backend."""

    def __init__(self, *args, hold: str | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.held: dict[str, str] = {}  # cache key -> the context message warmed into it
        self.events: list[tuple[str, str]] = []  # ("warm" | "compact" | "move" | ..., key)
        self.hold = hold  # a warm of a key starting with this waits for ``release``
        self.release = anyio.Event()

    async def warm(
        self, messages, *, cache_key, priority=Priority.BACKGROUND, seed_key=None, user_next=False
    ) -> RequestMetrics:
        self.held[cache_key] = messages[1].content
        self.events.append(("warm", cache_key))
        metrics = await super().warm(messages, cache_key=cache_key, priority=priority)
        if self.hold is not None and cache_key.startswith(self.hold):
            await self.release.wait()
        return metrics

    async def move_cache(self, source: str, target: str) -> bool:
        self.events.append(("move", f"{source}->{target}"))
        if source not in self.held:
            return False
        self.held[target] = self.held.pop(source)
        return True

    async def forget_cache(self, *keys: str) -> None:
        for key in keys:
            self.events.append(("forget", key))
            self.held.pop(key, None)

    def generate(self, messages, options):  # type: ignore[no-untyped-def]
        if is_compaction(list(messages)):
            self.events.append(("compact", ""))
        return super().generate(messages, options)


def manager(llm, clock: Clock | None = None, *, store=None, recall_index=None, **kwargs):
    """A manager showing UTC times by ``clock`` that compacts without a quiet period;
    ``kwargs`` are :class:`ContextConfig` fields."""
    kwargs.setdefault("compaction_quiet_s", 0)
    config = ContextConfig(timezone=UTC, **kwargs)
    return ContextManager(
        llm, config, store=store, recall_index=recall_index, clock=clock or Clock()
    )


async def eventually(condition: Callable[[], bool], limit_s: float = 3.0) -> None:
    with anyio.fail_after(limit_s):
        while not condition():  # noqa: ASYNC110 (polling state, not an event)
            await anyio.sleep(0.005)


def compactions(llm: ScriptedLLM) -> list:
    return [r for r in llm.requests if is_compaction(r.messages)]
