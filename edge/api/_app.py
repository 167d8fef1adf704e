"""The ASGI app behind the port's HTTP side: access, bounds, routes, errors.

Every request must carry the device access token as ``Authorization: Bearer <token>``
(what an OpenAI SDK sends as its API key; ``OLLAMA_API_KEY`` for the Ollama client), unless
the service runs ``--insecure``; a browser ``Origin`` must be the service's own page or
allow-listed, as for the WebSocket. Requests are bounded: at once in total and per
client address (429), a rate per address (429 with ``Retry-After``), body sizes (413)
and the time to send a body (408).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Send

from edge.server import ConnectionSlots, LogLimiter, bearer_token, origin_allowed, token_matches

from . import _audio, _ollama, _openai, _responses
from ._errors import ApiError, error_response
from ._faces import Faces
from ._limits import BoundedBody, RateLimiter

log = logging.getLogger(__name__)
limited_log = LogLimiter(log)

Scope = dict[str, Any]


def routes(faces: Faces) -> list[Route]:
    def get(path: str, make: Callable[[Faces], Response]) -> Route:
        async def endpoint(request: Request) -> Response:
            return make(faces)

        return Route(path, endpoint, methods=["GET"])

    def post(path: str, handle: Callable[[Faces, Request], Awaitable[Response]]) -> Route:
        return Route(path, _with(faces, handle), methods=["POST"])

    return [
        get("/v1/models", _openai.models),
        post("/v1/chat/completions", _openai.chat_completions),
        post("/v1/responses", _responses.responses),
        Route(
            "/v1/responses/{response_id}",
            _with(faces, _responses.stored),
            methods=["GET", "DELETE"],
        ),
        post("/v1/audio/transcriptions", _audio.transcriptions),
        post("/v1/audio/speech", _audio.speech),
        get("/api/version", lambda f: _ollama.version()),
        get("/api/tags", _ollama.tags),
        get("/api/ps", _ollama.running),
        post("/api/show", _ollama.show),
        post("/api/chat", _ollama.chat),
        post("/api/generate", _ollama.generate),
    ]


def _with(
    faces: Faces, handle: Callable[[Faces, Request], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        return await handle(faces, request)

    return endpoint


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc, request.url.path)


async def _not_found(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 404)
    path = request.url.path
    message = f"{request.method} {path} is not served here (see docs/api.md)"
    return error_response(ApiError(status, message), path)


async def _failed(request: Request, exc: Exception) -> Response:
    return error_response(ApiError(500, f"internal error: {exc}"), request.url.path)


class ApiApp:
    """The ASGI app: checks access and bounds, then routes (see the module docstring)."""

    def __init__(self, faces: Faces) -> None:
        self.faces = faces
        limits = faces.limits
        self.slots = ConnectionSlots(limits.max_requests, limits.max_per_address)
        self.rates = RateLimiter(limits.rate, limits.burst)
        self.router = Starlette(
            routes=routes(faces),
            exception_handlers={
                ApiError: _api_error,
                404: _not_found,
                405: _not_found,
                Exception: _failed,
            },
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        address = str((scope.get("client") or ("?",))[0])
        limit, timeout_s = self.faces.limits.for_path(scope["path"])
        body = BoundedBody(receive, limit, timeout_s)
        try:
            self._admit(scope, address)
        except ApiError as exc:
            await error_response(exc, scope["path"])(scope, receive, send)
            return
        refused = self.slots.acquire(address)
        if refused is not None:
            error = ApiError(429, f"too many requests at once: {refused}", code="too_many_requests")
            await error_response(error, scope["path"])(scope, receive, send)
            return
        try:
            length = _content_length(scope)
            if length is not None and length > limit:
                try:
                    await body.drain()
                except ApiError as exc:
                    await error_response(exc, scope["path"])(scope, receive, send)
                    return
            await self.router(scope, body, send)
        except Exception:  # answered 500 by _failed (or a stream cut short): logged here
            limited_log.log(logging.ERROR, "api", "%s failed", scope["path"], exc_info=True)
        finally:
            self.slots.release(address)

    def _admit(self, scope: Scope, address: str) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        access = self.faces.access
        host = headers.get("host")
        if not origin_allowed(headers.get("origin"), host, access.allowed_origins):
            raise ApiError(403, "this page's origin may not use the service (see allowed_origins)")
        expected = access.current_token()
        if expected is not None and not token_matches(
            expected, bearer_token(headers.get("authorization"))
        ):
            missing = "authorization" not in headers
            message = (
                "this service needs its device access token as 'Authorization: Bearer <token>' "
                "(the API key; `edge token` on the service's machine shows it)"
                if missing
                else "wrong device access token (`edge token` on the service's machine shows it)"
            )
            raise ApiError(401, message, code="invalid_api_key")
        wait = self.rates.take(address)
        if wait > 0:
            retry = str(math.ceil(wait))
            raise ApiError(
                429,
                f"too many requests from this address; try again in {retry} s",
                code="rate_limit_exceeded",
                headers={"Retry-After": retry},
            )


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
