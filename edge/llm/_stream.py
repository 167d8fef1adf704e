"""A generation's tokens as text: deltas that never end inside a stop string, with the
first token's and the generation's timing recorded on the request's metrics."""

from __future__ import annotations

import codecs
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence

from ._types import RequestMetrics


def split_on_stop(text: str, stop: Sequence[str]) -> tuple[str, bool, str]:
    """Split streamed text at the first stop string.

    Returns ``(emit, hit, keep)``: text safe to emit, whether a stop string was found, and
    the tail held back because it could still become a stop string.
    """
    if not stop:
        return text, False, ""
    first = min((i for s in stop if (i := text.find(s)) >= 0), default=-1)
    if first >= 0:
        return text[:first], True, ""
    hold = 0
    for s in stop:
        for n in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:n]):
                hold = max(hold, n)
                break
    return text[: len(text) - hold], False, text[len(text) - hold :]


class Detokenizer:
    """Generated tokens to text deltas, holding back a tail that may begin a stop string."""

    def __init__(self, token_bytes: Callable[[int], bytes], stop: Sequence[str]) -> None:
        self._bytes = token_bytes
        self._stop = list(stop)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held = ""
        self.hit = False

    def feed(self, token: int) -> str:
        text = self._held + self._decoder.decode(self._bytes(token))
        emit, self.hit, self._held = split_on_stop(text, self._stop)
        return emit

    def tail(self) -> str:
        return "" if self.hit else self._held + self._decoder.decode(b"", final=True)


async def text_deltas(
    tokens: AsyncIterator[int], text: Detokenizer, metrics: RequestMetrics, started: float
) -> AsyncGenerator[str, None]:
    """``tokens`` as text until a stop string (``text.hit``) or their end; counts them
    and sets ``ttft_s`` (from ``started``, a ``perf_counter`` time) and ``generation_s``."""
    first_at = None
    async for token in tokens:
        metrics.generated_tokens += 1
        if emit := text.feed(token):
            if first_at is None:
                first_at = time.perf_counter()
                metrics.ttft_s = first_at - started
            yield emit
        if text.hit:
            break
    if tail := text.tail():
        yield tail
    if first_at is not None:
        metrics.generation_s = time.perf_counter() - first_at
