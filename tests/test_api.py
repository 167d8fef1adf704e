"""The OpenAI and Ollama APIs on the service's port, driven by the official clients, on a
scripted model: access, bounds, error shapes, stateless and participant answers."""

from __future__ import annotations

from contextlib import AsyncExitStack

import anyio
import httpx
import ollama
import openai
import pytest

from edge.api import ApiLimits
from edge.llm import ScriptedLLM, ScriptedReply
from edge.server import EdgeClient
from tests.api_helpers import (
    TOKEN,
    api_service,
    ollama_client,
    openai_client,
    trust,
    web_url,
)
from tests.server_helpers import answer_for

pytestmark = pytest.mark.anyio

QUESTION = [{"role": "user", "content": "What is an edge device?"}]


async def test_models_and_a_whole_and_a_streamed_stateless_completion() -> None:
    llm = ScriptedLLM(replies=answer_for)
    async with AsyncExitStack() as stack, api_service(llm) as service:
        client = await stack.enter_async_context(openai_client(web_url(service)))
        models = [m.id async for m in client.models.list()]
        assert models == ["edge"]
        whole = await client.chat.completions.create(
            model="anything",
            messages=[{"role": "system", "content": "Be brief."}, *QUESTION],
            max_tokens=20,
            temperature=0.2,
        )
        assert whole.choices[0].message.content == "You said: What is an edge device?. That is all."
        assert whole.choices[0].finish_reason == "stop"
        assert whole.usage is not None and whole.usage.completion_tokens > 0
        sent = llm.requests[-1]  # the client's own messages, as they were, nothing added
        assert [m.content for m in sent.messages] == ["Be brief.", "What is an edge device?"]
        assert sent.options.max_tokens == 20 and sent.options.temperature == 0.2
        assert sent.options.priority == "interactive"
        stream = await client.chat.completions.create(
            model="x", messages=QUESTION, stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
        pieces = [c.choices[0].delta.content for c in chunks if c.choices]
        assert len([p for p in pieces if p]) > 3  # streamed, not one block
        assert "".join(p or "" for p in pieces) == whole.choices[0].message.content
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
        assert service.store.history("api:anyone")[0] == []  # nothing was recorded


async def test_a_named_participant_gets_its_own_context_and_its_exchanges_recorded() -> None:
    llm = ScriptedLLM(replies=answer_for)
    async with AsyncExitStack() as stack, api_service(llm) as service:
        client = await stack.enter_async_context(openai_client(web_url(service)))
        first = await client.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "My name is Ada."}], user="ada"
        )
        assert "My name is Ada." in (first.choices[0].message.content or "")
        await client.chat.completions.create(
            model="x",
            messages=[{"role": "user", "content": "What is my name?"}],
            extra_headers={"X-Edge-Participant": "ada"},
        )
        prompt = "\n".join(m.content for m in llm.requests[-1].messages)
        assert "My name is Ada." in prompt  # the participant's own context, from the service
        recorded = [r.user for r in service.store.history("api:ada")[0]]
        assert recorded == ["My name is Ada.", "What is my name?"]
        with pytest.raises(openai.BadRequestError, match="participant name"):
            await client.chat.completions.create(model="x", messages=QUESTION, user="a b!")


async def test_stop_strings_cut_stateless_and_participant_answers() -> None:
    async with AsyncExitStack() as stack, api_service(ScriptedLLM(replies=answer_for)) as service:
        client = await stack.enter_async_context(openai_client(web_url(service)))
        for user in (openai.omit, "cutter"):
            reply = await client.chat.completions.create(
                model="x", messages=QUESTION, stop=["That"], user=user
            )
            assert reply.choices[0].message.content.strip() == "You said: What is an edge device?."


async def test_wrong_or_missing_key_and_oversized_bodies_are_the_sdks_own_errors() -> None:
    limits = ApiLimits(max_body_bytes=64 * 1024)
    async with AsyncExitStack() as stack, api_service(limits=limits) as service:
        base = web_url(service)
        with pytest.raises(openai.AuthenticationError, match="wrong device access token"):
            async with openai_client(base, key="not-the-token") as wrong:
                await wrong.models.list()
        big = [{"role": "user", "content": "x" * 100_000}]
        client = await stack.enter_async_context(openai_client(base))
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(model="x", messages=big)
        assert caught.value.status_code == 413
        assert caught.value.body["type"] == "invalid_request_error"  # type: ignore[index]
        with pytest.raises(ollama.ResponseError) as refused:
            async with ollama_client(base, key="nope") as wrong_key:
                await wrong_key.list()
        assert (
            refused.value.status_code == 401 and "wrong device access token" in refused.value.error
        )
        # and the port still serves everything else
        assert (await client.chat.completions.create(model="x", messages=QUESTION)).choices


async def test_missing_key_gets_the_openai_error_shape() -> None:
    async with api_service() as service:
        async with httpx.AsyncClient() as plain:
            response = await plain.get(web_url(service) + "/v1/models")
            unknown = await plain.post(
                web_url(service) + "/v1/embeddings",
                json={},
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            ollama_style = await plain.get(web_url(service) + "/api/tags")
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
    assert unknown.status_code == 404 and "not served here" in unknown.json()["error"]["message"]
    assert ollama_style.status_code == 401 and isinstance(ollama_style.json()["error"], str)


async def test_requests_at_once_and_per_second_are_bounded() -> None:
    slow = ScriptedLLM(default=ScriptedReply("One two three four five.", delay_s=0.3))
    limits = ApiLimits(max_requests=4, max_per_address=2, rate=1.0, burst=50)
    async with AsyncExitStack() as stack, api_service(slow, limits=limits) as service:
        client = await stack.enter_async_context(openai_client(web_url(service)))
        outcomes: list[object] = []

        async def ask() -> None:
            try:
                await client.chat.completions.create(model="x", messages=QUESTION)
                outcomes.append("ok")
            except openai.RateLimitError as exc:
                outcomes.append(exc.message)

        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(ask)
        assert outcomes.count("ok") == 2
        assert any("too many requests at once" in str(o) for o in outcomes)
    limits = ApiLimits(rate=0.5, burst=2)
    async with AsyncExitStack() as stack, api_service(limits=limits) as service:
        client = await stack.enter_async_context(openai_client(web_url(service)))
        await client.models.list()
        await client.models.list()
        with pytest.raises(openai.RateLimitError) as caught:
            await client.models.list()
        assert caught.value.response.headers["retry-after"] == "2"


async def test_ollama_list_show_and_chat_streamed_and_whole() -> None:
    llm = ScriptedLLM(replies=answer_for)
    async with AsyncExitStack() as stack, api_service(llm) as service:
        client = await stack.enter_async_context(ollama_client(web_url(service)))
        listed = await client.list()
        assert [m.model for m in listed.models] == ["edge:latest"]
        shown = await client.show("edge:latest")
        assert shown.details is not None and shown.details.format == "gguf"
        parts = [
            part
            async for part in await client.chat(
                model="edge:latest",
                messages=[{"role": "system", "content": "Be brief."}, *QUESTION],
                stream=True,
                options={"num_ctx": 8192, "temperature": 0.1, "num_predict": 30},
                keep_alive="5m",
                tools=[{"type": "function", "function": {"name": "noop", "parameters": {}}}],
            )
        ]
        assert parts[-1].done and parts[-1].done_reason == "stop"
        text = "".join(p.message.content or "" for p in parts)
        assert text == "You said: What is an edge device?. That is all."
        assert len(parts) > 3
        assert llm.requests[-1].options.max_tokens == 30
        whole = await client.chat(model="edge", messages=QUESTION, stream=False)
        assert whole.message.content == text and whole.done
        loaded = await client.chat(model="edge", messages=[], keep_alive=0)
        assert loaded.done and loaded.done_reason == "unload"
        async with httpx.AsyncClient() as plain:
            version = await plain.get(
                web_url(service) + "/api/version", headers={"Authorization": f"Bearer {TOKEN}"}
            )
        assert version.json()["version"]


async def test_the_api_shares_the_tls_port_with_sessions_and_health() -> None:
    async with AsyncExitStack() as stack, api_service(tls=True) as service:
        verify = trust(service.settings.data_dir)
        base = web_url(service)
        assert base.startswith("https://")
        client = await stack.enter_async_context(openai_client(base, verify=verify))
        reply = await client.chat.completions.create(model="x", messages=QUESTION)
        assert reply.choices[0].message.content
        async with EdgeClient(service.websocket_url, token=TOKEN) as session:
            turn = await session.ask("hello over the session protocol")
        assert "hello over the session protocol" in turn.text
        async with httpx.AsyncClient(verify=verify) as plain:
            assert (await plain.get(base + "/health")).json()["status"] == "ok"


async def test_a_body_sent_too_slowly_is_refused() -> None:
    async with api_service(limits=ApiLimits(body_timeout_s=0.3)) as service:
        stream = await anyio.connect_tcp("127.0.0.1", service.websocket.bound_port)
        async with stream:
            await stream.send(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
                b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
            )
            answer = b""
            with anyio.fail_after(10):
                while b"\r\n\r\n" not in answer:
                    answer += await stream.receive()
        assert answer.startswith(b"HTTP/1.1 408")
