"""A turn the service refuses, or an utterance with no speech, ends at once: for
``EdgeClient`` and for ``edge client`` against the real service."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio
import numpy as np
import pytest

from edge.llm import ScriptedLLM
from edge.server import NO_SPEECH, AudioFormat, EdgeClient
from edge.voice import VoiceConfig, float_to_pcm16, write_wav
from tests.server_helpers import answer_for, make_service, tone_service
from tests.voice_helpers import silence, tone

pytestmark = pytest.mark.anyio

EDGE = [sys.executable, "-m", "edge"]


async def test_ask_ends_at_the_services_error() -> None:
    async with make_service() as service, EdgeClient(service.websocket_url) as client:
        for text in ("   ", "x" * 100_000):
            with anyio.fail_after(5):  # not the 60 s limit
                turn = await client.ask(text, limit_s=60)
            assert not turn.request_id and not turn.replies
            assert [e.in_reply_to for e in turn.errors] == ["text"]
        turn = await client.ask("still here", limit_s=10)  # the session goes on
        assert turn.text == "You said: still here. That is all."


async def _edge_client(*args: str) -> tuple[int, str, float]:
    start = time.monotonic()
    with anyio.fail_after(60):
        done = await anyio.run_process([*EDGE, "client", *args], check=False)
    return done.returncode, " ".join(done.stderr.decode().split()), time.monotonic() - start


async def test_edge_client_ends_at_the_services_error() -> None:
    async with make_service() as service:
        code, err, took = await _edge_client(
            "--url", service.websocket_url, "--text", "   ", "--timeout", "120"
        )
    assert code == 1 and "a text turn needs some text" in err
    assert took < 30, took


def _voice_service():  # type: ignore[no-untyped-def]
    return tone_service(
        ScriptedLLM(answer_for), VoiceConfig(playback_speed=0, partial_interval_s=0)
    )


async def test_an_utterance_without_speech_is_reported() -> None:
    async with _voice_service() as service:
        fmt = AudioFormat(sample_rate=16_000)
        async with EdgeClient(service.websocket_url, audio=fmt) as client:
            await client.speak(float_to_pcm16(silence(1.0)), realtime=False)
            await client.end_of_utterance()
            with anyio.fail_after(5):
                turn = await client.collect_turn(limit_s=60)
            assert not turn.request_id
            assert [e.code for e in turn.errors] == [NO_SPEECH]
            # speech after it is a turn as before; its release adds no second error
            pcm = float_to_pcm16(np.concatenate([tone(0.5, 440.0), silence(1.0)]))
            await client.speak(pcm, realtime=False)
            await client.end_of_utterance()
            turn = await client.collect_turn(limit_s=10)
            assert turn.query == "tone 440" and not turn.errors


async def test_edge_client_reports_a_silent_recording(tmp_path: Path) -> None:
    wav = tmp_path / "silent.wav"
    write_wav(str(wav), silence(2.0), 16_000)
    async with _voice_service() as service:
        code, err, took = await _edge_client(
            "--url", service.websocket_url, "--audio", str(wav), "--fast", "--timeout", "120"
        )
    assert code == 1 and "no speech was heard" in err
    assert took < 30, took


async def test_speak_sends_whole_frames_and_all_its_silence() -> None:
    """Every frame but the last is ``chunk_ms`` long, the silence going on from the speech's
    last frame (the service's VAD windows stay aligned with the frames), and nothing of the
    recording or its silence is skipped."""
    client = EdgeClient("ws://127.0.0.1:9", audio=AudioFormat(sample_rate=16_000))
    sent: list[bytes] = []

    async def record(pcm: bytes) -> None:
        sent.append(pcm)

    client.send_audio = record  # type: ignore[method-assign]
    speech = bytes(range(256)) * 20  # 5,120 bytes: 2,560 samples, 5 windows of 512
    await client.speak(speech[:5000], realtime=False, trailing_silence_s=0.1)
    assert {len(piece) for piece in sent[:-1]} == {1024}  # 32 ms at 16 kHz, PCM16
    assert b"".join(sent) == speech[:5000] + bytes(3200)
