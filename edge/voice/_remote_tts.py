"""Text to speech on a Wyoming ``tts`` server (``wyoming-piper`` or any other), in place
of the in-process Piper voice.

The speaker keeps its sentence streaming and barge-in: it asks for one sentence at a time,
a few sentences ahead of the one playing, so a reply's first sentence is spoken while the
model still writes the next, and an interrupted reply asks for nothing more. Where the
server's ``info`` advertises streaming (``supports_synthesize_streaming``, as
``wyoming-piper`` does), a reply is one connection (:meth:`WyomingTTS.synthesize_in`):
``synthesize-start``, then each sentence as a ``synthesize-chunk`` as it comes (ended by a
blank line, which the server's sentence splitter takes as a boundary, so it speaks the
sentence at once instead of waiting for the next one), its audio read back
(``audio-start``, ``audio-chunk``..., ``audio-stop``) before the next is sent, and
``synthesize-stop`` once the reply is spoken (:meth:`WyomingTTS.end_reply`). An
interrupted reply's connection is closed. A server without streaming gets one
``synthesize`` per sentence, each over its own connection. :meth:`WyomingTTS.load`
reads the server's ``info`` (the voice must be offered, in the service's language) and
synthesizes one short probe to learn the voice's sample rate, which must be one the
output path takes (8-48 kHz, 16-bit).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque

import anyio
import numpy as np
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.info import Info, TtsVoice
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeVoice,
)

from ._remote import (
    RemoteBackend,
    RemoteSpeechError,
    RemoteSpeechMismatch,
    _cause,
    _run,
    read_or_fail,
)
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
        self._replies: dict[str, _Reply] = {}  # reply (request id) -> its open stream
        self._interrupted: deque[str] = deque(maxlen=64)  # replies that ask for nothing more
        self.replies_streamed = 0  # connections opened for streamed replies

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

    def synthesize_in(self, reply: str, text: str) -> Synthesis:
        """Speak ``text``, the next sentence of ``reply`` (a request id): over the reply's
        stream where the server streams synthesis, else as :meth:`synthesize`.
        :class:`ReplyInterrupted` when the reply was ended (:meth:`end_reply`)."""
        clean = speakable(text)
        if not clean:
            raise NothingToSpeakError(f"nothing speakable in {text!r}")
        if self._rate is None:
            self._check()
        if not self.streams_synthesis:
            return self._request(clean)
        with self._lock:
            if reply in self._interrupted:
                raise ReplyInterrupted(f"reply {reply} was interrupted")
            stream = self._replies.get(reply)
            if stream is None:
                stream = self._replies[reply] = _Reply(reply)
        self.backend.check_backoff()
        self.backend.requests += 1
        started = time.perf_counter()
        try:
            audio, rate = _run(lambda: self._stream_sentence(stream, clean))
        except ReplyInterrupted:
            raise
        except Exception as exc:
            self._forget(stream)
            cause = _cause(exc, self.backend.timeout_s)
            self.backend.record_failure(cause)
            raise RemoteSpeechError(f"{self.backend.name} failed: {cause}") from exc
        elapsed = time.perf_counter() - started
        self.backend.record_success(elapsed)
        return Synthesis(audio, rate, elapsed)

    def end_reply(self, reply: str, *, interrupted: bool = False) -> None:
        """``reply`` is done (``synthesize-stop``) or ``interrupted`` (the connection is
        closed, nothing more is asked). Called on the event loop; never blocks."""
        with self._lock:
            stream = self._replies.pop(reply, None)
            if interrupted and reply not in self._interrupted:
                self._interrupted.append(reply)
        if stream is not None:
            stream.end(interrupted)

    def _forget(self, stream: _Reply) -> None:
        with self._lock:
            if self._replies.get(stream.reply) is stream:
                del self._replies[stream.reply]

    async def _stream_sentence(self, stream: _Reply, text: str) -> tuple[np.ndarray, int]:
        if stream.ended:
            raise ReplyInterrupted(f"reply {stream.reply} was interrupted")
        stream.busy = True
        try:
            with anyio.fail_after(self.backend.timeout_s):
                if stream.client is None:
                    stream.client = AsyncTcpClient(str(self.backend.host), self.backend.port)
                    await stream.client.connect()
                    self.replies_streamed += 1
                    voice = SynthesizeVoice(name=self.voice) if self.voice else None
                    await stream.client.write_event(SynthesizeStart(voice=voice).event())
                await stream.client.write_event(SynthesizeChunk(text=text + "\n\n").event())
                return _samples(*await _read_audio(stream.client))
        except BaseException:
            stream.ended = stream.interrupted = True  # a broken stream is not used again
            raise
        finally:
            stream.busy = False
            if stream.ended:
                await stream.close()

    def _request(self, text: str) -> Synthesis:
        started = time.perf_counter()
        voice = SynthesizeVoice(name=self.voice) if self.voice else None
        event = Synthesize(text=text, voice=voice).event()

        async def ask(client: AsyncTcpClient) -> tuple[np.ndarray, int]:
            await client.write_event(event)
            return _samples(*await _read_audio(client))

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


def _samples(pcm: bytes, rate: int, channels: int) -> tuple[np.ndarray, int]:
    """PCM16 audio as mono float32 samples (the first channel) and its rate."""
    if len(pcm) % (2 * channels):
        raise ValueError(f"{len(pcm)} bytes of audio are not whole 16-bit frames")
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    return samples[::channels], rate


class ReplyInterrupted(NothingToSpeakError):
    """The reply was interrupted: its stream asks for nothing more."""


_CLOSING: set[asyncio.Task[None]] = set()  # streams being closed (a reference each)


class _Reply:
    """One reply's connection to a streaming server (see the module docstring)."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.client: AsyncTcpClient | None = None
        self.busy = False  # a sentence is on its way; it closes the stream when ended
        self.ended = False
        self.interrupted = False

    def end(self, interrupted: bool) -> None:
        """On the event loop: end the stream now, or after the sentence on its way."""
        self.ended = True
        self.interrupted = interrupted
        if not self.busy and self.client is not None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # not on the event loop: the connection goes with the object
                return
            task = loop.create_task(self.close())
            _CLOSING.add(task)
            task.add_done_callback(_CLOSING.discard)

    async def close(self) -> None:
        """``synthesize-stop`` (a reply spoken to its end), then the connection closes."""
        client, self.client = self.client, None
        if client is None:
            return
        try:
            if not self.interrupted:
                with anyio.move_on_after(2.0):
                    await client.write_event(SynthesizeStop().event())
                    for _ in range(_MAX_EVENTS):
                        event = await client.read_event()
                        if event is None or SynthesizeStopped.is_type(event.type):
                            break
        except (OSError, ConnectionError):
            pass  # the server went: nothing to stop
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(OSError):
                await client.disconnect()
