"""What the chat APIs (OpenAI's and Ollama's) share: turning a request's messages into an
:class:`~edge.api._turns.Answer`, stateless or as a named participant's turn."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from edge.llm import ChatMessage, GenerationOptions, TokenCounter
from edge.server import MAX_TEXT_CHARS

from ._errors import ApiError
from ._faces import Faces
from ._stateless import stateless
from ._turns import Answer

PARTICIPANT_HEADER = "x-edge-participant"
ROLES: dict[str, Literal["system", "user", "assistant"]] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
}
MAX_MESSAGES = 500


def text_of(content: Any, where: str) -> str:
    """A message's text: a string, or OpenAI's list of parts (only text parts: ``text``,
    and the Responses API's ``input_text`` and ``output_text``)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in ("text", "input_text", "output_text"):
                raise ApiError(400, f"{where}: only text content is supported, not {kind!r}")
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise ApiError(400, f"{where}: content must be a string or a list of text parts")


def chat_messages(messages: Sequence[Any], key: str = "messages") -> list[ChatMessage]:
    """The request's messages as the model's; tool results and other roles are refused."""
    if not messages:
        raise ApiError(400, f"{key} must not be empty", param=key)
    if len(messages) > MAX_MESSAGES:
        raise ApiError(400, f"{key}: at most {MAX_MESSAGES} messages", param=key)
    out = []
    for i, message in enumerate(messages):
        role = ROLES.get(message.role)
        where = f"{key}[{i}]"
        if role is None:
            raise ApiError(400, f"{where}: role {message.role!r} is not supported", param=where)
        out.append(ChatMessage(role=role, content=text_of(message.content, where)))
    return out


@dataclass
class ChatRequest:
    """A chat request, as both APIs mean it."""

    messages: list[ChatMessage]
    participant: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    stop: tuple[str, ...] = ()


def answer(faces: Faces, request: ChatRequest) -> Answer:
    gateway = faces.gateway
    if request.participant is None:
        options = GenerationOptions(
            max_tokens=request.max_tokens,
            temperature=request.temperature,
            stop=request.stop,
            shift_reuse=faces.shift_trimmed,
        )
        return stateless(gateway, request.messages, options, faces.slots)
    last = request.messages[-1]
    if last.role != "user" or not last.content.strip():
        raise ApiError(
            400, "a participant's request must end with a user message", param="messages"
        )
    if len(last.content) > MAX_TEXT_CHARS:
        raise ApiError(400, f"the message is over {MAX_TEXT_CHARS:,} characters", param="messages")
    llm = gateway.llm
    count = llm.count_tokens if isinstance(llm, TokenCounter) else None
    turn = faces.participants.answer(request.participant, last.content, count)
    if request.stop:
        turn.pieces = cut_at_stop(turn.pieces, request.stop, turn)
    return turn


async def cut_at_stop(
    pieces: AsyncIterator[str], stop: tuple[str, ...], answer: Answer
) -> AsyncIterator[str]:
    """The text up to the first ``stop`` string (not included); the rest of the turn is
    stopped. Holds back only what could be the start of a stop string."""
    hold = max(len(s) for s in stop) - 1
    text = ""
    try:
        async for piece in pieces:
            text += piece
            found = [i for s in stop if (i := text.find(s)) >= 0]
            if found:
                if cut := text[: min(found)]:
                    yield cut
                answer.finish_reason = "stop"
                return
            if len(text) > hold:
                ready, text = text[: len(text) - hold], text[len(text) - hold :]
                yield ready
        if text:
            yield text
    finally:
        await pieces.aclose()  # type: ignore[attr-defined]  # an answer's pieces are an async generator
