"""A model wrapped to change how it streams: everything else goes to the wrapped model.

:class:`LLMWrapper` forwards ``chat``, ``health`` and ``close`` to ``self.llm``;
:class:`CountingLLMWrapper` also forwards the :class:`~edge.llm.TokenCounter` calls, for a
wrapped model that counts tokens. A wrapper defines only its own ``stream``.
"""

from __future__ import annotations

from typing import Any

from ._types import ChatResponse, GenerationOptions, LLMHealth, LLMService, Messages


class LLMWrapper:
    """Forwards every call but ``stream`` to ``llm``."""

    llm: LLMService

    async def chat(
        self, messages: Messages, options: GenerationOptions | None = None, /, **fields: Any
    ) -> ChatResponse:
        return await self.llm.chat(messages, options, **fields)

    async def health(self) -> LLMHealth:
        return await self.llm.health()

    async def close(self) -> None:
        await self.llm.close()


class CountingLLMWrapper(LLMWrapper):
    """:class:`LLMWrapper` over a model that counts tokens, counting with it."""

    llm: Any  # a TokenCounter as well as an LLMService

    @property
    def context_length(self) -> int:
        return int(self.llm.context_length)

    @property
    def default_max_tokens(self) -> int:
        return int(self.llm.default_max_tokens)

    def count_tokens(self, text: str) -> int:
        return int(self.llm.count_tokens(text))

    def format_chat(self, messages: Messages, add_generation_prompt: bool = True) -> str:
        return str(self.llm.format_chat(messages, add_generation_prompt))
