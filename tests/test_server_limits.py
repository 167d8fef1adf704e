"""The shared bounds: connection slots, audio pacing, rate-limited and escaped logging."""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import numpy as np
import pytest
from server_helpers import settings, wait_for
from voice_helpers import EnergyVAD, ToneTTS, tone
from wyoming.audio import AudioChunk, AudioStart
from wyoming.event import Event, async_write_event

from edge.decisions import ScriptedDecisions
from edge.llm import ScriptedLLM
from edge.server import EdgeService, SpeechParts
from edge.server._limits import AudioPacer, ConnectionSlots, LogLimiter, printable
from edge.server._wyoming import WyomingLimits
from edge.voice import Recognition, float_to_pcm16, resample


def test_connection_slots_cap_total_and_per_address() -> None:
    slots = ConnectionSlots(total=3, per_address=2)
    assert slots.acquire("a") is None and slots.acquire("a") is None
    assert "from this address (2)" in str(slots.acquire("a"))
    assert slots.acquire("b") is None
    assert "server full (3" in str(slots.acquire("c"))
    slots.release("a")
    assert slots.acquire("c") is None and slots.used == 3


def test_audio_pacer_allows_a_burst_then_twice_real_time() -> None:
    now = [0.0]
    pacer = AudioPacer(burst_s=10, rate=2, clock=lambda: now[0])
    assert pacer.delay(10) == 0  # the burst
    assert pacer.delay(2) == pytest.approx(1.0)  # 2 s ahead at 2x: wait 1 s
    now[0] = 1.0
    assert pacer.delay(0) == 0  # caught up
    pacer.restart()
    assert pacer.delay(9) == 0


def test_log_limiter_and_escaping(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    limiter = LogLimiter(logging.getLogger("test.limits"), interval_s=10, clock=lambda: now[0])
    with caplog.at_level(logging.ERROR, logger="test.limits"):
        for _ in range(100):
            limiter.log(logging.ERROR, "k", "failed %s", printable("x\nFORGED 2026 ERROR"))
        now[0] = 11.0
        limiter.log(logging.ERROR, "k", "failed again")
    assert len(caplog.records) == 2
    assert "\n" not in caplog.records[0].getMessage()
    assert "99 more like this suppressed" in caplog.records[1].getMessage()
    assert len(printable("y" * 1000)) == 120


class _CountingSTT:
    """A slow STT with no working memory of its own (the memory measured is the
    connections'), counting the recognitions running at once."""

    sample_rate = 16_000

    def __init__(self) -> None:
        self.running = self.most = 0
        self._lock = threading.Lock()

    def transcribe(self, audio: np.ndarray) -> Recognition:
        with self._lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            time.sleep(0.05)
            return Recognition("tone 440", len(audio) / 16_000, 0.05)
        finally:
            with self._lock:
                self.running -= 1


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS"))
    return int(line.split()[1]) / 1024


@functools.cache
def _spoken_like_192khz_stereo() -> tuple[Event, ...]:
    """A spoken-like recording (0.8 s tone, 0.6 s pause) at 192 kHz stereo, 100 ms a chunk."""
    pattern = np.concatenate([resample(tone(0.8), 16_000, 192_000), np.zeros(115_200, np.float32)])
    pcm = float_to_pcm16(np.repeat(pattern, 2))  # stereo: each sample twice
    size = 76_800
    return tuple(
        AudioChunk(rate=192_000, width=2, channels=2, audio=pcm[i : i + size]).event()
        for i in range(0, len(pcm) - size + 1, size)
    )


async def _record_192khz_stereo(port: int, seconds: float, peak: list[float]) -> None:
    """Home Assistant's way, as fast as the server takes it; closed without audio-stop."""
    chunks = _spoken_like_192khz_stereo()
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await async_write_event(AudioStart(rate=192_000, width=2, channels=2).event(), writer)
    for i in range(int(seconds * 10)):
        await async_write_event(chunks[i % len(chunks)], writer)
        if i % 20 == 0:
            peak[0] = max(peak[0], _rss_mb())
    peak[0] = max(peak[0], _rss_mb())
    writer.close()


async def _recordings(svc: EdgeService, stt: _CountingSTT, seconds: float) -> tuple[float, float]:
    """Four connections record at once; (peak, after close) resident MB above the start."""
    assert svc.wyoming is not None
    _spoken_like_192khz_stereo()
    gc.collect()
    peak = [_rss_mb()]
    base = peak[0]
    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(_record_192khz_stereo, svc.wyoming.bound_port, seconds, peak)
    for _ in range(2):  # a pass may start just as its connection closes
        await wait_for(lambda: stt.running == 0, 30)
        await anyio.sleep(0.3)
    gc.collect()
    return peak[0] - base, _rss_mb() - base


async def measure_192khz_recordings() -> dict[str, float]:
    """Four Wyoming connections recording 119 s of 192 kHz stereo each, through the real
    service: the most passes at once, and resident MB per connection at the peak and the
    process's MB above its start after they closed."""
    stt = _CountingSTT()
    service = EdgeService(
        settings(voice=True, wyoming_port=0),
        llm=ScriptedLLM(lambda messages: "ok"),
        decisions=ScriptedDecisions(default="conversation"),
        speech=SpeechParts(stt=stt, tts=ToneTTS(), vad_factory=EnergyVAD),
    )
    async with service as svc:
        assert svc.wyoming is not None and svc.wyoming.backend.speculation is not None
        svc.wyoming.backend.limits = WyomingLimits(audio_burst_s=1e6, audio_rate=1e6)
        await _recordings(svc, stt, 10.0)  # threads, arenas and libraries start once
        warm_most = stt.most
        peak, after = await _recordings(svc, stt, 119.0)
    return {"most": max(warm_most, stt.most), "per_connection": peak / 4, "after": after}


# Run in a process of its own: the resident memory of a test process that ran other tests
# (their threads, arenas and collected garbage) moves by more than the bound being checked.
PROBE = """
import json, sys
sys.path.insert(0, "tests")
import anyio
import test_server_limits
print(json.dumps(anyio.run(test_server_limits.measure_192khz_recordings)))
"""


def test_a_192khz_stereo_recording_stays_within_its_memory_bound() -> None:
    """docs/reliability.md: a Wyoming recording is kept at 16 kHz, at most 120 s (7.7 MB a
    connection), and its memory goes back to the system at close; one speculative pass at
    a time per recording (each used to copy the recording so far, and one started at
    every pause: 192 kHz stereo cost ~20 MB a connection here, +27 MB after close; with Whisper
    ~120 MB, ~480 MB staying after close)."""
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=root, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"+{found['per_connection']:.1f} MB a connection, {found['after']:+.1f} MB after close")
    assert found["most"] <= 4  # one speculative pass per recording at a time
    assert found["per_connection"] < 7.7 + 2  # the recording, and a chunk's buffers
    assert found["after"] < 4  # given back at close
