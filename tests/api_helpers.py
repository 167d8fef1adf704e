"""Shared helpers for the API tests: a service with the API faces, and the official
clients (``openai``, ``ollama``) pointed at it."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import ollama
import openai

from edge.api import ApiLimits, serve_api
from edge.decisions import ScriptedDecisions
from edge.llm import ScriptedLLM
from edge.server import EdgeService
from tests.server_helpers import answer_for, settings

TOKEN = "test-device-token"


@asynccontextmanager
async def api_service(
    llm: ScriptedLLM | None = None, *, limits: ApiLimits | None = None, **kw: Any
) -> AsyncIterator[EdgeService]:
    """A text service on a scripted model with the APIs on its port (token ``TOKEN``)."""
    kw.setdefault("token", TOKEN)
    service = EdgeService(
        settings(**kw),
        llm=llm or ScriptedLLM(replies=answer_for),
        decisions=ScriptedDecisions(default="conversation"),
    )
    serve_api(service, limits)
    async with service:
        yield service


def web_url(service: EdgeService) -> str:
    return service.websocket_url.replace("ws", "http", 1)


def trust(data_dir: Path) -> ssl.SSLContext:
    """Trust the service's own certificate (made in its data directory)."""
    return ssl.create_default_context(cafile=str(data_dir / "tls" / "cert.pem"))


def openai_client(
    base: str, key: str = TOKEN, verify: ssl.SSLContext | None = None
) -> openai.AsyncOpenAI:
    http = openai.DefaultAsyncHttpxClient(verify=verify) if verify is not None else None
    return openai.AsyncOpenAI(
        base_url=base + "/v1", api_key=key, max_retries=0, http_client=http, timeout=120
    )


def ollama_client(
    base: str, key: str | None = TOKEN, verify: ssl.SSLContext | None = None
) -> ollama.AsyncClient:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    extra: dict[str, Any] = {"verify": verify} if verify is not None else {}
    return ollama.AsyncClient(host=base, headers=headers, timeout=120, **extra)
