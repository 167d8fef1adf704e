"""The LLM service: one protocol, a local llama.cpp backend behind a priority scheduler,
an OpenAI-compatible remote backend, and a scripted model for tests."""

from ._activity import ActivityTracker
from ._scripted import RecordedRequest, ScriptedLLM, ScriptedReply
from ._types import (
    ChatMessage,
    ChatResponse,
    ContextOverflowError,
    FinishReason,
    GenerationError,
    LLMClosedError,
    LLMError,
    LLMHealth,
    LLMService,
    LLMUnavailableError,
    Messages,
    ModelLoadError,
    Priority,
    RequestMetrics,
    TextStream,
    as_messages,
    collect,
)

__all__ = [
    "ActivityTracker",
    "ChatMessage",
    "ChatResponse",
    "ContextOverflowError",
    "FinishReason",
    "GenerationError",
    "LLMClosedError",
    "LLMError",
    "LLMHealth",
    "LLMService",
    "LLMUnavailableError",
    "Messages",
    "ModelLoadError",
    "Priority",
    "RecordedRequest",
    "RequestMetrics",
    "ScriptedLLM",
    "ScriptedReply",
    "TextStream",
    "as_messages",
    "collect",
]
