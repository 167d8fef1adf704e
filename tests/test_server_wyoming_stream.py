"""Wyoming streaming (scripted model, tone voice): ``handled-start``/``-chunk``/``-stop``,
``synthesize-start``/``-chunk``/``-stop`` and ``transcript-start``/``-chunk``/``-stop``,
read with the ``wyoming`` package's own client."""

from __future__ import annotations

import time

import anyio
import numpy as np
import pytest
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.handle import Handled, HandledChunk
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from edge.decisions import ScriptedDecisions
from edge.llm import ScriptedLLM, ScriptedReply
from edge.server import EdgeService, SpeechParts
from edge.voice import float_to_pcm16
from tests.server_helpers import read_answer, read_spoken, read_transcript, settings, wait_for
from tests.voice_helpers import EnergyVAD, ToneSTT, ToneTTS, silence, tone

pytestmark = pytest.mark.anyio

ANSWER = "The first part comes now. The second part comes a little later."


def service(tts: ToneTTS | None = None, delay_s: float = 0.02) -> EdgeService:
    return EdgeService(
        settings(voice=True, wyoming_port=0, wyoming_reply_sentences=0),  # both parts
        llm=ScriptedLLM(lambda messages: ScriptedReply(ANSWER, delay_s=delay_s)),
        decisions=ScriptedDecisions(default="conversation"),
        speech=SpeechParts(stt=ToneSTT(), tts=tts or ToneTTS(), vad_factory=EnergyVAD),
    )


def client(svc: EdgeService) -> AsyncTcpClient:
    assert svc.wyoming is not None
    return AsyncTcpClient("127.0.0.1", svc.wyoming.bound_port, read_timeout=10)


async def test_describe_advertises_the_three_streams() -> None:
    async with service() as svc, client(svc) as c:
        await c.write_event(Describe().event())
        event = await c.read_event()
        assert event is not None
        info = Info.from_event(event)
        assert info.asr[0].supports_transcript_streaming
        assert info.tts[0].supports_synthesize_streaming
        assert info.handle[0].supports_handled_streaming


async def test_handle_streams_the_answer_as_it_is_generated() -> None:
    context = {"conversation_id": "stream-1"}
    async with service(delay_s=0.03) as svc, client(svc) as c:
        await c.write_event(Transcript(text="tell me in two parts", context=context).event())
        first = await c.read_event()
        assert first is not None and first.type == "handled-start"
        assert first.data["context"] == context
        arrivals: list[tuple[float, str]] = []
        while True:
            event = await c.read_event()
            assert event is not None
            if not HandledChunk.is_type(event.type):
                break
            arrivals.append((time.perf_counter(), HandledChunk.from_event(event).text))
        assert event.type == "handled-stop"
        final = await c.read_event()  # the whole answer, for clients without streaming
        assert final is not None and Handled.is_type(final.type)
        assert Handled.from_event(final).text == ANSWER
        assert Handled.from_event(final).context == context
    assert "".join(text for _, text in arrivals) == ANSWER
    assert len(arrivals) > 5  # token by token, not one piece
    assert arrivals[-1][0] - arrivals[0][0] > 0.1  # the first came while the model still wrote


async def test_handle_without_an_answer_is_not_handled_and_unstreamed() -> None:
    svc = EdgeService(
        settings(wyoming_port=0, handle_timeout_s=0.3),
        llm=ScriptedLLM(lambda messages: ScriptedReply("Too late.", first_delay_s=5)),
        decisions=ScriptedDecisions(default="conversation"),
    )
    async with svc, client(svc) as c:
        await c.write_event(Transcript(text="are you there").event())
        chunks, event = await read_answer(c)
        assert chunks == [] and event is not None and event.type == "not-handled"


async def test_synthesize_stream_speaks_each_sentence_once_complete() -> None:
    tts = ToneTTS()
    async with service(tts) as svc, client(svc) as c:
        await c.write_event(SynthesizeStart().event())
        await c.write_event(SynthesizeChunk(text="Hello there. How").event())
        with anyio.fail_after(5):  # the first sentence is spoken before the stream ends
            first = await read_spoken(c, until_stopped=False)
        assert tts.spoken == ["Hello there."] and len(first[0]) == 2 * 16000 * 0.2
        await c.write_event(SynthesizeChunk(text=" are you?").event())
        await c.write_event(Synthesize(text="Hello there. How are you?").event())  # ignored
        await c.write_event(SynthesizeStop().event())
        rest = await read_spoken(c)
        assert tts.spoken == ["Hello there.", "How are you?"] and len(rest) == 1

        # out of order, the connection goes on
        await c.write_event(SynthesizeChunk(text="orphan").event())
        event = await c.read_event()
        assert event is not None and Error.is_type(event.type)
        assert "without synthesize-start" in Error.from_event(event).text
        await c.write_event(Synthesize(text="Plain request.").event())  # not streamed
        event = await c.read_event()
        assert event is not None and AudioStart.is_type(event.type)


async def test_transcript_streams_then_comes_whole() -> None:
    pcm = float_to_pcm16(tone(0.6, 440.0))
    async with service() as svc, client(svc) as c:
        await c.write_event(Transcribe(language="en").event())
        await c.write_event(AudioStart(rate=16000, width=2, channels=1).event())
        await c.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=pcm).event())
        silent = float_to_pcm16(silence(0.2))
        await c.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=silent).event())
        await c.write_event(AudioStop().event())
        chunks, text = await read_transcript(c)
    assert text == "tone 440" and "".join(chunks) == text


async def _record(c: AsyncTcpClient, pieces: list[tuple[float, float]]) -> None:
    """Stream (seconds, frequency) pieces in 100 ms chunks; frequency 0 is silence."""
    audio = float_to_pcm16(
        np.concatenate([tone(s, f) if f else silence(s) for s, f in pieces]).astype(np.float32)
    )
    await c.write_event(Transcribe(language="en").event())
    await c.write_event(AudioStart(rate=16000, width=2, channels=1).event())
    for at in range(0, len(audio), 3200):
        chunk = AudioChunk(rate=16000, width=2, channels=1, audio=audio[at : at + 3200])
        await c.write_event(chunk.event())
        await anyio.sleep(0.01)


async def test_asr_transcribes_during_the_clients_trailing_silence() -> None:
    svc = service()
    stt = svc.voice.stt  # type: ignore[union-attr]
    stt.delay_s = 0.3
    async with svc, client(svc) as c:
        warm = len(stt.calls)  # the pipeline's warm-up pass
        await _record(c, [(0.6, 440.0), (0.7, 0)])  # speech, then the client's silence
        await wait_for(lambda: len(stt.calls) > warm)  # the pass started before audio-stop
        assert stt.calls[warm] < 1.0  # on the recording so far
        await c.write_event(AudioStop().event())
        _, text = await read_transcript(c)
    assert text == "tone 440" and len(stt.calls) == warm + 1  # no second pass at audio-stop


async def test_asr_speculation_is_not_used_when_speech_resumes() -> None:
    svc = service()
    stt = svc.voice.stt  # type: ignore[union-attr]
    async with svc, client(svc) as c:
        warm = len(stt.calls)
        await _record(c, [(0.4, 440.0), (0.4, 0), (0.6, 880.0), (0.3, 0)])
        await c.write_event(AudioStop().event())
        _, text = await read_transcript(c)
    passes = stt.calls[warm:]
    assert text == "tone 880"  # not the mid-sentence pause's pass ("tone 440")
    assert passes[0] < 0.8 and passes[-1] > 1.3  # the pause's pass, then one with all speech
