"""A recording's pause pass (Wyoming ``asr``) hears what the voice pipeline's final pass
would: the speech as the endpointer ends it (windows above the silence threshold that go
on from speech count as speech) and the endpoint's pad after it. Scripted VAD windows; the
pass itself is recorded, not run."""

from __future__ import annotations

from typing import Any

import numpy as np

from edge.voice import RecordingPauses
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


def heard(probabilities: list[float], after_s: float = 0.15) -> tuple[int | None, list[int]]:
    """Feed one window at a time: (the speech end it found, the audio length of each pass)."""
    passes = Passes()
    pauses = RecordingPauses(
        passes,  # type: ignore[arg-type]
        lambda *a: None,
        ScriptedVAD(probabilities),
        utterance=1,
        threshold=0.5,
        silence_threshold=0.35,
        after_s=after_s,
    )
    recording = Recording(RATE * 5)
    for _ in probabilities:
        chunk = np.zeros(WINDOW, dtype=np.float32)
        recording.append(chunk)
        pauses.feed(chunk, recording)
    return pauses._last_voice, [length for _, length in passes.started]


def test_the_tail_of_the_speech_counts_as_the_endpointer_counts_it() -> None:
    # speech, then two windows of a fading last word (0.4) before the silence
    end, passes = heard([0.9] * 10 + [0.4, 0.4] + [0.05] * 12)
    assert end == 12 * WINDOW  # the fading windows are speech, as the endpointer's
    pad = int(0.15 * RATE)
    assert len(passes) == 1 and passes[0] >= end + pad  # the endpoint's pad, heard


def test_a_weak_window_after_a_pause_does_not_resume_the_speech() -> None:
    end, passes = heard([0.9] * 10 + [0.1, 0.1, 0.4, 0.1] + [0.05] * 10)
    assert end == 10 * WINDOW  # 0.4 after silent windows is not speech resuming
    assert len(passes) == 1


def test_no_pass_before_the_pad_after_the_speech_is_heard() -> None:
    pad_windows = -(-int(0.15 * RATE) // WINDOW)  # 5 windows of 512 samples
    _, passes = heard([0.9] * 10 + [0.05] * (pad_windows - 1))
    assert passes == []
    _, passes = heard([0.9] * 10 + [0.05] * pad_windows)
    assert len(passes) == 1
