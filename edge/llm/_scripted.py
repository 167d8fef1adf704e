"""A deterministic LLM for unit tests of the components that use one."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field

import anyio

from ._activity import ActivityTracker
from ._types import (
    ChatMessage,
    FinishReason,
    GenerationError,
    GenerationOptions,
    LLMClosedError,
    LLMHealth,
    Messages,
    Priority,
    RequestMetrics,
    StreamingLLM,
    TextStream,
    as_messages,
)


def _before_stop(text: str, stop: tuple[str, ...]) -> str:
    """The reply up to its first stop string, as a real backend would end it."""
    cut = min((i for s in stop if (i := text.find(s)) >= 0), default=-1)
    return text if cut < 0 else text[:cut]


@dataclass
class ScriptedReply:
    """One scripted answer.

    ``fail_after`` raises :class:`GenerationError` after that many deltas;
    ``finish_reason="length"`` marks a cut-off reply; ``delay_s`` is slept before each
    delta and ``first_delay_s`` before the first one (time to first token).
    """

    text: str
    finish_reason: FinishReason = "stop"
    fail_after: int | None = None
    delay_s: float = 0.0
    first_delay_s: float = 0.0


@dataclass
class RecordedRequest:
    messages: list[ChatMessage]
    options: GenerationOptions
    completed: bool = False
    cancelled: bool = False
    output: str = ""

    @property
    def max_tokens(self) -> int | None:
        return self.options.max_tokens

    @property
    def temperature(self) -> float | None:
        return self.options.temperature

    @property
    def stop(self) -> list[str] | None:
        return list(self.options.stop) or None

    @property
    def priority(self) -> Priority:
        return self.options.priority

    @property
    def cache_key(self) -> str | None:
        return self.options.cache_key

    @property
    def prompt(self) -> str:
        """Every message's content joined, handy for assertions."""
        return "\n".join(m.content for m in self.messages)


Responder = Callable[[list[ChatMessage]], "str | ScriptedReply"]


@dataclass
class ScriptedLLM(StreamingLLM):
    """Replies from a script: a list consumed in order, then ``default``; or a function of
    the messages. Every request is recorded in ``requests``. Deltas are words (with their
    leading space), so streaming consumers see several chunks.
    """

    replies: Iterable[str | ScriptedReply] | Responder = ()
    default: str | ScriptedReply = "OK."
    delay_s: float = 0.0
    requests: list[RecordedRequest] = field(default_factory=list)
    closed: bool = False
    activity: ActivityTracker = field(default_factory=ActivityTracker)

    def __post_init__(self) -> None:
        self._queue: list[str | ScriptedReply] | None = (
            None if callable(self.replies) else list(self.replies)
        )

    def push(self, *replies: str | ScriptedReply) -> None:
        """Append replies to the script."""
        if self._queue is None:
            raise TypeError("this ScriptedLLM answers with a function")
        self._queue.extend(replies)

    def _next(self, messages: list[ChatMessage]) -> ScriptedReply:
        if callable(self.replies):
            reply = self.replies(messages)
        elif self._queue:
            reply = self._queue.pop(0)
        else:
            reply = self.default
        if isinstance(reply, str):
            reply = ScriptedReply(reply, delay_s=self.delay_s)
        return reply

    def generate(self, messages: Messages, options: GenerationOptions) -> TextStream:
        if self.closed:
            raise LLMClosedError("the scripted LLM is closed")
        msgs = as_messages(messages)
        record = RecordedRequest(msgs, options)
        self.requests.append(record)
        reply = self._next(msgs)
        metrics = RequestMetrics(
            priority=options.priority, cache_key=options.cache_key, queue_wait_s=0.0
        )
        holder: list[TextStream] = []

        interactive = options.priority is Priority.INTERACTIVE

        async def deltas() -> AsyncIterator[str]:
            started = time.perf_counter()
            text = _before_stop(reply.text, options.stop)
            pieces = re.findall(r"\s*\S+", text) or ([text] if text else [])
            busy = self.activity.interactive() if interactive else nullcontext()
            try:
                with busy:
                    for i, piece in enumerate(pieces):
                        if reply.fail_after is not None and i >= reply.fail_after:
                            raise GenerationError("scripted model failure")
                        await anyio.sleep(reply.first_delay_s if i == 0 else 0)
                        await anyio.sleep(reply.delay_s)
                        if i == 0:
                            metrics.ttft_s = time.perf_counter() - started
                        metrics.generated_tokens += 1
                        record.output += piece
                        yield piece
                    if reply.fail_after is not None and reply.fail_after >= len(pieces):
                        raise GenerationError("scripted model failure")
                holder[0].finish_reason = reply.finish_reason
                record.completed = True
            except (GeneratorExit, anyio.get_cancelled_exc_class()):
                record.cancelled = True
                raise
            finally:
                metrics.total_s = time.perf_counter() - started

        stream = TextStream(deltas(), metrics)
        holder.append(stream)
        return stream

    async def health(self) -> LLMHealth:
        return LLMHealth(ok=not self.closed, backend="scripted", model="scripted")

    async def close(self) -> None:
        self.closed = True
