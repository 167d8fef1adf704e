"""The OpenAI and Ollama APIs on the service's port, driven by the official clients, on a
scripted model: access, bounds, error shapes, stateless and participant answers."""

from __future__ import annotations

from contextlib import AsyncExitStack

import anyio
import httpx
import ollama
import openai
import pytest

from edge.api import ApiLimits, serve_api
from edge.decisions import ScriptedDecisions
from edge.llm import ScriptedLLM, ScriptedReply
from edge.server import EdgeClient, EdgeService
from tests.api_helpers import (
    TOKEN,
    api_service,
    ollama_client,
    openai_client,
    trust,
    web_url,
)
from tests.server_helpers import answer_for, settings

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


async def test_ollama_generate_streamed_and_whole_with_a_system_prompt() -> None:
    llm = ScriptedLLM(replies=answer_for)
    async with AsyncExitStack() as stack, api_service(llm) as service:
        client = await stack.enter_async_context(ollama_client(web_url(service)))
        parts = [
            part
            async for part in await client.generate(
                model="edge:latest",
                prompt="What is an edge device?",
                system="Be brief.",
                stream=True,
                options={"temperature": 0.1, "num_predict": 30},
                keep_alive="5m",
            )
        ]
        assert parts[-1].done and parts[-1].done_reason == "stop"
        assert parts[-1].eval_count and parts[-1].prompt_eval_count is not None
        text = "".join(p.response for p in parts)
        assert text == "You said: What is an edge device?. That is all."
        assert len(parts) > 3 and all(p.response for p in parts[:-1])
        asked = llm.requests[-1]
        assert [(m.role, m.content) for m in asked.messages] == [
            ("system", "Be brief."),
            ("user", "What is an edge device?"),
        ]
        assert asked.options.max_tokens == 30 and asked.options.temperature == 0.1
        whole = await client.generate(model="edge", prompt="What is an edge device?", stream=False)
        assert whole.response == text and whole.done and whole.context is None
        assert [m.role for m in llm.requests[-1].messages] == ["user"]  # no system given
        loaded = await client.generate(model="edge")
        assert loaded.done and loaded.done_reason == "load" and loaded.response == ""
        unloaded = await client.generate(model="edge", keep_alive=0)
        assert unloaded.done_reason == "unload"


async def test_ollama_generate_refuses_what_it_cannot_honour_and_names_it() -> None:
    llm = ScriptedLLM(replies=answer_for)
    async with AsyncExitStack() as stack, api_service(llm) as service:
        client = await stack.enter_async_context(ollama_client(web_url(service)))
        asked = len(llm.requests)
        for field, value, named in (
            ("suffix", "return a", "fill-in-the-middle"),
            ("raw", True, "raw prompts"),
            ("template", "{{ .Prompt }}", "template"),
            ("context", [1, 2, 3], "/api/chat"),
        ):
            with pytest.raises(ollama.ResponseError) as refused:
                await client.generate(model="edge", prompt="def f():", **{field: value})
            assert refused.value.status_code == 400 and named in refused.value.error, field
        with pytest.raises(ollama.ResponseError) as bad:
            await client.generate(model="edge", prompt="Hi", options={"num_predict": "many"})
        assert bad.value.status_code == 400
        assert len(llm.requests) == asked  # nothing reached the model
        named = await stack.enter_async_context(
            ollama_client(web_url(service), headers={"X-Edge-Participant": "kai"})
        )
        turn = await named.generate(model="edge", prompt="What is an edge device?")
        assert turn.response and turn.done  # a participant's turn, as /api/chat makes it
        assert "api:kai" in service.context.participants()


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


async def test_an_oversized_upload_is_the_sdks_request_error_and_ollama_names_participants() -> (
    None
):
    limits = ApiLimits(max_upload_bytes=100_000)
    llm = ScriptedLLM(replies=answer_for)
    async with AsyncExitStack() as stack, api_service(llm, limits=limits) as service:
        client = await stack.enter_async_context(openai_client(web_url(service)))
        with pytest.raises(openai.APIStatusError) as caught:
            await client.audio.transcriptions.create(
                model="whisper-1", file=("big.wav", b"\0" * 300_000, "audio/wav")
            )
        assert caught.value.status_code == 413 and "100,000 bytes" in caught.value.message
        with pytest.raises(openai.APIStatusError) as no_voice:  # a text-only service
            await client.audio.transcriptions.create(model="whisper-1", file=("a.wav", b"RIFF"))
        assert no_voice.value.status_code == 503
        ollama_api = await stack.enter_async_context(
            ollama_client(web_url(service), headers={"X-Edge-Participant": "lin"})
        )
        await ollama_api.chat(model="edge", messages=QUESTION, stream=False)
        assert [r.user for r in service.store.history("api:lin")[0]] == [QUESTION[0]["content"]]
        running = await ollama_api.ps()
        assert running.models[0].expires_at is not None


async def test_an_idle_participant_leaves_without_another_request() -> None:
    async with AsyncExitStack() as stack, api_service() as service:
        front = service.websocket.front
        assert front is not None
        front.faces.participants.idle_s = 0.2  # type: ignore[attr-defined]
        client = await stack.enter_async_context(openai_client(web_url(service)))
        await client.chat.completions.create(model="x", messages=QUESTION, user="brief")
        assert "api:brief" in service.hub.connected()
        with anyio.fail_after(10):
            while "api:brief" in service.hub.connected():  # noqa: ASYNC110 - polling a test
                await anyio.sleep(0.05)
        again = await client.chat.completions.create(model="x", messages=QUESTION, user="brief")
        assert again.choices[0].message.content  # it comes back with its context
        assert len(service.store.history("api:brief")[0]) == 2


async def test_a_request_head_never_finished_is_dropped_after_the_hello_timeout() -> None:
    async with api_service(hello_timeout_s=0.5) as service:
        stream = await anyio.connect_tcp("127.0.0.1", service.websocket.bound_port)
        async with stream:
            await stream.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            with anyio.fail_after(10), pytest.raises((anyio.EndOfStream, OSError)):
                await stream.receive()
        async with httpx.AsyncClient() as plain:  # the port serves on
            health = await plain.get(web_url(service) + "/health")
        assert health.status_code == 200


async def test_stopping_the_service_ends_a_running_stream_and_its_participant_leaves() -> None:
    from tests.server_helpers import Departures

    slow = ScriptedLLM(default=ScriptedReply("word " * 400, delay_s=0.05))
    departures = Departures()
    streaming, stop, stopped = anyio.Event(), anyio.Event(), anyio.Event()
    service = EdgeService(
        settings(token=TOKEN), llm=slow, decisions=ScriptedDecisions(default="conversation")
    )
    service.runtime.register("departures", departures)
    serve_api(service)

    async def serve() -> None:
        async with service:
            streaming_url.append(web_url(service))
            await stop.wait()
        stopped.set()

    async def ask() -> None:
        async with openai_client(streaming_url[0]) as client:
            with pytest.raises(openai.APIError):
                stream = await client.chat.completions.create(
                    model="x", messages=QUESTION, stream=True, user="late"
                )
                async for _ in stream:
                    streaming.set()

    streaming_url: list[str] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(serve)
        with anyio.fail_after(30):
            while not streaming_url:  # noqa: ASYNC110 - waiting for the service to listen
                await anyio.sleep(0.05)
        tg.start_soon(ask)
        await streaming.wait()
        stop.set()
        with anyio.fail_after(30):
            await stopped.wait()
    assert ("api:late", "server stopping") in departures.left
