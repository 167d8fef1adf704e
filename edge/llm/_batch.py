"""Continuous batching: one llama.cpp context holding several sequences at once.

:class:`SeqContext` (synchronous, worker thread only) owns a context made with
``n_seq_max`` sequences, each with its own KV stream of ``n_ctx`` cells. A cache key (a
participant) keeps its tokens live in a sequence; when every sequence is taken, the least
recently used idle one is saved into the :class:`KVStore` and handed over. A key without
a sequence or saved state starts as a copy of its seed key's (``llama_memory_seq_cp``).

One :meth:`SeqContext.step` is one ``llama_decode``: the next token of every generating
sequence, plus a chunk of the first newly arrived prompt in line, each sequence sampled
with its own sampler from its own row of logits.

:class:`BatchScheduler` (the event loop side) admits requests as :class:`SeqJob` s, at most
one per cache key and at most ``n_seq`` at once, interactive before background and, within
a priority, the key served least recently first; it bounds each key's queue. There is no
driver task: a request that needs the next step runs it (in a worker thread) unless
another request is already running it, and then waits for that one.
"""

from __future__ import annotations

import ctypes
import itertools
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from edge.runtime import NORMAL, URGENT, place_in_line, turn_started, urgency

from ._engine import AbortHook, LlamaEngine, SavedState, common_prefix, shifted_run
from ._kvstore import KVStore
from ._runner import Generation, Request, gated, step_urgency
from ._threads import ThreadPolicy
from ._types import LLMClosedError, LLMError, Priority, RequestMetrics
from ._worker import ModelThread

BACKGROUND_RANK = 1


def _urgency(job: SeqJob) -> int:
    """The compute gate's order for a step serving ``job`` (the step's is the most
    urgent of its jobs')."""
    if not isinstance(job, GenJob):
        return step_urgency(job.priority, None)
    return step_urgency(job.priority, job.produced, job.key, job.started)


_RANK = {Priority.INTERACTIVE: 0, Priority.BACKGROUND: BACKGROUND_RANK}


def _earlier_answers_first(ranked: list[tuple[int, SeqJob]]) -> list[tuple[int, SeqJob]]:
    """Urgent steps on a CPU: a later turn's prompt (or decision) sits out while the
    earliest answer in its first words gets them. Evaluated beside that answer's next
    token, a prompt chunk makes the step cost what the chunk costs (17 new tokens: 74 ms
    instead of 13 ms here), so the earlier turn, whose listener has waited longest, would
    hear its first piece later for the later turn's sake.

    A prompt sits out one answer's first words at most: once the answer it waited for is
    past them, it goes with the next step whatever other answer has started its first
    words meanwhile (else eight typed at once would be answered one after another)."""
    producing = [j for _, j in ranked if j.produced_any]
    if not producing:
        return ranked
    first = min(producing, key=lambda j: j.since)

    def sits_out(job: SeqJob) -> bool:
        if job.produced_any or job.since <= first.since:
            return False
        job.held_behind = job.held_behind or first
        return job.held_behind is first

    return [(rank, j) for rank, j in ranked if not sits_out(j)]


def _is_warm(job: SeqJob) -> bool:
    """A job that only evaluates its tokens (a warm-up): no logits, nothing generated."""
    return not job.need_logits and not isinstance(job, GenJob)


class QueueFullError(LLMError):
    """A participant already has as many requests waiting for the model as allowed."""


@dataclass(eq=False)
class SeqJob:
    """One request's use of one sequence: bring the sequence to ``target`` (evaluating what
    it does not hold yet) and, when ``need_logits``, call :meth:`complete` with the batch
    row of the last token's logits. A generating job extends ``target`` from there."""

    key: str
    priority: Priority
    target: list[int]
    metrics: RequestMetrics
    seed: str | None = None
    need_logits: bool = True
    ephemeral: bool = False
    shift_reuse: bool = False
    on_logits: Callable[[Any, int], None] | None = None
    out: deque[int] = field(default_factory=deque)
    ready: bool = False
    finished: bool = False
    seq: int | None = None
    reused: int | None = None
    arrival: int = 0
    since: float = 0.0  # its place in line: its turn's start (edge.runtime.place_in_line)
    paused: bool = False
    held_behind: SeqJob | None = field(default=None, repr=False, compare=False)

    @property
    def produced_any(self) -> bool:
        """Whether it has produced a token (only an answer does)."""
        return False

    @property
    def rank(self) -> int:
        return _RANK[self.priority]

    @property
    def slot(self) -> int:
        """The sequence of a job that has been assigned one (every job a step runs)."""
        assert self.seq is not None, "a job is assigned a sequence before it is stepped"
        return self.seq

    def wants_step(self) -> bool:
        return not (self.ready or self.finished)


@dataclass(eq=False)
class GenJob(SeqJob):
    """A generating job: samples after each evaluated token, stops at an end-of-generation
    token or after ``budget`` tokens; pauses while ``read_ahead`` tokens are unread."""

    sampler: Any = None
    budget: int = 1
    is_eog: Callable[[int], bool] = lambda _t: False
    read_ahead: int = 4
    produced: int = 0
    started: float = field(default_factory=time.perf_counter)

    @property
    def produced_any(self) -> bool:
        return self.produced > 0

    def wants_step(self) -> bool:
        return super().wants_step() and len(self.out) < self.read_ahead

    def sample(self, ctx: Any, idx: int) -> None:
        token = int(self.sampler.sample(ctx, idx))
        if self.is_eog(token):
            self.finished = True
            return
        self.produced += 1
        self.out.append(token)
        if self.produced >= self.budget:
            self.finished = True
        else:
            self.target.append(token)
            self.ready = False


class SeqContext:
    """The multi-sequence llama.cpp context and which key each sequence holds."""

    def __init__(
        self,
        model: Any,
        *,
        n_ctx: int,
        n_seq: int,
        n_batch: int,
        n_threads: int,
        store: KVStore,
        base_params: Any,
    ) -> None:
        from llama_cpp import _internals
        from llama_cpp import llama_cpp as capi

        params = capi.llama_context_params()
        ctypes.pointer(params)[0] = base_params  # the one-sequence context's settings
        params.n_ctx = n_ctx * n_seq
        params.n_batch = params.n_ubatch = n_batch
        params.n_seq_max = n_seq
        params.n_threads = params.n_threads_batch = n_threads
        params.kv_unified = False  # a stream per sequence: each attends to its own cells
        self._capi = capi
        self.ctx = _internals.LlamaContext(model=model, params=params, verbose=False)
        self.mem = capi.llama_get_memory(self.ctx.ctx)
        self.can_shift = bool(capi.llama_memory_can_shift(self.mem))
        self.n_ctx, self.n_seq, self.n_batch = n_ctx, n_seq, n_batch
        self.n_vocab = model.n_vocab()
        self._batch = capi.llama_batch_init(n_batch, 0, 1)
        self.tokens: list[list[int]] = [[] for _ in range(n_seq)]
        self.owner: list[str | None] = [None] * n_seq
        self._used = [0] * n_seq
        self._clock = itertools.count(1)
        self.store = store
        self._abort_hook = AbortHook.install(self.ctx.ctx)
        self.threads: ThreadPolicy | None = None  # fewer threads while others hold cores

    def close(self) -> None:
        if self._batch is not None:
            self._capi.llama_batch_free(self._batch)
            self._batch = None
        self.ctx.close()
        self.store.clear()

    @property
    def abort_check(self) -> Callable[[], bool] | None:
        """Asked between graph nodes of the next steps (True: drop the step); None: steps
        run to the end, without llama.cpp's abort callback (:class:`AbortHook`)."""
        return self._abort_hook.check if self._abort_hook is not None else None

    @abort_check.setter
    def abort_check(self, check: Callable[[], bool] | None) -> None:
        if self._abort_hook is not None:
            self._abort_hook.watch(check)

    # -- sequences -----------------------------------------------------------------------
    def seq_of(self, key: str) -> int | None:
        try:
            return self.owner.index(key)
        except ValueError:
            return None

    def live_keys(self) -> list[str]:
        return [k for k in self.owner if k is not None]

    def assign(self, job: SeqJob, busy: set[int]) -> None:
        """Give ``job`` its key's sequence: live, restored from the store, copied from its
        seed's, or empty; a sequence is freed from the least recently used idle key."""
        seq = self.seq_of(job.key)
        if seq is None:
            seq = min(
                (s for s in range(self.n_seq) if s not in busy),
                key=lambda s: (self.owner[s] is not None, self._used[s]),
            )
            self._evict(seq)
            self._fill(seq, job.key, job.seed)
        self._used[seq] = next(self._clock)
        job.seq = seq

    def _fill(self, seq: int, key: str, seed: str | None) -> None:
        state = self.store.pop(key)
        if state is None and seed is not None:
            seed_seq = self.seq_of(seed)
            if seed_seq is not None:
                self._capi.llama_memory_seq_cp(self.mem, seed_seq, seq, -1, -1)
                self.tokens[seq] = list(self.tokens[seed_seq])
            else:
                state = self.store.get(seed)
        if state is not None:
            self.load(seq, state)
        self.owner[seq] = key

    def _evict(self, seq: int) -> None:
        key = self.owner[seq]
        if key is not None and self.tokens[seq] and not key.startswith("__job:"):
            self.store.put(key, self.save(seq))
        self.clear(seq)

    def clear(self, seq: int) -> None:
        self._capi.llama_memory_seq_rm(self.mem, seq, -1, -1)
        self.tokens[seq] = []
        self.owner[seq] = None

    def save(self, seq: int) -> SavedState:
        capi, ctx = self._capi, self.ctx.ctx
        size = capi.llama_state_seq_get_size(ctx, seq)
        buf = (ctypes.c_uint8 * size)()
        if capi.llama_state_seq_get_data(ctx, buf, size, seq) != size:
            raise RuntimeError("llama.cpp could not save a sequence's state")
        return SavedState(buf, tuple(self.tokens[seq]))

    def load(self, seq: int, state: SavedState) -> None:
        size = len(state.data)
        if self._capi.llama_state_seq_set_data(self.ctx.ctx, state.data, size, seq) != size:
            raise RuntimeError("llama.cpp could not restore a saved state")
        self.tokens[seq] = list(state.tokens)

    def forget(self, key: str, busy: set[int]) -> None:
        self.store.drop(key)
        seq = self.seq_of(key)
        if seq is not None:
            owner = self.owner[seq]
            self.clear(seq)
            if seq in busy:
                self.owner[seq] = owner  # its job keeps the sequence, now empty

    def move(self, source: str, target: str, busy: set[int]) -> bool:
        seq = self.seq_of(source)
        if seq is not None:
            self.forget(target, busy)
            self.owner[seq] = target
            return True
        state = self.store.pop(source)
        if state is None:
            return False
        self.forget(target, busy)
        self.store.put(target, state)
        return True

    # -- one step ------------------------------------------------------------------------
    def plan(self, job: SeqJob) -> list[int]:
        """The tokens ``job``'s sequence must still evaluate (dropping any that differ)."""
        assert job.seq is not None
        held, target = self.tokens[job.seq], job.target
        if job.reused is not None and len(held) == len(target) - 1 and held[-1:] == target[-2:-1]:
            return target[-1:]  # the common case: the token sampled last step
        reuse = common_prefix(held, target)
        interactive = job.priority is Priority.INTERACTIVE  # never aborted before its decode
        if job.shift_reuse and job.reused is None and self.can_shift and interactive:
            reuse = self._shift(job.seq, held, target, reuse)
        if job.need_logits and reuse == len(target):
            reuse -= 1
        if reuse < len(held):
            self._capi.llama_memory_seq_rm(self.mem, job.seq, reuse, -1)
            del held[reuse:]
        if job.reused is None:
            job.reused = reuse
        return target[reuse:]

    def _shift(self, seq: int, held: list[int], target: list[int], start: int) -> int:
        """Reuse the run of ``held`` that ``target`` goes on with after one cut span (a
        client's oldest messages dropped): the span's cells are removed and the run's moved
        back over it (llama.cpp rotates their keys at the next decode, which follows in
        this step). Returns the tokens now reused; what follows the run goes next."""
        found = shifted_run(held, target, start)
        if found is None:
            return start
        offset, length = found
        self._capi.llama_memory_seq_rm(self.mem, seq, start, offset)
        self._capi.llama_memory_seq_add(self.mem, seq, offset, offset + length, start - offset)
        held[start:] = held[offset:]
        return start + length

    def step(self, jobs: list[SeqJob], chunk: int) -> bool:
        """One ``llama_decode`` for ``jobs`` (already assigned); False when aborted."""
        entries: list[tuple[SeqJob, list[int], bool]] = []
        room = self.n_batch
        planned = [(job, self.plan(job)) for job in jobs]
        for job, pending in planned:
            if not pending:
                job.ready = True
        tokens = [(job, p) for job, p in planned if len(p) == 1]
        prompts = [(job, p) for job, p in planned if len(p) > 1]
        # One prompt per step, the first in line (``jobs`` come by rank, then their turns'
        # start): on a CPU a prompt token costs about the same alone or batched, so
        # prompts evaluated together would all wait for the last of them, while one at a
        # time the first answer starts after one prompt, the second after two. A prompt
        # chunk delays the next token of every generating sequence in the step.
        limit = chunk if tokens else self.n_batch
        for job, pending in [*tokens, *prompts[:1]]:
            if room == 0:
                break
            take = min(len(pending), room, limit)
            entries.append((job, pending[:take], take == len(pending)))
            room -= take
        if not entries:
            return True
        if not self._decode(entries):
            return False
        self._after(entries)
        return True

    def _decode(self, entries: list[tuple[SeqJob, list[int], bool]]) -> bool:
        batch, i = self._batch, 0
        for job, toks, completes in entries:
            start = len(self.tokens[job.slot])
            for j, tok in enumerate(toks):
                batch.token[i] = tok
                batch.pos[i] = start + j
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = job.seq
                batch.logits[i] = completes and job.need_logits and j == len(toks) - 1
                i += 1
        batch.n_tokens = i
        policy, one_token = self.threads, i == 1
        threads = policy.apply(self.ctx.ctx, one_token=one_token) if policy else 0
        started = time.perf_counter()
        rc = self._capi.llama_decode(self.ctx.ctx, batch)
        if policy is not None and one_token and rc == 0:
            policy.one_token_took(threads, time.perf_counter() - started)
        if rc == 2 and self.abort_check is not None:
            for job, _, _ in entries:  # drop what the aborted batch may have left
                self._capi.llama_memory_seq_rm(self.mem, job.slot, len(self.tokens[job.slot]), -1)
            return False
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        return True

    def _after(self, entries: list[tuple[SeqJob, list[int], bool]]) -> None:
        i = 0
        for job, toks, completes in entries:
            self.tokens[job.slot].extend(toks)
            i += len(toks)
            if not completes:
                continue
            job.ready = True
            if job.need_logits and job.on_logits is not None:
                job.on_logits(self.ctx, i - 1)

    def logprobs(self, idx: int) -> Any:
        """Log-softmax (numpy) of the logits at batch row ``idx``."""
        import numpy as np

        raw = self._capi.llama_get_logits_ith(self.ctx.ctx, idx)
        logits = np.ctypeslib.as_array(raw, shape=(self.n_vocab,)).astype(np.float64)
        peak = logits.max()
        return logits - (peak + np.log(np.exp(logits - peak).sum()))


class BatchScheduler:
    """Admission, fair share and stepping for a :class:`SeqContext` (event-loop side).

    ``first_words_alone``: while any request's step is urgent (a turn's prompt or an
    answer's first words, :func:`~edge.llm._runner.step_urgency`) and no interactive
    request waits for a sequence, answers past their first words sit out. On a CPU a
    step's cost grows with the sequences in it (one 17 ms, four 40 ms here), and an answer
    already speaking has seconds of text ahead of its listener, while someone who just
    stopped speaking waits for a first sentence. On a GPU a step for several costs about
    one, so there everyone steps together."""

    def __init__(
        self,
        run_sync: Callable[..., Any],
        *,
        n_seq: int,
        prefill_chunk: int = 64,
        max_waiting_per_key: int = 4,
        first_words_alone: bool = False,
    ) -> None:
        self.ctx: SeqContext | None = None
        self._run_sync = run_sync  # awaits fn(*args) in the model's worker thread
        self.n_seq = n_seq
        self.prefill_chunk = prefill_chunk
        self.max_waiting_per_key = max_waiting_per_key
        self.first_words_alone = first_words_alone
        self.active: list[SeqJob] = []
        self._waiting: dict[str, deque[SeqJob]] = {}
        self._served: dict[str, int] = {}
        self._arrival = itertools.count()
        self._urgent_arrivals = 0
        self._dead: list[str] = []
        self._stepping = False
        self._progress = anyio.Event()
        self.steps = 0
        self._steps_by: dict[Priority, int] = {}

    @property
    def queued(self) -> int:
        return sum(len(q) for q in self._waiting.values())

    def steps_of(self, priority: Priority) -> int:
        """How many steps so far included work of ``priority``."""
        return self._steps_by.get(priority, 0)

    # -- admission -----------------------------------------------------------------------
    @asynccontextmanager
    async def admitted(self, job: SeqJob) -> AsyncIterator[SeqJob]:
        """Queue ``job`` behind its key's earlier jobs; hold a sequence while inside.

        At most ``max_waiting_per_key`` jobs of a key wait at ``job``'s priority or above:
        background work queued for a key (preparations that a busy machine never got to)
        never keeps that participant's turn out, and is itself refused past the limit."""
        queue = self._waiting.setdefault(job.key, deque())
        ahead = sum(1 for waiting in queue if waiting.rank <= job.rank)
        if ahead >= self.max_waiting_per_key:
            raise QueueFullError(
                f"{job.key!r} already has {ahead} requests waiting for the model "
                f"(at most {self.max_waiting_per_key}); wait for an answer before asking again"
            )
        job.arrival = next(self._arrival)
        job.since = place_in_line()
        queue.append(job)
        if job.rank < BACKGROUND_RANK:
            self._urgent_arrivals += 1
            self._cut_warm_short(job.key)
        queued_at = time.perf_counter()
        try:
            self._admit()
            while job not in self.active:
                await self._drive()
            job.metrics.queue_wait_s = time.perf_counter() - queued_at
            yield job
        finally:
            self._leave(job)

    def _leave(self, job: SeqJob) -> None:
        job.finished = True
        queue = self._waiting.get(job.key)
        if queue is not None and job in queue:
            queue.remove(job)
        if job in self.active:
            self.active.remove(job)
        if queue is not None and not queue:
            del self._waiting[job.key]
        if job.ephemeral:
            self._dead.append(job.key)
            self._served.pop(job.key, None)
        self._admit()
        self._notify()

    def _cut_warm_short(self, key: str) -> None:
        """Interactive work wants ``key``'s sequence: a warm-up running on it (a head start
        for that very work, e.g. a participant's prefix warmed as they join) ends where it
        is. What it evaluated stays in the sequence, and the request evaluates the rest
        itself, at its own place in line, instead of waiting for the whole warm-up."""
        warms = [
            j
            for j in [*self.active, *self._waiting.get(key, ())]
            if j.key == key and j.rank >= BACKGROUND_RANK and _is_warm(j)
        ]
        for job in warms:
            job.ready = True
        if warms:
            self._notify()

    def _rank(self, job: SeqJob) -> int:
        """``job``'s rank, raised to the best of its key's waiting jobs: background work
        that interactive work of the same key waits behind runs as interactive."""
        queue = self._waiting.get(job.key, ())
        return min([job.rank, *(j.rank for j in queue)])

    def _admit(self) -> None:
        busy = {j.key for j in self.active}
        heads = sorted(
            (q[0] for k, q in self._waiting.items() if k not in busy and q),
            key=lambda j: (self._rank(j), self._served.get(j.key, -1), j.since, j.arrival),
        )
        for job in heads:
            if len(self.active) >= self.n_seq and not self._preempt_for(job):
                break
            self._waiting[job.key].popleft()
            self.active.append(job)
            self._served[job.key] = next(self._arrival)

    def _preempt_for(self, job: SeqJob) -> bool:
        """Send an admitted background job back to the head of its queue for ``job``."""
        if self._rank(job) >= BACKGROUND_RANK:
            return False
        victims = [j for j in self.active if self._rank(j) >= BACKGROUND_RANK]
        if not victims:
            return False
        victim = victims[-1]
        self.active.remove(victim)
        victim.metrics.preemptions += 1
        self._waiting.setdefault(victim.key, deque()).appendleft(victim)
        return True

    # -- stepping ------------------------------------------------------------------------
    def _notify(self) -> None:
        event, self._progress = self._progress, anyio.Event()
        event.set()

    async def _wait_progress(self) -> None:
        await self._progress.wait()

    async def wait(self, job: SeqJob, done: Callable[[], bool]) -> None:
        """Run steps (or wait for others') until ``done()``."""
        while not done():
            if job.finished and job not in self.active:
                return
            await self._drive()

    async def _drive(self) -> None:
        """Run the next step when none runs and some job wants one, else wait for news.
        Any waiting request drives, so a reader that pauses holds nobody up."""
        if self._stepping or not self._runnable():
            await self._wait_progress()
        else:
            await self._advance()

    def _runnable(self) -> list[SeqJob]:
        ranked = [(self._rank(j), j) for j in self.active if j.wants_step()]
        if any(rank < BACKGROUND_RANK for rank, _ in ranked):
            ranked = [(rank, j) for rank, j in ranked if rank < BACKGROUND_RANK]
        if self._first_words_alone_now(ranked):
            ranked = [(rank, j) for rank, j in ranked if _urgency(j) == URGENT]
            ranked = _earlier_answers_first(ranked)
        return [j for _, j in sorted(ranked, key=lambda rj: (rj[0], rj[1].since, rj[1].arrival))]

    def _first_words_alone_now(self, ranked: list[tuple[int, SeqJob]]) -> bool:
        """Whether answers past their first words sit out this step: some request's step is
        urgent, and no interactive request waits for a sequence (one that an answer
        finishing would free)."""
        if not self.first_words_alone or not any(_urgency(j) == URGENT for _, j in ranked):
            return False
        busy = {j.key for j in self.active}
        return not any(
            q[0].key not in busy and self._rank(q[0]) < BACKGROUND_RANK
            for q in self._waiting.values()
            if q
        )

    async def _advance(self) -> None:
        self._stepping = True
        try:
            jobs = self._runnable()
            self._mark_paused(jobs)
            active = list(self.active)
            background = all(self._rank(j) >= BACKGROUND_RANK for j in jobs)
            urgent = self._urgent_arrivals
            abort = (lambda: self._urgent_arrivals != urgent) if background else None
            dead, self._dead = self._dead, []
            first = min((j.since for j in jobs), default=None)  # its place in the gate's line
            with urgency(min(map(_urgency, jobs), default=NORMAL)), turn_started(first):
                await self._run_sync(self._step_sync, jobs, active, dead, abort)
            self.steps += 1
            for priority in {j.priority for j in jobs}:
                self._steps_by[priority] = self._steps_by.get(priority, 0) + 1
        finally:
            self._stepping = False
            self._notify()

    def _mark_paused(self, jobs: list[SeqJob]) -> None:
        """Count a preemption each time admitted background work starts sitting out."""
        for job in self.active:
            sitting_out = job.wants_step() and job not in jobs
            if sitting_out and not job.paused:
                job.metrics.preemptions += 1
            job.paused = sitting_out

    def _step_sync(
        self,
        jobs: list[SeqJob],
        active: list[SeqJob],
        dead: list[str],
        abort: Callable[[], bool] | None,
    ) -> None:
        ctx = self.ctx
        assert ctx is not None
        busy = self._busy(active)
        for key in dead:
            ctx.forget(key, busy)
        for job in jobs:
            if job.seq is None or ctx.owner[job.seq] != job.key:
                ctx.assign(job, busy)
                busy.add(job.slot)
        ctx.abort_check = abort
        try:
            ctx.step(jobs, self.prefill_chunk)
        finally:
            ctx.abort_check = None

    def _busy(self, active: list[SeqJob]) -> set[int]:
        """The sequences admitted jobs hold (a preempted job's may have been given away)."""
        assert self.ctx is not None
        owner = self.ctx.owner
        return {j.seq for j in active if j.seq is not None and owner[j.seq] == j.key}

    async def exclusive(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(ctx, busy, *args)`` in the worker thread between steps."""
        while self._stepping:
            await self._wait_progress()
        self._stepping = True
        try:
            active = list(self.active)
            return await self._run_sync(lambda: fn(self.ctx, self._busy(active), *args))
        finally:
            self._stepping = False
            self._notify()


class BatchRunner:
    """:class:`~edge.llm.LlamaCppLLM`'s requests as jobs of one :class:`BatchScheduler`."""

    def __init__(
        self,
        engine: LlamaEngine,
        thread: ModelThread,
        *,
        n_seq: int,
        prefill_chunk: int,
        max_waiting_per_key: int,
        first_words_alone: bool = False,
        is_closed: Callable[[], bool],
    ) -> None:
        self._engine = engine
        self._thread = thread
        self._is_closed = is_closed
        self.scheduler = BatchScheduler(
            self._run,
            n_seq=n_seq,
            prefill_chunk=prefill_chunk,
            max_waiting_per_key=max_waiting_per_key,
            first_words_alone=first_words_alone,
        )

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await self._thread.run(gated, fn, *args)

    def loaded(self) -> None:
        """Make the multi-sequence context (worker thread, after the engine loaded)."""
        engine = self._engine
        ctx = SeqContext(
            engine.llama._model,
            n_ctx=engine.n_ctx,
            n_seq=self.scheduler.n_seq,
            n_batch=engine.n_batch,
            n_threads=engine.n_threads,
            store=engine.store,
            base_params=engine.llama.context_params,
        )
        ctx.threads = engine.thread_policy
        self.scheduler.ctx = ctx

    @property
    def queued(self) -> int:
        return self.scheduler.queued

    def cached_keys(self) -> list[str]:
        ctx = self.scheduler.ctx
        live = [] if ctx is None else [k for k in ctx.live_keys() if not k.startswith("__job:")]
        return self._engine.store.keys() + live

    def cache_stats(self) -> dict[str, int]:
        ctx = self.scheduler.ctx
        live = 0 if ctx is None else len(ctx.live_keys())
        return {
            "sequences": self.scheduler.n_seq,
            "live_sequences": live,
            **self._engine.store.stats(),
        }

    def _check_open(self) -> None:
        if self._is_closed():
            raise LLMClosedError("the LLM service is closed")

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            if self.scheduler.ctx is not None:
                await self.scheduler.exclusive(lambda ctx, _busy: ctx.close())
            await self._run(self._engine.close)

    async def forget(self, keys: Sequence[str]) -> None:
        def drop(ctx: SeqContext, busy: set[int]) -> None:
            for key in keys:
                ctx.forget(key, busy)

        await self.scheduler.exclusive(drop)

    async def move(self, source: str, target: str) -> bool:
        return bool(
            await self.scheduler.exclusive(lambda ctx, busy: ctx.move(source, target, busy))
        )

    def _job(self, req: Request, cls: type[SeqJob] = SeqJob, **fields: Any) -> Any:
        return cls(
            key=req.key,
            priority=req.priority,
            target=list(req.tokens),
            metrics=req.metrics,
            seed=req.seed,
            ephemeral=req.ephemeral,
            shift_reuse=req.shift_reuse,
            **fields,
        )

    async def tokens(self, req: Generation) -> AsyncGenerator[int, None]:
        engine = self._engine
        sampler = engine.new_sampler(req.temperature)
        job: GenJob = self._job(
            req, GenJob, sampler=sampler, budget=req.budget, is_eog=engine.is_eog
        )
        job.on_logits = job.sample
        started = time.perf_counter()
        async with self.scheduler.admitted(job):
            self._check_open()
            while True:
                await self.scheduler.wait(job, lambda: bool(job.out) or job.finished)
                if job.metrics.prompt_eval_s is None and job.reused is not None:
                    req.metrics.reused_tokens = job.reused
                    req.metrics.prompt_eval_s = (
                        time.perf_counter() - started - (req.metrics.queue_wait_s or 0)
                    )
                if not job.out:
                    break
                yield job.out.popleft()
        req.eog = job.produced < job.budget

    async def _evaluate(self, job: SeqJob) -> None:
        await self.scheduler.wait(job, lambda: job.ready)

    async def warm(self, req: Request) -> int:
        job = self._job(req, need_logits=False)
        async with self.scheduler.admitted(job):
            self._check_open()
            await self._evaluate(job)
        return job.reused or 0

    async def state_bytes(self, req: Request) -> int:
        job = self._job(req, need_logits=False)
        async with self.scheduler.admitted(job):
            await self._evaluate(job)
            state = await self.scheduler.exclusive(lambda ctx, _busy: ctx.save(job.seq))
        return int(state.llama_state_size)

    async def score(self, req: Request, conts: Sequence[list[int]]) -> list[float]:
        rows: list[Any] = []
        ctx = self.scheduler.ctx
        assert ctx is not None
        job = self._job(req, on_logits=lambda _ctx, idx: rows.append(ctx.logprobs(idx)))
        started = time.perf_counter()
        async with self.scheduler.admitted(job):
            self._check_open()
            await self._evaluate(job)
            req.metrics.reused_tokens = job.reused or 0
            wait = req.metrics.queue_wait_s or 0
            req.metrics.prompt_eval_s = time.perf_counter() - started - wait
            scores = [float(rows[0][c[0]]) for c in conts]
            for i, cont in enumerate(conts):
                for j in range(1, len(cont)):
                    job.target, job.ready = list(req.tokens) + cont[:j], False
                    await self._evaluate(job)
                    scores[i] += float(rows[-1][cont[j]])
        return scores
