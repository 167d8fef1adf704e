"""An utterance streamed to a Wyoming ``asr`` server as it is spoken.

:class:`WyomingSpeechStream` is one utterance over one connection: opened when confirmed
speech starts (``transcribe``, ``audio-start``, then the pre-roll and each chunk as the
listener receives it), ``audio-stop`` at the endpoint, so the final transcript costs only
the server's decode, not the upload. Transcript chunks a server streams before
``audio-stop`` (``transcript-start/chunk``) are the utterance's partial transcripts.

A stream that fails (the connection drops, the server errs or stalls) raises from
:meth:`WyomingSpeechStream.finish`; the listener then transcribes the whole utterance in
one request, so nothing said is lost. A stream's failure is logged, not counted against
the backend's health: the request after it decides that. :meth:`cancel` closes a stream
whose utterance needs no transcript from it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

import anyio
import numpy as np
from wyoming.asr import Transcribe, Transcript, TranscriptChunk, TranscriptStart, TranscriptStop
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient

from ._audio import STT_RATE, float_to_pcm16
from ._remote import RemoteBackend, RemoteSpeechError, read_or_fail
from ._stt import Recognition, without_loops

log = logging.getLogger(__name__)

_FORMAT: dict[str, Any] = {"rate": STT_RATE, "width": 2, "channels": 1}
_MAX_EVENTS = 10_000


class WyomingSpeechStream:
    """One utterance streamed to ``backend`` (see the module docstring); ``on_partial`` is
    told the words so far each time the server streams a transcript chunk before the end."""

    def __init__(
        self,
        backend: RemoteBackend,
        model: str | None,
        language: str,
        on_partial: Callable[[str], None] | None = None,
    ) -> None:
        self.backend = backend
        self.model = model
        self.language = language
        self.on_partial = on_partial
        self._send, self._receive = anyio.create_memory_object_stream[bytes | None](math.inf)
        self._scope = anyio.CancelScope()
        self._done = anyio.Event()
        self.samples = 0  # sent (queued), from the utterance's first sample
        self._stopped = False
        self._chunks: list[str] = []
        self.text: str | None = None
        self.error: str | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    def feed(self, audio: np.ndarray) -> None:
        """Queue 16 kHz mono float32 audio for the server (never blocks)."""
        if self._stopped or not len(audio) or self._done.is_set():
            return
        self.samples += len(audio)
        self._send.send_nowait(float_to_pcm16(np.asarray(audio, dtype=np.float32)))

    async def run(self) -> None:
        """Own the connection until the transcript came, the stream failed or was cancelled."""
        try:
            with self._scope:
                self.backend.check_backoff()
                self.backend.requests += 1
                async with AsyncTcpClient(str(self.backend.host), self.backend.port) as client:
                    await self._converse(client)
        except Exception as exc:
            self.error = _describe(exc)
            log.info("%s: the streamed utterance failed (%s)", self.backend.name, self.error)
        finally:
            if self._scope.cancel_called and self.text is None and self.error is None:
                self.error = "closed"
            self._done.set()

    async def _converse(self, client: AsyncTcpClient) -> None:
        await client.write_event(Transcribe(name=self.model, language=self.language).event())
        await client.write_event(AudioStart(**_FORMAT).event())
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._read, client)
            async for pcm in self._receive:
                if pcm is None:
                    break
                await client.write_event(AudioChunk(audio=pcm, **_FORMAT).event())
            await client.write_event(AudioStop().event())

    async def _read(self, client: AsyncTcpClient) -> None:
        for _ in range(_MAX_EVENTS):
            try:
                event = await read_or_fail(client)
            except ConnectionError:
                if self._chunks and self._stopped:  # closed after transcript-stop
                    self.text = "".join(self._chunks).strip()
                    self._scope.cancel()
                    return
                raise
            if Transcript.is_type(event.type):
                self.text = str(Transcript.from_event(event).text).strip()
                self._scope.cancel()  # done: nothing more to send or read
                return
            if TranscriptStart.is_type(event.type):
                self._chunks = []
            elif TranscriptChunk.is_type(event.type):
                self._chunks.append(str(TranscriptChunk.from_event(event).text))
                if not self._stopped and self.on_partial is not None:
                    self.on_partial("".join(self._chunks).strip())
            elif TranscriptStop.is_type(event.type) and not self._stopped:
                self._chunks = []  # a partial stream ended; the final one follows
        raise ValueError(f"more than {_MAX_EVENTS} events without a transcript")

    async def finish(self) -> Recognition:
        """Send ``audio-stop`` and wait (``timeout_s`` at most) for the transcript;
        :class:`RemoteSpeechError` when the stream failed."""
        started = time.perf_counter()
        if not self._stopped:
            self._stopped = True
            self._send.send_nowait(None)
        with anyio.move_on_after(self.backend.timeout_s):
            await self._done.wait()
        if self.text is None:
            self.cancel()
            cause = self.error
            if cause is None:  # stalled: the request after it need not wait again
                cause = f"no answer within {self.backend.timeout_s:g} s (stalled)"
                self.backend.record_failure(cause)
            raise RemoteSpeechError(f"{self.backend.name}: the streamed utterance failed: {cause}")
        elapsed = time.perf_counter() - started
        self.backend.record_success(elapsed)
        return Recognition(without_loops(self.text), self.samples / STT_RATE, elapsed)

    def cancel(self) -> None:
        """Close the stream: nothing more is sent, the connection closes."""
        self._stopped = True
        self._scope.cancel()


def _describe(exc: BaseException) -> str:
    """The first underlying error of ``exc`` (a task group's group unwrapped), in words."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__
