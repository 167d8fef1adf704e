"""A reply to a Wyoming (Home Assistant) client is a voice assistant's length: at most
``wyoming_reply_sentences`` sentences (1 by default), the model stopped at that boundary as
it writes it, not the text cut afterwards; other participants keep the conversation's own
bound. A likely answer started in the client's end silence is generated whole before its
``handle`` comes, so ``handled`` goes out as soon as it is asked."""

from __future__ import annotations

import threading

import anyio
import pytest

from edge.decisions import ScriptedDecisions
from edge.llm import ScriptedLLM, ScriptedReply
from edge.server import EdgeService, SpeechParts
from edge.server._reply_length import sentence_bound
from edge.server._wyoming_stream import PreparedSpeech, speak_sentence
from tests.server_helpers import ask_handled, settings, wait_for
from tests.test_server_wyoming_speculation import CONTEXT, transcribe
from tests.voice_helpers import EnergyVAD, ToneSTT, ToneTTS

pytestmark = pytest.mark.anyio

LONG = (
    "Paris is the capital of France. It is famous for the Eiffel Tower. "
    "It also has the Louvre, which holds the Mona Lisa."
)
# one sentence of more words than a speculation generates ahead of its turn by default
WHOLE = (
    "You said: {} and the answer to that is a single sentence that runs on for well over "
    "sixteen words before it ends."
)


def service(llm: ScriptedLLM, **kw: object) -> EdgeService:
    return EdgeService(
        settings(voice=True, wyoming_port=0, **kw),
        llm=llm,
        decisions=ScriptedDecisions(default="conversation"),
        speech=SpeechParts(stt=ToneSTT(), tts=ToneTTS(), vad_factory=EnergyVAD),
    )


async def ask(svc: EdgeService, text: str) -> str:
    return await ask_handled(svc, text, CONTEXT, read_timeout=10)


@pytest.mark.parametrize("sentences", [1, 2])
async def test_a_wyoming_reply_stops_generating_at_its_sentence_bound(sentences: int) -> None:
    llm = ScriptedLLM(lambda messages: ScriptedReply(LONG, delay_s=0.01))
    async with service(llm, wyoming_reply_sentences=sentences) as svc:
        answer = await ask(svc, "what is Paris famous for?")
    expected = ["Paris is the capital of France.", "It is famous for the Eiffel Tower."]
    assert answer == " ".join(expected[:sentences])
    (request,) = llm.requests
    assert request.cancelled and not request.completed  # the model stopped there
    assert "Louvre" not in request.output  # the rest was never generated


async def test_zero_leaves_a_wyoming_reply_to_the_conversations_bound() -> None:
    llm = ScriptedLLM(lambda messages: ScriptedReply(LONG, delay_s=0.005))
    async with service(llm, wyoming_reply_sentences=0) as svc:
        assert await ask(svc, "what is Paris famous for?") == LONG  # three, as instructed


async def test_other_participants_keep_the_conversations_bound() -> None:
    bounded = sentence_bound(ScriptedLLM(lambda messages: LONG), {"wyoming:": 1})
    assert bounded.bound("wyoming:01HA") == 1
    assert bounded.bound("alice") is None and bounded.bound(None) is None
    stream = bounded.stream([{"role": "user", "content": "hi"}], cache_key="alice")
    assert "".join([d async for d in stream]) == LONG
    stream = bounded.stream([{"role": "user", "content": "hi"}], cache_key="wyoming:01HA")
    assert "".join([d async for d in stream]) == "Paris is the capital of France."
    assert stream.finish_reason == "stop"


async def test_the_likely_answer_is_whole_before_its_handle_comes() -> None:
    llm = ScriptedLLM(lambda messages: ScriptedReply(WHOLE.format(messages[-1].content)))
    svc = service(llm)
    async with svc:
        await ask(svc, "hello")  # the conversation is active (its context loaded)
        assert await transcribe(svc) == "tone 440"
        await wait_for(lambda: len(llm.requests) == 2)
        early = llm.requests[1]
        # generated to its end (past the 16 deltas a headset's guess stops at) unasked
        await wait_for(lambda: early.output.endswith("before it ends."))
        with anyio.fail_after(5):
            answer = await ask(svc, "tone 440")
    assert answer == WHOLE.format("tone 440")
    assert svc.answers.stats.adopted == 1 and len(llm.requests) == 2


class GatedTTS(ToneTTS):
    """A voice whose synthesis waits until ``gate`` opens (a loaded host's slow Piper)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def synthesize(self, text: str):  # type: ignore[no-untyped-def]
        self.gate.wait(10)
        return super().synthesize(text)


async def test_a_synthesize_waits_for_its_sentence_being_prepared() -> None:
    """The ``synthesize`` that follows ``handled`` may come while the answer's first
    sentence is still being synthesized ahead: it takes that audio when done rather than
    synthesizing the sentence a second time."""
    tts = GatedTTS()
    prepared = PreparedSpeech(tts, "wyoming:")

    async def deltas():  # type: ignore[no-untyped-def]
        yield "Paris is the capital."

    written: list[str] = []

    async def write(event) -> None:  # type: ignore[no-untyped-def]
        written.append(event.type)

    async with anyio.create_task_group() as tg:
        tg.start_soon(prepared.prepare_reply, "wyoming:01HA", deltas())
        await wait_for(lambda: bool(prepared._underway))
        tg.start_soon(speak_sentence, write, tts, "Paris is the capital.", prepared)
        await anyio.sleep(0.05)
        assert written == []  # waiting for the prepared audio, not synthesizing again
        tts.gate.set()
    assert tts.spoken == ["Paris is the capital."]  # synthesized once, ahead
    assert prepared.used == 1 and written[0] == "audio-start"
