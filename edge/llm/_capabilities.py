"""Optional capabilities of an :class:`~edge.llm.LLMService`, as protocols.

Callers test ``isinstance(llm, Warmable)`` (and so on) instead of probing attributes. The
local backend (:class:`~edge.llm.LlamaCppLLM`) has them all; the remote and scripted
backends have ``activity`` only. On Python 3.11 ``isinstance`` against a protocol with
data members reads them, so a ``TokenCounter`` check reads ``context_length`` (which loads
the local model): test it where the window is needed anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ._activity import ActivityTracker
from ._types import Messages, Priority, RequestMetrics

if TYPE_CHECKING:
    from ._llamacpp import ScoreResult


@runtime_checkable
class Loadable(Protocol):
    """Loads its model ahead of the first request (idempotent)."""

    async def load(self) -> None: ...


@runtime_checkable
class ChatFormatter(Protocol):
    """Renders messages into the model's raw prompt text (its chat template)."""

    def format_chat(self, messages: Messages, add_generation_prompt: bool = True) -> str: ...


@runtime_checkable
class TokenCounter(ChatFormatter, Protocol):
    """Counts tokens of raw text and knows its context window and default answer length."""

    context_length: int
    default_max_tokens: int

    def count_tokens(self, text: str) -> int: ...


@runtime_checkable
class Warmable(Protocol):
    """Evaluates a prompt prefix into a participant's KV state ahead of their request."""

    async def warm(
        self,
        messages: Messages,
        *,
        cache_key: str,
        priority: Priority | str = ...,
        seed_key: str | None = None,
        user_next: bool = False,
        open_last: bool = False,
    ) -> RequestMetrics: ...


@runtime_checkable
class ForgetsCache(Protocol):
    """Drops the KV states saved under cache keys (a participant erased everywhere)."""

    async def forget_cache(self, *keys: str) -> None: ...


@runtime_checkable
class MovesCache(Protocol):
    """Hands the KV state saved under one cache key to another (see
    :meth:`~edge.llm.LlamaCppLLM.move_cache`)."""

    async def move_cache(self, source: str, target: str) -> bool: ...


@runtime_checkable
class Scorer(ChatFormatter, Protocol):
    """Scores continuations of a raw prompt (log-probabilities), for local decisions."""

    async def score(
        self,
        prompt: str,
        continuations: Sequence[str],
        *,
        cache_key: str | None = None,
        priority: Priority | str = ...,
        seed_key: str | None = None,
    ) -> ScoreResult: ...


@runtime_checkable
class ReportsCache(Protocol):
    """Counts its KV states (see :meth:`~edge.llm.LlamaCppLLM.cache_stats`)."""

    def cache_stats(self) -> dict[str, int]: ...


@runtime_checkable
class ReportsActivity(Protocol):
    """Tracks its interactive work, so background work can wait for quiet."""

    activity: ActivityTracker
