"""Errors in each API's own shape: OpenAI's ``{"error": {"message", "type", "param",
"code"}}`` under ``/v1/``, Ollama's ``{"error": "..."}`` under ``/api/``."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from starlette.responses import JSONResponse

OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "server_error",
}


class ApiError(Exception):
    """A request the API answers with an error: ``status``, a message saying why, and for
    OpenAI clients the offending ``param`` and a ``code``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}


def invalid(exc: ValidationError) -> ApiError:
    """A request body that does not fit the API's schema: the first problem, by field."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    message = f"{where}: {first['msg']}" if where else str(first["msg"])
    return ApiError(400, message, param=where or None)


def openai_body(error: ApiError) -> dict[str, Any]:
    return {
        "error": {
            "message": error.message,
            "type": OPENAI_TYPES.get(error.status, "server_error"),
            "param": error.param,
            "code": error.code,
        }
    }


def error_response(error: ApiError, path: str) -> JSONResponse:
    body = {"error": error.message} if path.startswith("/api/") else openai_body(error)
    return JSONResponse(body, status_code=error.status, headers=error.headers)
