"""What :class:`~edge.llm.LlamaCppLLM` hands its runner: text made into token requests.

Prompts are rendered with the model's chat template and tokenized, checked against the
context window; each request runs under its caller's cache key or, when none is named, a
temporary ``__job:`` key (a prefix callers may not use); its metrics are kept once it ends.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from ._engine import LlamaEngine
from ._runner import Generation, Request
from ._types import ContextOverflowError, GenerationOptions, RequestMetrics

JOB_PREFIX = "__job:"


def check_key(key: str) -> None:
    """A caller's cache key may not start with :data:`JOB_PREFIX`."""
    if key.startswith(JOB_PREFIX):
        raise ValueError(f"cache keys starting with {JOB_PREFIX!r} are reserved")


def check_fits(n_ctx: int, tokens: Sequence[int], what: str) -> None:
    if len(tokens) >= n_ctx:
        raise ContextOverflowError(
            f"{what} is {len(tokens)} tokens but the context window is {n_ctx} tokens; "
            "shorten it (a shorter message, smaller context budgets) or load the model "
            "with a larger n_ctx"
        )


class Requests:
    """Requests for one loaded :class:`LlamaEngine` (each method needs it loaded), with
    ``temperature`` and ``max_tokens`` for a generation that names none; ``log`` keeps
    the newest 1000 finished requests' metrics."""

    def __init__(self, engine: LlamaEngine, temperature: float, max_tokens: int) -> None:
        self._engine = engine
        self.temperature = temperature
        self.max_tokens = max_tokens
        self._jobs = itertools.count()
        self.log: deque[RequestMetrics] = deque(maxlen=1000)

    def request(
        self,
        tokens: list[int],
        metrics: RequestMetrics,
        cache_key: str | None,
        seed_key: str | None = None,
        shift_reuse: bool = False,
    ) -> Request:
        if cache_key is not None:
            check_key(cache_key)
        key = f"{JOB_PREFIX}{next(self._jobs)}" if cache_key is None else cache_key
        ephemeral = cache_key is None
        return Request(key, tokens, metrics.priority, metrics, seed_key, ephemeral, shift_reuse)

    def generation(
        self, messages: list[Any], options: GenerationOptions, metrics: RequestMetrics
    ) -> Generation:
        """The request answering ``messages``: at most the options' ``max_tokens``, and
        never past the context window."""
        engine = self._engine
        prompt = engine.tokenize_prompt(engine.format_chat(messages, True))
        check_fits(engine.n_ctx, prompt, "the prompt")
        metrics.prompt_tokens = len(prompt)
        req = self.request(
            prompt, metrics, options.cache_key, options.seed_key, options.shift_reuse
        )
        temperature = self.temperature if options.temperature is None else options.temperature
        max_tokens = options.max_tokens or self.max_tokens
        budget = min(max_tokens, engine.n_ctx - len(prompt))
        return Generation(**vars(req), temperature=temperature, budget=budget)

    def warming(
        self,
        messages: list[Any],
        user_next: bool,
        metrics: RequestMetrics,
        seed_key: str | None,
        open_last: bool = False,
    ) -> Request:
        """The request evaluating the prompt of ``messages`` into ``metrics.cache_key``
        (up to where a user message's text would begin, with ``user_next``; up to the end
        of the last message's text, with ``open_last``)."""
        engine = self._engine
        prompt = engine.tokenize_prompt(engine.format_warm(messages, user_next, open_last))
        check_fits(engine.n_ctx, prompt, "the prompt to warm")
        metrics.prompt_tokens = len(prompt)
        return self.request(prompt, metrics, metrics.cache_key, seed_key)

    def scoring(
        self,
        prompt: str,
        continuations: Sequence[str],
        metrics: RequestMetrics,
        seed_key: str | None,
    ) -> tuple[Request, list[list[int]]]:
        """The raw ``prompt``'s request and each continuation's tokens (none may be
        empty; the prompt and the longest one must fit the window together)."""
        engine = self._engine
        tokens = engine.tokenize_prompt(prompt)
        conts = [engine.tokenize_plain(c) for c in continuations]
        for text, toks in zip(continuations, conts, strict=True):
            if not toks:
                raise ValueError(f"continuation {text!r} has no tokens")
        check_fits(engine.n_ctx, tokens + max(conts, key=len), "the scoring prompt")
        metrics.prompt_tokens = len(tokens)
        return self.request(tokens, metrics, metrics.cache_key, seed_key), conts

    def probe(self, n_tokens: int) -> Request:
        """``n_tokens`` of filler text under a temporary key (for sizing saved states)."""
        tokens = self._engine.tokenize_plain("the " * (n_tokens + 8))[:n_tokens]
        check_fits(self._engine.n_ctx, tokens, "the state-size probe")
        metrics = RequestMetrics()
        req = self.request(tokens, metrics, None)
        metrics.cache_key = req.key
        return req

    def finish(self, metrics: RequestMetrics, started: float) -> None:
        """Record a request that ended (``started``: its ``perf_counter`` start)."""
        metrics.total_s = time.perf_counter() - started
        self.log.append(metrics)
