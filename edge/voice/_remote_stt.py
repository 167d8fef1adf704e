"""Speech to text on a Wyoming ``asr`` server (``wyoming-faster-whisper``, a GPU build, or
any other), in place of the in-process Whisper.

VAD, endpointing and the listener's passes stay on the device. Each utterance is streamed
to the server as it is spoken (:meth:`WyomingSTT.open_stream`, one connection per
utterance, ``edge.voice._remote_stream``): its final transcript costs only the server's
decode, and a server that streams transcript chunks before ``audio-stop`` gives the
partial transcripts. The other passes the listener makes over the utterance so far (a
partial while the participant speaks, where the server does not stream them; the
speculative pass during the end-of-utterance pause; the final pass when the stream
failed) are each one Wyoming request:
``transcribe``, ``audio-start``, the audio as ``audio-chunk`` events, ``audio-stop``, and
the server's ``transcript`` (or its ``transcript-start/chunk/stop`` stream, joined). So
partial transcripts and speculation work against any server; the listener's own rule
(a pass must be shorter than the partial interval and the end silence) decides whether
partials are affordable, from the measured cost of the remote passes, as it does for the
local model. The server's ``info`` is read at :meth:`WyomingSTT.load` and checked: it must
offer ``asr`` in the service's language.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from wyoming.asr import Transcribe, Transcript, TranscriptChunk, TranscriptStop
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.info import AsrProgram, Info

from ._audio import STT_RATE, float_to_pcm16
from ._remote import RemoteBackend, RemoteSpeechError, RemoteSpeechMismatch, read_or_fail
from ._remote_stream import WyomingSpeechStream
from ._stt import Recognition, without_loops

log = logging.getLogger(__name__)

CHUNK_SAMPLES = STT_RATE // 2  # 0.5 s of audio per audio-chunk event
_MAX_EVENTS = 10_000  # a server streaming more events than this for one pass is broken


def language_matches(offered: list[str], wanted: str) -> bool:
    """``en`` matches ``en``, ``en_US`` and ``en-GB``; an empty list offers everything."""
    if not offered:
        return True
    wanted = wanted.lower()
    return any(o.lower().replace("-", "_").split("_")[0] == wanted for o in offered)


def pick_asr(info: Info, language: str) -> tuple[AsrProgram, str] | None:
    """The first installed ``asr`` program with a model in ``language``: (program, model)."""
    for program in info.asr:
        if not program.installed:
            continue
        for model in program.models:
            if model.installed and language_matches(model.languages, language):
                return program, model.name
    return None


class WyomingSTT:
    """A :class:`~edge.voice.SpeechToText` on a Wyoming ``asr`` server; see the module
    docstring. Blocking like the local model: the pipeline calls it in worker threads."""

    sample_rate = STT_RATE

    def __init__(self, backend: RemoteBackend, *, language: str = "en") -> None:
        self.backend = backend
        self.language = language
        self.program: str | None = None
        self.model: str | None = None
        self.streams_transcripts = False  # as its info says
        self.partials_streamed = False  # a stream gave transcript chunks before its end

    @property
    def description(self) -> str:
        what = f"{self.program}/{self.model}" if self.program else "not checked yet"
        return f"{what} @ {self.backend.url}"

    def load(self) -> None:
        """Read the server's ``info`` and check it offers ``asr`` in our language
        (:class:`RemoteSpeechMismatch` when not). A server that is down now is checked
        at its first answer instead: the service starts without it."""
        try:
            self._check()
        except RemoteSpeechError as exc:
            log.warning("%s; checked once it answers", exc)

    def _check(self) -> None:
        info = self.backend.describe()
        found = pick_asr(info, self.language)
        if found is None:
            offered = [
                f"{p.name} ({', '.join(lang for m in p.models for lang in m.languages)})"
                for p in info.asr
            ]
            raise RemoteSpeechMismatch(
                f"{self.backend.name} offers no speech recognition in {self.language!r}: "
                f"asr programs {offered or 'none'}"
            )
        program, self.model = found
        self.program = program.name
        self.streams_transcripts = program.supports_transcript_streaming

    def open_stream(self, on_partial: Callable[[str], None]) -> WyomingSpeechStream:
        """A stream for one utterance, sent as it is spoken (the listener runs it)."""

        def partial(text: str) -> None:
            self.partials_streamed = True
            on_partial(text)

        return WyomingSpeechStream(self.backend, self.model, self.language, partial)

    def transcribe(self, audio: np.ndarray) -> Recognition:
        """Transcribe 16 kHz mono float32 audio on the server (one request)."""
        audio = np.asarray(audio, dtype=np.float32)
        if audio.ndim != 1:
            raise ValueError("transcribe takes mono audio (a 1-D array)")
        duration = len(audio) / self.sample_rate
        if len(audio) < self.sample_rate // 10:
            return Recognition("", duration, 0.0)
        if self.program is None:
            self._check()
        pcm = float_to_pcm16(audio)
        started = time.perf_counter()
        text = self.backend.call(lambda client: self._request(client, pcm))
        return Recognition(without_loops(text), duration, time.perf_counter() - started)

    async def _request(self, client: AsyncTcpClient, pcm: bytes) -> str:
        fmt: dict[str, Any] = {"rate": STT_RATE, "width": 2, "channels": 1}
        await client.write_event(Transcribe(name=self.model, language=self.language).event())
        await client.write_event(AudioStart(**fmt).event())
        step = CHUNK_SAMPLES * 2
        for offset in range(0, len(pcm), step):
            chunk = AudioChunk(audio=pcm[offset : offset + step], **fmt)
            await client.write_event(chunk.event())
        await client.write_event(AudioStop().event())
        return await _read_transcript(client)


async def _read_transcript(client: AsyncTcpClient) -> str:
    """The ``transcript`` event's text; a stream's chunks joined when the server closes
    after ``transcript-stop`` without the whole transcript."""
    chunks: list[str] = []
    stopped = False
    for _ in range(_MAX_EVENTS):
        try:
            event = await read_or_fail(client)
        except ConnectionError:
            if stopped:
                return "".join(chunks).strip()
            raise
        if Transcript.is_type(event.type):
            return str(Transcript.from_event(event).text).strip()
        if TranscriptChunk.is_type(event.type):
            chunks.append(str(TranscriptChunk.from_event(event).text))
        elif TranscriptStop.is_type(event.type):
            stopped = True
    raise ValueError(f"more than {_MAX_EVENTS} events without a transcript")
