"""A recording's pause pass (Wyoming ``asr``) hears what the voice pipeline's final pass
would: the speech as the endpointer ends it (windows above the silence threshold that go
on from speech count as speech) and the endpoint's pad after it, the part not received yet
as silence. Scripted VAD windows; the pass itself is recorded, not run."""

from __future__ import annotations

from typing import Any

import numpy as np

from edge.voice import RecordingPauses, VoiceConfig
from edge.voice._recording import Recording

WINDOW = 512
RATE = 16_000


class ScriptedVAD:
    """One scripted probability per fed window of 512 samples."""

    window = WINDOW

    def __init__(self, probabilities: list[float]) -> None:
        self.left = list(probabilities)

    def process(self, samples: np.ndarray) -> np.ndarray:
        count = len(samples) // WINDOW
        taken, self.left = self.left[:count], self.left[count:]
        return np.array(taken, dtype=np.float32)


class Passes:
    """The pause recognizer's surface a recording uses; it records the passes started."""

    running = False

    def __init__(self) -> None:
        self.started: list[tuple[Any, int]] = []

    def reusable(self, utterance: int, speech_end: int, pad: int) -> Any:
        return next((job for job, _ in self.started if job.covers >= speech_end), None)

    def start(self, spawn: Any, job: Any, audio: np.ndarray, done: Any) -> None:
        self.started.append((job, len(audio)))


def heard(probabilities: list[float], after_s: float = 0.064) -> tuple[int | None, list[int]]:
    """Feed one window at a time: (the speech end it found, the audio length of each pass)."""
    passes = Passes()
    pauses = RecordingPauses(
        passes,  # type: ignore[arg-type]
        lambda *a: None,
        ScriptedVAD(probabilities),
        utterance=1,
        config=VoiceConfig(speculative_after_ms=round(after_s * 1000)),
    )
    recording = Recording(RATE * 5)
    for _ in probabilities:
        chunk = np.zeros(WINDOW, dtype=np.float32)
        recording.append(chunk)
        pauses.feed(chunk, recording)
    return pauses._last_voice, [length for _, length in passes.started]


PAD = int(0.15 * RATE)


def test_the_pass_hears_the_speech_as_the_endpointer_ends_it_and_the_pad_after() -> None:
    # speech, then two windows of a fading last word (0.4) before the silence
    end, passes = heard([0.9] * 10 + [0.4, 0.4] + [0.05] * 12)
    assert end == 12 * WINDOW  # the fading windows are speech, as the endpointer's
    # the pass starts 64 ms into the pause and hears the endpoint's cut: the pad after
    # the speech, the part not received yet as silence (it was cut where it started)
    assert passes == [end + PAD]


def test_a_pass_started_late_hears_the_same_cut() -> None:
    passes = Passes()
    passes.running = True  # another pass holds this recording's recognizer for a while
    pauses = RecordingPauses(
        passes,  # type: ignore[arg-type]
        lambda *a: None,
        ScriptedVAD([0.9] * 10 + [0.05] * 14),
        utterance=1,
    )
    recording = Recording(RATE * 5)
    for i in range(24):
        passes.running = i < 20
        chunk = np.zeros(WINDOW, dtype=np.float32)
        recording.append(chunk)
        pauses.feed(chunk, recording)
    assert [length for _, length in passes.started] == [10 * WINDOW + PAD]


def test_a_weak_window_after_a_pause_does_not_resume_the_speech() -> None:
    end, passes = heard([0.9] * 10 + [0.1, 0.1, 0.4, 0.1] + [0.05] * 10)
    assert end == 10 * WINDOW  # 0.4 after silent windows is not speech resuming
    assert passes == [end + PAD]
