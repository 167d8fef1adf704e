"""The scheduler's ordering and preemption, without a model."""

from __future__ import annotations

import time

import anyio
import pytest

from edge.llm import ModelScheduler, Priority, RequestMetrics
from edge.llm._stream import split_on_stop

pytestmark = pytest.mark.anyio


async def test_interactive_runs_before_queued_background_and_fifo_within_priority() -> None:
    sched = ModelScheduler()
    order: list[str] = []
    gate = anyio.Event()

    async def job(name: str, priority: Priority, hold: anyio.Event | None = None) -> None:
        async with sched.slot(priority, RequestMetrics()):
            order.append(name)
            if hold is not None:
                await hold.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(job, "first", Priority.BACKGROUND, gate)
        await anyio.sleep(0.01)
        tg.start_soon(job, "bg1", Priority.BACKGROUND)
        await anyio.sleep(0.01)
        tg.start_soon(job, "bg2", Priority.BACKGROUND)
        await anyio.sleep(0.01)
        tg.start_soon(job, "int1", Priority.INTERACTIVE)
        await anyio.sleep(0.01)
        tg.start_soon(job, "int2", Priority.INTERACTIVE)
        await anyio.sleep(0.01)
        gate.set()
    assert order == ["first", "int1", "int2", "bg1", "bg2"]


async def test_background_yields_at_next_step_and_resumes_ahead_of_later_background() -> None:
    sched = ModelScheduler()
    log: list[str] = []
    a_running = anyio.Event()
    spans: dict[str, float] = {}

    async def background(name: str, steps: int) -> RequestMetrics:
        metrics = RequestMetrics(priority=Priority.BACKGROUND)
        started = time.perf_counter()
        async with sched.slot(Priority.BACKGROUND, metrics) as slot:
            for i in range(steps):
                await slot.checkpoint()
                log.append(f"{name}{i}")
                if i == 1:
                    a_running.set()
                await anyio.sleep(0.005)  # one "token"
        spans[name] = time.perf_counter() - started
        return metrics

    async def interactive() -> RequestMetrics:
        metrics = RequestMetrics()
        async with sched.slot(Priority.INTERACTIVE, metrics):
            log.append("INT")
        return metrics

    results: dict[str, RequestMetrics] = {}

    async def run(name: str, coro) -> None:  # type: ignore[no-untyped-def]
        results[name] = await coro

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, "a", background("a", 10))
        await a_running.wait()
        arrived = len(log)  # "a" has logged this many steps when the others arrive
        tg.start_soon(run, "b", background("b", 2))
        tg.start_soon(run, "i", interactive())
    assert arrived <= log.index("INT") <= arrived + 1  # within one step of arriving
    assert log[log.index("INT") + 1].startswith("a")  # a resumes before b starts
    assert results["a"].preemptions == 1
    # it waited for a step, not for the whole background request (measured in this run)
    assert results["i"].queue_wait_s is not None
    assert results["i"].queue_wait_s < spans["a"] / 3, (results["i"].queue_wait_s, spans)


async def test_cancelled_waiter_leaves_queue_consistent() -> None:
    sched = ModelScheduler()
    hold = anyio.Event()

    async def holder() -> None:
        async with sched.slot(Priority.INTERACTIVE, RequestMetrics()):
            await hold.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(holder)
        await anyio.sleep(0.01)
        with anyio.move_on_after(0.02):
            async with sched.slot(Priority.INTERACTIVE, RequestMetrics()):
                pytest.fail("should not get the slot")
        hold.set()
    async with sched.slot(Priority.BACKGROUND, RequestMetrics()):
        pass
    assert sched.queued == 0


async def test_activity_tracks_interactive_work() -> None:
    sched = ModelScheduler()
    async with sched.slot(Priority.INTERACTIVE, RequestMetrics()):
        assert sched.activity.busy
    assert not sched.activity.busy
    with anyio.fail_after(30):  # a hang guard: the quiet is 0.05 s
        await sched.activity.wait_quiet(0.05)


def test_split_on_stop_holds_back_partial_matches() -> None:
    assert split_on_stop("hello wor", ["world"]) == ("hello ", False, "wor")
    assert split_on_stop("hello world!", ["world"]) == ("hello ", True, "")
    assert split_on_stop("abc", []) == ("abc", False, "")
    assert split_on_stop("x\n\nUser", ["\nUser:"]) == ("x\n", False, "\nUser")


async def test_a_lent_slot_goes_to_interactive_work_only() -> None:
    """A holder waiting for its reader lends the slot: background work keeps waiting,
    interactive work arriving meanwhile takes it, and the holder comes back after it."""
    sched = ModelScheduler()
    order: list[str] = []
    lent, resume = anyio.Event(), anyio.Event()

    async def holder() -> None:
        async with sched.slot(Priority.INTERACTIVE, RequestMetrics()) as slot:
            await slot.lend()
            lent.set()
            await resume.wait()  # its reader is away
            await slot.reclaim()
            order.append("holder back")

    async def job(name: str, priority: Priority) -> None:
        async with sched.slot(priority, RequestMetrics()):
            order.append(name)
            if name == "other":
                resume.set()
                await anyio.sleep(0.01)

    async with anyio.create_task_group() as tg:
        tg.start_soon(holder)
        await lent.wait()
        tg.start_soon(job, "background", Priority.BACKGROUND)
        await anyio.sleep(0.01)
        assert order == []  # background did not take the lent slot
        tg.start_soon(job, "other", Priority.INTERACTIVE)
    assert order == ["other", "holder back", "background"]
