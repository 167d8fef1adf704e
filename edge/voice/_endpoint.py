"""Endpointing: turn per-window speech probabilities into utterances.

:class:`Endpointer` is pure logic over 16 kHz float audio and one probability per
window (from :class:`~edge.voice.SileroVAD`, or a script in tests). It keeps a pre-roll
ring of recent audio while idle and the utterance's audio while speaking, and reports:

* :class:`SpeechStarted` once a run of speech lasts ``min_speech_ms`` (confirmed speech),
  or when a shorter run of at least ``min_word_ms`` ends (a short word: a
  :class:`SpeechPaused` follows at once);
* :class:`SpeechPaused` at the first silent window after speech (the utterance may be
  over: a good moment to start transcribing), :class:`SpeechResumed` if speech returns;
* :class:`UtteranceEnded` after ``end_silence_ms`` of silence (adapted by :meth:`adapt`
  within the configured bounds), at the length cap, or at once on :meth:`finish`
  (push-to-talk release).

Sample positions count samples of the whole stream since the endpointer was created.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._config import VadConfig


@dataclass(frozen=True)
class SpeechStarted:
    start_sample: int  # first sample of the utterance's speech (pre-roll comes before)


@dataclass(frozen=True)
class SpeechPaused:
    speech_end_sample: int  # end of the last speech window


@dataclass(frozen=True)
class SpeechResumed:
    sample: int


@dataclass(frozen=True)
class UtteranceEnded:
    audio: np.ndarray  # pre-roll + speech + trailing pad, 16 kHz float32
    audio_start_sample: int  # stream position of audio[0]
    start_sample: int  # first speech sample
    speech_end_sample: int  # end of the last speech window
    truncated: bool = False  # cut at max_utterance_s


Event = SpeechStarted | SpeechPaused | SpeechResumed | UtteranceEnded


class Endpointer:
    """Streaming speech/silence state machine; see the module docstring."""

    def __init__(
        self, config: VadConfig | None = None, sample_rate: int = 16_000, window: int = 512
    ) -> None:
        self.config = config or VadConfig()
        self.rate = sample_rate
        self.window = window
        ms = sample_rate / 1000
        self._min_speech = int(self.config.min_speech_ms * ms)
        self._min_word = min(int(self.config.min_word_ms * ms), self._min_speech)
        self._end_silence_default = int(self.config.end_silence_ms * ms)
        self._end_silence = self._end_silence_default
        low, high = self.config.min_end_silence_ms, self.config.max_end_silence_ms
        self._end_silence_bounds = (
            int(low * ms) if low is not None else self._end_silence_default,
            int(high * ms) if high is not None else self._end_silence_default,
        )
        self._pre_roll = int(self.config.pre_roll_ms * ms)
        self._pad = int(self.config.pad_ms * ms)
        self._cap = int(self.config.max_utterance_s * sample_rate)
        self._pending = np.zeros(0, dtype=np.float32)
        self._position = 0  # samples consumed into windows
        self._history: list[np.ndarray] = []  # pre-roll ring while idle
        self._history_len = 0
        self._audio: list[np.ndarray] = []  # utterance audio while candidate/speaking
        self._audio_start = 0
        self._state = "idle"  # idle | candidate | speech
        self._run_start = 0
        self._speech_start = 0
        self._last_voiced_end = 0
        self._paused = False
        self._held_until = -1  # stream position where a push-to-talk hold lapses

    @property
    def speaking(self) -> bool:
        """True between :class:`SpeechStarted` and :class:`UtteranceEnded`."""
        return self._state == "speech"

    @property
    def position(self) -> int:
        return self._position

    @property
    def held(self) -> bool:
        """Whether the client holds the floor: silence does not end the utterance."""
        return self._position < self._held_until

    def hold(self) -> None:
        """Push-to-talk pressed: until :meth:`finish` (its release), a pause of any length
        is part of the utterance. The hold lapses after ``max_utterance_s`` of audio (the
        cap ends a held utterance there as it ends any other)."""
        self._held_until = self._position + self._cap

    def release(self) -> None:
        self._held_until = -1

    @property
    def silence_samples(self) -> int:
        """How long the current pause in speech has lasted (0 unless speaking and paused)."""
        if self._state != "speech" or not self._paused:
            return 0
        return self._position - self._last_voiced_end

    @property
    def pad_samples(self) -> int:
        """Audio kept after the last speech window for the recognizer (``pad_ms``)."""
        return self._pad

    @property
    def last_voiced_end(self) -> int:
        """End of the current utterance's last speech window."""
        return self._last_voiced_end

    @property
    def end_silence_samples(self) -> int:
        """The silence that ends the current utterance, as adapted so far."""
        return self._end_silence

    def adapt(self, complete: bool) -> list[Event]:
        """The words of the current pause form a complete sentence (shortest end silence
        within bounds) or stop mid-phrase (longest); returns the end of the utterance
        when the pause is already that long."""
        if self._state != "speech" or not self._paused or self.held:
            return []
        low, high = self._end_silence_bounds
        self._end_silence = low if complete else high
        if self._position - self._last_voiced_end >= self._end_silence:
            return [self._end(truncated=False)]
        return []

    def finish(self) -> list[Event]:
        """End the current utterance now (push-to-talk release), as if its end silence
        had passed; a run of speech not yet confirmed counts as an utterance too. A hold
        ends here."""
        self.release()
        events: list[Event] = []
        if self._state == "candidate":
            events.append(self._confirm())
        if self._state == "speech":
            if not self._paused:
                self._last_voiced_end = self._position
            events.append(self._end(truncated=False))
        return events

    def utterance_audio(self) -> tuple[np.ndarray, int]:
        """The current utterance's audio so far and its first sample's stream position."""
        if self._state == "idle" or not self._audio:
            return np.zeros(0, dtype=np.float32), self._position
        return np.concatenate(self._audio), self._audio_start

    def feed(self, audio: np.ndarray, probabilities: np.ndarray) -> list[Event]:
        """Consume ``audio`` with one probability per complete window it completes.

        ``audio`` joins the samples left over from earlier calls; the caller's VAD sees
        the same samples, so ``len(probabilities)`` windows are complete now.
        """
        audio = np.concatenate([self._pending, np.asarray(audio, dtype=np.float32)])
        count = len(probabilities)
        if count * self.window > len(audio):
            raise ValueError(
                f"{count} probabilities but only {len(audio)} samples ({self.window} a window)"
            )
        events: list[Event] = []
        for i, prob in enumerate(probabilities):
            frame = audio[i * self.window : (i + 1) * self.window]
            events.extend(self._window(frame, float(prob)))
        self._pending = audio[count * self.window :]
        return events

    def _window(self, frame: np.ndarray, prob: float) -> list[Event]:
        start = self._position
        end = start + len(frame)
        self._position = end
        cfg = self.config
        events: list[Event] = []
        if self._state == "idle":
            if prob >= cfg.threshold:
                self._state = "candidate"
                self._run_start = start
                self._audio = [*self._history, frame]
                self._audio_start = start - self._history_len
                self._last_voiced_end = end
                self._history, self._history_len = [], 0
            else:
                self._remember(frame)
            if self._state == "candidate" and self._min_speech <= end - self._run_start:
                events.append(self._confirm())
            return events
        self._audio.append(frame)
        if self._state == "candidate":
            if prob < cfg.silence_threshold:
                if self._last_voiced_end - self._run_start >= self._min_word:
                    return self._short_word()
                self._back_to_idle()
                return events
            self._last_voiced_end = end
            if end - self._run_start >= self._min_speech:
                events.append(self._confirm())
            return events
        # speaking
        if prob >= cfg.silence_threshold:
            if self._paused and prob >= cfg.threshold:
                self._paused = False
                self._end_silence = self._end_silence_default
                events.append(SpeechResumed(start))
            if not self._paused:
                self._last_voiced_end = end
        elif not self._paused:
            self._paused = True
            events.append(SpeechPaused(self._last_voiced_end))
        if self._paused and end - self._last_voiced_end >= self._end_silence and not self.held:
            events.append(self._end(truncated=False))
        elif end - self._audio_start >= self._cap:
            if not self._paused:
                self._last_voiced_end = end
            events.append(self._end(truncated=True))
            if not self._paused and prob >= cfg.threshold:
                # Still talking: what follows is a new utterance, already confirmed.
                self._state = "speech"
                self._audio, self._audio_start = [], end
                self._speech_start = self._last_voiced_end = end
                events.append(SpeechStarted(end))
        return events

    def _confirm(self) -> SpeechStarted:
        self._state = "speech"
        self._speech_start = self._run_start
        self._paused = False
        self._end_silence = self._end_silence_default
        return SpeechStarted(self._run_start)

    def _short_word(self) -> list[Event]:
        """A run too short to confirm while it lasted has ended: it was a short word."""
        started = self._confirm()
        self._paused = True
        return [started, SpeechPaused(self._last_voiced_end)]

    def _end(self, truncated: bool) -> UtteranceEnded:
        audio = np.concatenate(self._audio) if self._audio else np.zeros(0, dtype=np.float32)
        keep = min(len(audio), self._last_voiced_end + self._pad - self._audio_start)
        event = UtteranceEnded(
            audio=audio[:keep],
            audio_start_sample=self._audio_start,
            start_sample=self._speech_start,
            speech_end_sample=self._last_voiced_end,
            truncated=truncated,
        )
        self._back_to_idle([audio[keep:]] if keep < len(audio) else [])
        return event

    def _back_to_idle(self, keep: list[np.ndarray] | None = None) -> None:
        """Stop tracking an utterance; ``keep`` (default: all its audio) seeds the pre-roll."""
        frames = self._audio if keep is None else keep
        self._state = "idle"
        self._paused = False
        self._end_silence = self._end_silence_default
        self._audio = []
        self._history, self._history_len = [], 0
        for frame in frames:
            self._remember(frame)

    def _remember(self, frame: np.ndarray) -> None:
        if self._pre_roll <= 0:
            return
        self._history.append(frame)
        self._history_len += len(frame)
        while self._history and self._history_len - len(self._history[0]) >= self._pre_roll:
            self._history_len -= len(self._history.pop(0))
