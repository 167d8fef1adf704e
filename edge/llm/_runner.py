"""What :class:`~edge.llm.LlamaCppLLM` asks of the model's runner, one request at a time
(:class:`~edge.llm._serial.SerialRunner`) or batched (:class:`~edge.llm._batch.BatchRunner`)."""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from edge.runtime import COMPUTE_GATE, FIRST_PIECES, NORMAL, URGENT

from ._types import Priority, RequestMetrics

T = TypeVar("T")


FIRST_WORDS_TOKENS = 12
"""Tokens of an interactive answer that are its first words at most (a reply's first piece
of speech is at most 32 characters): until then, or until a voice took its first piece,
its steps are urgent in the compute gate."""


def step_urgency(
    priority: Priority, produced: int | None, key: str = "", started: float = math.inf
) -> int:
    """How a model step waits in the compute gate beside speech work: a turn's prompt
    (``produced`` None or 0) and an answer's first words are :data:`URGENT`, like the Whisper
    pass and the sentence someone waits for; the rest of an answer, and background work,
    wait in turn with sentences synthesized ahead and partial passes. The first words end
    after ``FIRST_WORDS_TOKENS``, or sooner once the voice of ``key`` (the participant)
    took the first piece of an answer begun at ``started`` (:data:`FIRST_PIECES`)."""
    if priority is not Priority.INTERACTIVE:
        return NORMAL
    if not produced:
        return URGENT
    if produced >= FIRST_WORDS_TOKENS or FIRST_PIECES.spoken_since(key, started):
        return NORMAL
    return URGENT


def gated(fn: Callable[..., T], *args: Any) -> T:
    """One model step, alone among the device's heavy steps (:data:`COMPUTE_GATE`)."""
    with COMPUTE_GATE.hold("llm"):
        return fn(*args)


@dataclass
class Request:
    """One request's use of the model: its tokens under a cache key (a participant; a
    temporary ``__job:`` key, ``ephemeral``, when the caller named none);
    ``shift_reuse``: see :class:`~edge.llm.GenerationOptions`."""

    key: str
    tokens: list[int]
    priority: Priority
    metrics: RequestMetrics
    seed: str | None = None
    ephemeral: bool = False
    shift_reuse: bool = False


@dataclass
class Generation(Request):
    """A generating request: ``budget`` tokens at most; ``eog`` is set when the model
    ended the answer itself."""

    temperature: float = 0.2
    budget: int = 1
    eog: bool = False


class Runner(Protocol):
    @property
    def queued(self) -> int: ...

    def tokens(self, req: Generation) -> AsyncGenerator[int, None]: ...

    async def warm(self, req: Request) -> int: ...

    async def score(self, req: Request, conts: Sequence[list[int]]) -> list[float]: ...

    async def state_bytes(self, req: Request) -> int: ...

    async def forget(self, keys: Sequence[str]) -> None: ...

    async def move(self, source: str, target: str) -> bool: ...

    def cached_keys(self) -> list[str]: ...

    def cache_stats(self) -> dict[str, int]: ...

    async def close(self) -> None: ...
