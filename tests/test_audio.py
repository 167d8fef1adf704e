"""Audio utilities: PCM16 conversion, resampling, WAV files, bad formats."""

from __future__ import annotations

import numpy as np
import pytest

from edge.voice import (
    AudioFormatError,
    StreamResampler,
    chunk_pcm,
    float_to_pcm16,
    pcm16_to_float,
    read_wav,
    resample,
    wav_bytes,
    write_wav,
)
from tests.voice_helpers import tone


def test_pcm16_round_trip() -> None:
    audio = tone(0.1)
    back = pcm16_to_float(float_to_pcm16(audio))
    assert back.dtype == np.float32
    assert np.abs(back - audio).max() < 1e-4


def test_stereo_is_mixed_to_mono() -> None:
    left, right = np.full(4, 0.5, np.float32), np.zeros(4, np.float32)
    interleaved = np.stack([left, right], axis=1).reshape(-1)
    mono = pcm16_to_float(float_to_pcm16(interleaved), channels=2)
    assert mono.shape == (4,)
    assert np.allclose(mono, 0.25, atol=1e-3)


def test_ragged_pcm_is_rejected() -> None:
    with pytest.raises(AudioFormatError, match="whole number"):
        pcm16_to_float(b"\x00\x01\x02")
    with pytest.raises(AudioFormatError, match="2-channel"):
        pcm16_to_float(b"\x00\x01", channels=2)


def test_clipping() -> None:
    pcm = float_to_pcm16(np.array([2.0, -2.0], np.float32))
    assert np.frombuffer(pcm, "<i2").tolist() == [32767, -32767]


def test_resample_keeps_duration_and_pitch() -> None:
    audio = tone(1.0, 440.0, rate=22_050)
    out = resample(audio, 22_050, 16_000)
    assert abs(len(out) - 16_000) <= 2
    freq = np.argmax(np.abs(np.fft.rfft(out))) * 16_000 / len(out)
    assert abs(freq - 440) < 2


def test_stream_resampler_matches_length() -> None:
    audio = tone(1.0, 440.0, rate=48_000)
    rs = StreamResampler(48_000, 16_000)
    parts = [rs.process(audio[i : i + 4_800]) for i in range(0, len(audio), 4_800)]
    parts.append(rs.process(np.zeros(0, np.float32), last=True))
    total = sum(len(p) for p in parts)
    assert abs(total - 16_000) <= 2
    assert StreamResampler(16_000, 16_000).process(audio[:10]) is not None


def test_wav_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    audio = tone(0.25, rate=22_050)
    path = write_wav(tmp_path / "x.wav", audio, 22_050)
    wav = read_wav(path)
    assert wav.sample_rate == 22_050 and wav.channels == 1
    assert abs(wav.duration_s - 0.25) < 1e-3
    assert read_wav(wav_bytes(audio, 22_050)).sample_rate == 22_050


def test_bad_wav_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(AudioFormatError, match="no such WAV"):
        read_wav(tmp_path / "missing.wav")
    (tmp_path / "junk.wav").write_bytes(b"not a wav at all")
    with pytest.raises(AudioFormatError, match="not a readable"):
        read_wav(tmp_path / "junk.wav")
    import wave

    with wave.open(str(tmp_path / "w8.wav"), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(1)
        handle.setframerate(8_000)
        handle.writeframes(b"\x80" * 100)
    with pytest.raises(AudioFormatError, match="16-bit"):
        read_wav(tmp_path / "w8.wav")


def test_chunk_pcm() -> None:
    pcm = float_to_pcm16(tone(0.25))
    chunks = chunk_pcm(pcm, 16_000, 100)
    assert [len(c) for c in chunks] == [3200, 3200, 1600]


def test_audio_messages_serialize_pcm_as_base64() -> None:
    from edge.voice import AudioInput, AudioOutput

    chunk = AudioOutput(pcm=b"\x00\xff\x10\x80", sample_rate=22_050, request_id="r", final=True)
    text = chunk.model_dump_json()
    assert '"pcm":"AP8QgA=="' in text
    assert AudioOutput.model_validate_json(text) == chunk
    assert AudioInput.model_validate_json('{"pcm": "AAA=", "sample_rate": 48000}').pcm == b"\0\0"
