"""Audio and transcript payloads and the topics that carry them.

The participant travels in the message metadata, like every other payload. PCM bytes
serialize to JSON as base64.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from edge.runtime import Topic


class _Payload(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", ser_json_bytes="base64", val_json_bytes="base64"
    )


class AudioInput(_Payload):
    """A chunk of a participant's microphone audio: little-endian PCM16.

    Any rate from 8 kHz to 192 kHz (resampled to 16 kHz for the models); stereo is mixed
    down to mono. ``timestamp_us`` is when the chunk's first sample was captured (Unix
    microseconds), when the client knows; otherwise arrival time stands for it.
    """

    pcm: bytes
    sample_rate: int = 16_000
    sample_width: int = 2
    channels: int = 1
    timestamp_us: int | None = None


class AudioOutput(_Payload):
    """A chunk of synthesized speech for a participant: mono little-endian PCM16.

    One spoken stream per ``(request_id, source)``, like :class:`ResponseOutput`;
    ``sequence`` counts its chunks from 0 and the last has ``final=True`` (its ``pcm`` may
    be empty). ``text`` is the sentence that starts in this chunk, for captions.
    Chunks arrive in playing order, paced at about real time.
    """

    pcm: bytes
    sample_rate: int
    request_id: str | None = None
    source: str = ""
    sequence: int = Field(default=0, ge=0)
    final: bool = False
    text: str = ""


class Transcript(_Payload):
    """What the participant is saying: partials while they speak, then the final text.

    ``utterance`` counts the participant's utterances from 0. A final transcript with
    empty text means the audio held no recognizable words (no query is published).
    ``truncated`` marks an utterance cut at the configured length cap. ``error`` names
    the speech recognition backend that failed on a final transcript's audio (a remote
    server down, stalled or answering garbage): the text is empty, and the utterance is
    lost, not unheard.
    """

    text: str
    utterance: int = Field(ge=0)
    final: bool = False
    truncated: bool = False
    speech_start_us: int | None = None
    error: str | None = None


class Speculation(_Payload):
    """What the participant has probably said, published during the pause that may end
    the utterance (the speculative transcript), so an answer can start before the
    endpoint. ``text`` "" retracts it (speech resumed). Never shown to clients: only the
    final transcript and the query count; an answer started on it is adopted only when
    the query says the same words."""

    text: str
    utterance: int = Field(ge=0)


class EndOfUtterance(_Payload):
    """The participant has finished speaking (push-to-talk released): end the utterance
    now instead of waiting for the end-of-utterance silence."""


class HoldFloor(_Payload):
    """Push-to-talk pressed: the participant holds the floor, so a pause does not end
    their utterance; their :class:`EndOfUtterance` (the release) does, or the utterance
    length cap."""


class SpeechBegan(_Payload):
    """Confirmed speech began in a participant's audio (the voice activity detector's
    start of an utterance, before any transcript): for a client that shows it at once
    (the Realtime API's ``input_audio_buffer.speech_started``)."""


class SpeechFailed(_Payload):
    """A speech backend failed on a reply (a remote voice down, stalled or answering
    garbage): ``message`` names it; the reply's text was delivered, its speech is cut
    short. One per request."""

    backend: str
    message: str
    request_id: str | None = None


AUDIO_INPUT_TOPIC: Topic[AudioInput] = Topic("voice.audio.in", AudioInput)
"""Microphone audio from clients; the voice pipeline consumes it."""

AUDIO_OUTPUT_TOPIC: Topic[AudioOutput] = Topic("voice.audio.out", AudioOutput)
"""Synthesized speech for clients, in playing order."""

TRANSCRIPT_TOPIC: Topic[Transcript] = Topic("voice.transcript", Transcript)
"""Partial and final transcripts, for clients to show."""

SPECULATION_TOPIC: Topic[Speculation] = Topic("voice.speculation", Speculation)
"""Speculative transcripts for answer speculation (in process only, never to clients)."""

END_OF_UTTERANCE_TOPIC: Topic[EndOfUtterance] = Topic("voice.audio.end", EndOfUtterance)
"""Explicit ends of utterances (push-to-talk release) from clients."""

HOLD_FLOOR_TOPIC: Topic[HoldFloor] = Topic("voice.audio.hold", HoldFloor)
"""Push-to-talk presses from clients (the floor is held until the matching release)."""

SPEECH_BEGAN_TOPIC: Topic[SpeechBegan] = Topic("voice.speech.began", SpeechBegan)
"""Each utterance's start of speech, as the listener confirms it."""

SPEECH_FAILED_TOPIC: Topic[SpeechFailed] = Topic("voice.failed", SpeechFailed)
"""A speech backend's failure on a reply, for the participant's client to show."""
