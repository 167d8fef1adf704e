"""OpenAICompatLLM against real HTTP servers on 127.0.0.1.

Two kinds of server: llama-cpp-python's own OpenAI-compatible server running the default
GGUF model (``@pytest.mark.model``; started once for the module), and a tiny raw-socket
server written here that plays back exact bytes, for what a healthy server never does
(malformed chunks, a connection dropped mid-answer, HTTP errors, stalls).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import SocketAttribute, SocketStream
from required import require

from edge.llm import (
    ContextOverflowError,
    GenerationError,
    LLMClosedError,
    LLMService,
    LLMUnavailableError,
    Priority,
)
from edge.llm._openai import OpenAICompatLLM

pytestmark = pytest.mark.anyio

HI = [{"role": "user", "content": "Say hello."}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- a raw server that plays back exact bytes -------------------------------------------


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


Respond = Callable[[SocketStream, Request], Awaitable[None]]


@dataclass
class RawServer:
    base_url: str
    requests: list[Request] = field(default_factory=list)
    disconnected: anyio.Event = field(default_factory=anyio.Event)


async def read_request(conn: SocketStream) -> Request:
    data = b""
    while b"\r\n\r\n" not in data:
        data += await conn.receive()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", 0)):
        body += await conn.receive()
    return Request(method, path, headers, body)


MODELS = json.dumps({"object": "list", "data": [{"id": "raw-model", "object": "model"}]})


@asynccontextmanager
async def raw_server(respond: Respond) -> AsyncIterator[RawServer]:
    """Serve one response per connection; ``GET /v1/models`` answers a one-model list."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(SocketAttribute.local_port)
    server = RawServer(f"http://127.0.0.1:{port}/v1")

    async def handle(conn: SocketStream) -> None:
        async with conn:
            request = await read_request(conn)
            server.requests.append(request)
            try:
                if request.path.endswith("/models"):
                    await send_body(conn, 200, MODELS)
                else:
                    await respond(conn, request)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                server.disconnected.set()

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        try:
            yield server
        finally:
            tg.cancel_scope.cancel()


async def send_body(conn: SocketStream, status: int, body: str) -> None:
    raw = body.encode()
    await conn.send(
        f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(raw)}\r\nConnection: close\r\n\r\n".encode()
        + raw
    )


def chunk(content: str | None = None, finish: str | None = None, **extra: Any) -> str:
    delta = {} if content is None else {"content": content}
    return json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra})


def sse(*events: str, done: bool = True, chunked: bool = False, then_hang: bool = False) -> Respond:
    """An SSE answer: each event a ``data:`` line; ``chunked`` drops the connection without
    the final chunk (a broken transfer); ``then_hang`` stalls after the events."""

    async def respond(conn: SocketStream, request: Request) -> None:
        encoding = "Transfer-Encoding: chunked\r\n" if chunked else ""
        await conn.send(
            f"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n{encoding}"
            "Connection: close\r\n\r\n".encode()
        )
        payloads = [": ping\r\n\r\n", *(f"data: {e}\r\n\r\n" for e in events)]
        if done:
            payloads.append("data: [DONE]\r\n\r\n")
        for text in payloads:
            data = text.encode()
            await conn.send(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
            await anyio.sleep(0.01)
        if then_hang:
            while True:
                await anyio.sleep(0.05)
                await conn.send(b"%x\r\n: ping\n\n\r\n" % 8 if chunked else b": ping\n\n")

    return respond


def status(code: int, body: str) -> Respond:
    async def respond(conn: SocketStream, request: Request) -> None:
        await send_body(conn, code, body)

    return respond


# -- protocol behaviour against the raw server -------------------------------------------


async def test_streams_deltas_and_sends_an_openai_request() -> None:
    answer = sse(
        json.dumps({"choices": [{"index": 0, "delta": {"role": "assistant"}}]}),
        chunk("Hel"),
        chunk("lo"),
        chunk(None, "stop"),
        json.dumps({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3}}),
    )
    async with raw_server(answer) as server:
        llm = OpenAICompatLLM(
            server.base_url, api_key="k", extra_body={"top_p": 0.5}, default_max_tokens=40
        )
        assert isinstance(llm, LLMService)
        async with llm:
            stream = llm.stream(HI, cache_key="alice", stop=["\n"], priority="background")
            assert [d async for d in stream] == ["Hel", "lo"]
            assert (stream.finish_reason, stream.content) == ("stop", "Hello")
            m = stream.metrics
            assert (m.prompt_tokens, m.generated_tokens, m.queue_wait_s) == (12, 3, None)
            assert m.priority is Priority.BACKGROUND and m.cache_key == "alice"
            assert m.ttft_s is not None and m.total_s is not None and m.generation_s is not None
            health = await llm.health()
    models, post, _ = server.requests
    assert models.path == "/v1/models"
    assert (post.method, post.path) == ("POST", "/v1/chat/completions")
    assert post.headers["authorization"] == "Bearer k"
    assert post.json() == {
        "model": "raw-model",
        "messages": HI,
        "max_tokens": 40,
        "temperature": 0.2,
        "stream": True,
        "stream_options": {"include_usage": True},
        "stop": ["\n"],
        "user": "alice",
        "chat_template_kwargs": {"enable_thinking": False},
        "top_p": 0.5,
    }
    assert health.ok and health.model == "raw-model" and health.backend == "openai"


async def test_health_reports_a_model_the_server_does_not_serve() -> None:
    async with raw_server(sse()) as server:
        async with OpenAICompatLLM(server.base_url, model="other") as llm:
            health = await llm.health()
    assert not health.ok and "'other' is not among the served models" in health.detail


async def test_thinking_flag_is_optional_and_model_is_sent_as_given() -> None:
    async with raw_server(sse(chunk("x", "stop"))) as server:
        async with OpenAICompatLLM(server.base_url, model="m", disable_thinking=False) as llm:
            response = await llm.chat(HI, max_tokens=5, temperature=0)
    (post,) = server.requests
    body = post.json()
    assert "chat_template_kwargs" not in body and "user" not in body
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("m", 5, 0)
    # No usage chunk: the deltas are counted.
    assert (response.content, response.finish_reason, response.metrics.generated_tokens) == (
        "x",
        "stop",
        1,
    )


@pytest.mark.parametrize(
    ("reason", "expected"),
    [("length", "length"), ("max_tokens", "length"), ("tool_calls", "stop"), ("eos", "stop")],
)
async def test_finish_reasons_map_to_the_protocol(reason: str, expected: str) -> None:
    async with raw_server(sse(chunk("a"), chunk(None, reason))) as server:
        async with OpenAICompatLLM(server.base_url, model="m") as llm:
            assert (await llm.chat(HI)).finish_reason == expected


async def test_server_reported_failure_is_an_error_finish() -> None:
    async with raw_server(sse(chunk("part"), chunk(None, "abort"))) as server:
        async with OpenAICompatLLM(server.base_url, model="m") as llm:
            response = await llm.chat(HI)
    assert (response.content, response.finish_reason) == ("part", "error")
    assert "abort" in (response.error or "")


async def test_malformed_chunk_is_a_generation_error() -> None:
    async with raw_server(sse(chunk("ok "), "{not json")) as server:
        async with OpenAICompatLLM(server.base_url, model="m") as llm:
            stream = llm.stream(HI)
            got = []
            with pytest.raises(GenerationError, match=r"malformed chunk .* after 1 deltas"):
                async for delta in stream:
                    got.append(delta)
            assert got == ["ok "]
            response = await llm.chat(HI)
    assert (response.content, response.finish_reason) == ("ok ", "error")
    assert "{not json" in (response.error or "")


async def test_connection_dropped_mid_stream_is_a_generation_error() -> None:
    async with raw_server(sse(chunk("one "), chunk("two "), done=False, chunked=True)) as server:
        async with OpenAICompatLLM(server.base_url, model="m") as llm:
            response = await llm.chat(HI)
    assert (response.content, response.finish_reason) == ("one two ", "error")
    assert "broke after 2 deltas" in (response.error or "")


async def test_stream_ending_without_finish_or_done_is_a_generation_error() -> None:
    async with raw_server(sse(chunk("one "), done=False)) as server:
        async with OpenAICompatLLM(server.base_url, model="m") as llm:
            with pytest.raises(GenerationError, match="without a finish reason"):
                async for _ in llm.stream(HI):
                    pass


async def test_done_without_finish_reason_is_an_interruption() -> None:
    async with raw_server(sse(chunk("half "))) as server:
        async with OpenAICompatLLM(server.base_url, model="m") as llm:
            response = await llm.chat(HI)
    assert (response.content, response.finish_reason) == ("half ", "error")
    assert "interrupted" in (response.error or "")


def empty_stream_then(code: int, body: str) -> Respond:
    """llama-cpp-python's server: a failing streamed request gets 200 and no events."""

    async def respond(conn: SocketStream, request: Request) -> None:
        if request.json()["stream"]:
            await sse(done=False)(conn, request)
        else:
            assert "stream_options" not in request.json()
            await send_body(conn, code, body)

    return respond


async def test_empty_stream_asks_again_without_streaming() -> None:
    overflow = (
        '{"error": {"message": "This model\'s maximum context length is 2048 tokens. However, '
        'you requested 3039 tokens", "code": "context_length_exceeded"}}'
    )
    async with raw_server(empty_stream_then(400, overflow)) as server:
        async with OpenAICompatLLM(server.base_url, model="m") as llm:
            with pytest.raises(ContextOverflowError, match="maximum context length is 2048"):
                await llm.chat(HI)
    completion = json.dumps(
        {
            "choices": [
                {"message": {"role": "assistant", "content": "Hi!"}, "finish_reason": "length"}
            ],
            "usage": {"prompt_tokens": 9, "completion_tokens": 2},
        }
    )
    async with raw_server(empty_stream_then(200, completion)) as server:
        async with OpenAICompatLLM(server.base_url, model="m") as llm:
            response = await llm.chat(HI)
    assert (response.content, response.finish_reason) == ("Hi!", "length")
    assert (response.metrics.prompt_tokens, response.metrics.generated_tokens) == (9, 2)
    async with raw_server(empty_stream_then(200, "{}")) as server:
        async with OpenAICompatLLM(server.base_url, model="m") as llm:
            response = await llm.chat(HI)
    assert response.finish_reason == "error" and "streamed nothing" in (response.error or "")


async def test_error_event_mid_stream_is_a_generation_error() -> None:
    error = json.dumps({"error": {"message": "CUDA out of memory", "code": 500}})
    async with raw_server(sse(chunk("a"), error)) as server:
        async with OpenAICompatLLM(server.base_url, model="m") as llm:
            response = await llm.chat(HI)
    assert response.finish_reason == "error" and "CUDA out of memory" in (response.error or "")


async def test_http_errors_name_status_and_body() -> None:
    async with raw_server(status(500, '{"error": {"message": "engine crashed"}}')) as server:
        async with OpenAICompatLLM(server.base_url, model="m") as llm:
            with pytest.raises(LLMUnavailableError, match=r"HTTP 500: engine crashed"):
                await llm.chat(HI)
    async with raw_server(status(404, "no such route")) as server:
        async with OpenAICompatLLM(server.base_url, model="m") as llm:
            with pytest.raises(LLMUnavailableError, match=r"/chat/completions .*HTTP 404: no such"):
                await llm.chat(HI)


async def test_context_overflow_http_400_raises_context_overflow() -> None:
    vllm = (
        '{"object": "error", "message": "This model\'s maximum context length is 4096 tokens. '
        'However, you requested 5000 tokens.", "type": "BadRequestError", "code": 400}'
    )
    llamacpp = (
        '{"error": {"code": 400, "message": "the request exceeds the available context size, '
        'try increasing it", "type": "exceed_context_size_error"}}'
    )
    for body in (vllm, llamacpp):
        async with raw_server(status(400, body)) as server:
            async with OpenAICompatLLM(server.base_url, model="m") as llm:
                with pytest.raises(ContextOverflowError, match="context"):
                    await llm.chat(HI)
    async with raw_server(status(400, '{"error": "temperature must be <= 2"}')) as server:
        async with OpenAICompatLLM(server.base_url, model="m") as llm:
            with pytest.raises(LLMUnavailableError, match="HTTP 400: temperature must be"):
                await llm.chat(HI, temperature=3)


async def test_stalls_time_out_with_clear_errors() -> None:
    async def silent(conn: SocketStream, request: Request) -> None:
        await anyio.sleep(5)

    async with raw_server(silent) as server:
        async with OpenAICompatLLM(server.base_url, model="m", timeout_s=0.2) as llm:
            with pytest.raises(LLMUnavailableError, match="did not answer in time"):
                await llm.chat(HI)

    async def stall(conn: SocketStream, request: Request) -> None:
        await sse(chunk("a"), done=False)(conn, request)
        await anyio.sleep(5)

    async with raw_server(stall) as server:
        async with OpenAICompatLLM(server.base_url, model="m", timeout_s=0.2) as llm:
            response = await llm.chat(HI)
    assert response.finish_reason == "error" and "ReadTimeout" in (response.error or "")


async def test_closing_a_stream_closes_the_connection_promptly() -> None:
    async with raw_server(sse(chunk("a "), chunk("b "), done=False, then_hang=True)) as server:
        async with OpenAICompatLLM(server.base_url, model="m") as llm:
            stream = llm.stream(HI)
            assert await stream.__anext__() == "a "
            assert llm.activity.busy
            # the server never ends this body, so returning at all means the client did not
            # wait for it (the limit only turns a hang into a failure)
            with anyio.fail_after(10):
                await stream.aclose()
            assert not llm.activity.busy
            with anyio.fail_after(30):  # the body never ends: only a hang fails
                await server.disconnected.wait()  # the server saw the client go


async def test_cancelled_scope_closes_the_connection_and_concurrent_streams_work() -> None:
    async with raw_server(sse(chunk("a "), done=False, then_hang=True)) as server:
        async with OpenAICompatLLM(server.base_url, model="m") as llm:
            got: list[str] = []

            async def read_one_stream() -> None:
                with anyio.move_on_after(0.3):
                    async for delta in llm.stream(HI):
                        got.append(delta)

            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(read_one_stream)
            assert got == ["a "] * 3 and not llm.activity.busy
            with anyio.fail_after(30):  # the body never ends: only a hang fails
                await server.disconnected.wait()


async def test_unreachable_server_and_bad_input() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    async with OpenAICompatLLM(url, model="m", connect_timeout_s=1) as llm:
        with pytest.raises(LLMUnavailableError, match=f"{url}/chat/completions cannot be reached"):
            await llm.chat(HI)
        health = await llm.health()
        assert not health.ok and url in health.detail
        with pytest.raises(ValueError, match="max_tokens"):
            llm.stream(HI, max_tokens=0)
        with pytest.raises(ValueError, match="at least one message"):
            llm.stream([])
        with pytest.raises(ValueError, match="not a valid Priority"):
            llm.stream(HI, priority="urgent")
    with pytest.raises(LLMClosedError):
        await llm.chat(HI)
    later = OpenAICompatLLM(url)
    stream = later.stream(HI)
    await later.close()
    with pytest.raises(LLMClosedError, match="closed"):
        await stream.__anext__()
    assert not (await llm.health()).ok
    with pytest.raises(ValueError, match="http"):
        OpenAICompatLLM("gpu-box:8000")
    with pytest.raises(ValueError, match="base_url"):
        OpenAICompatLLM("http://[::1")


# -- against llama-cpp-python's server running the default model -------------------------


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require("llama_cpp.server")  # declared: llama-cpp-python[server]
    from edge.catalogue import default_model_path

    model = default_model_path("llm")
    port = free_port()
    log = Path(tmp_path_factory.mktemp("llama-server")) / "server.log"
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048"]
    # One thread: steadier than two busy-waiting ones on a shared, loaded machine.
    command += ["--n_threads", "1", "--n_threads_batch", "1", "--model_alias", "smollm2"]
    base_url = f"http://127.0.0.1:{port}/v1"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                pytest.fail(f"llama_cpp.server exited {process.returncode}:\n{log.read_text()}")
            try:
                if httpx.get(f"{base_url}/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not start in 60 s:\n{log.read_text()}")
            time.sleep(0.2)
        # The first generation pays one-off costs (page-in, graph set-up); keep them here.
        warm = {"messages": HI, "max_tokens": 1, "stream": False}
        httpx.post(f"{base_url}/chat/completions", json=warm, timeout=120).raise_for_status()
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
async def remote(llama_server: str) -> AsyncIterator[OpenAICompatLLM]:
    async with OpenAICompatLLM(llama_server, timeout_s=30) as llm:
        yield llm


@pytest.mark.model
async def test_real_server_streams_incrementally_and_matches_chat(
    remote: OpenAICompatLLM,
) -> None:
    question = [{"role": "user", "content": "Name three colours."}]
    # The server reuses the previous request's KV state, which can change greedy output on
    # this tiny model; after one identical request, the next ones repeat exactly.
    await remote.chat(question, max_tokens=16, temperature=0)
    arrivals: list[float] = []
    stream = remote.stream(question, max_tokens=16, temperature=0, cache_key="p1")
    deltas = []
    async for delta in stream:
        deltas.append(delta)
        arrivals.append(time.perf_counter())
    assert len(deltas) >= 3 and "".join(deltas).strip()
    assert arrivals[-1] - arrivals[0] > 0.01  # the deltas came one by one, not in one body
    m = stream.metrics
    # llama-cpp-python's server sends no usage chunk: the deltas are counted.
    assert 3 <= m.generated_tokens <= 16 and m.queue_wait_s is None
    assert m.ttft_s is not None and m.tokens_per_s is not None
    response = await remote.chat(question, max_tokens=16, temperature=0)
    assert response.content == "".join(deltas)
    assert response.finish_reason == stream.finish_reason


@pytest.mark.model
async def test_real_server_length_cutoff_and_health(remote: OpenAICompatLLM) -> None:
    story = [{"role": "user", "content": "Tell me a long story about a dragon."}]
    response = await remote.chat(story, max_tokens=4, temperature=0)
    assert response.finish_reason == "length"
    assert response.content and response.metrics.generated_tokens <= 4
    health = await remote.health()
    assert health.ok and health.model == "smollm2"


@pytest.mark.model
async def test_real_server_context_overflow_is_clear(remote: OpenAICompatLLM) -> None:
    huge = [{"role": "user", "content": "word " * 3000}]
    with pytest.raises(ContextOverflowError, match="context"):
        await remote.chat(huge, max_tokens=8)
    assert (await remote.chat(HI, max_tokens=4, temperature=0)).content


@pytest.mark.model
async def test_real_server_cancellation_leaves_the_client_usable(remote: OpenAICompatLLM) -> None:
    story = [{"role": "user", "content": "Write a long poem about the sea."}]
    stream = remote.stream(story, max_tokens=400, temperature=0)
    got = [await stream.__anext__()]
    first = time.perf_counter()
    got.append(await stream.__anext__())
    started = time.perf_counter()
    per_token = started - first  # measured in this run, on this machine as loaded now
    await stream.aclose()
    closing = time.perf_counter() - started
    # closing does not wait for the other ~398 tokens: a ratio, not an absolute time
    assert closing < 40 * max(per_token, 0.005), (closing, per_token)
    assert len(got) == 2 and stream.finish_reason is None
    with anyio.fail_after(20):
        response = await remote.chat(HI, max_tokens=8, temperature=0)
    assert response.content and response.finish_reason in ("stop", "length")
