"""OpenAI's REST API: ``GET /v1/models`` and ``POST /v1/chat/completions`` (streamed as
server-sent events, or whole)."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ._chat import PARTICIPANT_HEADER, ChatRequest, answer, chat_messages
from ._errors import ApiError, invalid, openai_body
from ._faces import Faces

OWNER = "xr-edge"


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")  # fields we do not serve are accepted, unused


class InMessage(_Lenient):
    role: str
    content: Any = None


class StreamOptions(_Lenient):
    include_usage: bool = False


class CompletionRequest(_Lenient):
    model: str = ""
    messages: list[InMessage]
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    stop: str | list[str] | None = None
    user: str | None = None
    n: Literal[1] | None = None


def models(faces: Faces) -> JSONResponse:
    created = int(faces.started)
    data = [
        {"id": name, "object": "model", "created": created, "owned_by": OWNER}
        for name in faces.model_ids()
    ]
    return JSONResponse({"object": "list", "data": data})


async def chat_completions(faces: Faces, request: Request) -> Response:
    try:
        body = CompletionRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        raise invalid(exc) from None
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    if len(stop) > 4 or any(not s for s in stop):
        raise ApiError(400, "stop: at most 4 non-empty strings", param="stop")
    chat = ChatRequest(
        messages=chat_messages(body.messages),
        participant=body.user or request.headers.get(PARTICIPANT_HEADER),
        max_tokens=body.max_completion_tokens or body.max_tokens,
        temperature=body.temperature,
        stop=stop,
    )
    reply = answer(faces, chat)
    completion = _Completion(faces.llm_id(), reply)
    if body.stream:
        usage = body.stream_options is not None and body.stream_options.include_usage
        return StreamingResponse(completion.events(usage), media_type="text/event-stream")
    return JSONResponse(await completion.whole())


class _Completion:
    def __init__(self, model: str, reply: Any) -> None:
        self.id = "chatcmpl-" + secrets.token_hex(12)
        self.created = int(time.time())
        self.model = model
        self.reply = reply

    def _head(self) -> dict[str, Any]:
        return {"id": self.id, "created": self.created, "model": self.model}

    def _usage(self) -> dict[str, int]:
        u = self.reply.usage
        return {
            "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens,
            "total_tokens": u.total_tokens,
        }

    async def whole(self) -> dict[str, Any]:
        text = "".join([piece async for piece in self.reply.pieces])
        message = {"role": "assistant", "content": text, "refusal": None}
        choice = {"index": 0, "message": message, "finish_reason": self.reply.finish_reason}
        return {
            **self._head(),
            "object": "chat.completion",
            "choices": [{**choice, "logprobs": None}],
            "usage": self._usage(),
            "system_fingerprint": None,
        }

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        chunk = {**self._head(), "object": "chat.completion.chunk", "choices": [choice]}
        return _event(chunk)

    async def events(self, usage: bool) -> AsyncIterator[str]:
        yield self._chunk({"role": "assistant", "content": ""})
        try:
            async for piece in self.reply.pieces:
                yield self._chunk({"content": piece})
        except ApiError as exc:  # the headers are out: the error is the stream's last event
            yield _event(openai_body(exc))
            return
        yield self._chunk({}, self.reply.finish_reason)
        if usage:
            chunk = {**self._head(), "object": "chat.completion.chunk", "choices": []}
            yield _event({**chunk, "usage": self._usage()})
        yield "data: [DONE]\n\n"


def _event(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n"
