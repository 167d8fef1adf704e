"""PCM16 audio: checking, converting, resampling, and WAV files.

Inside the voice layer audio is mono ``float32`` in [-1, 1] at a known rate; on the wire
and in WAV files it is little-endian signed 16-bit PCM. Everything here is plain
functions except :class:`StreamResampler`, which keeps soxr's state between chunks.
"""

from __future__ import annotations

import io
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soxr

MIN_RATE = 8_000
MAX_RATE = 192_000
SAMPLE_WIDTH = 2  # bytes: PCM16
STT_RATE = 16_000


class AudioFormatError(ValueError):
    """Audio that the voice layer cannot take; the message names what is wrong."""


def check_format(sample_rate: int, sample_width: int = SAMPLE_WIDTH, channels: int = 1) -> None:
    """Raise :class:`AudioFormatError` unless this is PCM16 at a sane rate, 1 or 2 channels."""
    if sample_width != SAMPLE_WIDTH:
        raise AudioFormatError(
            f"audio must be 16-bit PCM (sample width 2 bytes), got width {sample_width}"
        )
    if not MIN_RATE <= sample_rate <= MAX_RATE:
        raise AudioFormatError(
            f"sample rate {sample_rate} Hz is outside the supported {MIN_RATE}-{MAX_RATE} Hz"
        )
    if channels not in (1, 2):
        raise AudioFormatError(f"audio must be mono or stereo, got {channels} channels")


def pcm16_to_float(pcm: bytes, channels: int = 1) -> np.ndarray:
    """Little-endian PCM16 bytes to mono float32 in [-1, 1]; stereo is averaged to mono."""
    frame = SAMPLE_WIDTH * channels
    if len(pcm) % frame:
        raise AudioFormatError(
            f"PCM16 data of {len(pcm)} bytes is not a whole number of {channels}-channel "
            f"frames ({frame} bytes each)"
        )
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    if channels == 2:
        samples = samples.reshape(-1, 2).mean(axis=1)
    return samples


def float_to_pcm16(audio: np.ndarray) -> bytes:
    """Mono float audio in [-1, 1] to little-endian PCM16 bytes (clipped)."""
    clipped = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)
    return (clipped * 32767.0).round().astype("<i2").tobytes()


def cut_or_pad(audio: np.ndarray, length: int) -> np.ndarray:
    """``audio`` cut to ``length`` samples, or silence appended up to them."""
    if len(audio) >= length:
        return audio[:length]
    return np.concatenate([audio, np.zeros(length - len(audio), dtype=np.float32)])


def resample(audio: np.ndarray, from_rate: int, to_rate: int) -> np.ndarray:
    """Resample a whole mono float32 signal (soxr, high quality)."""
    audio = np.asarray(audio, dtype=np.float32)
    if from_rate == to_rate or audio.size == 0:
        return audio
    return soxr.resample(audio, from_rate, to_rate, quality="HQ").astype(np.float32, copy=False)


class StreamResampler:
    """Resample a stream chunk by chunk, keeping the filter state between chunks."""

    def __init__(self, from_rate: int, to_rate: int) -> None:
        self.from_rate = from_rate
        self.to_rate = to_rate
        self._stream = (
            None
            if from_rate == to_rate
            else soxr.ResampleStream(from_rate, to_rate, 1, dtype="float32", quality="HQ")
        )

    def process(self, audio: np.ndarray, last: bool = False) -> np.ndarray:
        audio = np.asarray(audio, dtype=np.float32)
        if self._stream is None:
            return audio
        return self._stream.resample_chunk(audio, last=last)


@dataclass(frozen=True)
class WavAudio:
    """A WAV file's content as mono float32 plus its native format."""

    audio: np.ndarray
    sample_rate: int
    channels: int

    @property
    def duration_s(self) -> float:
        return len(self.audio) / self.sample_rate


def read_wav(source: Path | str | bytes) -> WavAudio:
    """Read a PCM16 WAV file (path or bytes); stereo is averaged to mono."""
    where = io.BytesIO(source) if isinstance(source, bytes) else str(source)
    try:
        handle = wave.open(where, "rb")
    except FileNotFoundError:
        raise AudioFormatError(f"no such WAV file: {where}") from None
    except (wave.Error, EOFError) as exc:
        raise AudioFormatError(f"not a readable PCM WAV file ({exc})") from None
    with handle:
        channels, width, rate = handle.getnchannels(), handle.getsampwidth(), handle.getframerate()
        check_format(rate, width, channels)
        pcm = handle.readframes(handle.getnframes())
    return WavAudio(pcm16_to_float(pcm, channels), rate, channels)


def wav_bytes(audio: np.ndarray, sample_rate: int) -> bytes:
    """Mono float audio as the bytes of a PCM16 WAV file."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(SAMPLE_WIDTH)
        handle.setframerate(sample_rate)
        handle.writeframes(float_to_pcm16(audio))
    return buffer.getvalue()


def write_wav(path: Path | str, audio: np.ndarray, sample_rate: int) -> Path:
    """Write mono float audio as a PCM16 WAV file."""
    target = Path(path)
    target.write_bytes(wav_bytes(audio, sample_rate))
    return target


def chunk_pcm(pcm: bytes, sample_rate: int, chunk_ms: int) -> list[bytes]:
    """Split mono PCM16 bytes into chunks of ``chunk_ms`` (the last may be shorter)."""
    step = max(1, sample_rate * chunk_ms // 1000) * SAMPLE_WIDTH
    return [pcm[i : i + step] for i in range(0, len(pcm), step)]
