"""LLMResponder: the minimal destination used by ``edge talk --direct`` and the benchmarks."""

from __future__ import annotations

import pytest

from edge.interaction import (
    INTERRUPTED_TOPIC,
    USER_QUERY_TOPIC,
    VOICE_OUTPUT_TOPIC,
    Interrupted,
    UserQuery,
)
from edge.llm import ScriptedLLM, ScriptedReply
from edge.runtime import AgentRuntime
from edge.voice import LLMResponder
from tests.voice_helpers import Recorder, wait_for

pytestmark = pytest.mark.anyio


def setup(llm: ScriptedLLM) -> tuple[AgentRuntime, LLMResponder, Recorder]:
    runtime = AgentRuntime()
    responder = LLMResponder(llm, source="assistant")
    recorder = Recorder(VOICE_OUTPUT_TOPIC)
    runtime.register("assistant", responder)
    runtime.register("recorder", recorder)
    return runtime, responder, recorder


async def test_streams_the_answer_as_one_reply_stream() -> None:
    runtime, responder, rec = setup(ScriptedLLM(["Paris is the capital."]))
    async with responder, runtime:
        meta = await runtime.publish(
            USER_QUERY_TOPIC, UserQuery(text="Capital of France?"), participant_id="p1"
        )
        await wait_for(lambda: any(f.final for f in rec.messages(VOICE_OUTPUT_TOPIC)))
    frames = rec.messages(VOICE_OUTPUT_TOPIC)
    assert "".join(f.text for f in frames) == "Paris is the capital."
    assert [f.sequence for f in frames] == list(range(len(frames)))
    assert {f.request_id for f in frames} == {meta.message_id}
    assert {f.source for f in frames} == {"assistant"}


async def test_interrupt_and_new_query_cancel_the_answer() -> None:
    slow = ScriptedReply("one two three four five six seven eight", delay_s=0.05)
    llm = ScriptedLLM([slow, slow, "Done."])
    runtime, responder, rec = setup(llm)
    async with responder, runtime:
        first = await runtime.publish(USER_QUERY_TOPIC, UserQuery(text="a"), participant_id="p1")
        await wait_for(lambda: rec.messages(VOICE_OUTPUT_TOPIC))
        await runtime.publish(INTERRUPTED_TOPIC, Interrupted(), participant_id="p1")
        await wait_for(lambda: any(f.final for f in rec.messages(VOICE_OUTPUT_TOPIC)))
        second = await runtime.publish(USER_QUERY_TOPIC, UserQuery(text="b"), participant_id="p1")
        await wait_for(lambda: len(llm.requests) == 2)
        third = await runtime.publish(USER_QUERY_TOPIC, UserQuery(text="c"), participant_id="p1")
        await wait_for(
            lambda: any(
                f.final and f.request_id == third.message_id
                for f in rec.messages(VOICE_OUTPUT_TOPIC)
            )
        )
    by_request: dict[str, str] = {}
    finals: dict[str, int] = {}
    for frame in rec.messages(VOICE_OUTPUT_TOPIC):
        by_request[frame.request_id] = by_request.get(frame.request_id, "") + frame.text
        finals[frame.request_id] = finals.get(frame.request_id, 0) + frame.final
    assert llm.requests[0].cancelled and llm.requests[1].cancelled
    assert by_request[first.message_id] != "one two three four five six seven eight"
    # an opened stream is finalized once; one cancelled before its first word never opened
    assert finals[first.message_id] == 1 and finals[third.message_id] == 1
    assert finals.get(second.message_id, 0) <= 1
    assert by_request[third.message_id] == "Done."
