"""``edge client --audio`` against the service with the real default models (Silero VAD,
Whisper, Piper): a silent recording ends at once with ``no_speech``; a spoken question
is still heard and answered after the client's ``end_of_utterance``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio
import numpy as np
import pytest

from edge.voice import PiperTTS, WhisperSTT, write_wav
from tests.test_server_models import QUESTION, real_service
from tests.voice_helpers import words

pytestmark = [pytest.mark.anyio, pytest.mark.model]

EDGE = [sys.executable, "-m", "edge"]


async def _edge_client(*args: str) -> tuple[int, str, str, float]:
    start = time.monotonic()
    with anyio.fail_after(120):
        done = await anyio.run_process([*EDGE, "client", *args], check=False)
    err = " ".join(done.stderr.decode().split())
    return done.returncode, done.stdout.decode(), err, time.monotonic() - start


async def test_edge_client_with_real_models_hears_silence_and_speech(  # type: ignore[no-untyped-def]
    models: tuple[WhisperSTT, PiperTTS], tmp_path: Path
) -> None:
    _, tts = models
    silent, spoken = tmp_path / "silent.wav", tmp_path / "question.wav"
    write_wav(str(silent), np.zeros(32_000, dtype=np.float32), 16_000)
    speech = tts.synthesize(QUESTION)
    write_wav(str(spoken), speech.audio, speech.sample_rate)
    async with real_service(models) as service:
        url = service.websocket_url
        code, _, err, took = await _edge_client("--url", url, "--audio", str(silent), "--fast")
        assert code == 1 and "no speech was heard" in err, err
        assert took < 60, took  # not the 120 s timeout
        code, out, err, _ = await _edge_client("--url", url, "--audio", str(spoken), "--fast")
    assert code == 0, err
    heard = words(err.split("heard: ", 1)[1])
    assert heard[: len(words(QUESTION))] == words(QUESTION) and out.strip()
    assert "no speech" not in err
