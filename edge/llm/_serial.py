"""One request at a time in one llama.cpp sequence, behind the priority scheduler.

Background requests yield whenever interactive work waits — between tokens, and in the
middle of a prompt batch through llama.cpp's abort callback, which is checked between
graph nodes — then resume from their saved state. A generating request lends the model
while its reader holds a token (a paused speculative answer), so it never keeps others
waiting for longer than one step.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any, TypeVar

import anyio

from edge.runtime import urgency

from ._engine import EvalAborted, LlamaEngine
from ._runner import Generation, Request, gated, step_urgency
from ._scheduler import ModelScheduler, Slot
from ._types import GenerationError, LLMClosedError, LLMError, Priority, RequestMetrics
from ._worker import ModelThread

T = TypeVar("T")


class SerialRunner:
    """The proven path: the live context serves one cache key; others are saved states."""

    def __init__(
        self,
        engine: LlamaEngine,
        scheduler: ModelScheduler,
        thread: ModelThread,
        *,
        background_chunk_tokens: int,
        is_closed: Callable[[], bool],
    ) -> None:
        self._engine = engine
        self.scheduler = scheduler
        self._thread = thread
        self.background_chunk_tokens = max(1, background_chunk_tokens)
        self._is_closed = is_closed

    @property
    def queued(self) -> int:
        return self.scheduler.queued

    def cached_keys(self) -> list[str]:
        return self._engine.store.keys()

    def cache_stats(self) -> dict[str, int]:
        return {"sequences": 1, **self._engine.store.stats()}

    async def _step(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._thread.run(gated, fn, *args)

    def _check_open(self) -> None:
        if self._is_closed():
            raise LLMClosedError("the LLM service is closed")

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            async with self.scheduler.slot(Priority.INTERACTIVE, RequestMetrics()):
                await self._step(self._engine.close)

    async def forget(self, keys: Sequence[str]) -> None:
        async with self.scheduler.slot(Priority.INTERACTIVE, RequestMetrics()):
            live = self._engine.owner in keys
            for key in keys:
                self._engine.forget(key)
            if live:
                await self._step(self._engine.reset)

    async def move(self, source: str, target: str) -> bool:
        async with self.scheduler.slot(Priority.INTERACTIVE, RequestMetrics()):
            return self._engine.move(source, target)

    # -- evaluation ----------------------------------------------------------------------
    async def _ensure(
        self,
        slot: Slot,
        req: Request,
        target: Sequence[int],
        need_logits: bool = True,
    ) -> int:
        """Bring the live context to ``target`` for ``req.key``; returns the tokens reused.

        Background work stays preemptible while it evaluates: llama.cpp asks between graph
        nodes whether interactive work waits and, if so, drops the batch in progress
        (builds without that hook can only yield between ``background_chunk_tokens`` chunks).
        The request then yields the slot and, once back, plans again from its saved state.
        A key without a saved state starts from ``req.seed``'s (see ``Engine.switch_to``).
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
            await self._step(self._engine.switch_to, req.key, req.seed)
            slot.metrics.restore_s += time.perf_counter() - switched_at
            reuse, pending = self._engine.plan(target, need_logits)
            first_reuse = reuse if first_reuse is None else first_reuse
            await self._step(self._engine.truncate, reuse)
            if await self._eval_chunks(slot, pending, chunk, abort_check):
                return first_reuse

    async def _eval_chunks(
        self, slot: Slot, pending: list[int], chunk: int, abort_check: Any
    ) -> bool:
        """Evaluate ``pending`` in chunks; False when preempted on the way."""
        for start in range(0, len(pending), chunk):
            if await slot.checkpoint():
                return False
            try:
                await self._step(self._engine.eval, pending[start : start + chunk], abort_check)
            except EvalAborted:
                await slot.yield_()
                return False
        return True

    async def _next_token(
        self, slot: Slot, req: Request, context: Sequence[int], sampler: Any
    ) -> int:
        """Evaluate the token just generated (the last of ``context``) and sample the next.

        One worker-thread step while the live context is the request's own, one token short
        of ``context`` (per-step thread hops cost as much as a small model's token); the
        full path otherwise (background work preempted meanwhile, a switched context)."""
        engine = self._engine
        if not slot.should_yield() and engine.holds(req.key, context[:-1]):
            return await self._step(engine.advance, context[-1], sampler)
        await self._ensure(slot, req, context)
        return await self._step(engine.sample, sampler)

    # -- requests ------------------------------------------------------------------------
    async def tokens(self, req: Generation) -> AsyncGenerator[int, None]:
        """The generated tokens; the slot is lent to waiting work while the reader holds one."""
        engine, metrics = self._engine, req.metrics
        started = time.perf_counter()
        async with self.scheduler.slot(req.priority, metrics) as slot:
            self._check_open()
            try:
                with urgency(step_urgency(req.priority, None)):  # no yield inside
                    metrics.reused_tokens = await self._ensure(slot, req, req.tokens)
                    wait = metrics.queue_wait_s or 0
                    metrics.prompt_eval_s = time.perf_counter() - started - wait
                    sampler = await self._step(engine.new_sampler, req.temperature)
                    token = await self._step(engine.sample, sampler)
                generated: list[int] = []
                while len(generated) < req.budget:
                    if engine.is_eog(token):
                        req.eog = True
                        break
                    generated.append(token)
                    await slot.lend()
                    yield token
                    await slot.reclaim()
                    if len(generated) < req.budget:
                        level = step_urgency(req.priority, len(generated), req.key, started)
                        with urgency(level):
                            context = req.tokens + generated
                            token = await self._next_token(slot, req, context, sampler)
            except (LLMError, ValueError):
                raise
            except Exception as exc:
                if isinstance(exc, anyio.get_cancelled_exc_class()) or not slot.held:
                    raise
                await self._step(engine.reset)
                raise GenerationError(f"llama.cpp failed while generating: {exc!r}") from exc
            finally:
                if req.ephemeral:
                    engine.forget(req.key)

    async def warm(self, req: Request) -> int:
        async with self.scheduler.slot(req.priority, req.metrics) as slot:
            self._check_open()
            return await self._ensure(slot, req, req.tokens, need_logits=False)

    async def state_bytes(self, req: Request) -> int:
        async with self.scheduler.slot(Priority.INTERACTIVE, req.metrics) as slot:
            try:
                await self._ensure(slot, req, req.tokens, need_logits=False)
                return (await self._step(self._engine.save_state)).llama_state_size
            finally:
                self._engine.forget(req.key)

    async def _score(
        self, slot: Slot, req: Request, conts: Sequence[list[int]], started: float
    ) -> list[float]:
        engine = self._engine
        req.metrics.reused_tokens = await self._ensure(slot, req, req.tokens)
        req.metrics.prompt_eval_s = time.perf_counter() - started - (req.metrics.queue_wait_s or 0)
        base = await self._step(engine.logprobs)
        scores = [float(base[c[0]]) for c in conts]
        for i, cont in enumerate(conts):
            for j in range(1, len(cont)):
                await self._ensure(slot, req, req.tokens + cont[:j])
                scores[i] += float((await self._step(engine.logprobs))[cont[j]])
        return scores

    async def score(self, req: Request, conts: Sequence[list[int]]) -> list[float]:
        engine = self._engine
        started = time.perf_counter()
        async with self.scheduler.slot(req.priority, req.metrics) as slot:
            self._check_open()
            try:
                with urgency(step_urgency(req.priority, None)):
                    return await self._score(slot, req, conts, started)
            finally:
                if req.ephemeral:
                    engine.forget(req.key)
