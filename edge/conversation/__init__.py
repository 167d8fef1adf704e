"""Conversation with participant-scoped context, compacted in the background when idle.

:class:`Conversation` is a routed destination (:class:`edge.routing.RoutableAgent`) that
answers from the model's own knowledge and a :class:`ContextManager`: completed dialogue
and named background sources (summary topics replace their state, incremental topics
append and are compacted into rolling summaries, within byte budgets).

Example::

    async with ContextManager(llm, incremental_context_topics=("lab.notes",)) as context:
        runtime.register("context", context.subscriber())
        config = ConversationConfig(instructions="Answer about the lab.")
        conversation = Conversation(llm, context=context, config=config,
                                    runtime=runtime, output_topic=VOICE_OUTPUT_TOPIC)
        ...
"""

from edge.interaction import ConversationContextUpdate  # the payload, re-exported

from ._compaction import (
    CompactionAttempt,
    CompactionPrompts,
    CompactionReport,
    CompactionRequest,
)
from ._context import TranscriptEntry
from ._conversation import (
    DEFAULT_DESCRIPTION,
    DEFAULT_STOP,
    DEFAULT_SYSTEM_PROMPT,
    ROUTE_EXAMPLES,
    ContextDialogue,
    Conversation,
    ConversationConfig,
)
from ._eval import CASES as EVAL_CASES
from ._eval import CaseResult as EvalCaseResult
from ._eval import run_eval
from ._eval_recall import FILLERS as RECALL_EVAL_FILLERS
from ._eval_recall import HALVES as RECALL_EVAL_HALVES
from ._eval_recall import RECALL_CASES as RECALL_EVAL_CASES
from ._eval_recall import RecallResult as RecallCaseResult
from ._eval_recall import profile_budgets as recall_eval_budgets
from ._eval_recall import run_recall_eval
from ._eval_recall import summarize as recall_eval_summary
from ._manager import ContextManager
from ._recall import MemoryRecallIndex, RecallIndex, Statement
from ._render import ContextBlock

__all__ = [
    "DEFAULT_DESCRIPTION",
    "DEFAULT_STOP",
    "DEFAULT_SYSTEM_PROMPT",
    "EVAL_CASES",
    "RECALL_EVAL_CASES",
    "RECALL_EVAL_FILLERS",
    "RECALL_EVAL_HALVES",
    "ROUTE_EXAMPLES",
    "CompactionAttempt",
    "CompactionPrompts",
    "CompactionReport",
    "CompactionRequest",
    "ContextBlock",
    "ContextDialogue",
    "ContextManager",
    "Conversation",
    "ConversationConfig",
    "ConversationContextUpdate",
    "EvalCaseResult",
    "MemoryRecallIndex",
    "RecallCaseResult",
    "RecallIndex",
    "Statement",
    "TranscriptEntry",
    "recall_eval_budgets",
    "recall_eval_summary",
    "run_eval",
    "run_recall_eval",
]
