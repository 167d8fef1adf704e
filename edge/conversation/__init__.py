"""Conversation with participant-scoped context, compacted in the background when idle.

:class:`Conversation` is a routed destination (:class:`edge.routing.RoutableAgent`) that
answers from the model's own knowledge and a :class:`ContextManager`: completed dialogue
and named background sources (summary topics replace their state, incremental topics
append and are compacted into rolling summaries, within byte budgets).

Example::

    context_config = ContextConfig(incremental_context_topics=("lab.notes",))
    async with ContextManager(llm, context_config) as context:
        runtime.register("context", context.subscriber())
        answering = ConversationConfig(instructions="Answer about the lab.")
        conversation = Conversation(llm, context=context, config=answering,
                                    runtime=runtime, output_topic=VOICE_OUTPUT_TOPIC)
        ...
"""

from edge.interaction import ConversationContextUpdate  # the payload, re-exported
from edge.recall import MemoryRecallIndex, RecallIndex, Statement  # re-exported

from ._compaction import (
    CompactionAttempt,
    CompactionPrompts,
    CompactionReport,
    CompactionRequest,
)
from ._config import (
    COMPACTION_RESERVE_BYTES,
    ContextConfig,
    ContextOptions,
    least_compaction_input,
)
from ._context import TranscriptEntry
from ._conversation import (
    DEFAULT_DESCRIPTION,
    DEFAULT_STOP,
    DEFAULT_SYSTEM_PROMPT,
    ROUTE_EXAMPLES,
    Conversation,
    ConversationConfig,
)
from ._dialogue import ContextDialogue
from ._manager import ContextManager
from ._prefixes import SUCCESSOR_KEY, SYSTEM_PROMPT_KEY, PrefixWarmer
from ._render import ContextBlock
from ._reply import ReplyFilter, has_scaffolding
from ._stated import StatedAnswer

__all__ = [
    "COMPACTION_RESERVE_BYTES",
    "DEFAULT_DESCRIPTION",
    "DEFAULT_STOP",
    "DEFAULT_SYSTEM_PROMPT",
    "ROUTE_EXAMPLES",
    "SUCCESSOR_KEY",
    "SYSTEM_PROMPT_KEY",
    "CompactionAttempt",
    "CompactionPrompts",
    "CompactionReport",
    "CompactionRequest",
    "ContextBlock",
    "ContextConfig",
    "ContextDialogue",
    "ContextManager",
    "ContextOptions",
    "Conversation",
    "ConversationConfig",
    "ConversationContextUpdate",
    "MemoryRecallIndex",
    "PrefixWarmer",
    "RecallIndex",
    "ReplyFilter",
    "StatedAnswer",
    "Statement",
    "TranscriptEntry",
    "has_scaffolding",
    "least_compaction_input",
]
