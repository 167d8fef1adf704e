"""Text to speech with Piper (piper-tts 1.8), offline.

:class:`PiperTTS` wraps one ``PiperVoice`` (the catalogue's default voice unless given a
path), loaded lazily. ``synthesize`` is blocking: the pipeline calls it in worker
threads, one sentence at a time.

A synthesis is one of the device's heavy model steps (:data:`edge.runtime.COMPUTE_GATE`):
beside a llama.cpp step on two cores, onnxruntime's threads and llama.cpp's OpenMP team
slowed each other (a first clause took 267 ms instead of 137 ms, each generated token
31 ms instead of 11 ms), so on a small device it waits for the step in progress and runs
alone. Its threads spin-wait between operators only while a run lasts (onnxruntime's
``session.force_spinning_stop``): the spin after a run would take the cores from the next
step, and no spin at all made a first piece slower.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from edge.runtime import COMPUTE_GATE, FIRST_SENTENCE, URGENT, OrderedLock, current_urgency

from ._sentences import speakable

if TYPE_CHECKING:
    from piper import PiperVoice

SENTENCE_GAP_S = 0.08  # silence between sentences Piper speaks in one call


class TextToSpeechError(RuntimeError):
    """The voice could not load or failed on the text."""


class NothingToSpeakError(ValueError):
    """The text has no speakable characters (no letters or digits)."""


@dataclass(frozen=True)
class Synthesis:
    """Synthesized speech: mono float32 audio at ``sample_rate`` and what it cost."""

    audio: np.ndarray
    sample_rate: int
    elapsed_s: float

    @property
    def duration_s(self) -> float:
        return len(self.audio) / self.sample_rate

    @property
    def rtf(self) -> float:
        return self.elapsed_s / self.duration_s if len(self.audio) else 0.0


@runtime_checkable
class TextToSpeech(Protocol):
    """What the pipeline needs from a voice."""

    @property
    def sample_rate(self) -> int: ...

    def synthesize(self, text: str) -> Synthesis: ...


@runtime_checkable
class StreamingTextToSpeech(Protocol):
    """A voice that speaks a reply's sentences over one stream (a remote server):
    ``synthesize_in(reply, text)`` for each sentence in order, ``end_reply(reply)`` once
    the reply is synthesized or interrupted (non-blocking)."""

    def synthesize_in(self, reply: str, text: str) -> Synthesis: ...

    def end_reply(self, reply: str, *, interrupted: bool = False) -> None: ...


class PiperTTS:
    """A Piper voice. ``length_scale`` < 1 speaks faster.

    Piper adds random variation to each synthesis (``noise_scale`` to the sound,
    ``noise_w_scale`` to phoneme lengths; the voice's own values by default), so the same
    text gives slightly different audio each time; ``0`` for both makes it repeatable.

    Any number of threads may call :meth:`synthesize` at once (``concurrent_callers``): it
    runs them one at a time, the sentence a listener waits for in silence
    (:data:`edge.runtime.URGENT`) before sentences synthesized ahead for others."""

    concurrent_callers = 64

    def __init__(
        self,
        model_path: Path | str | None = None,
        *,
        config_path: Path | str | None = None,
        length_scale: float | None = None,
        noise_scale: float | None = None,
        noise_w_scale: float | None = None,
    ) -> None:
        self._model_path = Path(model_path) if model_path is not None else None
        self._config_path = Path(config_path) if config_path is not None else None
        self.length_scale = length_scale
        self.noise_scale = noise_scale
        self.noise_w_scale = noise_w_scale
        self._voice: PiperVoice | None = None
        self._lock = OrderedLock()  # a sentence someone waits for before the others'

    @property
    def model_path(self) -> Path:
        if self._model_path is None:
            from edge.catalogue import Catalogue

            self._model_path = Catalogue.load().default("tts").locate()
        return self._model_path

    @property
    def sample_rate(self) -> int:
        if self._voice is None:
            self.load()
        assert self._voice is not None  # load() sets it or raises
        return int(self._voice.config.sample_rate)

    def load(self) -> None:
        with self._lock.hold():
            self._load_locked()

    def _load_locked(self) -> PiperVoice:
        if self._voice is not None:
            return self._voice
        path = self.model_path
        config = self._config_path or path.with_name(path.name + ".json")
        if not path.exists() or not config.exists():
            raise TextToSpeechError(f"Piper voice needs {path} and its config {config}")
        self._voice = _load_voice(path, config)
        return self._voice

    def synthesize(self, text: str) -> Synthesis:
        """Speak ``text``; raises :class:`NothingToSpeakError` when nothing is speakable."""
        clean = speakable(text)
        if not clean:
            raise NothingToSpeakError(f"nothing speakable in {text!r}")
        from piper import SynthesisConfig

        syn = SynthesisConfig(
            length_scale=self.length_scale,
            noise_scale=self.noise_scale,
            noise_w_scale=self.noise_w_scale,
        )
        kind = FIRST_SENTENCE if current_urgency() == URGENT else "tts"
        # the gate first: a sentence never holds the voice while it waits for the gate, so
        # a listener's first sentence waits only for the step in progress
        with COMPUTE_GATE.hold(kind), self._lock.hold():
            voice = self._load_locked()
            started = time.perf_counter()
            parts = [chunk.audio_float_array for chunk in voice.synthesize(clean, syn)]
            elapsed = time.perf_counter() - started
        rate = self.sample_rate
        gap = np.zeros(int(rate * SENTENCE_GAP_S), dtype=np.float32)
        joined: list[np.ndarray] = []
        for part in parts:
            joined.extend((gap, part) if joined else (part,))
        audio = np.concatenate(joined).astype(np.float32) if joined else np.zeros(0, np.float32)
        return Synthesis(audio, rate, elapsed)


def _load_voice(path: Path, config: Path) -> PiperVoice:
    """A ``PiperVoice`` as ``PiperVoice.load`` makes it on the CPU, with an onnxruntime
    session whose threads stop spin-waiting when a run ends (see the module's notes)."""
    try:
        import onnxruntime
        from piper import PiperVoice
        from piper.config import PiperConfig
        from piper.voice import ESPEAK_DATA_DIR
    except ImportError as exc:  # pragma: no cover - dependency of the package
        raise TextToSpeechError("piper-tts is not installed") from exc
    options = onnxruntime.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "1")
    options.add_session_config_entry("session.force_spinning_stop", "1")
    try:
        settings = json.loads(config.read_text(encoding="utf-8"))
        session = onnxruntime.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except (OSError, ValueError, RuntimeError) as exc:
        raise TextToSpeechError(f"Piper voice {path} could not load: {exc}") from exc
    return PiperVoice(
        config=PiperConfig.from_dict(settings),
        session=session,
        espeak_data_dir=Path(ESPEAK_DATA_DIR),
        download_dir=path.parent,
    )
