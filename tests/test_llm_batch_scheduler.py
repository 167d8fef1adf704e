"""The batch scheduler's order, fair share and bounds, with a scripted context."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from edge.llm import Priority, QueueFullError, RequestMetrics
from edge.llm._batch import BatchScheduler, GenJob, SeqContext, SeqJob
from edge.llm._runner import FIRST_WORDS_TOKENS
from edge.runtime import turn_started

pytestmark = pytest.mark.anyio

BG, INT = Priority.BACKGROUND, Priority.INTERACTIVE


class Sampler:
    def sample(self, _ctx: Any, _idx: int) -> int:
        return 7


class ScriptedContext:
    """Stands in for the llama.cpp context: each step gives every job one token."""

    def __init__(self, n_seq: int) -> None:
        self.owner: list[str | None] = [None] * n_seq
        self.steps: list[list[str]] = []

    def forget(self, key: str, busy: set[int]) -> None:
        if key in self.owner:
            self.owner[self.owner.index(key)] = None

    def assign(self, job: SeqJob, busy: set[int]) -> None:
        free = [s for s in range(len(self.owner)) if s not in busy]
        job.seq = next((s for s in free if self.owner[s] == job.key), free[0])
        self.owner[job.seq] = job.key

    def step(self, jobs: list[SeqJob], chunk: int) -> bool:
        self.steps.append([j.key for j in jobs])
        for job in jobs:
            job.reused = 0 if job.reused is None else job.reused
            job.ready = True
            if job.on_logits is not None:
                job.on_logits(None, 0)
        return True


def scheduler(n_seq: int, **kw: Any) -> tuple[BatchScheduler, ScriptedContext]:
    async def run(fn: Callable[..., Any], *args: Any) -> Any:
        await anyio.sleep(0.002)  # a step takes time
        return fn(*args)

    sched = BatchScheduler(run, n_seq=n_seq, **kw)
    ctx = ScriptedContext(n_seq)
    sched.ctx = ctx  # type: ignore[assignment]
    return sched, ctx


def gen_job(key: str, priority: Priority, budget: int, read_ahead: int = 64) -> GenJob:
    job = GenJob(
        key=key,
        priority=priority,
        target=[1],
        metrics=RequestMetrics(priority=priority),
        sampler=Sampler(),
        budget=budget,
        read_ahead=read_ahead,
    )
    job.on_logits = job.sample
    return job


async def generate(sched: BatchScheduler, job: GenJob, log: list[str], name: str = "") -> int:
    got = 0
    async with sched.admitted(job):
        log.append(f"start {name or job.key}")
        while True:
            await sched.wait(job, lambda: bool(job.out) or job.finished)
            if not job.out:
                break
            job.out.popleft()
            got += 1
    log.append(f"end {name or job.key}")
    return got


async def test_a_participants_further_turns_wait_behind_their_own_not_others() -> None:
    sched, _ = scheduler(n_seq=1)
    log: list[str] = []
    async with anyio.create_task_group() as tg:
        for name in ("a1", "a2", "a3"):
            tg.start_soon(generate, sched, gen_job("a", INT, 3), log, name)
            await anyio.sleep(0.001)
        tg.start_soon(generate, sched, gen_job("b", INT, 3), log, "b1")
    starts = [e.split()[1] for e in log if e.startswith("start")]
    assert starts == ["a1", "b1", "a2", "a3"]


async def test_answers_are_decoded_together_one_token_each_per_step() -> None:
    sched, ctx = scheduler(n_seq=4)
    log: list[str] = []
    async with anyio.create_task_group() as tg:
        for key in "abcd":
            tg.start_soon(generate, sched, gen_job(key, INT, 5), log)
    assert len(ctx.steps) <= 6 and sorted(ctx.steps[2]) == list("abcd")


async def test_background_sits_out_while_answers_run_then_resumes() -> None:
    sched, ctx = scheduler(n_seq=2)
    log: list[str] = []
    bg = gen_job("compaction", BG, 30)
    async with anyio.create_task_group() as tg:
        tg.start_soon(generate, sched, bg, log)
        while len(ctx.steps) < 3:  # noqa: ASYNC110
            await anyio.sleep(0.001)
        tg.start_soon(generate, sched, gen_job("p1", INT, 5), log)
    first = next(i for i, s in enumerate(ctx.steps) if "p1" in s)
    last = max(i for i, s in enumerate(ctx.steps) if "p1" in s)
    assert all(ctx.steps[i] == ["p1"] for i in range(first, last + 1))
    assert log.index("end p1") < log.index("end compaction")
    assert bg.metrics.preemptions == 1 and bg.produced == 30


async def test_background_gives_up_its_sequence_when_all_are_taken() -> None:
    sched, ctx = scheduler(n_seq=1)
    log: list[str] = []
    bg = gen_job("warm", BG, 20)
    async with anyio.create_task_group() as tg:
        tg.start_soon(generate, sched, bg, log)
        while len(ctx.steps) < 2:  # noqa: ASYNC110
            await anyio.sleep(0.001)
        tg.start_soon(generate, sched, gen_job("p1", INT, 3), log)
    assert log == ["start warm", "start p1", "end p1", "end warm"]
    assert bg.metrics.preemptions >= 1 and bg.produced == 20


async def test_a_full_queue_is_a_clear_error() -> None:
    sched, _ = scheduler(n_seq=1, max_waiting_per_key=2)
    hold = anyio.Event()

    async def held(job: SeqJob) -> None:
        async with sched.admitted(job):
            await hold.wait()

    def job() -> SeqJob:
        return SeqJob(key="a", priority=INT, target=[1], metrics=RequestMetrics())

    async with anyio.create_task_group() as tg:
        for _ in range(3):  # one admitted, two waiting
            tg.start_soon(held, job())
            await anyio.sleep(0.01)
        with pytest.raises(QueueFullError, match="'a' already has 2 requests waiting"):
            async with sched.admitted(job()):
                pass
        hold.set()
    assert sched.queued == 0 and not sched.active


async def test_a_reader_that_stops_reading_holds_nobody_up() -> None:
    sched, _ = scheduler(n_seq=2)
    log: list[str] = []
    paused = gen_job("spec", INT, 200, read_ahead=4)
    async with anyio.create_task_group() as tg:

        async def stalled() -> None:
            async with sched.admitted(paused):
                await sched.wait(paused, lambda: bool(paused.out))
                await anyio.sleep(3600)  # never reads again

        tg.start_soon(stalled)
        await anyio.sleep(0.01)
        with anyio.fail_after(60):  # the stalled reader never reads again: only a hang fails
            got = await generate(sched, gen_job("b", INT, 10), log)
        tg.cancel_scope.cancel()
    assert got == 10 and len(paused.out) == 4  # it stopped 4 tokens ahead of its reader


async def test_an_answer_waiting_behind_its_own_background_work_lifts_it() -> None:
    """A participant's decision waits behind the same key's background scoring: that work
    runs as interactive instead of sitting out behind everyone else's answers."""
    sched, ctx = scheduler(n_seq=4)
    log: list[str] = []
    prior = gen_job("decisions:a", BG, 6)
    async with anyio.create_task_group() as tg:
        tg.start_soon(generate, sched, prior, log, "prior")
        while not ctx.steps:  # noqa: ASYNC110
            await anyio.sleep(0.001)
        tg.start_soon(generate, sched, gen_job("b", INT, 40), log, "answer b")
        await anyio.sleep(0.005)
        tg.start_soon(generate, sched, gen_job("decisions:a", INT, 2), log, "decision a")
    assert log.index("end decision a") < log.index("end answer b")


async def test_a_turn_that_began_first_is_served_first_whatever_its_requests_arrival() -> None:
    """A participant's answer follows their routing decision, so it reaches the model
    after others' requests that came in meanwhile: it keeps its turn's place in line."""
    sched, _ = scheduler(n_seq=1)
    log: list[str] = []
    with turn_started() as early:
        pass
    async with anyio.create_task_group() as tg:
        tg.start_soon(generate, sched, gen_job("busy", INT, 5), log)
        await anyio.sleep(0.001)
        with turn_started():  # a later turn, whose request arrives first
            tg.start_soon(generate, sched, gen_job("later", INT, 2), log)
        await anyio.sleep(0.001)
        with turn_started(early):
            tg.start_soon(generate, sched, gen_job("earlier", INT, 2), log)
    starts = [e.split()[1] for e in log if e.startswith("start")]
    assert starts == ["busy", "earlier", "later"]


class _PlannedContext(SeqContext):
    """A :class:`SeqContext` without llama.cpp: each job's pending tokens are given, and a
    step records what it would decode."""

    def __init__(self, pending: dict[str, int]) -> None:  # no super().__init__: no model
        self.n_batch = 512
        self.pending = pending
        self.decoded: list[tuple[str, int]] = []

    def plan(self, job: SeqJob) -> list[int]:
        return [1] * self.pending[job.key]

    def _decode(self, entries: list[tuple[SeqJob, list[int], bool]]) -> bool:
        self.decoded = [(job.key, len(toks)) for job, toks, _ in entries]
        return True

    def _after(self, entries: list[tuple[SeqJob, list[int], bool]]) -> None:
        pass


def test_a_step_evaluates_one_prompt_the_first_in_line_beside_every_next_token() -> None:
    """Prompts evaluated together would all wait for the last of them (a prompt token
    costs about the same alone or batched on a CPU): one prompt per step, so the first in
    line starts answering after one prompt, while every generating sequence still gets its
    next token and a long prompt goes in chunks."""
    jobs = [SeqJob(key=k, priority=INT, target=[1], metrics=RequestMetrics()) for k in "gpqr"]
    ctx = _PlannedContext({"g": 1, "p": 200, "q": 40, "r": 1})
    ctx.step(jobs, chunk=64)
    assert ctx.decoded == [("g", 1), ("r", 1), ("p", 64)]
    ctx = _PlannedContext({"p": 200, "q": 40})
    ctx.step(jobs[1:3], chunk=64)
    assert ctx.decoded == [("p", 200)]  # nothing generating: the whole prompt at once


async def past_first_words(tg: Any, sched: BatchScheduler, log: list[str], budget: int) -> GenJob:
    """Start answer "a" of ``budget`` tokens; return it once it is past its first words."""
    talking = gen_job("a", INT, budget)
    tg.start_soon(generate, sched, talking, log)
    while talking.produced < FIRST_WORDS_TOKENS + 2:  # noqa: ASYNC110
        await anyio.sleep(0.001)
    return talking


@pytest.mark.parametrize("alone", [True, False])
async def test_an_answer_past_its_first_words_sits_out_while_another_starts(alone: bool) -> None:
    """On a CPU (``first_words_alone``) a step's cost grows with its sequences: an answer
    already speaking waits while one that just began gets its first words; on a GPU both
    step together."""
    sched, ctx = scheduler(n_seq=4, first_words_alone=alone)
    log: list[str] = []
    async with anyio.create_task_group() as tg:
        talking = await past_first_words(tg, sched, log, budget=40)
        tg.start_soon(generate, sched, gen_job("b", INT, 20), log)
    b_steps = [i for i, s in enumerate(ctx.steps) if "b" in s]
    first_words = ctx.steps[b_steps[0] : b_steps[0] + FIRST_WORDS_TOKENS]
    assert all(s == ["b"] for s in first_words) is alone
    assert any(s == ["a", "b"] or s == ["b", "a"] for s in ctx.steps)  # together after
    assert talking.produced == 40


async def test_answers_past_their_first_words_go_on_while_a_request_waits_for_a_sequence() -> None:
    """With every sequence taken, an answer finishing frees one for a waiting turn: it
    does not sit out then."""
    sched, ctx = scheduler(n_seq=2, first_words_alone=True)
    log: list[str] = []
    async with anyio.create_task_group() as tg:
        await past_first_words(tg, sched, log, budget=30)
        tg.start_soon(generate, sched, gen_job("b", INT, 20), log)
        while not any("b" in s for s in ctx.steps):  # noqa: ASYNC110
            await anyio.sleep(0.001)
        tg.start_soon(generate, sched, gen_job("c", INT, 5), log)
    assert log.index("end a") < log.index("start c")
    before_c = ctx.steps[next(i for i, s in enumerate(ctx.steps) if "c" in s) - 1]
    assert sorted(before_c) == ["a", "b"]  # "a" stepped on, to free a sequence


class SlowWarmContext(ScriptedContext):
    """A warm-up (no logits) takes ten steps; everything else one token per step."""

    def __init__(self, n_seq: int) -> None:
        super().__init__(n_seq)
        self.warm_steps: dict[int, int] = {}

    def step(self, jobs: list[SeqJob], chunk: int) -> bool:
        warms = [j for j in jobs if not j.need_logits]
        super().step([j for j in jobs if j.need_logits], chunk)
        self.steps[-1] += [j.key for j in warms]
        for job in warms:
            job.reused = 0
            self.warm_steps[id(job)] = self.warm_steps.get(id(job), 0) + 1
            job.ready = job.ready or self.warm_steps[id(job)] >= 10
        return True


async def test_a_turn_cuts_its_own_keys_warm_up_short_instead_of_waiting_for_it() -> None:
    """A participant who asks while their prefix is still being warmed (they just joined)
    does not wait for the whole warm-up: it ends where it is, the turn goes on from there."""
    sched = BatchScheduler(scheduler(1)[0]._run_sync, n_seq=2)
    ctx = SlowWarmContext(2)
    sched.ctx = ctx  # type: ignore[assignment]
    warm = SeqJob(
        key="p", priority=BG, target=[1] * 640, metrics=RequestMetrics(), need_logits=False
    )
    log: list[str] = []

    async def warming() -> None:
        async with sched.admitted(warm):
            await sched.wait(warm, lambda: warm.ready)
        log.append("warm done")

    async with anyio.create_task_group() as tg:
        tg.start_soon(warming)
        while len(ctx.steps) < 2:  # noqa: ASYNC110
            await anyio.sleep(0.001)
        tg.start_soon(generate, sched, gen_job("p", INT, 5), log, "answer")
    assert ctx.warm_steps[id(warm)] < 10
    assert log.index("warm done") < log.index("end answer")
    assert sum(s.count("p") for s in ctx.steps) < 10 + 5


async def test_background_work_queued_for_a_key_never_keeps_its_turn_out() -> None:
    """A person's turn is never dropped for a queue limit. Piped `edge client` lines on a
    busy machine: each exchange queues a background preparation of the participant's
    next decision, none runs while answers hold the model, and the fifth turn's decision
    was refused ('decisions:X' already has 4 requests waiting). Now background work past
    the limit is refused instead, and the turn's request queues and is served."""
    sched, _ = scheduler(n_seq=1, max_waiting_per_key=4)
    hold = anyio.Event()
    refused: list[Priority] = []
    served: list[Priority] = []

    def job(priority: Priority) -> SeqJob:
        return SeqJob(key="decisions:X", priority=priority, target=[1], metrics=RequestMetrics())

    async def request(priority: Priority, key: str = "decisions:X") -> None:
        try:
            async with sched.admitted(job(priority)) as admitted:
                if admitted.key != key:
                    return
                served.append(priority)
        except QueueFullError:
            refused.append(priority)

    async def answer() -> None:  # another answer holds the only sequence meanwhile
        answering = SeqJob(key="conversation:X", priority=INT, target=[1], metrics=RequestMetrics())
        async with sched.admitted(answering):
            await hold.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(answer)
        await anyio.sleep(0.01)
        for _ in range(5):  # five exchanges' preparations: the fifth is over the limit
            tg.start_soon(request, BG)
            await anyio.sleep(0.005)
        for _ in range(4):  # the next turns' decisions
            tg.start_soon(request, INT)
            await anyio.sleep(0.005)
        assert refused == [BG] and sched.queued == 8
        hold.set()
    assert refused == [BG] and served.count(INT) == 4 and served.count(BG) == 4
    assert sched.queued == 0 and not sched.active


async def test_a_later_turns_prompt_waits_for_an_earlier_answers_first_words() -> None:
    """On a CPU a prompt evaluated beside an answer's next token makes that step as slow
    as the prompt: while an earlier turn's answer is in its first words, a later turn's
    prompt sits out, and is evaluated once that answer is past them."""
    sched, ctx = scheduler(n_seq=4, first_words_alone=True)
    log: list[str] = []
    earlier = gen_job("a", INT, 30)
    async with anyio.create_task_group() as tg:
        tg.start_soon(generate, sched, earlier, log)
        while earlier.produced < 2:  # noqa: ASYNC110
            await anyio.sleep(0.001)
        tg.start_soon(generate, sched, gen_job("b", INT, 5), log)
    first_b = next(i for i, s in enumerate(ctx.steps) if "b" in s)
    a_before = sum("a" in s for s in ctx.steps[:first_b])
    assert a_before >= FIRST_WORDS_TOKENS, ctx.steps[: first_b + 1]
    assert log.count("end b") == 1 and earlier.produced == 30


async def test_a_step_takes_the_compute_gates_line_at_its_earliest_turns_place() -> None:
    """The compute gate orders urgent work by its turn's start: a model step stands there
    at the place of the earliest turn among its answers, whichever request drives it."""
    from edge.runtime import place_in_line

    steps: list[tuple[list[str], float]] = []

    async def run(fn: Callable[..., Any], *args: Any) -> Any:
        steps.append(([j.key for j in args[0]], place_in_line()))
        await anyio.sleep(0.002)
        return fn(*args)

    sched = BatchScheduler(run, n_seq=2, first_words_alone=True)
    sched.ctx = ScriptedContext(2)  # type: ignore[assignment]
    early = time.perf_counter() - 5.0

    async def in_turn() -> None:
        with turn_started(early):
            await generate(sched, gen_job("a", INT, 6), [])

    async with anyio.create_task_group() as tg:
        tg.start_soon(generate, sched, gen_job("b", INT, 6), [])  # outside any turn
        tg.start_soon(in_turn)
    with_a = [place for keys, place in steps if "a" in keys]
    assert with_a and all(place == early for place in with_a), (early, steps)


def test_a_later_prompt_sits_out_one_earlier_answers_first_words_at_most() -> None:
    """Eight typed at once: each prompt that sat out the first answer's first words goes
    with the next step, though the second answer has started its first words meanwhile
    (else the eighth waited seven answers' first words one after another)."""
    from edge.llm._batch import _earlier_answers_first

    a, b, c = (gen_job(k, INT, 30) for k in "abc")
    a.since, b.since, c.since = 1.0, 2.0, 3.0
    a.produced = 3  # in its first words
    assert [j for _, j in _earlier_answers_first([(0, j) for j in (a, b, c)])] == [a]
    b.produced = 1  # a is past its first words (no longer urgent), b has begun its own
    assert [j for _, j in _earlier_answers_first([(0, j) for j in (b, c)])] == [b, c]
    d = gen_job("d", INT, 30)
    d.since = 4.0  # came after: it sits out b's first words, once
    assert [j for _, j in _earlier_answers_first([(0, j) for j in (b, c, d)])] == [b, c]


def test_an_answer_whose_first_piece_a_voice_took_is_no_longer_urgent() -> None:
    """Four speaking at once: once a participant's voice took their answer's first piece
    ("A spider has 8 legs." at its seventh token), that answer's later tokens wait in turn
    instead of going ahead of the next listener's prompt for twelve tokens. A mark left by
    an earlier answer, or another participant's, changes nothing."""
    from edge.llm._batch import _urgency
    from edge.runtime import FIRST_PIECES, NORMAL, URGENT

    earlier = gen_job("first-piece-p", INT, 30)
    earlier.produced = 7
    FIRST_PIECES.spoken("first-piece-p")
    answer, other = gen_job("first-piece-p", INT, 30), gen_job("first-piece-q", INT, 30)
    answer.produced = other.produced = 3
    assert _urgency(earlier) == NORMAL  # its first piece is being spoken
    assert _urgency(answer) == URGENT and _urgency(other) == URGENT  # begun after the mark
    FIRST_PIECES.spoken("first-piece-p")
    assert _urgency(answer) == NORMAL and _urgency(other) == URGENT
    answer.produced = 0  # before its first token its prompt is urgent, whatever was spoken
    assert _urgency(answer) == URGENT
