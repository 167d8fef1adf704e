"""Speculative recognition for Wyoming ``asr``.

Home Assistant streams the microphone until its own VAD has heard a stretch of silence
(0.7 s by default), then sends ``audio-stop``; only then does a plain server start
transcribing. This one watches the same audio with the service's VAD, and once a pause has
lasted ``after_s`` it starts a recognition pass over the recording so far (in the server's
background tasks) while the client waits out its silence. At ``audio-stop``, when no
speech came after that pause, the pass's text is the transcript: ready, or nearly.
When speech resumed, the pass is not used (a later pause starts a new one).
"""

from __future__ import annotations

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

    def start(self, stt: SpeechToText, spawn: Callable[..., None]) -> SpeculativeAsr:
        return SpeculativeAsr(
            stt, self.vad_factory(), spawn, threshold=self.threshold, after_s=self.after_s
        )


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
    ) -> None:
        self.stt = stt
        self.vad = vad
        self.spawn = spawn
        self.threshold = threshold
        self.after = int(after_s * STT_RATE)
        self._windows = 0
        self._last_voice: int | None = None  # sample where the last voiced window ended
        self._pass: _Pass | None = None
        self.started = 0  # passes started (for tests and logs)

    def feed(self, samples: np.ndarray, recording: list[np.ndarray]) -> None:
        """``samples`` were just appended to ``recording``."""
        window = int(self.vad.window)
        for p in self.vad.process(samples):
            self._windows += 1
            if p >= self.threshold:
                self._last_voice = self._windows * window
        last = self._last_voice
        if last is None or self._windows * window - last < self.after:
            return
        if self._pass is not None and self._pass.upto >= last:
            return  # this pause already has its pass
        audio = np.concatenate(recording)
        self._pass = _Pass(len(audio))
        self.started += 1
        self.spawn(self._run, self._pass, audio)

    async def _run(self, job: _Pass, audio: np.ndarray) -> None:
        try:
            result = await anyio.to_thread.run_sync(self.stt.transcribe, audio)
            job.text = result.text.strip()
        except Exception:
            job.text = None  # the pass at audio-stop reports the failure
        finally:
            job.done.set()

    async def take(self) -> str | None:
        """The speculative text when it covers all the speech, else None."""
        job, last = self._pass, self._last_voice
        if job is None or last is None or last > job.upto:
            return None
        await job.done.wait()
        return job.text
