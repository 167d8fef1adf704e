"""``--fallback local``: the in-process model answers while its remote server is down.

Each request goes to the remote server first; when it fails (or the back-off after a
failure lasts, so no time is lost waiting on it) the local model answers instead, and the
backend's ``fallback_uses`` counts it. The remote is tried again once its back-off ends.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from ._remote import RemoteSpeechError
from ._remote_stream import WyomingSpeechStream
from ._remote_stt import WyomingSTT
from ._remote_tts import WyomingTTS
from ._stt import LoadsModel, Recognition, SpeechToText
from ._tts import Synthesis, TextToSpeech

log = logging.getLogger(__name__)


class FallbackSTT:
    """A remote recognizer with the local one behind it."""

    def __init__(self, remote: WyomingSTT, local: SpeechToText) -> None:
        self.remote = remote
        self.local = local
        self.backend = remote.backend
        self.sample_rate = remote.sample_rate

    @property
    def description(self) -> str:
        return f"{self.remote.description}, local fallback"

    def load(self) -> None:
        self.remote.load()
        if isinstance(self.local, LoadsModel):
            self.local.load()

    @property
    def partials_streamed(self) -> bool:
        return self.remote.partials_streamed

    def open_stream(self, on_partial: Callable[[str], None]) -> WyomingSpeechStream:
        """The remote's stream; when it fails, :meth:`transcribe` (local behind it) answers."""
        return self.remote.open_stream(on_partial)

    def transcribe(self, audio: np.ndarray) -> Recognition:
        try:
            return self.remote.transcribe(audio)
        except RemoteSpeechError as exc:
            log.info("%s; the local recognizer answers", exc)
            self.backend.fallback_uses += 1
        return self.local.transcribe(audio)


class FallbackTTS:
    """A remote voice with the local one behind it."""

    def __init__(self, remote: WyomingTTS, local: TextToSpeech) -> None:
        self.remote = remote
        self.local = local
        self.backend = remote.backend

    @property
    def description(self) -> str:
        return f"{self.remote.description}, local fallback"

    @property
    def sample_rate(self) -> int:
        return self.remote.sample_rate

    def load(self) -> None:
        self.remote.load()
        if isinstance(self.local, LoadsModel):
            self.local.load()

    def synthesize(self, text: str) -> Synthesis:
        try:
            return self.remote.synthesize(text)
        except RemoteSpeechError as exc:
            log.info("%s; the local voice answers", exc)
            self.backend.fallback_uses += 1
        return self.local.synthesize(text)

    def synthesize_in(self, reply: str, text: str) -> Synthesis:
        try:
            return self.remote.synthesize_in(reply, text)
        except RemoteSpeechError as exc:
            log.info("%s; the local voice answers", exc)
            self.backend.fallback_uses += 1
        return self.local.synthesize(text)

    def end_reply(self, reply: str, *, interrupted: bool = False) -> None:
        self.remote.end_reply(reply, interrupted=interrupted)
