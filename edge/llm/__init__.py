"""The LLM service: one protocol, a local llama.cpp backend behind a priority scheduler,
an OpenAI-compatible remote backend, and a scripted model for tests."""

from ._activity import ActivityTracker
from ._llamacpp import LlamaCppLLM, ScoreResult
from ._openai import OpenAICompatLLM
from ._scheduler import ModelScheduler, Slot
from ._scripted import RecordedRequest, ScriptedLLM, ScriptedReply
from ._speculation import SpeculationStats, SpeculativeLLM
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
    StreamingLLM,
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
    "LlamaCppLLM",
    "Messages",
    "ModelLoadError",
    "ModelScheduler",
    "OpenAICompatLLM",
    "Priority",
    "RecordedRequest",
    "RequestMetrics",
    "ScoreResult",
    "ScriptedLLM",
    "ScriptedReply",
    "Slot",
    "SpeculationStats",
    "SpeculativeLLM",
    "StreamingLLM",
    "TextStream",
    "as_messages",
    "collect",
]
