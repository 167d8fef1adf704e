"""The remote backend: any OpenAI-compatible chat server (llama.cpp's server, vLLM, Ollama).

A site that outgrows one device moves the model to an existing serving engine and points
the service at it; nothing else changes, because this backend speaks the same
:class:`~edge.llm.LLMService` protocol as the local one.

What crosses the wire (``POST {base_url}/chat/completions``, streamed as server-sent
events, which ``httpx-sse`` parses):

* ``max_tokens``, ``temperature``, ``stop``, ``stream: true`` and
  ``stream_options: {"include_usage": true}`` (token counts come from the usage chunk when
  the server sends one, otherwise deltas are counted);
* ``cache_key`` becomes the standard ``user`` field. Servers that route or cache per user
  can use it; nothing server-specific (llama.cpp's ``cache_prompt`` / ``id_slot``) is
  assumed. Pass such fields through ``extra_body`` when a site wants them;
* ``chat_template_kwargs: {"enable_thinking": false}`` when ``disable_thinking`` (the
  default), so reasoning models answer directly; servers ignore fields they do not know;
* ``priority`` is accepted, recorded in the metrics and sent nowhere: there is no standard
  field for it, and the remote engine runs its own batching scheduler.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, asynccontextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import httpx
from httpx_sse import EventSource, ServerSentEvent, SSEError
from pydantic import BaseModel, ConfigDict, Field

from ._activity import ActivityTracker
from ._types import (
    ContextOverflowError,
    FinishReason,
    GenerationError,
    GenerationOptions,
    LLMClosedError,
    LLMHealth,
    LLMUnavailableError,
    Messages,
    Priority,
    RequestMetrics,
    StreamingLLM,
    TextStream,
    as_messages,
)

_CONTEXT_TEXT = re.compile(
    r"context[ _-]?(length|window|size)|maximum context|exceed_context|too many tokens"
    r"|prompt is too long|reduce (the length|your prompt)",
    re.IGNORECASE,
)
_LENGTH_REASONS = {"length", "max_tokens", "model_length"}
_FAILED_REASONS = {"error", "abort", "aborted", "cancelled"}
_EXCERPT = 300


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "..."


def _error_text(body: str) -> str:
    """The readable part of an error body: ``error.message`` or ``detail`` when JSON."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nested too deep
        return body
    if isinstance(data, dict):
        error = data.get("error", data.get("detail"))
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
    return body


@dataclass
class _Progress:
    """How far one streamed request got (for its metrics and its errors)."""

    started: float
    metrics: RequestMetrics
    first: float | None = None
    last: float | None = None
    counted: int = 0
    events: int = 0
    finish: str | None = None
    done: bool = False

    def arrived(self) -> None:
        """A delta with text arrived."""
        self.last = time.perf_counter()
        if self.first is None:
            self.first = self.last
            self.metrics.ttft_s = self.first - self.started
        self.counted += 1

    def close(self) -> None:
        metrics = self.metrics
        if not metrics.generated_tokens:
            metrics.generated_tokens = self.counted
        if self.first is not None and self.last is not None:
            metrics.generation_s = self.last - self.first
        metrics.total_s = time.perf_counter() - self.started


class OpenAIConfig(BaseModel):
    """How :class:`OpenAICompatLLM` talks to its server (every field can also be given to
    the constructor as a keyword)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = None
    api_key: str | None = None
    timeout_s: float = Field(default=60.0, gt=0, description="timeouts must be positive")
    connect_timeout_s: float = Field(default=5.0, gt=0)
    default_max_tokens: int = Field(default=256, ge=1)
    temperature: float = 0.2
    extra_body: dict[str, Any] = Field(default_factory=dict)
    disable_thinking: bool = True
    context_length: int | None = None


class OpenAICompatLLM(StreamingLLM):
    """The LLM service over an OpenAI-compatible HTTP server.

    ``base_url`` is the API root, e.g. ``http://gpu-box:8000/v1`` (llama.cpp, vLLM) or
    ``http://gpu-box:11434/v1`` (Ollama). ``model`` is sent as-is; when None, the first
    model the server lists at ``/models`` is used (asked once). ``timeout_s`` bounds the
    wait for the response head and then each gap between streamed chunks, so a long
    answer is never cut short by it; ``connect_timeout_s`` bounds connecting.

    Errors: the server unreachable or answering an HTTP error raises
    :class:`LLMUnavailableError` (with the URL, status and body excerpt); a 4xx saying the
    prompt exceeds the context raises :class:`ContextOverflowError`; a stream that breaks
    or carries a malformed chunk raises :class:`GenerationError` (``chat`` turns that into
    ``finish_reason="error"``). Closing a stream early closes its HTTP response at once;
    the client stays usable. ``context_length`` is what the caller declares, or what the
    server reports (vLLM's ``max_model_len``) once :meth:`health` has run.
    """

    backend = "openai"

    def __init__(self, base_url: str, config: OpenAIConfig | None = None, **options: Any) -> None:
        try:
            url = httpx.URL(base_url)
        except (httpx.InvalidURL, TypeError) as exc:
            raise ValueError(f"base_url is not a URL: {base_url!r} ({exc})") from None
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"base_url must be an http(s) URL with a host, got {base_url!r}")
        cfg = config or OpenAIConfig()
        self.config = cfg = OpenAIConfig.model_validate({**cfg.model_dump(), **options})
        self.base_url = str(base_url).rstrip("/")
        self.model = cfg.model
        self.default_max_tokens = cfg.default_max_tokens
        self.temperature = cfg.temperature
        self.extra_body = dict(cfg.extra_body)
        self.disable_thinking = cfg.disable_thinking
        self.context_length = cfg.context_length
        self.activity = ActivityTracker()
        self.closed = False
        headers = {"Accept": "text/event-stream, application/json"}
        if cfg.api_key:
            headers["Authorization"] = f"Bearer {cfg.api_key}"
        self._client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(cfg.timeout_s, connect=cfg.connect_timeout_s),
        )

    # -- lifecycle ---------------------------------------------------------------------

    async def close(self) -> None:
        """Close the HTTP client; later requests raise :class:`LLMClosedError`."""
        self.closed = True
        await self._client.aclose()

    async def __aenter__(self) -> OpenAICompatLLM:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self.closed:
            raise LLMClosedError(f"the LLM client for {self.base_url} is closed")

    # -- health ------------------------------------------------------------------------

    async def _list_models(self) -> list[dict[str, Any]]:
        url = f"{self.base_url}/models"
        try:
            response = await self._client.get(url)
        except httpx.HTTPError as exc:
            raise self._unreachable(url, exc) from exc
        if response.status_code >= 400:
            raise LLMUnavailableError(
                f"LLM server at {url} answered HTTP {response.status_code}: "
                f"{_excerpt(_error_text(response.text))}"
            )
        try:
            data = response.json()["data"]
        except (ValueError, KeyError, TypeError) as exc:
            raise LLMUnavailableError(
                f"{url} is not an OpenAI-compatible model list: {_excerpt(response.text)}"
            ) from exc
        return [m for m in data if isinstance(m, dict)]

    async def health(self) -> LLMHealth:
        """Ask the server for its models (``GET {base_url}/models``); never raises."""
        if self.closed:
            return LLMHealth(False, self.backend, self.model or "", "the client is closed")
        try:
            models = await self._list_models()
        except LLMUnavailableError as exc:
            return LLMHealth(False, self.backend, self.model or "", str(exc))
        ids = [str(m.get("id", "")) for m in models]
        served_ids = {*ids, *(i.removesuffix(":latest") for i in ids)}  # Ollama tags
        if self.model is not None and self.model not in served_ids and ids:
            detail = f"{self.model!r} is not among the served models {ids}"
            return LLMHealth(False, self.backend, self.model, detail)
        name = self.model or (ids[0] if ids else "")
        served = next((m for m in models if m.get("id") in (name, f"{name}:latest")), {})
        if isinstance(served.get("max_model_len"), int):
            self.context_length = served["max_model_len"]
        detail = f"{self.base_url} serves {', '.join(ids) or 'no listed model'}"
        return LLMHealth(True, self.backend, name, detail, self.context_length)

    async def _model_name(self) -> str | None:
        if self.model is None:
            models = await self._list_models()
            if models and models[0].get("id"):
                self.model = str(models[0]["id"])
        return self.model

    # -- requests ----------------------------------------------------------------------

    def _body(self, messages: Messages, options: GenerationOptions) -> dict[str, Any]:
        msgs = as_messages(messages)
        max_tokens = self.default_max_tokens if options.max_tokens is None else options.max_tokens
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
        temperature = self.temperature if options.temperature is None else options.temperature
        if temperature < 0:
            raise ValueError(f"temperature must not be negative, got {temperature}")
        body: dict[str, Any] = {
            "messages": [m.model_dump() for m in msgs],
            "max_tokens": max_tokens,
            "temperature": temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if options.stop:
            body["stop"] = list(options.stop)
        if options.cache_key is not None:
            body["user"] = options.cache_key
        if self.disable_thinking:
            body["chat_template_kwargs"] = {"enable_thinking": False}
        body.update(self.extra_body)
        return body

    def generate(self, messages: Messages, options: GenerationOptions) -> TextStream:
        """Stream the answer's text deltas; see the class docstring for errors."""
        self._check_open()
        priority = options.priority
        body = self._body(messages, options)
        metrics = RequestMetrics(priority=priority, cache_key=options.cache_key)
        stream: TextStream

        async def deltas() -> AsyncIterator[str]:
            busy = self.activity.interactive() if priority is Priority.INTERACTIVE else None
            with busy or nullcontext():
                async for delta in self._run(body, metrics, stream):
                    yield delta

        stream = TextStream(deltas(), metrics)
        return stream

    async def _run(
        self, body: dict[str, Any], metrics: RequestMetrics, stream: TextStream
    ) -> AsyncIterator[str]:
        p = _Progress(time.perf_counter(), metrics)
        url = f"{self.base_url}/chat/completions"
        try:
            self._check_open()
            model = await self._model_name()
            if model is not None:
                body = {"model": model, **body}
            async with aclosing(self._stream(url, body, p)) as texts:
                async for text in texts:
                    yield text
            if not p.events and not p.done:
                # llama-cpp-python's server answers a request that fails (a prompt over the
                # context, say) with "200 OK" and an empty stream; asking once more without
                # streaming gets the real error, or the answer in one piece.
                text, p.finish = await self._complete(url, body, metrics)
                if text:
                    p.arrived()
                    yield text
            elif p.finish is None:
                why = "interrupted" if p.done else "cut off"
                raise GenerationError(
                    f"the stream from {url} ended after {p.counted} deltas without a finish "
                    f"reason (the answer was {why})"
                )
            stream.finish_reason = _map_finish(url, p.finish)
        finally:
            p.close()

    async def _stream(
        self, url: str, body: dict[str, Any], p: _Progress
    ) -> AsyncGenerator[str, None]:
        """The streamed deltas' text, recording the stream's progress in ``p``."""
        async with self._open(url, body) as response:
            try:
                async for sse in _events(response):
                    if sse.data.strip() == "[DONE]":
                        p.done = True
                        break
                    p.events += 1
                    chunk = _parse_chunk(url, sse.event, sse.data, p.counted)
                    _read_usage(chunk, p.metrics)
                    text, reason = _first_choice(chunk)
                    if text:
                        p.arrived()
                        yield text
                    p.finish = reason or p.finish
            except (httpx.HTTPError, httpx.StreamError) as exc:
                raise GenerationError(
                    f"the stream from {url} broke after {p.counted} deltas: "
                    f"{type(exc).__name__} {exc}".rstrip()
                ) from exc

    async def _complete(
        self, url: str, body: dict[str, Any], metrics: RequestMetrics
    ) -> tuple[str, str | None]:
        """The same request without streaming: the answer text and its finish reason."""
        body = {k: v for k, v in body.items() if k != "stream_options"} | {"stream": False}
        try:
            try:
                response = await self._client.post(url, json=body)
            except (httpx.ReadError, httpx.RemoteProtocolError):
                # The server may drop the connection the failed stream came on; once more.
                response = await self._client.post(url, json=body)
        except httpx.HTTPError as exc:
            raise self._unreachable(url, exc) from exc
        if response.status_code >= 400:
            await _raise_for_status(url, response)
        try:
            data = response.json()
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise GenerationError(
                f"{url} streamed nothing, then answered without a completion: "
                f"{_excerpt(response.text)!r}"
            ) from exc
        _read_usage(data, metrics)
        reason = choice.get("finish_reason")
        return str(text), (str(reason) if reason else "stop")

    @asynccontextmanager
    async def _open(self, url: str, body: dict[str, Any]) -> AsyncIterator[httpx.Response]:
        """Send the request; raise the right error for an unreachable server or HTTP error."""
        request = self._client.build_request("POST", url, json=body)
        try:
            response = await self._client.send(request, stream=True)
        except RuntimeError as exc:  # httpx: "the client has been closed"
            if self._client.is_closed:
                raise LLMClosedError(f"the LLM client for {self.base_url} is closed") from exc
            raise
        except httpx.HTTPError as exc:
            raise self._unreachable(url, exc) from exc
        try:
            if response.status_code >= 400:
                await _raise_for_status(url, response)
            yield response
        finally:
            await response.aclose()

    def _unreachable(self, url: str, exc: httpx.HTTPError) -> LLMUnavailableError:
        if isinstance(exc, httpx.TimeoutException):
            why = "did not answer in time"
        elif isinstance(exc, httpx.ConnectError):
            why = "cannot be reached"
        else:
            why = "failed"
        return LLMUnavailableError(
            f"the LLM server at {url} {why}: {type(exc).__name__} {exc}".rstrip()
        )


async def _raise_for_status(url: str, response: httpx.Response) -> None:
    try:
        raw = (await response.aread()).decode("utf-8", "replace")
    except httpx.HTTPError:
        raw = ""
    text = _error_text(raw)
    if 400 <= response.status_code < 500 and _CONTEXT_TEXT.search(text):
        raise ContextOverflowError(
            f"the prompt does not fit the model's context window ({url} answered "
            f"HTTP {response.status_code}: {_excerpt(text)})"
        )
    raise LLMUnavailableError(
        f"LLM server at {url} answered HTTP {response.status_code}: {_excerpt(text) or '(empty)'}"
    )


async def _events(response: httpx.Response) -> AsyncIterator[ServerSentEvent]:
    """The response's server-sent events that carry data, parsed by ``httpx-sse``
    (comments such as keep-alive pings are skipped). A response that is not an event
    stream yields none, so the caller asks again without streaming."""
    try:
        async for sse in EventSource(response).aiter_sse():
            if sse.data:
                yield sse
    except SSEError:  # raised before reading: the content type is not text/event-stream
        return


def _parse_chunk(url: str, event: str, data: str, counted: int) -> dict[str, Any]:
    try:
        chunk = json.loads(data)
    except (ValueError, RecursionError):
        chunk = None
    if not isinstance(chunk, dict):
        raise GenerationError(
            f"malformed chunk from {url} after {counted} deltas: {_excerpt(data)!r}"
        )
    error = chunk.get("error")
    if error is not None or event == "error":
        message = error.get("message", error) if isinstance(error, dict) else (error or chunk)
        text = str(message)
        if counted == 0 and _CONTEXT_TEXT.search(text):
            raise ContextOverflowError(
                f"the prompt does not fit the model's context window ({url}: {_excerpt(text)})"
            )
        raise GenerationError(f"the server at {url} failed mid-stream: {_excerpt(text)}")
    return chunk


def _first_choice(chunk: dict[str, Any]) -> tuple[str, str | None]:
    """The text delta and finish reason of ``choices[0]`` (empty for a usage-only chunk)."""
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return "", None
    choice = choices[0]
    delta = choice.get("delta")
    text = delta.get("content") if isinstance(delta, dict) else None
    reason = choice.get("finish_reason")
    return (text if isinstance(text, str) else ""), (str(reason) if reason else None)


def _read_usage(chunk: dict[str, Any], metrics: RequestMetrics) -> None:
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        if isinstance(usage.get("prompt_tokens"), int):
            metrics.prompt_tokens = usage["prompt_tokens"]
        if isinstance(usage.get("completion_tokens"), int):
            metrics.generated_tokens = usage["completion_tokens"]
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            metrics.reused_tokens = details["cached_tokens"]
    timings = chunk.get("timings")  # llama.cpp's server
    if isinstance(timings, dict):
        if isinstance(timings.get("cache_n"), int):
            metrics.reused_tokens = timings["cache_n"]
        if isinstance(timings.get("prompt_ms"), int | float):
            metrics.prompt_eval_s = timings["prompt_ms"] / 1000


def _map_finish(url: str, reason: str | None) -> FinishReason:
    if reason in _LENGTH_REASONS:
        return "length"
    if reason in _FAILED_REASONS:
        raise GenerationError(f"the server at {url} ended the answer with {reason!r}")
    return "stop"
