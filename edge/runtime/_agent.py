"""Agents and the ``@subscribe`` decorator."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ._topic import Topic

if TYPE_CHECKING:
    from ._runtime import HandlerContext

Handler = Callable[[Any, "HandlerContext"], Awaitable[None]]

_SUBSCRIPTIONS_ATTR = "__edge_subscriptions__"


def subscribe(
    topic: Topic[Any],
) -> Callable[[Callable[..., Awaitable[None]]], Callable[..., Awaitable[None]]]:
    """Mark ``async def on(self, message, ctx)`` as a handler for ``topic``.

    A method may carry several ``@subscribe`` decorators to handle several topics.
    """

    def mark(fn: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
        topics = getattr(fn, _SUBSCRIPTIONS_ATTR, ())
        setattr(fn, _SUBSCRIPTIONS_ATTR, (*topics, topic))
        return fn

    return mark


class Agent:
    """Something registered with an :class:`AgentRuntime` that handles topics.

    Handlers come from methods decorated with :func:`subscribe`, plus any added at run
    time with :meth:`add_handler` (used by components whose topics are configured, like
    the router). ``on_start`` and ``on_stop`` run when the runtime starts and stops.
    """

    def __init__(self) -> None:
        self._extra: list[tuple[Topic[Any], Handler]] = []

    def add_handler(self, topic: Topic[Any], handler: Handler) -> None:
        """Subscribe ``handler(message, ctx)`` to ``topic``; call before the runtime starts."""
        if not hasattr(self, "_extra"):
            self._extra = []
        self._extra.append((topic, handler))

    def subscriptions(self) -> list[tuple[Topic[Any], Handler]]:
        """Every (topic, bound handler) pair this agent handles."""
        found: list[tuple[Topic[Any], Handler]] = []
        seen: set[str] = set()
        for klass in type(self).__mro__:
            for attr, value in vars(klass).items():
                if attr in seen:
                    continue
                seen.add(attr)
                for topic in getattr(value, _SUBSCRIPTIONS_ATTR, ()):
                    found.append((topic, getattr(self, attr)))
        found.extend(getattr(self, "_extra", []))
        return found

    async def on_start(self) -> None:
        """Called once when the runtime starts, before any delivery."""

    async def on_stop(self) -> None:
        """Called once when the runtime stops, after in-flight deliveries finish."""
