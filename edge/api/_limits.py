"""Bounds on API requests, like the WebSocket's: body sizes, time to send a body, requests
at once (in total and per client address) and a request rate per address."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from starlette.types import Message, Receive

from ._errors import ApiError

UPLOAD_PATHS = ("/v1/audio/transcriptions",)
DRAIN_LIMIT = 64 << 20  # an oversized body is read (and dropped) up to this, then refused


@dataclass(frozen=True)
class ApiLimits:
    """``max_body_bytes``: a JSON body; ``max_upload_bytes``: an audio upload (OpenAI's own
    limit); ``body_timeout_s`` / ``upload_timeout_s``: to send it; ``max_requests`` and
    ``max_per_address``: requests at once; ``rate`` requests per second per address after a
    ``burst``; ``max_audio_s``: the longest recording transcribed."""

    max_body_bytes: int = 1 << 20
    max_upload_bytes: int = 25 << 20
    body_timeout_s: float = 10.0
    upload_timeout_s: float = 120.0
    max_requests: int = 32
    max_per_address: int = 8
    rate: float = 10.0
    burst: int = 60
    max_audio_s: float = 600.0
    max_speech_chars: int = 4096  # OpenAI's own limit on /v1/audio/speech input

    def for_path(self, path: str) -> tuple[int, float]:
        """(bytes, seconds) a body to ``path`` may take."""
        if path in UPLOAD_PATHS:
            return self.max_upload_bytes, self.upload_timeout_s
        return self.max_body_bytes, self.body_timeout_s


class RateLimiter:
    """A token bucket per client address (``burst`` requests, refilled at ``rate`` per s)."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, address: str) -> float:
        """Count one request; 0 when allowed, else the seconds until one would be."""
        now = self._clock()
        tokens, since = self._buckets.get(address, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - since) * self.rate)
        if tokens < 1.0:
            self._buckets[address] = (tokens, now)
            return (1.0 - tokens) / self.rate
        if len(self._buckets) > 4096:  # addresses come from the network: stay bounded
            self._buckets.clear()
        self._buckets[address] = (tokens - 1.0, now)
        return 0.0


class BoundedBody:
    """Wraps an ASGI ``receive``: the body may be at most ``limit`` bytes, sent within
    ``timeout_s``. An oversized body is read to its end (up to :data:`DRAIN_LIMIT`) and
    dropped, so the client reads the 413 rather than a reset connection."""

    def __init__(self, receive: Receive, limit: int, timeout_s: float) -> None:
        self._receive = receive
        self.limit = limit
        self._deadline = anyio.current_time() + timeout_s
        self._seen = 0
        self._done = False

    async def __call__(self) -> Message:
        if self._done:  # the body is in: what is left is the disconnect, however late
            return await self._receive()
        message = await self._next()
        if message["type"] == "http.request":
            self._seen += len(message.get("body", b""))
            self._done = not message.get("more_body", False)
            if self._seen > self.limit:
                await self.drain(message)
        return message

    async def _next(self) -> Message:
        try:
            with anyio.fail_after(max(0.0, self._deadline - anyio.current_time())):
                return await self._receive()
        except TimeoutError:
            raise ApiError(408, "the request body did not arrive in time") from None

    async def drain(self, message: Message | None = None) -> None:
        """Read the rest of an oversized body, then refuse it (413)."""
        while message is None or message.get("more_body", False):
            if self._seen > DRAIN_LIMIT:
                break
            message = await self._next()
            if message["type"] != "http.request":
                break
            self._seen += len(message.get("body", b""))
        self._done = True
        raise ApiError(
            413, f"the request body is over {self.limit:,} bytes", code="request_too_large"
        )
