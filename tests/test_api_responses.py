"""OpenAI's Responses API (``POST /v1/responses``) driven by the official ``openai`` SDK on
a scripted model: whole and streamed, instructions, conversations continued by
``previous_response_id``, ``store``, a participant's turn, and what it refuses."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import openai
import pytest
from openai import AsyncOpenAI

from edge.api import _response_chain
from edge.llm import ChatMessage, ScriptedLLM, ScriptedReply
from edge.server import EdgeService
from tests.api_helpers import api_service, openai_client, web_url
from tests.server_helpers import answer_for

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def responses_api(llm: ScriptedLLM) -> AsyncIterator[tuple[EdgeService, AsyncOpenAI]]:
    """A service on ``llm`` with the APIs, and the openai SDK's client for it."""
    async with api_service(llm) as service, openai_client(web_url(service)) as client:
        yield service, client


def asked(llm: ScriptedLLM) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in llm.requests[-1].messages]


async def test_a_whole_response_and_a_streamed_one_with_the_sdks_events() -> None:
    llm = ScriptedLLM(replies=answer_for)
    async with responses_api(llm) as (_, client):
        whole = await client.responses.create(
            model="edge", input="What is an edge device?", instructions="Be brief."
        )
        assert whole.status == "completed" and whole.object == "response"
        assert whole.output_text == "You said: What is an edge device?. That is all."
        assert whole.usage is not None and whole.usage.output_tokens > 0
        assert asked(llm) == [("system", "Be brief."), ("user", "What is an edge device?")]
        events = [
            event
            async for event in await client.responses.create(
                model="edge", input="Hello there", stream=True, max_output_tokens=40
            )
        ]
        kinds = [e.type for e in events]
        assert kinds[:4] == [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
        ]
        assert kinds[-4:] == [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
        deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
        assert len(deltas) > 3 and "".join(deltas) == "You said: Hello there. That is all."
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert events[-1].response.output_text == "".join(deltas)
        assert llm.requests[-1].options.max_tokens == 40
        async with client.responses.stream(model="edge", input="Hello there") as stream:
            streamed = [event.type async for event in stream]  # the SDK's own accumulator
            final = await stream.get_final_response()
        assert streamed == kinds and final.output_text == "".join(deltas)


async def test_previous_response_id_continues_the_conversation_without_its_instructions() -> None:
    llm = ScriptedLLM(replies=answer_for)
    async with responses_api(llm) as (_, client):
        first = await client.responses.create(
            model="edge", input="My name is Ada.", instructions="Be brief."
        )
        second = await client.responses.create(
            model="edge", input="What is my name?", previous_response_id=first.id
        )
        assert asked(llm) == [
            ("user", "My name is Ada."),
            ("assistant", first.output_text),
            ("user", "What is my name?"),
        ]
        await client.responses.create(
            model="edge",
            input=[{"role": "user", "content": [{"type": "input_text", "text": "And then?"}]}],
            previous_response_id=second.id,
            instructions="Answer in French.",
        )
        assert asked(llm)[0] == ("system", "Answer in French.")
        assert [m for _, m in asked(llm)[1:]] == [
            "My name is Ada.",
            first.output_text,
            "What is my name?",
            second.output_text,
            "And then?",
        ]
        kept = await client.responses.retrieve(first.id)
        assert kept.output_text == first.output_text and kept.instructions == "Be brief."
        deleted = await client.responses.delete(second.id)  # the SDK returns nothing
        assert deleted is None
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(second.id)
        with pytest.raises(openai.BadRequestError):  # its conversation cannot go on either
            await client.responses.create(model="edge", input="?", previous_response_id=second.id)
        unstored = await client.responses.create(model="edge", input="Hi", store=False)
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(unstored.id)
        with pytest.raises(openai.BadRequestError) as refused:
            await client.responses.create(
                model="edge", input="Again?", previous_response_id=unstored.id
            )
        assert refused.value.body["param"] == "previous_response_id"  # type: ignore[index]
        assert "not kept" in refused.value.body["message"]  # type: ignore[index]


async def test_history_sent_as_input_items_and_what_is_refused() -> None:
    llm = ScriptedLLM(replies=answer_for)
    async with responses_api(llm) as (_, client):
        history = [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Hello!"}],
            },
            {"role": "user", "content": "How are you?"},
        ]
        await client.responses.create(model="edge", input=history)  # type: ignore[arg-type]
        assert asked(llm) == [
            ("system", "Be brief."),
            ("user", "Hi"),
            ("assistant", "Hello!"),
            ("user", "How are you?"),
        ]
        count = len(llm.requests)
        for bad, named in (
            ("", "input must not be empty"),
            ([{"type": "function_call_output", "call_id": "c", "output": "1"}], "message items"),
            ([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}], "text"),
            ([{"role": "tool", "content": "1"}], "role 'tool'"),
        ):
            with pytest.raises(openai.BadRequestError) as refused:
                await client.responses.create(model="edge", input=bad)  # type: ignore[arg-type]
            assert named in refused.value.body["message"], bad  # type: ignore[index]
        with pytest.raises(openai.BadRequestError):
            await client.responses.create(model="edge", input="Hi", previous_response_id="resp_x")
        assert len(llm.requests) == count  # nothing reached the model


async def test_a_length_cut_answer_is_incomplete_and_a_participant_is_named_by_user() -> None:
    llm = ScriptedLLM(replies=[ScriptedReply("one two three four five", finish_reason="length")])
    async with responses_api(llm) as (_, client):
        cut = await client.responses.create(model="edge", input="Count.", max_output_tokens=16)
        assert cut.status == "incomplete"
        assert cut.incomplete_details is not None
        assert cut.incomplete_details.reason == "max_output_tokens"
    llm = ScriptedLLM(replies=answer_for)
    async with responses_api(llm) as (service, client):
        turn = await client.responses.create(model="edge", input="Hello", user="mia")
        assert turn.output_text and "api:mia" in service.context.participants()
        # her own context carries the conversation: recorded there, not stored here
        assert turn.store is False
        again = await client.responses.create(
            model="edge", input="Again", user="mia", previous_response_id=turn.id
        )
        assert again.output_text == "You said: Again. That is all."
        assert [r.user for r in service.store.history("api:mia")[0]] == ["Hello", "Again"]
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(turn.id)


def test_the_store_forgets_the_least_recently_used_and_names_a_broken_chain() -> None:
    chain = _response_chain.ResponseChain(max_bytes=1_000)

    def said(text: str) -> tuple[ChatMessage, ...]:
        return (ChatMessage(role="user", content=text), ChatMessage(role="assistant", content="ok"))

    chain.keep("a", _response_chain.StoredResponse(None, said("x" * 400)))
    chain.keep("b", _response_chain.StoredResponse("a", said("y" * 400)))
    assert [m.content for m in chain.history("b")] == ["x" * 400, "ok", "y" * 400, "ok"]
    chain.keep("c", _response_chain.StoredResponse(None, said("z" * 400)))  # "a" is forgotten
    assert len(chain) == 2
    with pytest.raises(Exception, match="earlier response 'a'"):
        chain.history("b")
    chain.keep("huge", _response_chain.StoredResponse(None, said("w" * 2_000)))
    assert len(chain) == 2  # one response over the whole bound is not kept


@pytest.mark.model
async def test_a_conversation_continued_by_previous_response_id_evaluates_only_its_news() -> None:
    """On the default model: each follow-up sent as previous_response_id (the history
    rebuilt from the stored chain) reuses the state that holds the conversation, so only
    its new message is evaluated, as for a client resending its history."""
    from edge.llm import LlamaCppLLM, Priority

    llm = LlamaCppLLM(n_ctx=2048, temperature=0.0, sequences=2)
    questions = ["What is a centrifuge?", "How fast does it spin?", "What is a pipette?"]
    evaluated, prompts, previous = [], [], None
    async with responses_api(llm) as (_, client):
        for question in questions:
            reply = await client.responses.create(
                model="edge",
                instructions="You are a lab assistant. Answer in one sentence.",
                input=question,
                previous_response_id=previous,
                max_output_tokens=32,
            )
            previous = reply.id
            asked = [x for x in llm.metrics_log if x.priority is Priority.INTERACTIVE][-1]
            evaluated.append(asked.evaluated_tokens)
            prompts.append(asked.prompt_tokens)
        question_tokens = llm.count_tokens(questions[-1]) + 12  # + the chat template's markers
    assert evaluated[0] > 30  # the instructions and the first question
    assert prompts[0] < prompts[1] < prompts[2], prompts  # each with the conversation before it
    assert max(evaluated[1:]) <= question_tokens + 8, (evaluated, prompts)
