"""The shared bounds: connection slots, audio pacing, rate-limited and escaped logging."""

from __future__ import annotations

import logging

import pytest

from edge.server._limits import AudioPacer, ConnectionSlots, LogLimiter, printable


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
