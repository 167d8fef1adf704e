"""Decisions asked ahead of time: the router's routing question, answered while the
participant is still finishing their sentence.

:class:`PrefetchingDecisions` wraps a :class:`DecisionService`. :meth:`prefetch` asks a
question now and keeps the answer; a later :meth:`decide` with an *equal* question gets
that answer (awaiting it if still in flight) instead of asking again. Any other question
is asked as usual, so the answers are exactly those the wrapped service gives: only the
moment they are computed moves. :func:`prefetching` wraps a service, keeping its
``prepare()`` when it has one (:class:`PreparingPrefetchingDecisions`).
"""

from __future__ import annotations

import time
from typing import cast

import anyio

from edge.decisions import ChoiceAnswer, ChoiceQuestion, DecisionService, PreparingDecisions

_KEEP = 16


class _Prefetched:
    def __init__(self, question: ChoiceQuestion) -> None:
        self.question = question
        self.answer: ChoiceAnswer | None = None
        self.error: BaseException | None = None
        self.done = anyio.Event()
        self.at = time.monotonic()


class PrefetchingDecisions:
    """A decision service that can answer a question before it is asked."""

    def __init__(self, decisions: DecisionService, *, keep_s: float = 30.0) -> None:
        self.decisions = decisions
        self.keep_s = keep_s
        self.hits = 0
        self._prefetched: list[_Prefetched] = []

    async def prefetch(self, question: ChoiceQuestion) -> ChoiceAnswer:
        """Answer ``question`` now and keep the answer for a later :meth:`decide`."""
        found = self._find(question)
        if found is not None:
            await found.done.wait()
        else:
            found = _Prefetched(question)
            self._prefetched = [*self._prefetched[-(_KEEP - 1) :], found]
            try:
                found.answer = await self.decisions.decide(question)
            except BaseException as exc:
                self._prefetched.remove(found)
                found.error = exc
                raise
            finally:
                found.done.set()
        if found.answer is None:
            raise RuntimeError("the prefetched decision failed")
        return found.answer

    async def decide(self, question: ChoiceQuestion) -> ChoiceAnswer:
        found = self._find(question)
        if found is not None:
            self._prefetched.remove(found)  # one use: a repeated question is asked again
            await found.done.wait()
            if found.answer is not None:
                self.hits += 1
                return found.answer
        return await self.decisions.decide(question)

    def _find(self, question: ChoiceQuestion) -> _Prefetched | None:
        now = time.monotonic()
        self._prefetched = [p for p in self._prefetched if now - p.at < self.keep_s]
        return next((p for p in self._prefetched if p.question == question), None)


class PreparingPrefetchingDecisions(PrefetchingDecisions):
    """:class:`PrefetchingDecisions` over a service that can prepare for a question
    (:func:`prefetching` makes one only for such a service)."""

    async def prepare(self, question: ChoiceQuestion) -> None:
        await cast(PreparingDecisions, self.decisions).prepare(question)


def prefetching(decisions: DecisionService, *, keep_s: float = 30.0) -> PrefetchingDecisions:
    """``decisions`` able to answer ahead, preparing as it does when it can."""
    if isinstance(decisions, PreparingDecisions):
        return PreparingPrefetchingDecisions(decisions, keep_s=keep_s)
    return PrefetchingDecisions(decisions, keep_s=keep_s)
