"""A model behind a Wyoming server: its address, its health, and one request at a time.

:class:`RemoteBackend` runs each request to a remote speech server with the ``wyoming``
package's :class:`~wyoming.client.AsyncTcpClient` (a new connection per request, as
Wyoming servers close theirs after an answer), bounded by ``timeout_s``. It keeps what
``/health`` shows: the state (``ok``; ``degraded`` while a recent request failed but the
latest one answered; ``down`` after a failure), the last error and the latency p50 of the
latest answers. After a failure the next requests fail at once, without waiting on the
network, until a back-off delay has passed (0.5 s, doubling to ``max_backoff_s``); the
first request after it tries the server again, and one answer makes it ``ok``.

The callers (the voice pipeline's worker threads) are blocking: :meth:`RemoteBackend.call`
runs the request on the event loop that started the thread (``anyio.from_thread``), or
on a loop of its own when called outside one.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar
from urllib.parse import urlparse

import anyio
import anyio.from_thread
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Describe, Info

T = TypeVar("T")

DEGRADED_FOR_S = 60.0
"""How long after a failure a backend that answers again is shown ``degraded``."""

BackendState = Literal["ok", "degraded", "down"]


class RemoteSpeechError(RuntimeError):
    """A remote speech server failed: down, stalled, or it answered what it should not.
    The message names the backend (its role and address)."""


class RemoteSpeechMismatch(ValueError):
    """A remote speech server does not offer what the service needs (its ``info``)."""


REMOTE_ERRORS = (RemoteSpeechError, RemoteSpeechMismatch)
"""What a remote speech backend raises; each names the backend."""


def parse_wyoming_url(url: str) -> tuple[str, int]:
    """``tcp://host:port`` → (host, port); anything else is a clear error."""
    parsed = urlparse(url.strip())
    try:
        port = parsed.port
    except ValueError:
        port = None
    if parsed.scheme != "tcp" or not parsed.hostname or port is None:
        raise ValueError(f"{url!r} is not a Wyoming address: give tcp://HOST:PORT (or auto)")
    return parsed.hostname, port


class RemoteBackend:
    """One remote Wyoming server (``role`` ``stt`` or ``tts``); see the module docstring.
    ``url`` None: not known yet (``auto`` before discovery); :meth:`retarget` sets it."""

    def __init__(
        self,
        role: str,
        url: str | None,
        *,
        timeout_s: float = 10.0,
        max_backoff_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.role = role
        self.host: str | None = None
        self.port = 0
        self.url: str | None = None
        if url is not None:
            self.retarget(url)
        self.timeout_s = timeout_s
        self.max_backoff_s = max_backoff_s
        self._clock = clock
        self._lock = threading.Lock()
        self._latencies: deque[float] = deque(maxlen=50)
        self._failures = 0  # in a row
        self._failed_at: float | None = None
        self._retry_at = 0.0
        self.last_error: str | None = None
        self.requests = 0
        self.errors = 0
        self.fallback_uses = 0

    def retarget(self, url: str) -> None:
        """Send the next requests to ``url`` (``tcp://host:port``)."""
        self.host, self.port = parse_wyoming_url(url)
        self.url = f"tcp://{self.host}:{self.port}"

    @property
    def name(self) -> str:
        label = {"stt": "speech recognition", "tts": "speech synthesis"}.get(self.role, self.role)
        return f"{label} (Wyoming {self.url or 'server not found'})"

    # -- state ----------------------------------------------------------------------------

    @property
    def state(self) -> BackendState:
        with self._lock:
            if self._failures:
                return "down"
            recent = self._failed_at is not None and (
                self._clock() - self._failed_at < DEGRADED_FOR_S
            )
            return "degraded" if recent else "ok"

    def latency_p50_ms(self) -> float | None:
        with self._lock:
            values = list(self._latencies)
        return round(statistics.median(values) * 1000, 1) if values else None

    def health(self) -> dict[str, Any]:
        with self._lock:
            retry_in = max(0.0, self._retry_at - self._clock()) if self._failures else 0.0
        return {
            "url": self.url,
            "state": self.state,
            "last_error": self.last_error,
            "latency_p50_ms": self.latency_p50_ms(),
            "requests": self.requests,
            "errors": self.errors,
            **({"retry_in_s": _up(retry_in, 2)} if retry_in else {}),
            **({"fallback_uses": self.fallback_uses} if self.fallback_uses else {}),
        }

    def _succeeded(self, elapsed_s: float) -> None:
        with self._lock:
            self._latencies.append(elapsed_s)
            self._failures = 0

    def _failed(self, cause: str) -> None:
        with self._lock:
            self._failures += 1
            self.errors += 1
            self.last_error = cause
            self._failed_at = self._clock()
            delay = min(self.max_backoff_s, 0.5 * 2 ** (self._failures - 1))
            self._retry_at = self._failed_at + delay

    def record_success(self, elapsed_s: float) -> None:
        """A request made outside :meth:`call` (a streamed utterance) answered."""
        self._succeeded(elapsed_s)

    def record_failure(self, cause: str) -> None:
        """A request made outside :meth:`call` failed (the back-off starts)."""
        self._failed(cause)

    def check_backoff(self) -> None:
        """:class:`RemoteSpeechError` while the back-off after a failure lasts, or while
        no server is known (``auto`` before discovery)."""
        if self.host is None:
            raise RemoteSpeechError(f"{self.name}: no server was found over mDNS")
        self._check_backoff()

    def _check_backoff(self) -> None:
        with self._lock:
            if not self._failures:
                return
            wait = self._retry_at - self._clock()
            error = self.last_error
        if wait > 0:
            raise RemoteSpeechError(
                f"{self.name} is down ({error}); it is tried again in {_up(wait, 1)} s"
            )

    # -- requests ---------------------------------------------------------------------------

    def call(self, request: Callable[[AsyncTcpClient], Awaitable[T]]) -> T:
        """Run ``request`` over a new connection (blocking); :class:`RemoteSpeechError`
        names the backend and the cause when it fails, stalls past ``timeout_s`` or
        answers garbage, or while the back-off after a failure lasts."""
        if self.host is None:
            raise RemoteSpeechError(f"{self.name}: no server was found over mDNS")
        self._check_backoff()
        with self._lock:
            self.requests += 1
        started = time.perf_counter()
        try:
            result = _run(lambda: self._bounded(request))
        except RemoteSpeechMismatch:
            raise
        except Exception as exc:
            cause = _cause(exc, self.timeout_s)
            self._failed(cause)
            raise RemoteSpeechError(f"{self.name} failed: {cause}") from exc
        self._succeeded(time.perf_counter() - started)
        return result

    async def _bounded(self, request: Callable[[AsyncTcpClient], Awaitable[T]]) -> T:
        with anyio.fail_after(self.timeout_s):
            async with AsyncTcpClient(str(self.host), self.port) as client:
                return await request(client)

    def describe(self) -> Info:
        """The server's ``info`` (``describe`` → ``info``)."""

        async def ask(client: AsyncTcpClient) -> Info:
            await client.write_event(Describe().event())
            while True:
                event = await read_or_fail(client)
                if Info.is_type(event.type):
                    return Info.from_event(event)

        return self.call(ask)


async def read_or_fail(client: AsyncTcpClient) -> Event:
    """The next event; a closed connection or an ``error`` event is an exception."""
    event = await client.read_event()
    if event is None:
        raise ConnectionError(
            "the server closed the connection, or answered something that is not a Wyoming "
            "event, before it answered"
        )
    if Error.is_type(event.type):
        raise RuntimeError(f"the server answered an error: {Error.from_event(event).text}")
    return event


def _up(seconds: float, digits: int) -> float:
    """``seconds`` rounded up to ``digits`` decimals: a wait still under way never reads 0."""
    scale = 10**digits
    return math.ceil(seconds * scale) / scale


def _cause(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout_s:g} s (stalled)"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is the server running?)"
    if isinstance(exc, (KeyError, TypeError, ValueError)):
        return f"it answered something unexpected ({type(exc).__name__}: {exc})"
    return str(exc) or type(exc).__name__


def _run(fn: Callable[[], Awaitable[T]]) -> T:
    """Run ``fn`` on the event loop that started this worker thread, or on a new one."""
    outcome: list[Any] = []

    async def captured() -> None:
        try:
            outcome.append((True, await fn()))
        except Exception as exc:
            outcome.append((False, exc))

    try:
        anyio.from_thread.run(captured)
    except RuntimeError:
        if outcome:
            raise
        anyio.run(captured)  # not in a worker thread of a running loop
    ok, value = outcome[0]
    if not ok:
        raise value
    return value
