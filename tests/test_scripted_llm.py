from __future__ import annotations

import pytest

from edge.llm import GenerationError, LLMService, Priority, ScriptedLLM, ScriptedReply

pytestmark = pytest.mark.anyio


async def test_scripted_replies_stream_in_words_and_record_requests() -> None:
    llm = ScriptedLLM(["Hello there world.", ScriptedReply("cut", finish_reason="length")])
    assert isinstance(llm, LLMService)
    stream = llm.stream([{"role": "user", "content": "hi"}], cache_key="p1")
    deltas = [d async for d in stream]
    assert deltas == ["Hello", " there", " world."]
    assert stream.finish_reason == "stop"
    response = await llm.chat([{"role": "user", "content": "again"}], priority="background")
    assert (response.content, response.finish_reason) == ("cut", "length")
    assert llm.requests[0].cache_key == "p1"
    assert llm.requests[1].priority is Priority.BACKGROUND
    assert (await llm.chat([{"role": "user", "content": "x"}])).content == "OK."


async def test_scripted_failure_mid_stream() -> None:
    llm = ScriptedLLM(
        [ScriptedReply("one two three", fail_after=2), ScriptedReply("a b", fail_after=1)]
    )
    stream = llm.stream([{"role": "user", "content": "hi"}])
    got = []
    with pytest.raises(GenerationError):
        async for delta in stream:
            got.append(delta)
    assert got == ["one", " two"]
    response = await llm.chat([{"role": "user", "content": "hi"}])
    assert response.finish_reason == "error" and response.content == "a"


async def test_scripted_cancel_marks_request_and_activity_tracks_interactive() -> None:
    llm = ScriptedLLM(["a b c d"])
    stream = llm.stream([{"role": "user", "content": "hi"}])
    async for _ in stream:
        assert llm.activity.busy
        break
    await stream.aclose()
    assert llm.requests[0].cancelled
    assert not llm.activity.busy


async def test_generation_options_are_one_value_overridden_by_keywords() -> None:
    from edge.llm import GenerationOptions

    llm = ScriptedLLM(["a", "b"])
    base = GenerationOptions(max_tokens=8, stop=["\n"], priority="background", cache_key="p")
    await llm.chat([{"role": "user", "content": "x"}], base, max_tokens=4)
    await llm.chat([{"role": "user", "content": "y"}], temperature=0.0)
    first, second = llm.requests
    assert first.options == GenerationOptions(4, None, ("\n",), Priority.BACKGROUND, "p")
    assert (first.stop, second.stop, second.priority) == (["\n"], None, Priority.INTERACTIVE)
    with pytest.raises(TypeError):
        GenerationOptions(stop="\n")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await llm.chat([{"role": "user", "content": "z"}], top_k=3)


def test_optional_capabilities_are_protocols() -> None:
    from edge.llm import (
        Loadable,
        OpenAICompatLLM,
        ReportsActivity,
        Scorer,
        TokenCounter,
        Warmable,
    )

    scripted = ScriptedLLM()
    remote = OpenAICompatLLM("http://127.0.0.1:9/v1")
    for llm in (scripted, remote):
        assert isinstance(llm, ReportsActivity)
        assert not isinstance(llm, Warmable | Scorer | TokenCounter | Loadable)
