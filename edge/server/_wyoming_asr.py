"""Speculative recognition for Wyoming ``asr``.

Home Assistant streams the microphone until its own VAD has heard a stretch of silence
(0.7 s by default), then sends ``audio-stop``; only then does a plain server start
transcribing. This one watches the same audio with the service's VAD, and once a pause has
lasted ``after_s`` it starts a recognition pass over the recording so far (in the server's
background tasks) while the client waits out its silence. At ``audio-stop``, when no
speech came after that pause, the pass's text is the transcript: ready, or nearly.
When speech resumed, the pass is not used (a later pause starts a new one). One pass runs
at a time per recording: a pause that comes while one runs gets its pass when it is done.
A recording longer than Whisper's 30 s window gets no more passes (each would transcribe
all of it again: seconds of CPU and ~100 MB of the recognizer's working memory).

The recording itself is a :class:`Recording`: 16 kHz mono float32 in one buffer of the
length cap, mapped from the system, so that only what was received is resident, a pass
reads it without a copy, and closing gives the memory back to the system.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import numpy as np

from edge.voice import STT_RATE, SpeechToText


@dataclass(frozen=True)
class AsrSpeculation:
    """How Wyoming ``asr`` speculates: the VAD to listen with and the pause that starts a pass."""

    vad_factory: Callable[[], Any]
    threshold: float = 0.5
    after_s: float = 0.15

    def start(
        self,
        stt: SpeechToText,
        spawn: Callable[..., None],
        on_text: Callable[[str], None] | None = None,
    ) -> SpeculativeAsr:
        return SpeculativeAsr(
            stt,
            self.vad_factory(),
            spawn,
            threshold=self.threshold,
            after_s=self.after_s,
            on_text=on_text,
        )


SPECULATE_UP_TO_S = 30.0
"""Passes stop once the recording is longer than this."""


class RecordingFullError(ValueError):
    """The recording reached its length cap."""


class Recording:
    """Up to ``max_samples`` of 16 kHz mono float32 in one anonymous memory map: pages
    become resident as samples are written (at most ``4 * max_samples`` bytes) and go back
    to the system when the last view of it is dropped."""

    def __init__(self, max_samples: int) -> None:
        self.max_samples = max_samples
        self._buffer = np.frombuffer(mmap.mmap(-1, max(4, 4 * max_samples)), np.float32)
        self.length = 0

    def append(self, samples: np.ndarray) -> None:
        end = self.length + len(samples)
        if end > self.max_samples:
            raise RecordingFullError(f"recording longer than {self.max_samples} samples")
        self._buffer[self.length : end] = samples
        self.length = end

    def audio(self) -> np.ndarray:
        """The samples so far (a view, no copy; later appends do not change it)."""
        return self._buffer[: self.length]


@dataclass
class _Pass:
    upto: int  # samples it covers
    done: anyio.Event = field(default_factory=anyio.Event)
    text: str | None = None


class SpeculativeAsr:
    """One recording's speculative pass: :meth:`feed` each chunk (16 kHz mono float32),
    :meth:`take` at ``audio-stop``."""

    def __init__(
        self,
        stt: SpeechToText,
        vad: Any,
        spawn: Callable[..., None],
        *,
        threshold: float = 0.5,
        after_s: float = 0.15,
        on_text: Callable[[str], None] | None = None,
    ) -> None:
        self.stt = stt
        self.on_text = on_text  # told a pause's words (the answer may start on them), "" retracts
        self.vad = vad
        self.spawn = spawn
        self.threshold = threshold
        self.after = int(after_s * STT_RATE)
        self._windows = 0
        self._last_voice: int | None = None  # sample where the last voiced window ended
        self._pass: _Pass | None = None
        self._offered: int | None = None  # the recording up to which words were offered
        self.started = 0  # passes started (for tests and logs)

    def feed(self, samples: np.ndarray, recording: Recording) -> None:
        """``samples`` were just appended to ``recording``."""
        window = int(self.vad.window)
        for p in self.vad.process(samples):
            self._windows += 1
            if p >= self.threshold:
                self._last_voice = self._windows * window
        self._retract_if_resumed()
        last = self._last_voice
        if last is None or self._windows * window - last < self.after:
            return
        if recording.length > SPECULATE_UP_TO_S * STT_RATE:
            return  # the pass at audio-stop transcribes it once
        if self._pass is not None and (self._pass.upto >= last or not self._pass.done.is_set()):
            return  # this pause already has its pass, or one runs (a later chunk retries)
        audio = recording.audio()
        self._pass = _Pass(len(audio))
        self.started += 1
        self.spawn(self._run, self._pass, audio)

    def _retract_if_resumed(self) -> None:
        """Speech after the pause whose words were offered: they are retracted ("")."""
        offered, last = self._offered, self._last_voice
        if offered is not None and last is not None and last > offered:
            self._offered = None
            if self.on_text is not None:
                self.on_text("")

    async def _run(self, job: _Pass, audio: np.ndarray) -> None:
        try:
            result = await anyio.to_thread.run_sync(self.stt.transcribe, audio)
            job.text = result.text.strip()
        except Exception:
            job.text = None  # the pass at audio-stop reports the failure
        finally:
            job.done.set()
        last = self._last_voice
        if job.text and self.on_text is not None and last is not None and last <= job.upto:
            self._offered = job.upto
            self.on_text(job.text)  # no speech came after the pause it transcribed (yet)

    async def take(self) -> str | None:
        """The speculative text when it covers all the speech, else None."""
        job, last = self._pass, self._last_voice
        if job is None or last is None or last > job.upto:
            return None
        await job.done.wait()
        return job.text
