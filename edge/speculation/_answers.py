"""Provisional answers: an answer started before its turn, adopted by the turn it guessed
or dropped unseen.

A speculation is a *provisional turn*: a participant (the answer's ``cache_key``), the
utterance it guesses (:class:`Guess`: the input's id for the utterance and its words) and
the answer request started for it, output held back. Its identity is the utterance, not
the request:

* :meth:`SpeculativeAnswers.confirm` with the endpoint's words for that utterance makes it
  the participant's confirmed answer when the id and the words match, and discards it
  otherwise;
* the participant's next answer request (:meth:`SpeculativeAnswers.stream` with that
  ``cache_key``) adopts a confirmed one, whatever the request's messages (the clock line of
  a request built a second later may differ): the held deltas are replayed at once and the
  rest follows live. An unconfirmed one is discarded and the request runs as asked.

A new speculation for the key, :meth:`SpeculativeAnswers.discard`, or ``hold_s`` passing
without adoption discards one: cancelled at the next token, its text never leaves this
object. Before adoption a speculation generates only ``ahead_deltas`` deltas (a first
clause to prepare; on a small device the CPU goes to the pass that confirms the words) and
waits; adopted, it goes on. A key for which ``whole_ahead(key)`` is true (its answers are
short and end by themselves, such as a satellite's one sentence) is generated whole
before adoption: its turn then finds the whole answer ready.

The wrapper is an :class:`~edge.llm.LLMService`; :func:`speculative_answers` returns one
that is also a :class:`~edge.llm.TokenCounter` when the wrapped model is. Use it as
``async with answers:`` (it owns the speculations' tasks).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from edge.llm import (
    CountingLLMWrapper,
    GenerationOptions,
    LLMService,
    LLMWrapper,
    Messages,
    RequestMetrics,
    TextStream,
    TokenCounter,
)
from edge.runtime import BackgroundTasks

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Guess:
    """What a provisional turn guesses: ``utterance`` (the input's id for it, such as
    ``voice:3`` or a Wyoming recording's) and its words."""

    utterance: str
    text: str


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
    guess: Guess
    messages: Messages
    options: GenerationOptions
    confirmed: bool = False
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


class SpeculativeAnswers(LLMWrapper):
    """An LLM service that can answer a turn ahead of it; see the module docstring."""

    def __init__(
        self,
        llm: LLMService,
        *,
        hold_s: float = 10.0,
        ahead_deltas: int = 16,
        whole_ahead: Callable[[str], bool] | None = None,
    ) -> None:
        self.llm = llm
        self.hold_s = hold_s
        self.ahead_deltas = ahead_deltas
        self.whole_ahead = whole_ahead
        self.stats = SpeculationStats()
        self._pending: dict[str, _Speculation] = {}
        self._tasks = BackgroundTasks("speculative answers")

    async def __aenter__(self) -> SpeculativeAnswers:
        await self._tasks.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for key in list(self._pending):
            self.discard(key)
        await self._tasks.close()

    # -- provisional turns ----------------------------------------------------------------

    def speculate(
        self,
        cache_key: str,
        guess: Guess,
        messages: Messages,
        options: GenerationOptions | None = None,
    ) -> None:
        """Start answering ``guess`` for ``cache_key`` with ``messages``, output held back
        (a speculation of the same guess already under way is kept)."""
        current = self._pending.get(cache_key)
        if current is not None and current.guess == guess:
            return
        self.discard(cache_key)
        if not self._tasks.running:
            return
        options = GenerationOptions.of(options, cache_key=cache_key)
        spec = self._pending[cache_key] = _Speculation(guess, list(messages), options)
        self.stats.started += 1
        self.stats.last_started_unix = time.time()
        self._tasks.start_soon(self._run, cache_key, spec)

    def confirm(self, cache_key: str, guess: Guess) -> bool:
        """The endpoint's words for an utterance: the key's speculation becomes the answer
        its next request adopts when it guessed exactly these (True); any other is
        discarded (False)."""
        spec = self._pending.get(cache_key)
        if spec is not None and spec.guess == guess:
            spec.confirmed = True
            return True
        self.discard(cache_key)
        return False

    def discard(self, cache_key: str) -> bool:
        """Drop the key's speculation (cancelled at the next token); True if there was one."""
        spec = self._pending.pop(cache_key, None)
        if spec is None:
            return False
        self.stats.discarded += 1
        spec.scope.cancel()
        log.debug("discarded the speculative answer for %s", cache_key)
        return True

    def guess(self, cache_key: str) -> Guess | None:
        """What the key's speculation guesses (None: there is none)."""
        spec = self._pending.get(cache_key)
        return spec.guess if spec is not None else None

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
            await self._generate(spec)
            await self._await_adoption(cache_key, spec)

    async def _generate(self, spec: _Speculation) -> None:
        key = spec.options.cache_key or ""
        whole = self.whole_ahead is not None and self.whole_ahead(key)
        try:
            stream = spec.stream = self.llm.stream(spec.messages, spec.options)
            async for delta in stream:
                spec.deltas.append(delta)
                spec.notify()
                if len(spec.deltas) == self.ahead_deltas and not (whole or spec.adopted.is_set()):
                    # Enough is ready ahead (a first clause to speak): the rest is generated
                    # only once the answer is wanted.
                    await self._await_adoption(key, spec)
        except Exception as exc:  # handed to the adopter, which would have seen it too
            spec.error = exc
        finally:
            if spec.stream is not None:
                with anyio.CancelScope(shield=True):
                    await spec.stream.aclose()  # the model is free again when this returns
            spec.done.set()
            spec.notify()

    async def _await_adoption(self, cache_key: str, spec: _Speculation) -> None:
        """Unclaimed within ``hold_s``, a speculation is discarded."""
        with anyio.move_on_after(self.hold_s):
            await spec.adopted.wait()
        if not spec.adopted.is_set() and self._pending.get(cache_key) is spec:
            self.discard(cache_key)

    # -- LLMService -------------------------------------------------------------------------

    def stream(
        self, messages: Messages, options: GenerationOptions | None = None, /, **fields: Any
    ) -> TextStream:
        """The request's stream: the key's confirmed speculation, else a new request (an
        unconfirmed speculation of the key is discarded first)."""
        options = GenerationOptions.of(options, **fields)
        cache_key = options.cache_key
        spec = self._pending.get(cache_key) if cache_key is not None else None
        if spec is not None and cache_key is not None:
            if spec.confirmed:
                del self._pending[cache_key]
                self.stats.adopted += 1
                spec.adopted.set()
                return _adopt(spec)
            self.discard(cache_key)
        return self.llm.stream(messages, options)


class CountingSpeculativeAnswers(CountingLLMWrapper, SpeculativeAnswers):
    """:class:`SpeculativeAnswers` over a model that counts tokens, counting with it."""


def speculative_answers(llm: LLMService, **kwargs: Any) -> SpeculativeAnswers:
    """``llm`` wrapped for provisional answers; a :class:`~edge.llm.TokenCounter` too when
    ``llm`` is one (a request is then fitted to the model's window as without it)."""
    if isinstance(llm, TokenCounter):
        return CountingSpeculativeAnswers(llm, **kwargs)
    return SpeculativeAnswers(llm, **kwargs)


def _adopt(spec: _Speculation) -> TextStream:
    metrics = spec.stream.metrics if spec.stream is not None else RequestMetrics()
    out = TextStream(_replay(spec, lambda: out), metrics)
    return out


async def _replay(spec: _Speculation, target: Callable[[], TextStream]) -> AsyncIterator[str]:
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
