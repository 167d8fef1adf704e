"""A stateless request's answer: the client's own messages, answered as they are.

The gateway's :meth:`~edge.server.Gateway.complete` answers (the one model scheduler,
interactive priority); nothing is recorded. Requests that open with the same first
message (``api:prefix:<hash>``) reuse its model state, one key per conversation
(:mod:`edge.api._slots`), so a client's system prompt is evaluated once and a client that
resends its history has only its newest messages evaluated. A clock line in the system
prompt (Home Assistant's) moves next to the question first (:mod:`edge.api._clock`); a
history the client trims (its oldest rounds dropped: Home Assistant's ``max_history``)
keeps the rest of its state, shifted (``GenerationOptions.shift_reuse``, set by the
caller).
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import AsyncIterator, Callable
from typing import cast

from edge.llm import ChatFormatter, ChatMessage, GenerationOptions, Messages, TextStream
from edge.server import ClientError, Gateway

from ._clock import clock_lines_last, settle, unsettle
from ._errors import ApiError
from ._slots import ConversationSlots, dialogue
from ._turns import PREFIX, Answer, Usage


def prefix_key(messages: Messages) -> str | None:
    first = messages[0] if messages else None
    if first is None:
        return None
    content = first.content if isinstance(first, ChatMessage) else first["content"]
    digest = hashlib.sha256(str(content).encode()).hexdigest()[:16]
    return f"{PREFIX}prefix:{digest}"


def stateless(
    gateway: Gateway,
    messages: Messages,
    options: GenerationOptions,
    slots: ConversationSlots | None = None,
) -> Answer:
    sent: list[ChatMessage] | None = None  # the messages as sent (all ChatMessage)
    moved: list[ChatMessage] | None = None  # the messages asked, when a clock line moved
    if all(isinstance(m, ChatMessage) for m in messages):
        sent = cast(list[ChatMessage], list(messages))
        formatter = gateway.llm if isinstance(gateway.llm, ChatFormatter) else None
        asked = clock_lines_last(sent, formatter)
        if asked != sent:
            messages = moved = asked
    key, seed, slot = prefix_key(messages), None, None
    if key is not None and slots is not None and sent is not None:
        slot, seed = slots.take(key, dialogue(sent))
        key = slot.key
    if key is not None:
        unsettle(gateway.llm, key)  # this request brings the state up to date itself
    try:
        stream = gateway.complete(
            messages, GenerationOptions.of(options, cache_key=key, seed_key=seed)
        )
    except ClientError as exc:
        if slots is not None and slot is not None:
            slots.done(slot, None)
        raise ApiError(503, str(exc)) from None

    finished = False

    def ended(text: str | None) -> None:
        nonlocal finished
        if finished:
            return
        finished = True
        if slots is not None and slot is not None and sent is not None:
            answered = (ChatMessage(role="assistant", content=text),) if text is not None else ()
            slots.done(slot, dialogue([*sent, *answered]) if text is not None else None)
        if text is not None and moved is not None and key is not None:
            settle(gateway.llm, moved, text, key)

    answer = Answer(pieces=_pieces(stream, None))
    answer.pieces = _pieces(stream, answer, ended)
    weakref.finalize(answer, ended, None)  # never read (its client left before the reply)
    return answer


async def _pieces(
    stream: TextStream, answer: Answer | None, ended: Callable[[str | None], None] | None = None
) -> AsyncIterator[str]:
    """The answer's text; ``ended`` gets it whole once it ended, or None when it failed
    or its reader left."""
    text: list[str] = []
    whole = False
    try:
        async with stream:
            async for piece in stream:
                text.append(piece)
                yield piece
        whole = True
    finally:
        if ended is not None:
            ended("".join(text) if whole else None)
    if answer is not None:
        metrics = stream.metrics
        answer.usage = Usage(
            metrics.prompt_tokens,
            metrics.generated_tokens,
            metrics.prompt_eval_s,
            metrics.generation_s,
        )
        answer.finish_reason = getattr(stream, "finish_reason", None) or "stop"
