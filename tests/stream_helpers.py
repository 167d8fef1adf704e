"""For the streamed remote speech tests: a TCP proxy on 127.0.0.1 that counts the
connections to a Wyoming server and what crossed them (and can drop one mid-stream), and a
small Wyoming ``asr`` server that streams transcript chunks while the audio arrives."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
from anyio.abc import SocketStream
from wyoming.asr import Transcript, TranscriptChunk, TranscriptStart, TranscriptStop
from wyoming.audio import AudioChunk, AudioStop
from wyoming.event import async_read_event, async_write_event
from wyoming.info import AsrModel, AsrProgram, Attribution, Describe, Info

AUDIO_BYTES = 8_000  # a connection that sent more than this carried audio (0.25 s)


@dataclass
class Connection:
    opened_at: float
    sent: int = 0  # bytes client → server
    first_audio_at: float | None = None  # when ``sent`` passed AUDIO_BYTES
    last_sent_at: float = 0.0
    received: int = 0  # bytes server → client
    closed_at: float | None = None
    closed: anyio.Event = field(default_factory=anyio.Event)
    log: bytearray = field(default_factory=bytearray)  # what the client sent (up to 1 MB)

    def events(self, kind: str) -> int:
        """How many events of type ``kind`` the client sent on this connection."""
        return self.log.count(f'"type": "{kind}"'.encode())


@dataclass
class Proxy:
    """Forwards 127.0.0.1:``port`` to ``upstream``; ``drop_after``: the next connection
    that sends more than that many bytes is cut there (both sides closed)."""

    upstream: int
    port: int = 0
    connections: list[Connection] = field(default_factory=list)
    drop_after: int | None = None
    dropped: int = 0

    @property
    def url(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def with_audio(self, since: float = 0.0) -> list[Connection]:
        """The connections opened after ``since`` (perf_counter) that carried audio."""
        return [c for c in self.connections if c.sent > AUDIO_BYTES and c.opened_at > since]

    async def _serve(self, client: SocketStream) -> None:
        record = Connection(time.perf_counter())
        self.connections.append(record)
        try:
            async with client, await anyio.connect_tcp("127.0.0.1", self.upstream) as server:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._pump, client, server, record, True, tg.cancel_scope)
                    tg.start_soon(self._pump, server, client, record, False, tg.cancel_scope)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            record.closed_at = time.perf_counter()
            record.closed.set()

    async def _pump(self, src, dst, record, upstream, scope) -> None:  # type: ignore[no-untyped-def]
        try:
            async for data in src:
                if upstream:
                    record.sent += len(data)
                    if len(record.log) < 1_000_000:
                        record.log += data
                    record.last_sent_at = time.perf_counter()
                    if record.first_audio_at is None and record.sent > AUDIO_BYTES:
                        record.first_audio_at = record.last_sent_at
                    if self.drop_after is not None and record.sent > self.drop_after:
                        self.drop_after = None
                        self.dropped += 1
                        break  # cut mid-stream
                else:
                    record.received += len(data)
                await dst.send(data)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        scope.cancel()


@asynccontextmanager
async def proxy_to(upstream_url: str) -> AsyncIterator[Proxy]:
    proxy = Proxy(int(upstream_url.rsplit(":", 1)[1]))
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    proxy.port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, proxy._serve)
        try:
            yield proxy
        finally:
            tg.cancel_scope.cancel()


def _asr_info() -> Info:
    attribution = Attribution(name="tests", url="")
    model = AsrModel(
        name="words",
        attribution=attribution,
        installed=True,
        description="counts audio",
        version="1",
        languages=["en"],
    )
    program = AsrProgram(
        name="word-streamer",
        attribution=attribution,
        installed=True,
        description="streams a word per quarter second of audio",
        version="1",
        models=[model],
        supports_transcript_streaming=True,
    )
    return Info(asr=[program])


@asynccontextmanager
async def streaming_asr(final: str) -> AsyncIterator[str]:
    """A Wyoming ``asr`` server on 127.0.0.1 that streams a transcript chunk (``w1``,
    ``w2``, ...) for each 0.25 s of audio while it arrives, and answers ``final`` at
    ``audio-stop``; yields its URL."""

    async def serve(stream: SocketStream) -> None:
        try:
            await answer(stream)
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            pass  # the client closed the stream

    async def answer(stream: SocketStream) -> None:
        reader = _Reader(stream)
        async with stream:
            received, words = 0, 0
            while (event := await async_read_event(reader)) is not None:  # type: ignore[arg-type]
                if Describe.is_type(event.type):
                    await _write(stream, _asr_info().event())
                elif AudioChunk.is_type(event.type):
                    received += len(AudioChunk.from_event(event).audio)
                    while received >= (words + 1) * 8_000:  # 0.25 s of PCM16
                        if words == 0:
                            await _write(stream, TranscriptStart(language="en").event())
                        words += 1
                        await _write(stream, TranscriptChunk(text=f" w{words}").event())
                elif AudioStop.is_type(event.type):
                    if words:
                        await _write(stream, TranscriptStop().event())
                    await _write(stream, Transcript(text=final).event())
                    return

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        try:
            yield f"tcp://127.0.0.1:{port}"
        finally:
            tg.cancel_scope.cancel()


class _Reader:
    """An anyio stream as the ``readline``/``readexactly`` reader wyoming reads events from."""

    def __init__(self, stream: SocketStream) -> None:
        self.stream = stream
        self.buffer = b""

    async def _fill(self) -> bool:
        try:
            self.buffer += await self.stream.receive()
            return True
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return False

    async def readline(self) -> bytes:
        while b"\n" not in self.buffer:
            if not await self._fill():
                line, self.buffer = self.buffer, b""
                return line
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line + b"\n"

    async def readexactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            if not await self._fill():
                raise anyio.EndOfStream
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data


async def _write(stream: SocketStream, event) -> None:  # type: ignore[no-untyped-def]
    class _Writer:
        def __init__(self) -> None:
            self.parts: list[bytes] = []

        def writelines(self, parts) -> None:  # type: ignore[no-untyped-def]
            self.parts.extend(parts)

        def write(self, data: bytes) -> None:
            self.parts.append(data)

        async def drain(self) -> None:
            await stream.send(b"".join(self.parts))
            self.parts.clear()

    await async_write_event(event, _Writer())  # type: ignore[arg-type]
