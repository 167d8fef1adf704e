"""An answer request fitted to the model's context window."""

from __future__ import annotations

import logging

from edge.llm import ChatMessage, LLMService, TokenCounter

from ._manager import ContextManager

log = logging.getLogger("edge.conversation._conversation")


def fitted(
    llm: LLMService,
    context: ContextManager,
    system: str,
    participant_id: str,
    query: str,
    *,
    now_us: int,
    max_tokens: int | None,
) -> list[ChatMessage]:
    """The three messages of an answer request.

    When the model can count tokens (the local backend), the request must also fit its
    context window with room for the answer: byte budgets are only an estimate of
    tokens (digits and times cost more tokens per byte). If it does not fit, the oldest
    context blocks are left out (entries first, then summaries) and a warning is
    logged. The current request and its recalled block are never clipped."""
    now = now_us
    messages = context.messages(participant_id, system=system, request=query, now_us=now)
    if not isinstance(llm, TokenCounter):
        return messages
    limit = llm.context_length - (max_tokens or llm.default_max_tokens)

    def fits(msgs: list[ChatMessage]) -> bool:
        return llm.count_tokens(llm.format_chat(msgs)) <= limit

    if fits(messages):
        return messages
    blocks = context.blocks(participant_id)
    recalled = context.recalled(participant_id, query)
    summaries = sum(1 for b in blocks if b.kind == "summary")
    dropped = 0
    while blocks:
        # the oldest entry first (entries follow the summaries), then summaries
        del blocks[summaries if summaries < len(blocks) else 0]
        summaries = min(summaries, len(blocks))
        dropped += 1
        text = context.render_blocks(blocks, now_us=now, recalled=recalled)
        candidate = [messages[0], ChatMessage(role="user", content=text), messages[2]]
        if fits(candidate):
            messages = candidate
            break
    else:
        messages = [
            messages[0],
            ChatMessage(
                role="user",
                content=context.render_blocks([], now_us=now, recalled=recalled),
            ),
            messages[2],
        ]
    log.warning(
        "participant %r: the request exceeded the model's %d-token window; "
        "%d oldest context block(s) left out",
        participant_id,
        llm.context_length,
        dropped,
    )
    return messages
