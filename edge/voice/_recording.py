"""A recording whose end the client decides (Wyoming ``asr``: Home Assistant streams the
microphone until its own VAD has heard a stretch of silence, then sends ``audio-stop``),
and the pause recognizer that follows it.

:class:`RecordingPauses` watches the recording with a VAD, and once a pause has lasted
the voice's ``speculative_after_ms`` (from where the endpointer would end the speech) it
starts a pass over the recording as the endpoint would cut it (its ``pad_ms`` after the
speech, what is not received yet as silence) (a :class:`PauseRecognizer`'s,
on the service's shared recognizer) while the client waits out its silence. At the end,
when no speech came after that pause, the pass's text is the transcript: ready, or
nearly. When speech resumed, the pass is not used (a later pause starts a new one). One
pass runs at a time per recording: a pause that comes while one runs gets its pass when
it is done. A recording longer than Whisper's 30 s window gets no more passes (each
would transcribe all of it again: seconds of CPU and ~100 MB of the recognizer's working
memory).

The recording itself is a :class:`Recording`: 16 kHz mono float32 in one buffer of the
length cap, mapped from the system, so that only what was received is resident, a pass
reads it without a copy, and closing gives the memory back to the system.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable
from typing import Any

import numpy as np

from ._audio import STT_RATE, cut_or_pad
from ._config import VoiceConfig
from ._pause import Pass, PauseRecognizer

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


class RecordingPauses:
    """Recognition during one recording's pauses (utterance ``utterance`` of its voice):
    :meth:`feed` each chunk (16 kHz mono float32) as it is appended, :meth:`take` at the
    end. ``on_text`` is told a pause's words (the answer may start on them); "" retracts
    them when speech resumes."""

    def __init__(
        self,
        pauses: PauseRecognizer,
        spawn: Callable[..., Any],
        vad: Any,
        utterance: int,
        *,
        config: VoiceConfig | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> None:
        self.pauses = pauses
        self.spawn = spawn  # starts a pass's task
        self.vad = vad
        self.utterance = utterance
        config = config or VoiceConfig()
        self.threshold = config.vad.threshold
        self.silence_threshold = config.vad.silence_threshold
        self.after = config.speculative_after_ms * STT_RATE // 1000
        self.pad = config.vad.pad_ms * STT_RATE // 1000
        self.on_text = on_text
        self._windows = 0
        self._last_voice: int | None = None  # sample where the last voiced window ended
        self._offered: int | None = None  # the recording up to which words were offered
        self.started = 0  # passes started (for tests and logs)

    def feed(self, samples: np.ndarray, recording: Recording) -> None:
        """``samples`` were just appended to ``recording``."""
        window = int(self.vad.window)
        for p in self.vad.process(samples):
            self._windows += 1
            end = self._windows * window
            # as the endpointer counts it: speech goes on while windows stay above the
            # silence threshold, and resumes after a pause only above the threshold
            going_on = self._last_voice == end - window and p >= self.silence_threshold
            if p >= self.threshold or going_on:
                self._last_voice = end
        self._retract_if_resumed()
        last = self._last_voice
        if last is None or self._windows * window - last < self.after:
            return
        if recording.length > SPECULATE_UP_TO_S * STT_RATE:
            return  # the pass at the end transcribes it once
        if self.pauses.running or self.pauses.reusable(self.utterance, last, 0) is not None:
            return  # this pause already has its pass, or one runs (a later chunk retries)
        heard = recording.audio()
        self.started += 1
        job = Pass(self.utterance, len(heard), "speculative", speculative=True, cut_for=last)
        # cut as the endpoint would: the pad after the speech, what is not received yet as
        # silence (Whisper tiny's reading of a last word changes with what follows it)
        self.pauses.start(self.spawn, job, cut_or_pad(heard, last + self.pad), self._done)

    def _retract_if_resumed(self) -> None:
        """Speech after the pause whose words were offered: they are retracted ("")."""
        offered, last = self._offered, self._last_voice
        if offered is not None and last is not None and last > offered:
            self._offered = None
            if self.on_text is not None:
                self.on_text("")

    def _done(self, job: Pass) -> None:
        text, last = _text(job), self._last_voice
        if text and self.on_text is not None and last is not None and last <= job.covers:
            self._offered = job.covers
            self.on_text(text)  # no speech came after the pause it transcribed (yet)

    async def take(self) -> str | None:
        """The pause's text when its pass covers all the speech and gave one, else None
        (the caller transcribes the recording whole)."""
        last = self._last_voice
        job = self.pauses.reusable(self.utterance, last, 0) if last is not None else None
        if job is None:
            return None
        await job.done.wait()
        return _text(job)


def _text(job: Pass) -> str | None:
    return job.result.text.strip() if job.result is not None else None
