"""Ollama's API, the calls Home Assistant's Ollama integration, Open WebUI and Ollama's
own clients make: ``GET /api/version``, ``GET /api/tags``, ``POST /api/show``,
``GET /api/ps``, ``POST /api/chat`` and ``POST /api/generate`` (newline-delimited JSON
while streaming, the default)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from edge.llm import ChatMessage

from ._chat import PARTICIPANT_HEADER, ChatRequest, answer, chat_messages
from ._errors import ApiError, invalid
from ._faces import Faces
from ._turns import Answer

_Shape = Callable[[str], dict[str, Any]]  # an answer's text as a reply line carries it
OLLAMA_API_VERSION = "0.12.0"  # the Ollama release whose calls these follow
NDJSON = "application/x-ndjson"


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")  # fields we do not serve are accepted, unused


class OllamaMessage(_Lenient):
    role: str
    content: str = ""


class OllamaOptions(_Lenient):
    temperature: float | None = None
    num_predict: int | None = None
    stop: list[str] | None = None


class OllamaChat(_Lenient):
    model: str = ""
    messages: list[OllamaMessage] = []
    stream: bool = True
    options: OllamaOptions | None = None
    keep_alive: str | int | float | None = None


class OllamaGenerate(_Lenient):
    model: str = ""
    prompt: str = ""
    system: str | None = None
    suffix: str | None = None
    template: str | None = None
    context: list[int] | None = None
    raw: bool = False
    stream: bool = True
    options: OllamaOptions | None = None
    keep_alive: str | int | float | None = None


# What /api/generate cannot do with this model and service, refused rather than ignored:
# each would change what the answer means.
_GENERATE_REFUSED = {
    "suffix": "suffix (fill-in-the-middle) is not served: the model has no insert template",
    "template": "template is not served: the model's own chat template applies",
    "context": "context (deprecated by Ollama) is not served: send the conversation's "
    "messages to /api/chat",
    "raw": "raw prompts are not served: the prompt is answered through the model's "
    "chat template (send raw false)",
}


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def version() -> JSONResponse:
    return JSONResponse({"version": OLLAMA_API_VERSION})


def _details(faces: Faces) -> dict[str, Any]:
    name = faces.llm_id()
    quant = name.rsplit("-", 1)[-1].upper() if "-" in name else ""
    return {
        "parent_model": "",
        "format": "gguf",
        "family": name.split("-", 1)[0],
        "families": [name.split("-", 1)[0]],
        "parameter_size": "",
        "quantization_level": quant,
    }


def _tag(faces: Faces) -> str:
    return f"{faces.llm_id()}:latest"


def tags(faces: Faces) -> JSONResponse:
    model = {
        "name": _tag(faces),
        "model": _tag(faces),
        "modified_at": datetime.fromtimestamp(faces.started, UTC).isoformat(),
        "size": faces.llm_size(),
        "digest": faces.llm_digest(),
        "details": _details(faces),
    }
    return JSONResponse({"models": [model]})


def running(faces: Faces) -> JSONResponse:
    """The model is always loaded: it "expires" a year from now."""
    model = {"name": _tag(faces), "model": _tag(faces), "size": faces.llm_size()}
    expires = (datetime.now(UTC) + timedelta(days=365)).isoformat()
    model |= {"digest": faces.llm_digest(), "details": _details(faces), "expires_at": expires}
    return JSONResponse({"models": [{**model, "size_vram": 0}]})


class OllamaShow(_Lenient):
    model: str = ""
    name: str = ""  # the older clients' field


async def show(faces: Faces, request: Request) -> JSONResponse:
    try:  # pydantic's parser, not json.loads: a deeply nested body is a 400, not a crash
        body = OllamaShow.model_validate_json(await request.body() or b"{}")
    except ValidationError as exc:
        raise invalid(exc) from None
    if not (body.model or body.name):
        raise ApiError(400, "model is required")
    info = {"general.architecture": _details(faces)["family"]}
    if faces.context_length():
        info["general.context_length"] = faces.context_length()
    return JSONResponse(
        {
            "license": "",
            "modelfile": f"FROM {_tag(faces)}\n",
            "parameters": "",
            "template": "{{ .Prompt }}",
            "details": _details(faces),
            "model_info": info,
            "capabilities": ["completion"],
            "modified_at": datetime.fromtimestamp(faces.started, UTC).isoformat(),
        }
    )


def _message(text: str) -> dict[str, Any]:
    """A chat answer's text, as /api/chat sends it."""
    return {"message": {"role": "assistant", "content": text}}


def _response(text: str) -> dict[str, Any]:
    """A completion's text, as /api/generate sends it."""
    return {"response": text}


def _unloaded(keep_alive: object) -> str:
    """A request with nothing to answer loads the model (or unloads it, for keep_alive 0):
    it is always loaded here, so only the reason is told."""
    return "unload" if keep_alive in (0, "0", "0s") else "load"


async def chat(faces: Faces, request: Request) -> Response:
    try:
        body = OllamaChat.model_validate_json(await request.body())
    except ValidationError as exc:
        raise invalid(exc) from None
    if not body.messages:
        return JSONResponse(_final(faces, _message(""), _unloaded(body.keep_alive)))
    chat_request = _request(chat_messages(body.messages), request, body.options)
    return await _answered(faces, chat_request, body.stream, _message)


async def generate(faces: Faces, request: Request) -> Response:
    """A completion of ``prompt`` (after ``system``, if given), answered as a chat turn."""
    try:
        body = OllamaGenerate.model_validate_json(await request.body())
    except ValidationError as exc:
        raise invalid(exc) from None
    for field, why in _GENERATE_REFUSED.items():
        if getattr(body, field):
            raise ApiError(400, why, param=field)
    if not body.prompt:
        return JSONResponse(_final(faces, _response(""), _unloaded(body.keep_alive)))
    messages = [ChatMessage(role="system", content=body.system)] if body.system else []
    messages.append(ChatMessage(role="user", content=body.prompt))
    return await _answered(faces, _request(messages, request, body.options), body.stream, _response)


def _request(
    messages: list[ChatMessage], request: Request, options: OllamaOptions | None
) -> ChatRequest:
    options = options or OllamaOptions()
    limit = options.num_predict if options.num_predict and options.num_predict > 0 else None
    return ChatRequest(
        messages=messages,
        participant=request.headers.get(PARTICIPANT_HEADER),
        max_tokens=limit,
        temperature=options.temperature,
        stop=tuple(s for s in options.stop or () if s),
    )


async def _answered(
    faces: Faces, chat_request: ChatRequest, stream: bool, shape: _Shape
) -> Response:
    started = time.perf_counter()
    reply = answer(faces, chat_request)
    if not stream:
        text = "".join([piece async for piece in reply.pieces])
        return JSONResponse(_final(faces, shape(text), reply.finish_reason, reply, started))
    return StreamingResponse(_lines(faces, reply, started, shape), media_type=NDJSON)


async def _lines(faces: Faces, reply: Answer, started: float, shape: _Shape) -> AsyncIterator[str]:
    try:
        async for piece in reply.pieces:
            yield _line({"model": _tag(faces), "created_at": _now(), **shape(piece), "done": False})
    except ApiError as exc:  # the headers are out: the error is the stream's last line
        yield _line({"error": exc.message})
        return
    yield _line(_final(faces, shape(""), reply.finish_reason, reply, started))


def _final(
    faces: Faces,
    said: dict[str, Any],
    reason: str,
    reply: Answer | None = None,
    started: float = 0.0,
) -> dict[str, Any]:
    total = int((time.perf_counter() - started) * 1e9) if started else 0
    final: dict[str, Any] = {
        "model": _tag(faces),
        "created_at": _now(),
        **said,
        "done": True,
        "done_reason": reason,
        "total_duration": total,
        "load_duration": 0,
    }
    if reply is not None:
        usage = reply.usage
        final["prompt_eval_count"] = usage.prompt_tokens
        final["eval_count"] = usage.completion_tokens
        for name, seconds in (
            ("prompt_eval_duration", usage.prompt_eval_s),
            ("eval_duration", usage.generation_s),
        ):
            if seconds is not None:
                final[name] = int(seconds * 1e9)
    return final


def _line(data: dict[str, Any]) -> str:
    return json.dumps(data, separators=(",", ":")) + "\n"
