"""Speculative requests: start an answer before it is asked for, adopt it or drop it.

:class:`SpeculativeLLM` wraps an :class:`LLMService`. :meth:`SpeculativeLLM.speculate`
starts a streamed request for a ``cache_key`` (a participant) whose output is held back.
A later :meth:`SpeculativeLLM.stream` for the same key with the *same* messages and
options adopts it: the held deltas are replayed at once and the rest follows live, so
the caller sees exactly the stream it would have got, only sooner. Any other request for
that key, a new speculation, :meth:`SpeculativeLLM.discard`, or ``hold_s`` passing
after it finished without being adopted discards it: cancelled at the next token, its text never
leaves this object. Before adoption a speculation generates only ``ahead_deltas`` deltas (a
first clause to prepare, on a small device the CPU the confirming transcription needs) and
waits; adopted, it goes on. Everything else is delegated to the wrapped service.

Use it as ``async with speculative:`` (it owns the speculations' tasks).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

import anyio

from edge.runtime import BackgroundTasks

from ._types import (
    GenerationOptions,
    LLMService,
    Messages,
    RequestMetrics,
    TextStream,
    as_messages,
)

log = logging.getLogger(__name__)


@dataclass
class SpeculationStats:
    """How speculation went: started, adopted by the real request, discarded; and when
    (Unix seconds) the latest one started, for benchmarks to time it against speech."""

    started: int = 0
    adopted: int = 0
    discarded: int = 0
    last_started_unix: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {
            "started": self.started,
            "adopted": self.adopted,
            "discarded": self.discarded,
            "last_started_unix": self.last_started_unix,
        }


@dataclass(eq=False)
class _Speculation:
    request: tuple[Any, ...]
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    deltas: list[str] = field(default_factory=list)
    stream: TextStream | None = None
    error: BaseException | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    adopted: anyio.Event = field(default_factory=anyio.Event)
    changed: anyio.Event = field(default_factory=anyio.Event)

    def notify(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()


def _request(messages: Messages, options: GenerationOptions) -> tuple[Any, ...]:
    """What a request asks, whoever's key it runs under."""
    return (tuple(as_messages(messages)), replace(options, cache_key=None))


class SpeculativeLLM:
    """An LLM service that can answer ahead of the request; see the module docstring."""

    def __init__(self, llm: LLMService, *, hold_s: float = 10.0, ahead_deltas: int = 16) -> None:
        self.llm = llm
        self.hold_s = hold_s
        self.ahead_deltas = ahead_deltas
        self.stats = SpeculationStats()
        self._pending: dict[str, _Speculation] = {}
        self._tasks = BackgroundTasks("speculative answers")

    def __getattr__(self, name: str) -> Any:  # capabilities of the wrapped service
        return getattr(self.llm, name)

    async def __aenter__(self) -> SpeculativeLLM:
        await self._tasks.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for key in list(self._pending):
            self.discard(key)
        await self._tasks.close()

    # -- speculation ------------------------------------------------------------------

    def speculate(
        self,
        cache_key: str,
        messages: Messages,
        options: GenerationOptions | None = None,
        /,
        **fields: Any,
    ) -> None:
        """Start answering ``messages`` for ``cache_key`` now, holding the output back."""
        request = _request(messages, GenerationOptions.of(options, **fields))
        current = self._pending.get(cache_key)
        if current is not None and current.request == request:
            return  # already under way
        self.discard(cache_key)
        if not self._tasks.running:
            return
        spec = self._pending[cache_key] = _Speculation(request)
        self.stats.started += 1
        self.stats.last_started_unix = time.time()
        self._tasks.start_soon(self._run, cache_key, spec)

    def discard(self, cache_key: str) -> bool:
        """Drop the key's speculation (cancelled at the next token); True if there was one."""
        spec = self._pending.pop(cache_key, None)
        if spec is None:
            return False
        self.stats.discarded += 1
        spec.scope.cancel()
        log.debug("discarded the speculative answer for %s", cache_key)
        return True

    def pending(self, cache_key: str) -> bool:
        return cache_key in self._pending

    async def held(self, cache_key: str) -> AsyncIterator[str]:
        """The deltas of the key's speculation as they are generated, until it ends or
        is discarded (to prepare work on a likely answer, such as its first speech);
        reading them changes nothing about the speculation."""
        spec = self._pending.get(cache_key)
        if spec is not None:
            async for delta in _follow(spec, until_cancelled=True):
                yield delta

    async def _run(self, cache_key: str, spec: _Speculation) -> None:
        with spec.scope:
            await self._generate(cache_key, spec)
            with anyio.move_on_after(self.hold_s):
                await spec.adopted.wait()
        if not spec.adopted.is_set() and self._pending.get(cache_key) is spec:
            self.discard(cache_key)  # nobody asked for it in time

    async def _generate(self, cache_key: str, spec: _Speculation) -> None:
        messages, options = spec.request
        try:
            stream = spec.stream = self.llm.stream(list(messages), options, cache_key=cache_key)
            async for delta in stream:
                spec.deltas.append(delta)
                spec.notify()
                if len(spec.deltas) == self.ahead_deltas and not spec.adopted.is_set():
                    await self._pause(cache_key, spec)
        except Exception as exc:  # handed to the adopter, which would have seen it too
            spec.error = exc
        finally:
            if spec.stream is not None:
                with anyio.CancelScope(shield=True):
                    await spec.stream.aclose()  # the model is free again when this returns
            spec.done.set()
            spec.notify()

    async def _pause(self, cache_key: str, spec: _Speculation) -> None:
        """Enough is ready ahead (a first clause to speak): the rest is generated only
        once the answer is wanted, so a guess does not take the CPU from the pass that
        confirms it. Unclaimed within ``hold_s``, it is discarded."""
        with anyio.move_on_after(self.hold_s):
            await spec.adopted.wait()
        if not spec.adopted.is_set() and self._pending.get(cache_key) is spec:
            self.discard(cache_key)

    # -- requests -----------------------------------------------------------------------

    def stream(
        self, messages: Messages, options: GenerationOptions | None = None, /, **fields: Any
    ) -> TextStream:
        """The request's stream: the key's speculation when it asked exactly this, else
        a new request (after discarding a speculation that asked something else)."""
        options = GenerationOptions.of(options, **fields)
        cache_key = options.cache_key
        if cache_key is not None and cache_key in self._pending:
            spec = self._pending[cache_key]
            if spec.request == _request(messages, options):
                del self._pending[cache_key]
                self.stats.adopted += 1
                spec.adopted.set()
                return self._adopt(spec)
            self.discard(cache_key)
        return self.llm.stream(messages, options)

    def _adopt(self, spec: _Speculation) -> TextStream:
        metrics = spec.stream.metrics if spec.stream is not None else RequestMetrics()
        out = TextStream(self._replay(spec, lambda: out), metrics)
        return out

    @staticmethod
    async def _replay(spec: _Speculation, target: Any) -> AsyncIterator[str]:
        try:
            async for delta in _follow(spec):
                yield delta
            if spec.error is not None:
                raise spec.error
            if spec.stream is not None:
                target().finish_reason = spec.stream.finish_reason
        finally:
            if not spec.done.is_set():  # closed early: stop the model, wait until it is free
                spec.scope.cancel()
                with anyio.CancelScope(shield=True):
                    await spec.done.wait()


async def _follow(spec: _Speculation, *, until_cancelled: bool = False) -> AsyncIterator[str]:
    """A speculation's deltas, those held so far and then each as it is generated, until
    it is done (or, with ``until_cancelled``, discarded)."""
    sent = 0
    while not (until_cancelled and spec.scope.cancel_called):
        while sent < len(spec.deltas):
            sent += 1
            yield spec.deltas[sent - 1]
        if spec.done.is_set():
            return
        await spec.changed.wait()
