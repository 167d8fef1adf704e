"""Property-based fuzzing (hypothesis) of the OpenAI and Ollama JSON endpoints: a running
service (scripted model) takes random bodies, most of them shaped like each endpoint's own
requests with hostile values. Each answer is a success or a 4xx in the API's own error
shape, never a 5xx, and after each example a well-formed request is still answered.
Examples and deadlines are bounded so the module stays within ~20 s."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import example, given
from hypothesis import strategies as st

from edge.api import ApiLimits, serve_api
from edge.decisions import ScriptedDecisions
from edge.llm import ScriptedLLM
from edge.server import EdgeService
from tests.api_helpers import TOKEN, web_url
from tests.fuzz_helpers import any_json, fuzz_settings
from tests.server_helpers import answer_for
from tests.server_helpers import settings as service_settings

LIVE = fuzz_settings(25, 5000)
FIELDS = {
    "/v1/chat/completions": ("model", "messages", "stream", "max_tokens", "stop", "user", "n"),
    "/v1/responses": (
        "model",
        "input",
        "instructions",
        "previous_response_id",
        "store",
        "stream",
        "max_output_tokens",
        "temperature",
        "user",
    ),
    "/api/chat": ("model", "messages", "stream", "options", "keep_alive", "format"),
    "/api/generate": ("model", "prompt", "system", "suffix", "raw", "context", "stream"),
    "/api/show": ("model", "name"),
}
GOOD = {
    "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/responses": {"model": "m", "input": "hi"},
    "/api/chat": {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False},
    "/api/generate": {"model": "m", "prompt": "hi", "stream": False},
    "/api/show": {"model": "m"},
}

json_values = any_json(wide_numbers=True)
roles = st.sampled_from(["user", "assistant", "system", "developer", "tool", "", "👀"])
contents = st.one_of(
    st.text(max_size=50),
    st.lists(
        st.fixed_dictionaries(
            {"type": st.sampled_from(["text", "input_text", "output_text", "image_url", "x"])},
            optional={"text": json_values},
        ),
        max_size=3,
    ),
    json_values,
)
message_lists = st.lists(
    st.fixed_dictionaries({"role": roles}, optional={"content": contents, "type": json_values}),
    max_size=4,
)


def bodies(path: str) -> st.SearchStrategy[bytes]:
    shaped = st.dictionaries(
        st.sampled_from(FIELDS[path]),
        st.one_of(json_values, message_lists, contents),
        max_size=len(FIELDS[path]),
    ).map(lambda body: json.dumps(body).encode())
    return st.one_of(
        shaped,
        json_values.map(lambda v: json.dumps(v).encode()),
        st.binary(max_size=200),
        st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n),
    )


endpoint_and_body = st.sampled_from(sorted(FIELDS)).flatmap(
    lambda path: st.tuples(st.just(path), bodies(path))
)


@pytest.fixture(scope="module")
def live() -> Iterator[tuple[BlockingPortal, str]]:
    with tempfile.TemporaryDirectory() as data_dir:
        service = EdgeService(
            service_settings(token=TOKEN, data_dir=data_dir, tls=False),
            llm=ScriptedLLM(answer_for),
            decisions=ScriptedDecisions(default="conversation"),
        )
        serve_api(service, ApiLimits(rate=1000.0, burst=10_000))
        with start_blocking_portal("asyncio") as portal:
            with portal.wrap_async_context_manager(service):
                yield portal, web_url(service)


def _error_shape(path: str, body: Any) -> bool:
    if path.startswith("/api/"):
        return isinstance(body, dict) and isinstance(body.get("error"), str)
    error = body.get("error") if isinstance(body, dict) else None
    return isinstance(error, dict) and isinstance(error.get("message"), str)


NESTED = b"[" * 5000 + b"]" * 5000  # past the JSON parser's depth: /api/show gave a 500


@LIVE
@given(endpoint_and_body)
@example(("/api/show", NESTED))
@example(("/v1/responses", NESTED))
def test_random_bodies_get_an_answer_or_a_4xx_and_the_api_keeps_serving(
    live: tuple[BlockingPortal, str], case: tuple[str, bytes]
) -> None:
    _, base = live
    path, body = case
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    with httpx.Client(base_url=base, headers=auth, timeout=10) as http:
        answered = http.post(path, content=body)
        assert answered.status_code < 500, (path, body, answered.text[:300])
        if answered.status_code >= 400:
            assert _error_shape(path, answered.json()), (path, answered.text[:300])
        else:
            answered.read()  # a stream is read to its end
        good = http.post(path, json=GOOD[path])
        assert good.status_code == 200, (path, good.text[:300])
