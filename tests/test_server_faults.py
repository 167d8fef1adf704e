"""Faults: the model failing mid-stream, STT/TTS failing, a client dropping mid-reply, a
slow synthesis whose requester leaves, and a data directory that cannot be written."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import numpy as np
import pytest
from wyoming.asr import Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.tts import Synthesize

from edge.decisions import ScriptedDecisions
from edge.llm import ChatMessage, ScriptedLLM, ScriptedReply
from edge.server import EdgeClient, EdgeService, SpeechParts
from edge.voice import Recognition, Synthesis, VoiceConfig
from tests.server_helpers import Departures, answer_for, read_answer, settings, wait_for
from tests.voice_helpers import EnergyVAD, ToneSTT, ToneTTS, tone

pytestmark = pytest.mark.anyio


def failing_midway(messages: list[ChatMessage]) -> str | ScriptedReply:
    if "explode" in messages[-1].content:
        return ScriptedReply("This answer breaks after three words", fail_after=3)
    return answer_for(messages)


async def test_model_raising_mid_stream_ends_that_turn_and_others_go_on() -> None:
    service = EdgeService(
        settings(), llm=ScriptedLLM(failing_midway), decisions=ScriptedDecisions("conversation")
    )
    async with service, EdgeClient(service.websocket_url, participant_id="a") as a:
        broken = await a.ask("please explode", limit_s=10)
        assert broken.replies and broken.replies[-1].final  # the stream still ends
        assert [e.code for e in broken.errors] == ["backend_failed"], broken.errors
        assert "language model failed" in broken.errors[0].message
        assert (await a.ask("and now?", limit_s=10)).text == "You said: and now?. That is all."


class BrokenSTT(ToneSTT):
    def transcribe(self, audio: np.ndarray) -> Recognition:
        if audio.size and np.abs(audio).max() > 0.05:  # the start-up warm-up is silence
            raise RuntimeError("the recognizer crashed")
        return super().transcribe(audio)


class SlowTTS(ToneTTS):
    """Each sentence takes 0.2 s (a real voice on a small CPU), or raises on 'boom'."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()  # like Piper's: one synthesis at a time

    def synthesize(self, text: str) -> Synthesis:
        if "boom" in text:
            raise RuntimeError("the voice crashed")
        with self.lock:
            time.sleep(0.2)
            return super().synthesize(text)


def voice_service(stt: object, tts: object) -> EdgeService:
    return EdgeService(
        settings(voice=True, wyoming_port=0),
        llm=ScriptedLLM(answer_for),
        decisions=ScriptedDecisions("conversation"),
        speech=SpeechParts(
            stt=stt,
            tts=tts,
            config=VoiceConfig(playback_speed=0, partial_interval_s=0),
            vad_factory=EnergyVAD,
        ),
    )


async def _recording(client: AsyncTcpClient) -> None:
    pcm = (tone(0.5) * 32767 * 0.5).astype("<i2").tobytes()
    await client.write_event(AudioStart(rate=16000, width=2, channels=1).event())
    await client.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=pcm).event())
    await client.write_event(AudioStop().event())


async def test_stt_and_tts_failures_are_errors_and_the_connection_goes_on() -> None:
    tts = SlowTTS()
    service = voice_service(BrokenSTT(), tts)
    async with service:
        assert service.wyoming is not None
        port = service.wyoming.bound_port
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await _recording(client)
            event = await client.read_event()
            assert event is not None and Error.is_type(event.type)
            assert "recognizer crashed" in Error.from_event(event).text
            await client.write_event(Synthesize(text="boom goes the voice.").event())
            event = await client.read_event()
            assert event is not None and "voice crashed" in Error.from_event(event).text
            await client.write_event(Synthesize(text="x" * 5000).event())
            event = await client.read_event()
            assert event is not None and "the limit is 2000" in Error.from_event(event).text
            await client.write_event(Transcript(text="still answering?").event())
            _, event = await read_answer(client)  # streamed, then whole
            assert event is not None and event.type == "handled"


async def test_synthesis_stops_when_its_requester_leaves_and_never_holds_others() -> None:
    tts = SlowTTS()
    service = voice_service(ToneSTT(), tts)
    long_text = " ".join(f"Sentence number {n} is here." for n in range(40))  # ~8 s of work
    async with service:
        assert service.wyoming is not None
        port = service.wyoming.bound_port
        async with AsyncTcpClient("127.0.0.1", port) as leaver:
            await leaver.write_event(Synthesize(text=long_text).event())
            await leaver.read_event()  # audio-start: it is speaking
        async with AsyncTcpClient("127.0.0.1", port) as other:  # someone else's request
            await other.write_event(Synthesize(text="A short one.").event())
            with anyio.fail_after(5):
                while (event := await other.read_event()) is not None:
                    if event.type == "audio-stop":
                        break
        before = tts.spoken.index("A short one.")  # its turn came between two sentences
        assert before <= 3, tts.spoken[: before + 1]
        await anyio.sleep(0.5)
        spoken = sum("Sentence number" in s for s in tts.spoken)
        assert spoken < 10, spoken  # it stopped after its requester left


async def test_a_client_dropping_mid_reply_leaves_and_others_are_answered() -> None:
    def slow(messages: list[ChatMessage]) -> str | ScriptedReply:
        if "slow" in messages[-1].content:
            return ScriptedReply("one two three four five six seven eight", delay_s=0.1)
        return answer_for(messages)

    service = EdgeService(
        settings(), llm=ScriptedLLM(slow), decisions=ScriptedDecisions("conversation")
    )
    departures = Departures()
    service.runtime.register("departures", departures)
    async with service:
        url = service.websocket_url
        async with EdgeClient(url, participant_id="stays") as stays:
            dropper = EdgeClient(url, participant_id="dropper")
            await dropper.__aenter__()
            await dropper.send({"type": "text", "text": "a slow answer please"})
            while (await dropper.receive())[0].type != "reply":
                pass
            assert dropper.ws is not None
            dropper.ws.transport.abort()  # gone mid-reply, no close handshake
            await wait_for(lambda: ("dropper", "connection closed") in departures.left)
            assert (await stays.ask("hello", limit_s=10)).text == "You said: hello. That is all."
            token = dropper.session_token  # the id is free again, for its owner
            async with EdgeClient(url, participant_id="dropper", resume=token) as back:
                assert (await back.ask("back", limit_s=10)).text


def _no_writes() -> None:  # runs in the child: any file write fails like a full disk
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))


def test_a_data_directory_that_cannot_be_written_is_a_clear_error(tmp_path: Path) -> None:
    edge = [sys.executable, "-m", "edge"]
    env = {**os.environ, "EDGE_DATA_DIR": str(tmp_path / "full")}
    token = subprocess.run(
        [*edge, "token"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_no_writes,
    )
    assert token.returncode == 2 and "cannot write" in token.stdout and "token" in token.stdout
    serve = subprocess.run(
        [*edge, "serve", "--host", "127.0.0.1", "--port", "0", "--no-wyoming", "--no-mdns",
         "--no-voice", "--profile", "ci-2core-24gb", "--llm-url", "http://127.0.0.1:9/v1"],
        env=env, capture_output=True, text=True, timeout=120, preexec_fn=_no_writes,
    )  # fmt: skip
    assert serve.returncode == 2, serve.stderr
    assert "error:" in serve.stderr
    assert "File too large" in serve.stderr or "cannot open the sessions store" in serve.stderr
