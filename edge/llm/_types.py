"""The LLM service protocol and the values that cross it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

FinishReason = Literal["stop", "length", "error"]


class Priority(StrEnum):
    """Where a request stands in the local model's queue.

    Interactive work (answers, acknowledgments, routing decisions) always runs first;
    background work (compaction, cache warm-up) runs when nothing interactive waits and is
    preempted at the next token when something does.
    """

    INTERACTIVE = "interactive"
    BACKGROUND = "background"


class ChatMessage(BaseModel):
    """One chat message; plain ``{"role": ..., "content": ...}`` dicts are accepted too."""

    model_config = ConfigDict(frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str


Messages = Sequence[ChatMessage | Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class GenerationOptions:
    """How to generate one answer; shared by :meth:`LLMService.chat` and
    :meth:`LLMService.stream`, which take it as an optional positional argument and/or
    its fields as keyword arguments (``llm.chat(messages, max_tokens=32)``).

    * ``max_tokens``: output limit (the backend's default when None);
    * ``temperature``: sampling temperature (0 is greedy; the backend's default when None);
    * ``stop``: strings that end the output (not included in it);
    * ``priority``: :class:`Priority` (interactive by default);
    * ``cache_key``: whose KV prefix to reuse, usually the participant id;
    * ``seed_key``: while ``cache_key`` has no saved state yet (a new participant, or one
      whose state was evicted), start from this key's (a copy: a shared prefix such as the
      system prompt). Backends without prefix reuse ignore both;
    * ``shift_reuse``: the caller sends a history it trims itself (a client dropping its
      oldest messages). When ``cache_key``'s state holds the prompt with one span cut out,
      the span's cells are removed and the tokens after it shifted back (llama.cpp's KV
      shift), instead of evaluating them again. The kept tokens' cells were computed with
      the cut span before them, so the answer may differ from an exact evaluation's.
      Only the batched llama.cpp runner shifts, and only for interactive requests;
      others evaluate exactly.
    """

    max_tokens: int | None = None
    temperature: float | None = None
    stop: tuple[str, ...] = ()
    priority: Priority = Priority.INTERACTIVE
    cache_key: str | None = None
    seed_key: str | None = None
    shift_reuse: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            raise TypeError("stop must be a sequence of strings, not a string")
        object.__setattr__(self, "stop", tuple(self.stop or ()))
        object.__setattr__(self, "priority", Priority(self.priority))

    @classmethod
    def of(cls, options: GenerationOptions | None = None, **fields: Any) -> GenerationOptions:
        """``options`` (or the defaults) with ``fields`` replaced; an unknown field is a
        ``TypeError``."""
        return replace(options, **fields) if options is not None else cls(**fields)


def as_messages(messages: Iterable[ChatMessage | Mapping[str, Any]]) -> list[ChatMessage]:
    """Validate ``messages`` into :class:`ChatMessage` objects (clear error when malformed)."""
    out = [m if isinstance(m, ChatMessage) else ChatMessage.model_validate(m) for m in messages]
    if not out:
        raise ValueError("a chat request needs at least one message")
    return out


@dataclass
class RequestMetrics:
    """What one request cost. Times in seconds; ``None`` where not reached.

    ``queue_wait_s`` is submission to first scheduling; ``ttft_s`` submission to the
    first text delta; ``reused_tokens`` prompt tokens served from the KV cache instead of
    evaluated; ``restore_s`` time spent switching the model to the request's saved KV
    state (saving the previous owner's, loading this one's); ``preemptions`` how often
    background work yielded to interactive work.
    """

    priority: Priority = Priority.INTERACTIVE
    cache_key: str | None = None
    queue_wait_s: float | None = None
    prompt_tokens: int = 0
    reused_tokens: int = 0
    prompt_eval_s: float | None = None
    ttft_s: float | None = None
    generated_tokens: int = 0
    generation_s: float | None = None
    total_s: float | None = None
    preemptions: int = 0
    restore_s: float = 0.0

    @property
    def evaluated_tokens(self) -> int:
        return self.prompt_tokens - self.reused_tokens

    @property
    def tokens_per_s(self) -> float | None:
        """Generation speed, first token to last."""
        if not self.generation_s or self.generated_tokens < 2:
            return None
        return (self.generated_tokens - 1) / self.generation_s

    @property
    def prompt_tokens_per_s(self) -> float | None:
        if not self.prompt_eval_s or self.evaluated_tokens <= 0:
            return None
        return self.evaluated_tokens / self.prompt_eval_s

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items()}
        out["priority"] = str(self.priority)
        out["tokens_per_s"] = self.tokens_per_s
        out["prompt_tokens_per_s"] = self.prompt_tokens_per_s
        return out


@dataclass
class ChatResponse:
    """A finished request: the text, why it stopped, and what it cost.

    ``finish_reason`` is ``"stop"`` (the model ended or a stop string matched),
    ``"length"`` (cut off at ``max_tokens`` or the context window) or ``"error"`` (the
    model failed part way; ``content`` holds what it produced and ``error`` says why).
    """

    content: str
    finish_reason: FinishReason
    metrics: RequestMetrics = field(default_factory=RequestMetrics)
    error: str | None = None


@dataclass
class LLMHealth:
    ok: bool
    backend: str
    model: str
    detail: str = ""
    context_length: int | None = None


class LLMError(RuntimeError):
    """Base class of the LLM service's errors; the message names the cause."""


class ModelLoadError(LLMError):
    """The model file is missing, unreadable, corrupt or of the wrong format."""


class ContextOverflowError(LLMError, ValueError):
    """The prompt does not fit the model's context window."""


class GenerationError(LLMError):
    """The model failed while producing text (after the request started)."""


class LLMClosedError(LLMError):
    """The service was closed."""


class LLMUnavailableError(LLMError):
    """A remote backend could not be reached or refused the request."""


class TextStream(AsyncIterator[str]):
    """Text deltas of one request, with its outcome once exhausted.

    Iterate it for deltas; afterwards ``finish_reason``, ``content`` and ``metrics``
    describe the request. A failure mid-stream raises :class:`GenerationError` (the
    deltas already received stand). ``aclose()`` (or leaving ``async with``) cancels the
    request at the next token and waits until the model is free again.
    """

    def __init__(self, deltas: AsyncIterator[str], metrics: RequestMetrics) -> None:
        self._deltas = deltas
        self.metrics = metrics
        self.finish_reason: FinishReason | None = None
        self.content = ""

    def __aiter__(self) -> TextStream:
        return self

    async def __anext__(self) -> str:
        delta = await self._deltas.__anext__()
        self.content += delta
        return delta

    async def aclose(self) -> None:
        aclose = getattr(self._deltas, "aclose", None)
        if aclose is not None:
            await aclose()

    async def __aenter__(self) -> TextStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


@runtime_checkable
class LLMService(Protocol):
    """What every model user depends on.

    :meth:`chat` and :meth:`stream` take :class:`GenerationOptions` (positionally) and/or
    its fields as keyword arguments, which override it.

    ``chat`` reports model failures as ``finish_reason="error"``; it raises only for bad
    requests (:class:`ContextOverflowError`, malformed messages), a closed service, or
    cancellation. ``stream`` raises :class:`GenerationError` when the model fails mid-way.
    Optional capabilities are protocols of their own (:mod:`edge.llm._capabilities`).
    """

    async def chat(
        self, messages: Messages, options: GenerationOptions | None = None, /, **fields: Any
    ) -> ChatResponse: ...

    def stream(
        self, messages: Messages, options: GenerationOptions | None = None, /, **fields: Any
    ) -> TextStream: ...

    async def health(self) -> LLMHealth: ...

    async def close(self) -> None: ...


class StreamingLLM:
    """Base for backends: they implement :meth:`generate`; ``stream`` merges the options
    and ``chat`` is ``stream`` collected (see :func:`collect`)."""

    def generate(self, messages: Messages, options: GenerationOptions) -> TextStream:
        raise NotImplementedError

    def stream(
        self, messages: Messages, options: GenerationOptions | None = None, /, **fields: Any
    ) -> TextStream:
        return self.generate(messages, GenerationOptions.of(options, **fields))

    async def chat(
        self, messages: Messages, options: GenerationOptions | None = None, /, **fields: Any
    ) -> ChatResponse:
        """The whole answer; a failure mid-stream gives ``finish_reason="error"``."""
        return await collect(self.stream(messages, options, **fields))


async def collect(stream: TextStream) -> ChatResponse:
    """Drain ``stream`` into a :class:`ChatResponse`, turning a mid-stream failure into
    ``finish_reason="error"``. Shared by backends to implement ``chat`` over ``stream``."""
    try:
        async with stream:
            async for _ in stream:
                pass
    except GenerationError as exc:
        return ChatResponse(stream.content, "error", stream.metrics, error=str(exc))
    return ChatResponse(stream.content, stream.finish_reason or "stop", stream.metrics)
