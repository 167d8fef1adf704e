"""Speech to text with faster-whisper (CTranslate2), offline.

:class:`WhisperSTT` wraps one ``WhisperModel`` (the catalogue's default STT model unless
given a path), int8 on CPU, loaded lazily with ``local_files_only``. Its methods are
blocking: the pipeline calls them in worker threads. Calls are serialized by a lock
(one CTranslate2 model does one transcription at a time well on a small device), taken
by a pass that may end a turn (final or speculative, :data:`edge.runtime.URGENT`) before
the partial passes waiting for it. A partial pass under way stops after its encoder when
such a pass waits (its decoder, token by token, would hold that one up).
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from edge.runtime import (
    COMPUTE_GATE,
    URGENT,
    OrderedLock,
    YieldedToUrgentError,
    current_urgency,
    gives_way,
)

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


@runtime_checkable
class FullWindowSpeechToText(Protocol):
    """A recognizer that can also decode with Whisper's whole 30 s window: slower, but
    its end punctuation is the model's usual one, which the end-of-utterance verdict
    reads (a fitted window drops a question's "?" more often)."""

    def transcribe_full(self, audio: np.ndarray) -> Recognition: ...


@runtime_checkable
class StreamingSpeechToText(Protocol):
    """A recognizer that takes an utterance as it is spoken (a remote server): the
    listener opens a stream when speech starts, feeds it each chunk, and ``finish()``
    gives the final :class:`Recognition` (see ``edge.voice._remote_stream``)."""

    partials_streamed: bool
    """The server has streamed transcript chunks before an utterance's end (partials)."""

    def open_stream(self, on_partial: Callable[[str], None]) -> Any: ...


TOKENS_PER_S = 10
"""The most tokens decoded per second of audio (speech is 3-5), plus 20: a pass that
starts to loop stops there instead of at Whisper's 448 tokens (seconds of decoding)."""


FRAMES_PER_S = 100
"""Whisper's feature frames per second of audio (its encoder sees 3,000: 30 s)."""


def encoder_frames(samples: int, window_s: float | None, rate: int = STT_RATE) -> int | None:
    """How many feature frames the encoder sees for ``samples`` of audio: the audio plus
    1 s, at least ``window_s``, in steps of 5 s; None (all 30 s) when ``window_s`` is None
    or the audio does not fit one window."""
    if window_s is None or samples > (29 * rate):
        return None
    frames = samples * FRAMES_PER_S // rate + FRAMES_PER_S
    step = 5 * FRAMES_PER_S
    return min(3000, max(int(window_s * FRAMES_PER_S), -(-frames // step) * step))


@functools.cache
def _fitted_model_class() -> Any:
    from faster_whisper import WhisperModel

    class FittedWhisperModel(WhisperModel):
        """Encodes the first ``window_frames`` feature frames of each 30 s window (the
        rest is padding after a short utterance); None encodes all 3,000."""

        window_frames: int | None = None
        after_encode: Callable[[], None] | None = None  # may raise: the pass stops there

        def encode(self, features: Any) -> Any:
            if self.window_frames is not None:
                features = features[..., : self.window_frames]
            encoded = super().encode(features)
            if self.after_encode is not None:
                self.after_encode()
            return encoded

    return FittedWhisperModel


def _gate_kind() -> str:
    return "stt urgent" if current_urgency() == URGENT else "stt"


_SENTENCE = re.compile(r"[^.!?…]+[.!?…]*")
LOOP_RUN = 3
"""Identical sentences in a row from which a transcript is one sentence said once."""


def without_loops(text: str) -> str:
    """``text`` with each run of ``LOOP_RUN`` or more identical sentences in a row kept
    once, the rest as written. Whisper loops on a sub-second clip ("Done. Done. Done.
    Done."), to its token limit; a person who says a word twice keeps both."""
    spans = [m for m in _SENTENCE.finditer(text) if m.group().strip()]
    keys = [re.sub(r"[^\w']+", " ", m.group().lower()).strip() for m in spans]
    out: list[str] = []
    i = copied = 0
    while i < len(spans):
        j = i
        while j + 1 < len(spans) and keys[j + 1] == keys[i]:
            j += 1
        if j - i + 1 >= LOOP_RUN:
            out.append(text[copied : spans[i].end()])
            copied = spans[j].end()
        i = j + 1
    out.append(text[copied:])
    return "".join(out).strip()


class WhisperSTT:
    """faster-whisper, greedy decoding without timestamps (fast and stable for short turns);
    a loop of one sentence is kept once (:func:`without_loops`).

    The encoder sees the utterance plus 1 s, at least ``encoder_window_s`` (10 s), not
    Whisper's whole 30 s window of mostly padding: a pass over a short question takes a
    quarter of the time with the same words (``benchmarks/stt_window.py``). Shorter
    windows make Whisper loop on short clips, hence the floor; ``None`` keeps 30 s.

    Any number of threads may call :meth:`transcribe` at once (``concurrent_callers``): it
    runs them one at a time, a pass that may end a turn (:data:`edge.runtime.URGENT`)
    first. Each caller waits at the compute gate, where a partial pass gives way to it;
    a partial pass under way gives way after its encoder (:meth:`_give_way`).
    """

    sample_rate = STT_RATE
    concurrent_callers = 16

    def __init__(
        self,
        model_path: Path | str | None = None,
        *,
        language: str | None = "en",
        compute_type: str = "int8",
        cpu_threads: int = 0,
        beam_size: int = 1,
        encoder_window_s: float | None = 10.0,
        device: str = "cpu",
    ) -> None:
        if encoder_window_s is not None and not 5 <= encoder_window_s <= 30:
            raise ValueError("encoder_window_s is between 5 and 30 seconds (or None)")
        self._model_path = Path(model_path) if model_path is not None else None
        self.encoder_window_s = encoder_window_s
        self.language = language
        self.compute_type = compute_type
        self.device = device  # "cuda" where CTranslate2 sees a GPU (edge.device's placement)
        self.cpu_threads = cpu_threads
        self.beam_size = beam_size
        self._model = None
        self._lock = OrderedLock()  # a final pass before others' partial passes

    @property
    def model_path(self) -> Path:
        if self._model_path is None:
            from edge.catalogue import Catalogue

            self._model_path = Catalogue.load().default("stt").locate()
        return self._model_path

    def load(self) -> None:
        """Load the model now (otherwise the first transcription does)."""
        with self._lock.hold():
            self._load_locked()

    def _load_locked(self) -> None:
        if self._model is not None:
            return
        path = self.model_path
        if not (path / "model.bin").exists():
            raise SpeechToTextError(f"{path} is not a CTranslate2 Whisper model (no model.bin)")
        try:
            import faster_whisper  # noqa: F401
        except ImportError as exc:  # pragma: no cover - dependency of the package
            raise SpeechToTextError("faster-whisper is not installed") from exc
        model = _fitted_model_class()(
            str(path),
            device=self.device,
            compute_type=self.compute_type,
            cpu_threads=self.cpu_threads,
            local_files_only=True,
        )
        model.after_encode = self._give_way
        self._model = model

    def _give_way(self) -> None:
        """Between the encoder and the decoder of a pass that gives way (a partial,
        :func:`edge.runtime.yielding`): stop it when a pass that may end a turn, or other
        urgent work, waits for the model (:class:`YieldedToUrgentError`: not run)."""
        if gives_way() and (COMPUTE_GATE.urgent_waiting() or self._lock.urgent_waiting()):
            raise YieldedToUrgentError("urgent work waits for the model: stopped after encoding")

    def transcribe(self, audio: np.ndarray) -> Recognition:
        """Transcribe 16 kHz mono float32 audio; empty text when nothing was said."""
        return self._transcribe(audio, self.encoder_window_s)

    def transcribe_full(self, audio: np.ndarray) -> Recognition:
        """The same with Whisper's whole 30 s window (see :class:`FullWindowSpeechToText`)."""
        return self._transcribe(audio, None)

    def _transcribe(self, audio: np.ndarray, window_s: float | None) -> Recognition:
        audio = np.asarray(audio, dtype=np.float32)
        if audio.ndim != 1:
            raise ValueError("transcribe takes mono audio (a 1-D array)")
        duration = len(audio) / self.sample_rate
        if len(audio) < self.sample_rate // 10:
            return Recognition("", duration, 0.0)
        # the gate first (not beside a llama.cpp step): a pass never holds the recognizer
        # while it waits for the gate, so a pass that ends a turn waits only for the step
        # in progress, not for another's pass waiting behind model steps
        with COMPUTE_GATE.hold(_gate_kind()), self._lock.hold():
            self._load_locked()
            model: Any = self._model
            model.window_frames = encoder_frames(len(audio), window_s)
            try:
                started = time.perf_counter()
                segments, _ = model.transcribe(
                    audio,
                    language=self.language,
                    beam_size=self.beam_size,
                    temperature=0.0,
                    condition_on_previous_text=False,
                    without_timestamps=True,
                    vad_filter=False,
                    max_new_tokens=min(400, int(duration * TOKENS_PER_S) + 20),
                )
                text = " ".join(segment.text.strip() for segment in segments).strip()
                text = without_loops(text)
            finally:
                model.window_frames = None
            elapsed = time.perf_counter() - started
        return Recognition(text, duration, elapsed)
