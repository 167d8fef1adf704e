"""Shared fixtures. Async tests use the anyio plugin on asyncio."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def models():  # type: ignore[no-untyped-def]
    """The real default STT (Whisper tiny.en) and TTS (Piper joe), loaded once per module."""
    from edge.voice import PiperTTS, WhisperSTT

    stt, tts = WhisperSTT(), PiperTTS()
    stt.load()
    tts.load()
    return stt, tts
