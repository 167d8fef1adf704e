"""The LLM service: one protocol (with its optional capabilities as protocols of their own
and one ``GenerationOptions`` value), a local llama.cpp backend behind a priority scheduler,
an OpenAI-compatible remote backend, and a scripted model for tests."""

from ._activity import ActivityTracker
from ._batch import QueueFullError, SeqContext
from ._capabilities import (
    ChatFormatter,
    ForgetsCache,
    Loadable,
    MovesCache,
    ReportsActivity,
    ReportsCache,
    Scorer,
    TokenCounter,
    Warmable,
)
from ._kvstore import KVStore
from ._llamacpp import LlamaConfig, LlamaCppLLM, ScoreResult
from ._openai import OpenAICompatLLM
from ._quantize import quantize_gguf
from ._scheduler import ModelScheduler, Slot
from ._scripted import RecordedRequest, ScriptedLLM, ScriptedReply
from ._types import (
    ChatMessage,
    ChatResponse,
    ContextOverflowError,
    FinishReason,
    GenerationError,
    GenerationOptions,
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
from ._wrapper import CountingLLMWrapper, LLMWrapper

__all__ = [
    "ActivityTracker",
    "ChatFormatter",
    "ChatMessage",
    "ChatResponse",
    "ContextOverflowError",
    "CountingLLMWrapper",
    "FinishReason",
    "ForgetsCache",
    "GenerationError",
    "GenerationOptions",
    "KVStore",
    "LLMClosedError",
    "LLMError",
    "LLMHealth",
    "LLMService",
    "LLMUnavailableError",
    "LLMWrapper",
    "LlamaConfig",
    "LlamaCppLLM",
    "Loadable",
    "Messages",
    "ModelLoadError",
    "ModelScheduler",
    "MovesCache",
    "OpenAICompatLLM",
    "Priority",
    "QueueFullError",
    "RecordedRequest",
    "ReportsActivity",
    "ReportsCache",
    "RequestMetrics",
    "ScoreResult",
    "Scorer",
    "ScriptedLLM",
    "ScriptedReply",
    "SeqContext",
    "Slot",
    "StreamingLLM",
    "TextStream",
    "TokenCounter",
    "Warmable",
    "as_messages",
    "collect",
    "quantize_gguf",
]
