from __future__ import annotations

import anyio
import pytest
from pydantic import BaseModel

from edge.interaction import ResponseOutput, UserQuery
from edge.runtime import (
    Agent,
    AgentRuntime,
    BackgroundTasks,
    HandlerContext,
    PayloadError,
    Topic,
    subscribe,
)

pytestmark = pytest.mark.anyio

QUERIES = Topic("test.queries", UserQuery)
ANSWERS = Topic("test.answers", ResponseOutput)


class Echo(Agent):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, object]] = []

    @subscribe(QUERIES)
    async def on(self, message: UserQuery, ctx: HandlerContext) -> None:
        self.seen.append((message.text, ctx.metadata))
        await ctx.publish(ANSWERS, ResponseOutput(text=message.text.upper()))


class Collector(Agent):
    def __init__(self) -> None:
        super().__init__()
        self.got: list[tuple[ResponseOutput, object]] = []

    @subscribe(ANSWERS)
    async def on(self, message: ResponseOutput, ctx: HandlerContext) -> None:
        self.got.append((message, ctx.metadata))


async def test_publish_delivers_with_metadata_and_ctx_publish_keeps_participant() -> None:
    runtime = AgentRuntime()
    echo, sink = Echo(), Collector()
    runtime.register("echo", echo)
    runtime.register("sink", sink)
    async with runtime:
        meta = await runtime.publish(QUERIES, UserQuery(text="hi"), participant_id="p1", source="t")
    assert echo.seen[0][0] == "hi"
    reply, reply_meta = sink.got[0]
    assert reply.text == "HI"
    assert reply_meta.participant_id == "p1"
    assert reply_meta.correlation_id == meta.message_id
    assert reply_meta.source == "echo"
    assert reply_meta.timestamp_us > 1_600_000_000_000_000


async def test_payload_validated_against_topic_class() -> None:
    runtime = AgentRuntime()
    runtime.register("echo", Echo())
    async with runtime:
        with pytest.raises(PayloadError):
            await runtime.publish(QUERIES, ResponseOutput(text="x"))  # type: ignore[arg-type]
        with pytest.raises(PayloadError):
            await runtime.publish(QUERIES, {"text": ""})
        await runtime.publish(QUERIES, {"text": "from a dict"})


async def test_one_name_one_class() -> None:
    class Other(BaseModel):
        x: int

    runtime = AgentRuntime()

    class A(Agent):
        @subscribe(Topic("same", Other))
        async def on(self, message: Other, ctx: HandlerContext) -> None: ...

    class B(Agent):
        @subscribe(Topic("same", UserQuery))
        async def on(self, message: UserQuery, ctx: HandlerContext) -> None: ...

    runtime.register("a", A())
    with pytest.raises(TypeError):
        runtime.register("b", B())


async def test_failing_subscriber_does_not_stop_others_and_raises_group() -> None:
    class Boom(Agent):
        @subscribe(ANSWERS)
        async def on(self, message: ResponseOutput, ctx: HandlerContext) -> None:
            raise ValueError("boom")

    runtime = AgentRuntime()
    sink = Collector()
    runtime.register("boom", Boom())
    runtime.register("sink", sink)
    async with runtime:
        with pytest.raises(ExceptionGroup) as info:
            await runtime.publish(ANSWERS, ResponseOutput(text="x"))
    assert info.group_contains(ValueError, match="boom")
    assert len(sink.got) == 1


async def test_register_after_start_and_publish_before_start_are_errors() -> None:
    runtime = AgentRuntime()
    with pytest.raises(RuntimeError):
        await runtime.publish(ANSWERS, ResponseOutput(text="x"))
    async with runtime:
        with pytest.raises(RuntimeError):
            runtime.register("late", Collector())
    with pytest.raises(ValueError):
        r2 = AgentRuntime()
        r2.register("x", Collector())
        r2.register("x", Collector())


async def test_stop_waits_for_inflight_delivery_and_dynamic_handlers() -> None:
    done: list[str] = []

    async def slow(message: ResponseOutput, ctx: HandlerContext) -> None:
        await anyio.sleep(0.05)
        done.append(message.text)

    agent = Agent()
    agent.add_handler(ANSWERS, slow)
    runtime = AgentRuntime()
    runtime.register("slow", agent)
    await runtime.start()
    async with anyio.create_task_group() as tg:
        tg.start_soon(runtime.publish, ANSWERS, ResponseOutput(text="late"))
        await anyio.sleep(0.01)
        await runtime.stop()
    assert done == ["late"]


def test_compute_gate_runs_heavy_steps_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    from edge.llm._llamacpp import _gated
    from edge.runtime import COMPUTE_GATE, ComputeGate

    gate = ComputeGate(enabled=True)
    inside, most = [0], [0]

    def step() -> None:
        with gate.hold():
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            time.sleep(0.01)
            inside[0] -= 1

    threads = [threading.Thread(target=step) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1
    with ComputeGate(enabled=False).hold(), ComputeGate(enabled=False).hold():
        pass  # off: never blocks
    monkeypatch.setenv("EDGE_COMPUTE_GATE", "0")
    assert not ComputeGate().enabled
    monkeypatch.setenv("EDGE_COMPUTE_GATE", "1")
    assert ComputeGate().enabled
    if COMPUTE_GATE.enabled:  # the model's steps hold the process's gate
        assert _gated(COMPUTE_GATE._lock.locked) is True


async def test_publications_without_a_time_take_the_runtime_clock() -> None:
    runtime = AgentRuntime(clock=lambda: 1_234)
    sink = Collector()
    runtime.register("echo", Echo())
    runtime.register("sink", sink)
    async with runtime:
        meta = await runtime.publish(QUERIES, UserQuery(text="hi"), participant_id="p1")
        said = await runtime.publish(QUERIES, UserQuery(text="hi"), timestamp_us=7)
    assert (meta.timestamp_us, said.timestamp_us) == (1_234, 7)
    assert sink.got[0][1].timestamp_us == 1_234


# ----------------------------------------------------------------- BackgroundTasks


class Owner:
    """A component with background tasks, entered with ``async with``."""

    def __init__(self) -> None:
        self.tasks = BackgroundTasks("the owner")
        self.ended: list[str] = []

    async def __aenter__(self) -> Owner:
        await self.tasks.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.tasks.close()

    async def forever(self, label: str) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            self.ended.append(label)


async def _stop_in_a_task_group(tasks: BackgroundTasks) -> None:
    async with anyio.create_task_group():
        await tasks.stop()


async def _stop_from_another_task(tasks: BackgroundTasks) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(tasks.stop)


async def _stop_in_a_cancelled_scope(tasks: BackgroundTasks) -> None:
    with anyio.CancelScope() as scope:
        scope.cancel()
        await tasks.stop()


@pytest.mark.parametrize(
    "where", [_stop_in_a_task_group, _stop_from_another_task, _stop_in_a_cancelled_scope]
)
async def test_background_tasks_stop_from_any_task_and_cancel_scope(where) -> None:
    async with Owner() as owner:
        owner.tasks.start_soon(owner.forever, "a")
        await anyio.wait_all_tasks_blocked()
        owner.tasks.start_soon(owner.forever, "b")  # not started yet: stopped all the same
        await where(owner.tasks)
        assert sorted(owner.ended) == ["a", "b"] and not owner.tasks.running
        await anyio.sleep(0.01)  # the owner's body is not cancelled
        with pytest.raises(RuntimeError, match="the owner is not running"):
            owner.tasks.start_soon(owner.forever, "c")
        await owner.tasks.stop()  # idempotent
    await owner.tasks.close()  # after the owner's exit too
    assert sorted(owner.ended) == ["a", "b"]


async def test_background_tasks_stop_from_one_of_its_tasks_does_not_wait_for_itself() -> None:
    async with Owner() as owner:

        async def stopper() -> None:
            await owner.tasks.stop()
            await anyio.sleep_forever()  # cancelled with the others

        owner.tasks.start_soon(owner.forever, "a")
        owner.tasks.start_soon(stopper)
        with anyio.fail_after(30):  # a hang guard: waiting for itself would never end
            while owner.tasks.running or not owner.ended:  # noqa: ASYNC110 (polling state)
                await anyio.sleep(0.005)
        assert owner.ended == ["a"]


async def test_background_tasks_close_without_cancel_waits_and_start_reports() -> None:
    done: list[int] = []

    async def work(n: int, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started(n * 10)
        await anyio.sleep(0.02)
        done.append(n)

    tasks = BackgroundTasks("the owner")
    await tasks.open()
    assert await tasks.start(work, 1) == 10
    tasks.start_soon(work, 2)
    await tasks.close(cancel=False)
    assert sorted(done) == [1, 2] and not tasks.running
