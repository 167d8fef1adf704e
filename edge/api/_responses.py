"""OpenAI's Responses API: ``POST /v1/responses`` (``client.responses.create``), whole or
streamed as its server-sent events (``response.created`` … ``response.output_text.delta``
… ``response.completed``).

``input`` is a string (one user message) or a list of messages (``message`` items with
text content); ``instructions`` come first, and are not carried to a later response (as
OpenAI does). A response is stored unless ``store`` is false, so a later request's
``previous_response_id`` continues its conversation (:mod:`edge.api._response_chain`),
and ``GET``/``DELETE /v1/responses/{id}`` read or forget it.
``user`` or ``X-Edge-Participant`` makes the newest user message that participant's turn,
as for chat completions: their own context carries the conversation, so such a response
is recorded in their history (and forgotten with it), not stored here, and its
``previous_response_id`` is not needed. Answers are text: ``tools``, ``text.format`` and
``reasoning`` are accepted and not used, as for chat completions.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from edge.llm import ChatMessage

from ._chat import PARTICIPANT_HEADER, ChatRequest, answer, chat_messages
from ._errors import ApiError, invalid
from ._faces import Faces
from ._response_chain import StoredResponse
from ._turns import Answer


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")  # fields we do not serve are accepted, unused


class InputItem(_Lenient):
    type: str = "message"
    role: str = "user"
    content: Any = None


class ResponseRequest(_Lenient):
    model: str = ""
    input: str | list[InputItem] = ""
    instructions: str | None = None
    previous_response_id: str | None = None
    store: bool = True
    stream: bool = False
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    user: str | None = None


def _input_messages(body: ResponseRequest) -> list[ChatMessage]:
    """The request's own input as messages (instructions not included)."""
    if isinstance(body.input, str):
        if not body.input:
            raise ApiError(400, "input must not be empty", param="input")
        return [ChatMessage(role="user", content=body.input)]
    for i, item in enumerate(body.input):
        if item.type != "message":
            raise ApiError(
                400, f"input[{i}]: only message items are served, not {item.type!r}", param="input"
            )
    return chat_messages(body.input, key="input")


async def responses(faces: Faces, request: Request) -> Response:
    try:
        body = ResponseRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        raise invalid(exc) from None
    new = _input_messages(body)
    participant = body.user or request.headers.get(PARTICIPANT_HEADER)
    earlier = []
    if body.previous_response_id and participant is None:  # a participant's own context
        earlier = faces.responses.history(body.previous_response_id)  # holds theirs
    system = [ChatMessage(role="system", content=body.instructions)] if body.instructions else []
    chat = ChatRequest(
        messages=[*system, *earlier, *new],
        participant=participant,
        max_tokens=body.max_output_tokens,
        temperature=body.temperature,
    )
    if participant is not None:  # recorded in the participant's history, forgotten with it
        body = body.model_copy(update={"store": False})
    made = _Response(faces, body, answer(faces, chat), new)
    if body.stream:
        return StreamingResponse(made.events(), media_type="text/event-stream")
    return JSONResponse(await made.whole())


async def stored(faces: Faces, request: Request) -> Response:
    """``GET /v1/responses/{id}``: a stored response; ``DELETE``: forget it."""
    response_id = request.path_params["response_id"]
    kept = faces.responses.get(response_id)
    if kept is None:
        raise ApiError(404, f"no response {response_id!r} is kept here", param="response_id")
    if request.method == "DELETE":
        faces.responses.forget(response_id)
        return JSONResponse({"id": response_id, "object": "response", "deleted": True})
    return Response(kept.body, media_type="application/json")


class _Response:
    """One response: its object as OpenAI shapes it, whole or as events."""

    def __init__(self, faces: Faces, body: ResponseRequest, reply: Answer, new: list[ChatMessage]):
        self.faces, self.body, self.reply, self.new = faces, body, reply, new
        self.id = "resp_" + secrets.token_hex(24)
        self.item_id = "msg_" + secrets.token_hex(24)
        self.created = int(time.time())
        self.sequence = 0

    def _object(self, status: str, text: str | None) -> dict[str, Any]:
        body = self.body
        whole = {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "instructions": body.instructions,
            "max_output_tokens": body.max_output_tokens,
            "model": self.faces.llm_id(),
            "output": [] if text is None else [self._item(text, "completed")],
            "parallel_tool_calls": True,
            "previous_response_id": body.previous_response_id,
            "store": body.store,
            "temperature": body.temperature,
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "top_p": None,
            "truncation": "disabled",
            "usage": None,
            "user": body.user,
            "metadata": {},
        }
        if status == "incomplete":
            whole["incomplete_details"] = {"reason": "max_output_tokens"}
        if text is not None:
            whole["usage"] = self._usage()
        return whole

    def _item(self, text: str | None, status: str) -> dict[str, Any]:
        content = [] if text is None else [_part(text)]
        return {
            "type": "message",
            "id": self.item_id,
            "status": status,
            "role": "assistant",
            "content": content,
        }

    def _usage(self) -> dict[str, Any]:
        u = self.reply.usage
        return {
            "input_tokens": u.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": u.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.total_tokens,
        }

    def _done(self, text: str) -> dict[str, Any]:
        """The response is over: its object, stored (unless ``store`` is false)."""
        status = "incomplete" if self.reply.finish_reason == "length" else "completed"
        whole = self._object(status, text)
        if self.body.store:
            answered = ChatMessage(role="assistant", content=text)
            kept = (*self.new, answered)
            stored = StoredResponse(self.body.previous_response_id, kept, json.dumps(whole))
            self.faces.responses.keep(self.id, stored)
        return whole

    async def whole(self) -> dict[str, Any]:
        return self._done("".join([piece async for piece in self.reply.pieces]))

    def _event(self, kind: str, **data: Any) -> str:
        event = {"type": kind, "sequence_number": self.sequence, **data}
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n"

    async def events(self) -> AsyncIterator[str]:
        at = {"item_id": self.item_id, "output_index": 0, "content_index": 0}
        yield self._event("response.created", response=self._object("in_progress", None))
        yield self._event("response.in_progress", response=self._object("in_progress", None))
        item = self._item(None, "in_progress")
        yield self._event("response.output_item.added", output_index=0, item=item)
        yield self._event("response.content_part.added", **at, part=_part(""))
        text = []
        try:
            async for piece in self.reply.pieces:
                text.append(piece)
                yield self._event("response.output_text.delta", **at, delta=piece, logprobs=[])
        except ApiError as exc:  # the headers are out: the error is the stream's last event
            yield self._event("error", code=exc.code, message=exc.message, param=exc.param)
            return
        whole = "".join(text)
        response = self._done(whole)
        yield self._event("response.output_text.done", **at, text=whole, logprobs=[])
        yield self._event("response.content_part.done", **at, part=_part(whole))
        done = self._item(whole, "completed")
        yield self._event("response.output_item.done", output_index=0, item=done)
        yield self._event(f"response.{response['status']}", response=response)


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
