"""Voice settings: endpointing and the pipeline's timing knobs."""

from __future__ import annotations

import logging
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ._sentences import SentenceSplitter

PASS_TIMEOUT_S = 30.0
"""The default bound on one transcription pass's hold of the recognizer."""

log = logging.getLogger(__name__)


class AudioProfile(Protocol):
    """A device profile's audio figures (``edge.device.AudioSettings``)."""

    @property
    def vad_threshold(self) -> float: ...
    @property
    def endpoint_silence_ms(self) -> int: ...
    @property
    def endpoint_min_silence_ms(self) -> int: ...
    @property
    def endpoint_max_silence_ms(self) -> int: ...
    @property
    def max_utterance_s(self) -> float: ...
    @property
    def stt_compute_type(self) -> str: ...
    @property
    def stt_beam_size(self) -> int: ...


class VadConfig(BaseModel):
    """When speech starts and ends.

    A run of windows at or above ``threshold`` lasting ``min_speech_ms`` confirms speech
    (this is what triggers barge-in); ``end_silence_ms`` below ``neg_threshold`` ends the
    utterance. A shorter run that has already ended is confirmed then (and barges in
    then) once it lasted ``min_word_ms``: a quick "Yes." or "Stop." is 0.2-0.3 s of
    speech. ``pre_roll_ms`` of audio before the first speech window and ``pad_ms`` after
    the last are kept for the recognizer. An utterance reaching
    ``max_utterance_s`` is cut there and transcribed, and listening goes on.

    Adaptive endpointing: with ``min_end_silence_ms`` / ``max_end_silence_ms`` set, the
    silence that ends an utterance shortens to the minimum once the words so far form a
    complete question (or exclamation) and lengthens to the maximum when they stop
    mid-phrase (the listener judges the speculative transcript of the pause); a
    statement ending in a period keeps ``end_silence_ms``, which applies until then.
    Unset bounds keep it fixed.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    threshold: float = Field(default=0.5, gt=0.0, lt=1.0)
    neg_threshold: float | None = Field(default=None, gt=0.0, lt=1.0)
    min_speech_ms: int = Field(default=250, ge=0)
    min_word_ms: int = Field(default=128, ge=0)
    end_silence_ms: int = Field(default=600, gt=0)
    pre_roll_ms: int = Field(default=300, ge=0)
    pad_ms: int = Field(default=150, ge=0)
    max_utterance_s: float = Field(default=20.0, gt=1.0)
    min_end_silence_ms: int | None = Field(default=None, gt=0)
    max_end_silence_ms: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _thresholds(self) -> VadConfig:
        if self.neg_threshold is not None and self.neg_threshold > self.threshold:
            raise ValueError("neg_threshold must not exceed threshold")
        if self.min_end_silence_ms is not None and self.min_end_silence_ms > self.end_silence_ms:
            raise ValueError("min_end_silence_ms must not exceed end_silence_ms")
        if self.max_end_silence_ms is not None and self.max_end_silence_ms < self.end_silence_ms:
            raise ValueError("max_end_silence_ms must not be below end_silence_ms")
        return self

    @property
    def silence_threshold(self) -> float:
        if self.neg_threshold is not None:
            return self.neg_threshold
        return max(self.threshold - 0.15, 0.01)


class VoiceConfig(BaseModel):
    """The voice pipeline's settings.

    * ``partial_interval_s``: seconds of new speech between partial transcripts (0: none);
    * ``output_rate``: sample rate of the audio sent out (None: the voice's own rate);
    * ``chunk_ms``: audio per output chunk (barge-in stops output within one chunk);
    * ``playback_speed``: pacing of output chunks relative to real time (1.0 plays in
      real time, 0 sends as fast as synthesized); ``playback_lead_s`` is how far ahead of
      the playing position chunks may be sent;
    * ``tts_lookahead``: sentences synthesized ahead of the one playing;
    * ``first_clause_chars``: a reply's first piece of speech ends at its first clause
      break once it holds this many characters (None: at the first sentence end);
    * ``first_piece_max_chars``: a first sentence longer than this with no clause break is
      cut at a phrase boundary within it (None: not cut), so a long first sentence does not
      hold back the reply's first audio;
    * ``sentence_max_chars``: a sentence longer than this is spoken in parts cut at a
      comma, semicolon or space: one synthesis holds the device's cores for at most
      ~0.25 s on two cores (a 220-character sentence took 0.45 s, while others' first
      words and pieces waited);
    * ``speculative_final``: start the final transcription once a pause has lasted
      ``speculative_after_ms`` instead of at the endpoint (the result is reused when
      speech does not resume; the short wait skips the pauses inside sentences);
      when speech stops, the latest partial transcript is offered as the pause's guess
      at once if it missed at most ``partial_guess_gap_ms`` of the speech (0, the
      default, turns that off: on a 2-core device the guessed answer's model work needs
      the cores of the transcription that confirms it, and waits for it at the compute
      gate, so it gains nothing there; where STT and the LLM run in parallel, ~300 lets
      the answer start a pass earlier);
    * ``full_window_pause_pass``: the pass started in a pause encodes Whisper's whole 30 s
      window (``FullWindowSpeechToText``) instead of a window fitted to the utterance.
      Off by default: with the fitted window the pause pass took ~0.1 s instead of
      0.5-0.6 s on the 2-core benchmark host, so the answer's speculation started in time
      for 11 of 14 hands-free turns instead of 3-5 (benchmarks/README.md); the whole
      window adds Whisper's end mark to more cut-off questions.
    * ``pass_timeout_s``: the longest one transcription pass may hold the recognizer (its
      wait at the compute gate and its model time); a stuck pass is abandoned then, so it
      never keeps every other participant's passes out: its utterance falls back to a
      fresh pass, or its final transcript names the failure.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    vad: VadConfig = VadConfig()
    partial_interval_s: float = Field(default=0.8, ge=0.0)
    output_rate: int | None = Field(default=None, ge=8_000, le=192_000)
    chunk_ms: int = Field(default=100, ge=10, le=2_000)
    playback_speed: float = Field(default=1.0, ge=0.0)
    playback_lead_s: float = Field(default=0.2, ge=0.0)
    tts_lookahead: int = Field(default=2, ge=1)
    first_clause_chars: int | None = Field(default=12, ge=1, le=220)
    first_piece_max_chars: int | None = Field(default=32, ge=13, le=220)
    sentence_max_chars: int = Field(default=120, ge=40, le=400)
    speculative_final: bool = True
    speculative_after_ms: int = Field(default=64, ge=0)
    partial_guess_gap_ms: int = Field(default=0, ge=0)
    full_window_pause_pass: bool = False
    pass_timeout_s: float = Field(default=PASS_TIMEOUT_S, gt=0.0)

    @model_validator(mode="after")
    def _first_piece(self) -> VoiceConfig:
        low, high = self.first_clause_chars or 1, self.first_piece_max_chars
        if high is not None and high <= low:
            raise ValueError("first_piece_max_chars must be above first_clause_chars")
        if low > self.sentence_max_chars:
            raise ValueError("first_clause_chars must not exceed sentence_max_chars")
        return self

    @classmethod
    def for_device(cls, audio: AudioProfile) -> VoiceConfig:
        """The settings a device profile's audio figures give (endpointing bounds kept
        around the profile's end silence)."""
        silence = audio.endpoint_silence_ms
        return cls(
            vad=VadConfig(
                threshold=audio.vad_threshold,
                end_silence_ms=silence,
                min_end_silence_ms=min(audio.endpoint_min_silence_ms, silence),
                max_end_silence_ms=max(audio.endpoint_max_silence_ms, silence),
                max_utterance_s=max(audio.max_utterance_s, 1.5),
            )
        )

    def splitter(self) -> SentenceSplitter:
        """A new splitter for one reply, cut as the speaker cuts it (so speech prepared
        for a reply's first piece is the piece the speaker asks for)."""
        return SentenceSplitter(
            max_chars=self.sentence_max_chars,
            first_min_chars=self.first_clause_chars,
            first_max_chars=self.first_piece_max_chars,
        )


class SttSettings(BaseModel):
    """How Whisper decodes on a device: its profile's compute type and beam, on its
    profile's STT threads (the LLM's unless the profile says; CTranslate2's own default
    is 4 threads)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    compute_type: str = "int8"
    beam_size: int = Field(default=1, ge=1)
    cpu_threads: int = Field(default=0, ge=0)
    device: str = "cpu"

    @classmethod
    def for_device(
        cls, audio: AudioProfile, *, threads: int, cpu_only: bool, cuda: bool = False
    ) -> SttSettings:
        """``cpu_only``: the hardware is known to have no CUDA (float16 falls back to int8);
        ``cuda``: CTranslate2 can run on a GPU here (then float16 on CUDA)."""
        if cuda and not cpu_only:
            return cls(
                compute_type="float16",
                beam_size=audio.stt_beam_size,
                cpu_threads=threads,
                device="cuda",
            )
        compute = audio.stt_compute_type
        if "float16" in compute and cpu_only:
            log.warning("stt_compute_type %s needs CUDA; using int8 on this CPU", compute)
            compute = "int8"
        return cls(compute_type=compute, beam_size=audio.stt_beam_size, cpu_threads=threads)
