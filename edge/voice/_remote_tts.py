"""Text to speech on a Wyoming ``tts`` server (``wyoming-piper`` or any other), in place
of the in-process Piper voice.

The speaker keeps its sentence streaming and barge-in: it asks for one sentence at a time
(``synthesize`` → ``audio-start``, ``audio-chunk``..., ``audio-stop``), a few sentences
ahead of the one playing, so a reply's first sentence is spoken while the model still
writes the next, and an interrupted reply asks for nothing more. :meth:`WyomingTTS.load`
reads the server's ``info`` (the voice must be offered, in the service's language) and
synthesizes one short probe to learn the voice's sample rate, which must be one the
output path takes (8-48 kHz, 16-bit).
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.info import Info, TtsVoice
from wyoming.tts import Synthesize, SynthesizeVoice

from ._remote import RemoteBackend, RemoteSpeechError, RemoteSpeechMismatch, read_or_fail
from ._remote_stt import language_matches
from ._sentences import speakable
from ._tts import NothingToSpeakError, Synthesis

log = logging.getLogger(__name__)

PROBE_TEXT = "Ready."
ASSUMED_RATE = 22_050
"""The sample rate announced while the server has not answered yet (Piper's usual one);
each synthesis carries its own rate, and the speaker converts it."""
RATES = (8_000, 48_000)
_MAX_EVENTS = 100_000


def pick_voice(info: Info, name: str | None, language: str) -> tuple[TtsVoice, bool] | None:
    """The voice named ``name`` (any language), else the first installed one speaking
    ``language``: (voice, whether its program streams synthesis). Without a name the
    server's default voice speaks; this only checks the language is offered."""
    for program in info.tts:
        for voice in program.voices:
            if name is not None and voice.name != name:
                continue
            speaks = voice.installed and language_matches(voice.languages, language)
            if name is None and not speaks:
                continue
            return voice, program.supports_synthesize_streaming
    return None


class WyomingTTS:
    """A :class:`~edge.voice.TextToSpeech` on a Wyoming ``tts`` server; see the module
    docstring. Blocking like the local voice: the pipeline calls it in worker threads."""

    def __init__(
        self, backend: RemoteBackend, *, voice: str | None = None, language: str = "en"
    ) -> None:
        self.backend = backend
        self.voice = voice
        self.language = language
        self.streams_synthesis = False
        self.voice_checked = "not checked yet"
        self._rate: int | None = None
        self._lock = threading.Lock()

    @property
    def description(self) -> str:
        return f"{self.voice or self.voice_checked} @ {self.backend.url}"

    @property
    def sample_rate(self) -> int:
        return self._rate or ASSUMED_RATE

    def load(self) -> None:
        """Check the server's ``info`` and learn the voice's sample rate (a probe);
        :class:`RemoteSpeechMismatch` when it does not fit. A server that is down now is
        checked at its first answer instead: the service starts without it."""
        try:
            self._check()
        except RemoteSpeechError as exc:
            log.warning("%s; checked once it answers", exc)

    def _check(self) -> None:
        with self._lock:
            if self._rate is not None:
                return
            info = self.backend.describe()
            found = pick_voice(info, self.voice, self.language)
            if found is None:
                offered = [
                    f"{v.name} ({', '.join(v.languages)})" for p in info.tts for v in p.voices
                ]
                wanted = repr(self.voice) if self.voice else f"a voice in {self.language!r}"
                raise RemoteSpeechMismatch(
                    f"{self.backend.name} offers no {wanted}: voices {offered or 'none'}"
                )
            _, self.streams_synthesis = found
            if self.voice is None:  # the server's default voice (wyoming-piper --voice)
                self.voice_checked = f"server default ({self.language})"
            probe = self._request(PROBE_TEXT)
            if not RATES[0] <= probe.sample_rate <= RATES[1]:
                raise RemoteSpeechMismatch(
                    f"{self.backend.name} speaks at {probe.sample_rate} Hz; "
                    f"the service takes {RATES[0]}-{RATES[1]} Hz"
                )
            self._rate = probe.sample_rate

    def synthesize(self, text: str) -> Synthesis:
        """Speak ``text`` on the server; :class:`NothingToSpeakError` when nothing is
        speakable."""
        clean = speakable(text)
        if not clean:
            raise NothingToSpeakError(f"nothing speakable in {text!r}")
        if self._rate is None:
            self._check()
        return self._request(clean)

    def _request(self, text: str) -> Synthesis:
        started = time.perf_counter()
        voice = SynthesizeVoice(name=self.voice) if self.voice else None
        event = Synthesize(text=text, voice=voice).event()

        async def ask(client: AsyncTcpClient) -> tuple[np.ndarray, int]:
            await client.write_event(event)
            pcm, rate, channels = await _read_audio(client)
            if len(pcm) % (2 * channels):
                raise ValueError(f"{len(pcm)} bytes of audio are not whole 16-bit frames")
            samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
            return samples[::channels], rate

        audio, rate = self.backend.call(ask)
        return Synthesis(audio, rate, time.perf_counter() - started)


async def _read_audio(client: AsyncTcpClient) -> tuple[bytes, int, int]:
    """(PCM16 audio, rate, channels) from ``audio-start``, ``audio-chunk``..., ``audio-stop``."""
    start: AudioStart | None = None
    parts: list[bytes] = []
    for _ in range(_MAX_EVENTS):
        event = await read_or_fail(client)
        if AudioStart.is_type(event.type):
            start = AudioStart.from_event(event)
            if start.width != 2:
                raise ValueError(f"audio of {start.width}-byte samples (16-bit expected)")
        elif AudioChunk.is_type(event.type):
            if start is None:
                raise ValueError("audio-chunk before audio-start")
            parts.append(AudioChunk.from_event(event).audio)
        elif AudioStop.is_type(event.type):
            if start is None:
                raise ValueError("audio-stop before audio-start")
            return b"".join(parts), int(start.rate), max(1, int(start.channels))
    raise ValueError(f"more than {_MAX_EVENTS} events without audio-stop")
