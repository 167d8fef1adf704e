"""``LlamaCppLLM``: one GGUF model in-process, one request at a time or batched."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel, ConfigDict, Field

from ._batch import BatchRunner
from ._engine import LlamaEngine
from ._requests import Requests, check_key
from ._runner import Runner
from ._runner import gated as _gated  # noqa: F401 (the step wrapper, for tests)
from ._scheduler import ModelScheduler
from ._serial import SerialRunner
from ._stream import Detokenizer, text_deltas
from ._types import (
    FinishReason,
    GenerationOptions,
    LLMClosedError,
    LLMError,
    LLMHealth,
    Messages,
    ModelLoadError,
    Priority,
    RequestMetrics,
    StreamingLLM,
    TextStream,
    as_messages,
)
from ._worker import MODEL_THREAD, ModelThread

DEFAULT_KV_CACHE_BUDGET = 256 * 2**20


@dataclass
class ScoreResult:
    """``logprobs[i]``: log P(continuations[i] | prompt), summed over its tokens."""

    logprobs: list[float]
    token_counts: list[int]
    metrics: RequestMetrics


def resolve_model_path(model_path: str | Path | None) -> Path:
    """The GGUF file for ``model_path``: a path as given; a catalogue id (a bare name that
    is not a file here, e.g. ``"smollm2-135m-instruct-q8_0"``) located through the
    catalogue; None for the catalogue's default LLM. A name that is neither stays a path,
    whose absence :func:`check_gguf` reports when the model loads."""
    from edge.catalogue import Catalogue, CatalogueError, ModelMissingError

    if model_path is not None:
        path = Path(model_path).expanduser()
        name = str(model_path)
        if path.exists() or "/" in name or name.endswith(".gguf"):
            return path
        try:
            entry = Catalogue.load().get(name)
        except CatalogueError:
            return path
    else:
        entry = Catalogue.load().default("llm")
    if entry.format != "gguf":
        raise ModelLoadError(f"catalogue model {entry.id!r} is not a GGUF language model")
    try:
        return entry.locate()
    except ModelMissingError as exc:
        raise ModelLoadError(str(exc)) from exc


class LlamaConfig(BaseModel):
    """How :class:`LlamaCppLLM` runs its model (every field can also be given to the
    constructor as a keyword).

    ``sequences`` > 1 turns on continuous batching: one llama.cpp context with that many
    sequences of ``n_ctx`` tokens each, every active request a sequence, one
    ``llama_decode`` per step for all of them (``docs/llm.md``). 1 runs one request at a
    time in one sequence.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    n_ctx: int | None = Field(default=None, ge=64, description="tokens per sequence")
    n_threads: int | None = Field(default=None, ge=1)
    n_gpu_layers: int = 0
    kv_cache_budget_bytes: int = Field(default=DEFAULT_KV_CACHE_BUDGET, ge=0)
    default_max_tokens: int = Field(default=256, ge=1)
    temperature: float = Field(default=0.2, ge=0)
    seed: int = 0
    background_chunk_tokens: int = Field(default=128, ge=1)
    sequences: int = Field(default=1, ge=1, le=64)
    prefill_chunk_tokens: int = Field(default=64, ge=1)
    max_waiting_per_key: int = Field(default=4, ge=1)
    adaptive_threads: bool = Field(
        default=True, description="fewer threads while other processes keep cores busy"
    )


def _make_runner(
    cfg: LlamaConfig,
    engine: LlamaEngine,
    scheduler: ModelScheduler,
    thread: ModelThread,
    closed: Callable[[], bool],
) -> Runner:
    """One request at a time (``sequences`` 1), or batched."""
    if cfg.sequences == 1:
        return SerialRunner(
            engine,
            scheduler,
            thread,
            background_chunk_tokens=cfg.background_chunk_tokens,
            is_closed=closed,
        )
    return BatchRunner(
        engine,
        thread,
        n_seq=cfg.sequences,
        prefill_chunk=cfg.prefill_chunk_tokens,
        max_waiting_per_key=cfg.max_waiting_per_key,
        first_words_alone=cfg.n_gpu_layers == 0,
        is_closed=closed,
    )


class LlamaCppLLM(StreamingLLM):
    """A local GGUF model through llama-cpp-python, implementing :class:`LLMService`.

    * Requests run one at a time (:class:`SerialRunner`, behind a :class:`ModelScheduler`:
      interactive first, background preemptible) or, with ``sequences`` > 1, batched
      (:class:`BatchRunner`: a sequence per request, one decode step for all).
    * Prompt-prefix reuse: each ``cache_key`` (a participant) keeps its KV state, live or
      saved in a byte-bounded LRU store, so a follow-up evaluates only its new tokens.
    * The chat template comes from the GGUF metadata, rendered with
      ``enable_thinking=False``; cancellation stops at the next step, the model usable.

    Extras: :meth:`warm` (fill a key's cache without generating), :meth:`score` (decisions'
    log-probabilities), :meth:`format_chat`, :meth:`count_tokens`, ``activity`` (idle
    tracking), ``metrics_log``, ``gpu_layers`` ((on the GPU, of all) layers once loaded).
    """

    gpu_layers: tuple[int, int] | None = None

    def __init__(
        self,
        model_path: str | Path | None = None,
        config: LlamaConfig | None = None,
        **options: Any,
    ) -> None:
        config = (config or LlamaConfig()).model_copy(update=options) if options else config
        self.config = LlamaConfig.model_validate((config or LlamaConfig()).model_dump())
        cfg = self.config
        self.model_path = resolve_model_path(model_path)
        self.default_max_tokens = cfg.default_max_tokens
        self.temperature = cfg.temperature
        self.scheduler = ModelScheduler()
        self.activity = self.scheduler.activity
        self._engine = LlamaEngine(
            self.model_path,
            n_ctx=cfg.n_ctx,
            n_threads=cfg.n_threads,
            n_gpu_layers=cfg.n_gpu_layers,
            seed=cfg.seed,
            kv_cache_budget_bytes=cfg.kv_cache_budget_bytes,
            own_context=cfg.sequences == 1,
            adaptive_threads=cfg.adaptive_threads,
        )
        self._thread = MODEL_THREAD  # every call to a model, on one thread
        self._load_lock = anyio.Lock()
        self._loaded = False
        self._closed = False
        self._runner = _make_runner(
            cfg, self._engine, self.scheduler, self._thread, lambda: self._closed
        )
        self._requests = Requests(self._engine, cfg.temperature, cfg.default_max_tokens)
        self.metrics_log: deque[RequestMetrics] = self._requests.log

    # -- lifecycle -----------------------------------------------------------------------
    async def load(self) -> None:
        """Load the model now (otherwise the first request does)."""
        if self._closed:
            raise LLMClosedError("the LLM service is closed")
        async with self._load_lock:
            if self._closed:  # closed while this waited: the model is being freed
                raise LLMClosedError("the LLM service is closed")
            if not self._loaded:
                await self._thread.run(self._load_sync)

    def _load_sync(self) -> None:
        if not self._loaded:
            self._engine.load()
            if isinstance(self._runner, BatchRunner):
                self._runner.loaded()
            self._loaded = True
            self.gpu_layers = self._engine.gpu_layers_loaded

    async def close(self) -> None:
        """Wait for the model to be free, then release it. Later requests fail clearly."""
        if self._closed:
            return
        self._closed = True
        await self._runner.close()

    async def __aenter__(self) -> LlamaCppLLM:
        await self.load()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def health(self) -> LLMHealth:
        try:
            await self.load()
        except LLMError as exc:
            return LLMHealth(False, "llama.cpp", str(self.model_path), detail=str(exc))
        return LLMHealth(
            True,
            "llama.cpp",
            self._engine.model_name,
            context_length=self._engine.n_ctx,
            detail=f"{self.model_path} · {self._runner.queued} queued · "
            + ", ".join(f"{k} {v}" for k, v in self.cache_stats().items()),
        )

    # -- text helpers --------------------------------------------------------------------
    @property
    def context_length(self) -> int:
        """The context window in tokens (loads the model if needed)."""
        self._load_sync()
        return self._engine.n_ctx

    @property
    def model_name(self) -> str:
        self._load_sync()
        return self._engine.model_name

    def format_chat(self, messages: Messages, add_generation_prompt: bool = True) -> str:
        """Render ``messages`` with the model's chat template (thinking disabled)."""
        self._load_sync()
        return self._engine.format_chat(as_messages(messages), add_generation_prompt)

    def count_tokens(self, text: str) -> int:
        self._load_sync()
        return len(self._engine.tokenize_plain(text))

    def cached_keys(self) -> list[str]:
        """Cache keys with a KV state (saved ones least recently used first)."""
        return self._runner.cached_keys()

    def cache_stats(self) -> dict[str, int]:
        """The model's sequences (and how many hold a key's tokens), the states saved
        beside them within the KV budget, and how many were dropped to make room (each
        dropped key's next request evaluates its prompt again)."""
        return self._runner.cache_stats()

    async def forget_cache(self, *keys: str) -> None:
        """Drop the KV states of ``keys``, after any request using the model; none of
        their tokens stay in memory."""
        if self._engine.llama is None:
            return
        await self._runner.forget(keys)

    async def move_cache(self, source: str, target: str) -> bool:
        """Make the KV state evaluated under ``source`` ``target``'s (replacing target's),
        e.g. a participant's next prompt prefix warmed aside while their current one still
        serves them; False when ``source`` has no state (then nothing changes)."""
        if self._engine.llama is None:
            return False
        check_key(source)
        check_key(target)
        return await self._runner.move(source, target)

    # -- generation ----------------------------------------------------------------------
    def generate(self, messages: Messages, options: GenerationOptions) -> TextStream:
        if self._closed:
            raise LLMClosedError("the LLM service is closed")
        msgs = as_messages(messages)
        if options.max_tokens is not None and options.max_tokens < 1:
            raise ValueError("max_tokens must be positive")
        metrics = RequestMetrics(priority=options.priority, cache_key=options.cache_key)
        stream = TextStream(self._generate(msgs, options, metrics, lambda: stream), metrics)
        return stream

    async def _generate(
        self,
        messages: list[Any],
        options: GenerationOptions,
        metrics: RequestMetrics,
        get_stream: Callable[[], TextStream],
    ) -> AsyncIterator[str]:
        started = time.perf_counter()
        await self.load()
        req = self._requests.generation(messages, options, metrics)
        text = Detokenizer(self._engine.token_bytes, options.stop)
        try:
            async with aclosing(self._runner.tokens(req)) as tokens:
                async with aclosing(text_deltas(tokens, text, metrics, started)) as deltas:
                    async for delta in deltas:
                        yield delta
            finish: FinishReason = "stop" if text.hit or req.eog else "length"
            get_stream().finish_reason = finish
        finally:
            self._requests.finish(metrics, started)

    # -- extras --------------------------------------------------------------------------
    async def warm(
        self,
        messages: Messages,
        *,
        cache_key: str,
        priority: Priority | str = Priority.BACKGROUND,
        seed_key: str | None = None,
        user_next: bool = False,
        open_last: bool = False,
    ) -> RequestMetrics:
        """Evaluate the prompt of ``messages`` into ``cache_key``'s KV state, generating
        nothing, so the next request with this prefix starts fast (a key without a state
        starts from ``seed_key``'s, as in :class:`~edge.llm.GenerationOptions`); with
        ``user_next``, up to where a user message's text would begin; with ``open_last``,
        up to the end of the last message's text, words still coming (``format_warm``)."""
        started = time.perf_counter()
        msgs = as_messages(messages)
        metrics = RequestMetrics(priority=Priority(priority), cache_key=cache_key)
        await self.load()
        req = self._requests.warming(msgs, user_next, metrics, seed_key, open_last)
        metrics.reused_tokens = await self._runner.warm(req)
        metrics.prompt_eval_s = time.perf_counter() - started - (metrics.queue_wait_s or 0)
        self._requests.finish(metrics, started)
        return metrics

    async def state_bytes(self, n_tokens: int) -> int:
        """Size of a saved KV state holding ``n_tokens`` tokens (for sizing caches).

        Evaluates filler text under a temporary key, saves its state and forgets it.
        """
        if n_tokens < 1:
            raise ValueError("n_tokens must be positive")
        await self.load()
        return await self._runner.state_bytes(self._requests.probe(n_tokens))

    async def score(
        self,
        prompt: str,
        continuations: Sequence[str],
        *,
        cache_key: str | None = None,
        priority: Priority | str = Priority.INTERACTIVE,
        seed_key: str | None = None,
    ) -> ScoreResult:
        """Log-probability of each continuation after the raw ``prompt`` text.

        The prompt is evaluated once (its prefix reused from ``cache_key``'s state, or,
        while that key has none, from ``seed_key``'s: a copy, left unchanged); the
        first token of every continuation is read from that one next-token distribution,
        and only further tokens of multi-token continuations cost an evaluation each.
        """
        if self._closed:
            raise LLMClosedError("the LLM service is closed")
        if not continuations:
            raise ValueError("score needs at least one continuation")
        started = time.perf_counter()
        metrics = RequestMetrics(priority=Priority(priority), cache_key=cache_key)
        await self.load()
        req, conts = self._requests.scoring(prompt, continuations, metrics, seed_key)
        try:
            scores = await self._runner.score(req, conts)
        finally:
            self._requests.finish(metrics, started)
        return ScoreResult(scores, [len(c) for c in conts], metrics)
