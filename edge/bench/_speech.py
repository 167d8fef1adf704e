"""The spoken question every speech stage uses (synthesized by the installed Piper voice,
so nothing is downloaded or shipped), and the one definition of the end of speech that
``edge bench`` and ``benchmarks/`` share: the last voiced sample of the input audio."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

QUESTION = "What is the capital of France, and how far is it from the coast?"
FRAME_S = 0.010  # voicing is decided per 10 ms frame
VOICED_DB = -40.0  # a frame is voiced when its RMS is within 40 dB of the loudest frame


def _voiced_frames(audio: np.ndarray, sample_rate: int) -> tuple[np.ndarray, int, int]:
    samples = np.asarray(audio, dtype=np.float64)
    if samples.size == 0:
        raise ValueError("no audio")
    frame = max(1, int(sample_rate * FRAME_S))
    n = -(-samples.size // frame)
    padded = np.zeros(n * frame)
    padded[: samples.size] = samples
    rms = np.sqrt((padded.reshape(n, frame) ** 2).mean(axis=1))
    if rms.max() <= 0:
        raise ValueError("no voiced sample in the audio")
    return np.flatnonzero(rms >= rms.max() * 10 ** (VOICED_DB / 20)), frame, samples.size


def last_voiced_sample(audio: np.ndarray, sample_rate: int) -> int:
    """Index of the last voiced sample of ``audio`` (mono float samples): the end of the
    last 10 ms frame whose RMS is within 40 dB of the loudest frame."""
    voiced, frame, size = _voiced_frames(audio, sample_rate)
    return min(size, (int(voiced[-1]) + 1) * frame) - 1


def voiced_span(audio: np.ndarray, sample_rate: int) -> tuple[float, float]:
    """First and last voiced instants of ``audio`` in seconds (the same frames)."""
    voiced, frame, size = _voiced_frames(audio, sample_rate)
    last = min(size, (int(voiced[-1]) + 1) * frame)
    return int(voiced[0]) * frame / sample_rate, last / sample_rate


def speech_end_offset_s(audio: np.ndarray, sample_rate: int) -> float:
    """Seconds from the start of ``audio`` to just after its last voiced sample."""
    return (last_voiced_sample(audio, sample_rate) + 1) / sample_rate


def speech_end_at(feed_started_at: float, audio: np.ndarray, sample_rate: int) -> float:
    """``perf_counter`` time of the end of speech for a recording fed in real time from
    ``feed_started_at`` on."""
    return feed_started_at + speech_end_offset_s(audio, sample_rate)


@dataclass(frozen=True)
class Clip:
    """The question spoken: at the voice's rate and at Whisper's 16 kHz."""

    audio: np.ndarray
    sample_rate: int
    audio_16k: np.ndarray

    @property
    def duration_s(self) -> float:
        return len(self.audio) / self.sample_rate


@functools.cache
def spoken_question() -> Clip:
    from edge.voice import PiperTTS, resample

    tts = PiperTTS(noise_scale=0.0, noise_w_scale=0.0)  # the same audio every run
    speech = tts.synthesize(QUESTION)
    pad = np.zeros(int(0.3 * speech.sample_rate), dtype=np.float32)
    audio = np.concatenate([pad, speech.audio.astype(np.float32), pad])
    return Clip(audio, speech.sample_rate, resample(audio, speech.sample_rate, 16_000))
