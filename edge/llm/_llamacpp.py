"""``LlamaCppLLM``: one GGUF model in-process, behind the priority scheduler."""

from __future__ import annotations

import codecs
import itertools
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio

from edge.runtime import COMPUTE_GATE

from ._engine import EvalAborted, LlamaEngine
from ._scheduler import ModelScheduler, Slot
from ._types import (
    ContextOverflowError,
    GenerationError,
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

T = TypeVar("T")

DEFAULT_KV_CACHE_BUDGET = 256 * 2**20


@dataclass
class ScoreResult:
    """``logprobs[i]``: log P(continuations[i] | prompt), summed over its tokens."""

    logprobs: list[float]
    token_counts: list[int]
    metrics: RequestMetrics


def split_on_stop(text: str, stop: Sequence[str]) -> tuple[str, bool, str]:
    """Split streamed text at the first stop string.

    Returns ``(emit, hit, keep)``: text safe to emit, whether a stop string was found, and
    the tail held back because it could still become a stop string.
    """
    if not stop:
        return text, False, ""
    first = min((i for s in stop if (i := text.find(s)) >= 0), default=-1)
    if first >= 0:
        return text[:first], True, ""
    hold = 0
    for s in stop:
        for n in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:n]):
                hold = max(hold, n)
                break
    return text[: len(text) - hold], False, text[len(text) - hold :]


def _gated(fn: Callable[..., T], *args: Any) -> T:
    """One model step, alone among the device's heavy steps (:data:`COMPUTE_GATE`)."""
    with COMPUTE_GATE.hold():
        return fn(*args)


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


class LlamaCppLLM(StreamingLLM):
    """A local GGUF model through llama-cpp-python, implementing :class:`LLMService`.

    * One :class:`ModelScheduler` serializes all model work: interactive requests first.
      Background requests yield whenever interactive work waits — between tokens, and in
      the middle of a prompt batch through llama.cpp's abort callback, which is checked
      between graph nodes — then resume from their saved state.
    * Prompt-prefix reuse: each ``cache_key`` (a participant) keeps its KV state. When
      another key used the model in between, the state is restored from a byte-bounded LRU
      store, so a follow-up evaluates only its new tokens.
    * The chat template comes from the GGUF metadata and is rendered with
      ``enable_thinking=False`` (templates without that switch ignore it).
    * Cancellation (cancelling the caller, or closing a stream) stops at the next step and
      leaves the model usable.

    Extras beyond the protocol: :meth:`warm` (fill a key's cache without generating),
    :meth:`score` (log-probabilities of continuations, for decisions), :meth:`format_chat`,
    :meth:`count_tokens`, ``activity`` (idle tracking) and ``metrics_log``.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        n_gpu_layers: int = 0,
        kv_cache_budget_bytes: int = DEFAULT_KV_CACHE_BUDGET,
        default_max_tokens: int = 256,
        temperature: float = 0.2,
        seed: int = 0,
        background_chunk_tokens: int = 128,
    ) -> None:
        if n_ctx is not None and n_ctx < 64:
            raise ValueError("n_ctx must be at least 64 tokens")
        if default_max_tokens < 1:
            raise ValueError("default_max_tokens must be positive")
        self.model_path = resolve_model_path(model_path)
        self.default_max_tokens = default_max_tokens
        self.temperature = temperature
        self.background_chunk_tokens = max(1, background_chunk_tokens)
        self.scheduler = ModelScheduler()
        self.activity = self.scheduler.activity
        self.metrics_log: deque[RequestMetrics] = deque(maxlen=1000)
        self._engine = LlamaEngine(
            self.model_path,
            n_ctx=n_ctx,
            n_threads=n_threads,
            n_gpu_layers=n_gpu_layers,
            seed=seed,
            kv_cache_budget_bytes=kv_cache_budget_bytes,
        )
        self._limiter = anyio.CapacityLimiter(1)
        self._load_lock = anyio.Lock()
        self._loaded = False
        self._closed = False
        self._jobs = itertools.count()

    # -- lifecycle -----------------------------------------------------------------------
    async def load(self) -> None:
        """Load the model now (otherwise the first request does)."""
        if self._closed:
            raise LLMClosedError("the LLM service is closed")
        async with self._load_lock:
            if not self._loaded:
                await anyio.to_thread.run_sync(self._engine.load, limiter=self._limiter)
                self._loaded = True

    def _load_sync(self) -> None:
        if not self._loaded:
            self._engine.load()
            self._loaded = True

    async def close(self) -> None:
        """Wait for the model to be free, then release it. Later requests fail clearly."""
        if self._closed:
            return
        self._closed = True
        metrics = RequestMetrics()
        with anyio.CancelScope(shield=True):
            async with self.scheduler.slot(Priority.INTERACTIVE, metrics):
                await anyio.to_thread.run_sync(self._engine.close, limiter=self._limiter)

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
            detail=f"{self.model_path} · {self.scheduler.queued} queued · "
            f"{len(self._engine.store)} cached keys ({self._engine.store.used_bytes} B)",
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
        """Cache keys with a saved KV state (least recently used first)."""
        return self._engine.store.keys()

    async def forget_cache(self, *keys: str) -> None:
        """Drop the KV states saved under ``keys``, after any request using the model; the
        live context is cleared too when it holds one of them, so none of their tokens
        stay in memory."""
        if self._engine.llama is None:
            return
        async with self.scheduler.slot(Priority.INTERACTIVE, RequestMetrics()):
            live = self._engine.owner in keys
            for key in keys:
                self._engine.forget(key)
            if live:
                await self._step(self._engine.reset)

    async def move_cache(self, source: str, target: str) -> bool:
        """Make the KV state evaluated under ``source`` ``target``'s (replacing target's),
        e.g. a participant's next prompt prefix warmed aside while their current one still
        serves them; False when ``source`` has no state (then nothing changes)."""
        if self._engine.llama is None:
            return False
        if any(key.startswith("__job:") for key in (source, target)):
            raise ValueError("cache keys starting with '__job:' are reserved")
        async with self.scheduler.slot(Priority.INTERACTIVE, RequestMetrics()):
            return self._engine.move(source, target)

    # -- internals -----------------------------------------------------------------------
    async def _step(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(_gated, fn, *args, limiter=self._limiter)

    def _check_fits(self, tokens: Sequence[int], what: str) -> None:
        n_ctx = self._engine.n_ctx
        if len(tokens) >= n_ctx:
            raise ContextOverflowError(
                f"{what} is {len(tokens)} tokens but the context window is {n_ctx} tokens; "
                "shorten it (smaller context budgets) or load the model with a larger n_ctx"
            )

    async def _ensure(
        self,
        slot: Slot,
        key: str,
        target: Sequence[int],
        need_logits: bool = True,
        seed: str | None = None,
    ) -> int:
        """Bring the live context to ``target`` for ``key``; returns the tokens reused.

        Background work stays preemptible while it evaluates: llama.cpp asks between graph
        nodes whether interactive work waits and, if so, drops the batch in progress
        (builds without that hook can only yield between ``background_chunk_tokens`` chunks).
        The request then yields the slot and, once back, plans again from its saved state.
        A ``key`` without a saved state starts from ``seed``'s (see ``Engine.switch_to``).
        """
        chunk = self._engine.n_batch
        abort_check = None
        if slot.priority is Priority.BACKGROUND:
            # Smaller batches bound the work an abort throws away (and, without the hook,
            # how long an interactive request waits).
            chunk = min(chunk, self.background_chunk_tokens)
            if self._engine.can_abort:
                abort_check = slot.should_yield
        first_reuse: int | None = None
        while True:
            switched_at = time.perf_counter()
            await self._step(self._engine.switch_to, key, seed)
            slot.metrics.restore_s += time.perf_counter() - switched_at
            reuse, pending = self._engine.plan(target, need_logits)
            first_reuse = reuse if first_reuse is None else first_reuse
            await self._step(self._engine.truncate, reuse)
            preempted = False
            for start in range(0, len(pending), chunk):
                if await slot.checkpoint():
                    preempted = True
                    break
                try:
                    await self._step(self._engine.eval, pending[start : start + chunk], abort_check)
                except EvalAborted:
                    await slot.yield_()
                    preempted = True
                    break
            if not preempted:
                return first_reuse

    async def _next_token(self, slot: Slot, key: str, context: Sequence[int], sampler: Any) -> int:
        """Evaluate the token just generated (the last of ``context``) and sample the next.

        One worker-thread step while the live context is the request's own, one token short
        of ``context`` (per-step thread hops cost as much as a small model's token); the
        full path otherwise (background work preempted meanwhile, a switched context)."""
        engine = self._engine
        if not slot.should_yield() and engine.holds(key, context[:-1]):
            return await self._step(engine.advance, context[-1], sampler)
        await self._ensure(slot, key, context)
        return await self._step(engine.sample, sampler)

    def _job_key(self, cache_key: str | None) -> tuple[str, bool]:
        if cache_key is not None:
            if cache_key.startswith("__job:"):
                raise ValueError("cache keys starting with '__job:' are reserved")
            return cache_key, False
        return f"__job:{next(self._jobs)}", True

    def _finish(self, metrics: RequestMetrics, started: float) -> None:
        metrics.total_s = time.perf_counter() - started
        self.metrics_log.append(metrics)

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
        max_tokens = options.max_tokens or self.default_max_tokens
        temperature = self.temperature if options.temperature is None else options.temperature
        stop, priority, cache_key = list(options.stop), options.priority, options.cache_key
        started = time.perf_counter()
        await self.load()
        engine = self._engine
        prompt = engine.tokenize_prompt(engine.format_chat(messages, True))
        self._check_fits(prompt, "the prompt")
        metrics.prompt_tokens = len(prompt)
        budget = min(max_tokens, engine.n_ctx - len(prompt))
        key, ephemeral = self._job_key(cache_key)
        async with self.scheduler.slot(priority, metrics) as slot:
            if self._closed:
                raise LLMClosedError("the LLM service is closed")
            try:
                metrics.reused_tokens = await self._ensure(slot, key, prompt, seed=options.seed_key)
                metrics.prompt_eval_s = time.perf_counter() - started - (metrics.queue_wait_s or 0)
                sampler = await self._step(engine.new_sampler, temperature)
                decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
                generated: list[int] = []
                held = ""
                finish = "length"
                first_at: float | None = None
                token = await self._step(engine.sample, sampler)
                while len(generated) < budget:
                    if engine.is_eog(token):
                        finish = "stop"
                        break
                    generated.append(token)
                    metrics.generated_tokens += 1
                    emit, hit, held = split_on_stop(
                        held + decoder.decode(engine.token_bytes(token)), stop
                    )
                    if emit:
                        if first_at is None:
                            first_at = time.perf_counter()
                            metrics.ttft_s = first_at - started
                        yield emit
                    if hit:
                        finish = "stop"
                        held = ""
                        break
                    if len(generated) < budget:
                        token = await self._next_token(slot, key, prompt + generated, sampler)
                tail = held + decoder.decode(b"", final=True)
                if tail:
                    yield tail
                if first_at is not None:
                    metrics.generation_s = time.perf_counter() - first_at
                get_stream().finish_reason = finish  # type: ignore[assignment]
            except (LLMError, ValueError):
                raise
            except Exception as exc:
                if isinstance(exc, anyio.get_cancelled_exc_class()):
                    raise
                await self._step(engine.reset)
                raise GenerationError(f"llama.cpp failed while generating: {exc!r}") from exc
            finally:
                if ephemeral:
                    engine.forget(key)
                self._finish(metrics, started)

    # -- extras --------------------------------------------------------------------------
    async def warm(
        self,
        messages: Messages,
        *,
        cache_key: str,
        priority: Priority | str = Priority.BACKGROUND,
        seed_key: str | None = None,
    ) -> RequestMetrics:
        """Evaluate the prompt of ``messages`` into ``cache_key``'s KV state, generating
        nothing, so the next request with this prefix starts fast (a key without a state
        starts from ``seed_key``'s, as in :class:`~edge.llm.GenerationOptions`)."""
        if self._closed:
            raise LLMClosedError("the LLM service is closed")
        started = time.perf_counter()
        msgs = as_messages(messages)
        priority = Priority(priority)
        metrics = RequestMetrics(priority=priority, cache_key=cache_key)
        await self.load()
        prompt = self._engine.tokenize_prompt(self._engine.format_chat(msgs, True))
        self._check_fits(prompt, "the prompt to warm")
        metrics.prompt_tokens = len(prompt)
        key, _ = self._job_key(cache_key)
        async with self.scheduler.slot(priority, metrics) as slot:
            if self._closed:
                raise LLMClosedError("the LLM service is closed")
            metrics.reused_tokens = await self._ensure(
                slot, key, prompt, need_logits=False, seed=seed_key
            )
            metrics.prompt_eval_s = time.perf_counter() - started - (metrics.queue_wait_s or 0)
        self._finish(metrics, started)
        return metrics

    async def state_bytes(self, n_tokens: int) -> int:
        """Size of a saved KV state holding ``n_tokens`` tokens (for sizing caches).

        Evaluates filler text under a temporary key, saves its state and forgets it.
        """
        if n_tokens < 1:
            raise ValueError("n_tokens must be positive")
        await self.load()
        engine = self._engine
        tokens = engine.tokenize_plain("the " * (n_tokens + 8))[:n_tokens]
        self._check_fits(tokens, "the state-size probe")
        key, _ = self._job_key(None)
        metrics = RequestMetrics(cache_key=key)
        async with self.scheduler.slot(Priority.INTERACTIVE, metrics) as slot:
            try:
                await self._ensure(slot, key, tokens, need_logits=False)
                return (await self._step(engine.save_state)).llama_state_size
            finally:
                engine.forget(key)

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
        priority = Priority(priority)
        metrics = RequestMetrics(priority=priority, cache_key=cache_key)
        await self.load()
        engine = self._engine
        tokens = engine.tokenize_prompt(prompt)
        conts = [engine.tokenize_plain(c) for c in continuations]
        for text, toks in zip(continuations, conts, strict=True):
            if not toks:
                raise ValueError(f"continuation {text!r} has no tokens")
        self._check_fits(tokens + max(conts, key=len), "the scoring prompt")
        metrics.prompt_tokens = len(tokens)
        key, ephemeral = self._job_key(cache_key)
        async with self.scheduler.slot(priority, metrics) as slot:
            if self._closed:
                raise LLMClosedError("the LLM service is closed")
            try:
                metrics.reused_tokens = await self._ensure(slot, key, tokens, seed=seed_key)
                metrics.prompt_eval_s = time.perf_counter() - started - (metrics.queue_wait_s or 0)
                base = await self._step(engine.logprobs)
                scores = [float(base[c[0]]) for c in conts]
                for i, cont in enumerate(conts):
                    for j in range(1, len(cont)):
                        await self._ensure(slot, key, tokens + cont[:j])
                        scores[i] += float((await self._step(engine.logprobs))[cont[j]])
            finally:
                if ephemeral:
                    engine.forget(key)
                self._finish(metrics, started)
        return ScoreResult(scores, [len(c) for c in conts], metrics)
