"""Replies of each source's length, ended where the model writes the boundary.

An answer spoken through a Home Assistant satellite is one short sentence; one read on a
headset may be longer. :class:`SentenceBoundLLM` wraps the conversation's model: a request
whose ``cache_key`` (the participant id) starts with one of ``bounds``' prefixes ends at
that many sentences of its reply, counted as the conversation counts them
(:class:`~edge.conversation.ReplyFilter`: scaffolding lines are not sentences). The model
is stopped there, at the next token, so the rest is never generated; the stream's text is
the bounded reply. Other requests pass unchanged (the conversation's own bound applies).

A bounded answer is short and ends by itself, so a speculation of one can be generated
whole before its turn (``bounded(cache_key)``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio

from edge.conversation import ReplyFilter
from edge.llm import (
    CountingLLMWrapper,
    GenerationOptions,
    LLMService,
    LLMWrapper,
    Messages,
    TextStream,
    TokenCounter,
)


class SentenceBoundLLM(LLMWrapper):
    """``llm`` with the replies of some participants bounded in sentences; see the module
    docstring. ``bounds`` maps a participant id prefix (``"wyoming:"``) to its most
    sentences; a bound under 1 leaves those replies alone."""

    def __init__(self, llm: LLMService, bounds: Mapping[str, int]) -> None:
        self.llm = llm
        self.bounds = {prefix: n for prefix, n in bounds.items() if n >= 1}

    def bound(self, cache_key: str | None) -> int | None:
        """The most sentences a reply for ``cache_key`` may have here (None: unbounded)."""
        if cache_key is None:
            return None
        return next((n for p, n in self.bounds.items() if cache_key.startswith(p)), None)

    def bounded(self, cache_key: str) -> bool:
        return self.bound(cache_key) is not None

    def stream(
        self, messages: Messages, options: GenerationOptions | None = None, /, **fields: Any
    ) -> TextStream:
        options = GenerationOptions.of(options, **fields)
        inner = self.llm.stream(messages, options)
        limit = self.bound(options.cache_key)
        if limit is None:
            return inner
        out: TextStream = TextStream(_sentences(inner, limit, lambda: out), inner.metrics)
        return out


class CountingSentenceBoundLLM(CountingLLMWrapper, SentenceBoundLLM):
    """:class:`SentenceBoundLLM` over a model that counts tokens, counting with it."""


def sentence_bound(llm: LLMService, bounds: Mapping[str, int]) -> SentenceBoundLLM:
    """``llm`` with bounded replies; a :class:`~edge.llm.TokenCounter` when ``llm`` is."""
    if isinstance(llm, TokenCounter):
        return CountingSentenceBoundLLM(llm, bounds)
    return SentenceBoundLLM(llm, bounds)


async def _sentences(inner: TextStream, limit: int, target: Any) -> AsyncIterator[str]:
    """``inner``'s reply up to ``limit`` sentences; the model stops there."""
    reply = ReplyFilter(limit)
    try:
        async for delta in inner:
            text = reply.feed(delta)
            if text:
                yield text
            if reply.done:
                target().finish_reason = "stop"
                return
        tail = reply.flush()
        if tail:
            yield tail
        target().finish_reason = inner.finish_reason
    finally:
        with anyio.CancelScope(shield=True):
            await inner.aclose()  # the model is free again when this returns
