"""Speech to text with faster-whisper (CTranslate2), offline.

:class:`WhisperSTT` wraps one ``WhisperModel`` (the catalogue's default STT model unless
given a path), int8 on CPU, loaded lazily with ``local_files_only``. Its methods are
blocking: the pipeline calls them in worker threads. Calls are serialized by a lock
(one CTranslate2 model does one transcription at a time well on a small device).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from ._audio import STT_RATE


class SpeechToTextError(RuntimeError):
    """The recognizer could not load or failed on the audio."""


@dataclass(frozen=True)
class Recognition:
    """One transcription: the text and what it cost."""

    text: str
    audio_s: float
    elapsed_s: float

    @property
    def rtf(self) -> float:
        """Real-time factor: processing time over audio duration."""
        return self.elapsed_s / self.audio_s if self.audio_s else 0.0


@runtime_checkable
class LoadsModel(Protocol):
    """A speech model that can load its weights ahead of the first request (blocking,
    idempotent): the pipeline calls it in a worker thread at start-up."""

    def load(self) -> None: ...


@runtime_checkable
class SpeechToText(Protocol):
    """What the pipeline needs from a recognizer: 16 kHz mono float32 in, text out."""

    sample_rate: int

    def transcribe(self, audio: np.ndarray) -> Recognition: ...


class WhisperSTT:
    """faster-whisper, greedy decoding without timestamps (fast and stable for short turns)."""

    sample_rate = STT_RATE

    def __init__(
        self,
        model_path: Path | str | None = None,
        *,
        language: str | None = "en",
        compute_type: str = "int8",
        cpu_threads: int = 0,
        beam_size: int = 1,
    ) -> None:
        self._model_path = Path(model_path) if model_path is not None else None
        self.language = language
        self.compute_type = compute_type
        self.cpu_threads = cpu_threads
        self.beam_size = beam_size
        self._model = None
        self._lock = threading.Lock()

    @property
    def model_path(self) -> Path:
        if self._model_path is None:
            from edge.catalogue import Catalogue

            self._model_path = Catalogue.load().default("stt").locate()
        return self._model_path

    def load(self) -> None:
        """Load the model now (otherwise the first transcription does)."""
        with self._lock:
            self._load_locked()

    def _load_locked(self) -> None:
        if self._model is not None:
            return
        path = self.model_path
        if not (path / "model.bin").exists():
            raise SpeechToTextError(f"{path} is not a CTranslate2 Whisper model (no model.bin)")
        try:
            from faster_whisper import WhisperModel
        except ImportError as exc:  # pragma: no cover - dependency of the package
            raise SpeechToTextError("faster-whisper is not installed") from exc
        self._model = WhisperModel(
            str(path),
            device="cpu",
            compute_type=self.compute_type,
            cpu_threads=self.cpu_threads,
            local_files_only=True,
        )

    def transcribe(self, audio: np.ndarray) -> Recognition:
        """Transcribe 16 kHz mono float32 audio; empty text when nothing was said."""
        audio = np.asarray(audio, dtype=np.float32)
        if audio.ndim != 1:
            raise ValueError("transcribe takes mono audio (a 1-D array)")
        duration = len(audio) / self.sample_rate
        if len(audio) < self.sample_rate // 10:
            return Recognition("", duration, 0.0)
        with self._lock:
            self._load_locked()
            started = time.perf_counter()
            segments, _ = self._model.transcribe(  # type: ignore[union-attr]
                audio,
                language=self.language,
                beam_size=self.beam_size,
                temperature=0.0,
                condition_on_previous_text=False,
                without_timestamps=True,
                vad_filter=False,
            )
            text = " ".join(segment.text.strip() for segment in segments).strip()
            elapsed = time.perf_counter() - started
        return Recognition(text, duration, elapsed)
