"""The in-process publish/subscribe runtime."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
from pydantic import BaseModel

from ._agent import Agent, Handler
from ._topic import Topic

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)


def now_us() -> int:
    """The current Unix time in microseconds."""
    return time.time_ns() // 1000


def new_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class MessageMetadata:
    """Who published a message, for whom, and when.

    ``participant_id`` None means the message is global. ``correlation_id`` ties a chain
    of messages together: it is the first message's id unless a publisher names one.
    ``timestamp_us`` is Unix microseconds, by default the publication time.
    """

    message_id: str
    correlation_id: str
    participant_id: str | None
    source: str
    timestamp_us: int
    topic: str


class HandlerContext:
    """What a handler gets besides the message: metadata and a way to publish."""

    def __init__(self, runtime: AgentRuntime, metadata: MessageMetadata, agent_name: str) -> None:
        self.runtime = runtime
        self.metadata = metadata
        self.agent_name = agent_name

    async def publish(
        self,
        topic: Topic[M],
        message: M,
        *,
        source: str | None = None,
        timestamp_us: int | None = None,
    ) -> MessageMetadata:
        """Publish keeping this message's participant and correlation id."""
        return await self.runtime.publish(
            topic,
            message,
            participant_id=self.metadata.participant_id,
            source=source if source is not None else self.agent_name,
            correlation_id=self.metadata.correlation_id,
            timestamp_us=timestamp_us,
        )


class AgentRuntime:
    """Typed, in-process topics connecting the agents of one service.

    Delivery guarantees:

    * In process and at most once: nothing is persisted or retried.
    * ``publish`` validates the payload against the topic's class (a wrong class raises
      :class:`~edge.runtime.PayloadError` before anyone sees it), then delivers it to every
      handler subscribed to that topic concurrently and returns when all have finished.
      Messages from one publisher therefore arrive in the order they were published.
    * A failing handler never stops delivery to the others. Once all have finished, the
      failures are raised to the publisher together as an ``ExceptionGroup``.
    * Cancelling the publisher cancels the deliveries it started.
    * Handlers that do long work should hand it to their own task group and return, so
      they do not hold up the publisher.

    Register agents before ``start()``. One topic name maps to one payload class.
    ``clock`` (Unix microseconds, the system clock by default) stamps each publication
    that names no time of its own.
    """

    def __init__(self, clock: Callable[[], int] = now_us) -> None:
        self.clock = clock
        self._agents: dict[str, Agent] = {}
        self._handlers: dict[str, list[tuple[str, Handler]]] = {}
        self._payloads: dict[str, type[BaseModel]] = {}
        self._state = "new"
        self._inflight = 0
        self._idle = anyio.Event()
        self._idle.set()

    @property
    def running(self) -> bool:
        return self._state == "running"

    def register(self, name: str, agent: Agent) -> None:
        """Add ``agent`` under ``name``; only before start."""
        if self._state != "new":
            raise RuntimeError("register agents before the runtime starts")
        if name in self._agents:
            raise ValueError(f"an agent named {name!r} is already registered")
        subs = agent.subscriptions()
        for topic, _ in subs:
            self._check_topic(topic)
        self._agents[name] = agent
        for topic, handler in subs:
            self._handlers.setdefault(topic.name, []).append((name, handler))

    def _check_topic(self, topic: Topic[Any]) -> None:
        known = self._payloads.setdefault(topic.name, topic.payload)
        if known is not topic.payload:
            raise TypeError(
                f"topic {topic.name!r} already carries {known.__name__}, "
                f"not {topic.payload.__name__}"
            )

    async def start(self) -> None:
        if self._state != "new":
            raise RuntimeError(f"runtime cannot start from state {self._state!r}")
        self._state = "running"
        for agent in self._agents.values():
            await agent.on_start()

    async def stop(self) -> None:
        """Refuse new messages, wait for in-flight deliveries, then stop the agents."""
        if self._state != "running":
            self._state = "stopped"
            return
        self._state = "stopping"
        with anyio.CancelScope(shield=True):
            await self._idle.wait()
            errors: list[Exception] = []
            for name, agent in self._agents.items():
                try:
                    await agent.on_stop()
                except Exception as exc:
                    log.exception("agent %s failed to stop", name)
                    errors.append(exc)
            self._state = "stopped"
        if errors:
            raise ExceptionGroup("agents failed to stop", errors)

    async def __aenter__(self) -> AgentRuntime:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def publish(
        self,
        topic: Topic[M],
        message: M | dict[str, Any],
        *,
        participant_id: str | None = None,
        source: str = "",
        correlation_id: str | None = None,
        timestamp_us: int | None = None,
    ) -> MessageMetadata:
        """Deliver ``message`` to every subscriber of ``topic``; see the class docstring."""
        if self._state not in ("running", "stopping"):
            # While stopping, in-flight handlers may still publish their follow-ups.
            raise RuntimeError(f"runtime is {self._state}; publish needs a running runtime")
        known = self._payloads.get(topic.name)
        if known is not None and known is not topic.payload:
            raise TypeError(
                f"topic {topic.name!r} carries {known.__name__}, not {topic.payload.__name__}"
            )
        payload = topic.validate(message)
        message_id = new_id()
        metadata = MessageMetadata(
            message_id=message_id,
            correlation_id=correlation_id or message_id,
            participant_id=participant_id,
            source=source,
            timestamp_us=timestamp_us if timestamp_us is not None else self.clock(),
            topic=topic.name,
        )
        handlers = list(self._handlers.get(topic.name, ()))
        if not handlers:
            return metadata
        errors: list[Exception] = []

        async def deliver(agent_name: str, handler: Handler) -> None:
            try:
                await handler(payload, HandlerContext(self, metadata, agent_name))
            except Exception as exc:
                log.debug("handler of %s in %s failed: %r", topic.name, agent_name, exc)
                errors.append(exc)

        self._inflight += 1
        self._idle = anyio.Event() if self._inflight == 1 else self._idle
        try:
            async with anyio.create_task_group() as tg:
                for agent_name, handler in handlers:
                    tg.start_soon(deliver, agent_name, handler)
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()
        if errors:
            raise ExceptionGroup(f"{len(errors)} subscriber(s) of {topic.name!r} failed", errors)
        return metadata
