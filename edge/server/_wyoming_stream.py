"""Wyoming's streaming events, as the ``wyoming`` package defines them.

* ``handle``: the answer goes out as it is generated — ``handled-start`` (the context),
  one ``handled-chunk`` per piece of reply text, ``handled-stop`` — followed, for clients
  that predate streaming, by the whole answer in one ``handled`` (or ``not-handled``).
* ``tts``: ``synthesize-start``, ``synthesize-chunk``..., ``synthesize-stop``: each
  sentence is spoken (``audio-start``, ``audio-chunk``..., ``audio-stop``) as soon as its
  text is complete, then ``synthesize-stopped``. A ``synthesize`` inside the stream (Home
  Assistant sends one for older servers) is ignored, as ``wyoming-piper`` does.
* ``asr``: ``transcript-start``, ``transcript-chunk`` (one per sentence of the recognised
  text), ``transcript-stop``, then the ``transcript`` every client reads.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import anyio
from wyoming.asr import Transcript, TranscriptChunk, TranscriptStart, TranscriptStop
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event
from wyoming.handle import HandledChunk, HandledStart
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
)

from edge.voice import (
    NothingToSpeakError,
    SentenceSplitter,
    Synthesis,
    TextToSpeech,
    chunk_pcm,
    first_piece,
    float_to_pcm16,
    speakable,
)

from ._client import ROUTER_SOURCE, reply_text
from ._gateway import ClientError
from ._protocol import Reply

CHUNK_MS = 100
PREPARED_KEPT = 4

Write = Callable[[Event], Awaitable[None]]


@dataclass
class ReplyFeed:
    """The reply frames of a Wyoming turn as the hub delivers them, and whether it is over."""

    frames: list[Reply] = field(default_factory=list)
    idle: bool = False
    _changed: anyio.Event = field(default_factory=anyio.Event)

    def push(self, frame: Reply) -> None:
        self.frames.append(frame)
        self._wake()

    def finish(self) -> None:
        self.idle = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def text(self, turn_id: str) -> str:
        return reply_text([f for f in self.frames if f.request_id == turn_id])

    async def pieces(self, turn_id: str) -> AsyncIterator[str]:
        """The turn's reply text, piece by piece as it arrives, until the turn is idle."""
        seen = 0
        started = False
        while True:
            changed = self._changed
            new, seen = self.frames[seen:], len(self.frames)
            for frame in new:
                if frame.request_id != turn_id or not frame.text:
                    continue
                piece = frame.text.strip() + " " if frame.source == ROUTER_SOURCE else frame.text
                if not started:
                    piece = piece.lstrip()
                if piece:
                    started = True
                    yield piece
            if self.idle:
                return
            await changed.wait()


async def stream_handled(
    write: Write, feed: ReplyFeed, turn_id: str, context: dict | None, limit_s: float
) -> tuple[bool, bool]:
    """Send the turn's reply as ``handled-start`` and ``handled-chunk`` events as it comes.

    Returns (whether anything was sent, whether ``limit_s`` ran out first); the caller
    ends the stream with ``handled-stop``.
    """
    started = False
    with anyio.move_on_after(limit_s) as scope:
        async for piece in feed.pieces(turn_id):
            if not started:
                await write(HandledStart(context=context).event())
                started = True
            await write(HandledChunk(text=piece).event())
    return started, scope.cancelled_caught


class PreparedSpeech:
    """Speech synthesized ahead for Home Assistant conversations (participants
    ``<prefix>…``): the first sentence a ``synthesize`` of a likely answer would speak, cut
    as a synthesize cuts it, kept unsent (the newest :data:`PREPARED_KEPT`). A synthesize
    whose sentence is exactly one of them is spoken from its audio (waiting for it when its
    synthesis is under way: it is done sooner than a new one); nothing else ever is."""

    def __init__(self, tts: TextToSpeech | None, prefix: str) -> None:
        self.tts = tts
        self.prefix = prefix
        self.used = 0  # sentences spoken from prepared audio
        self._audio: dict[str, Synthesis] = {}
        self._underway: dict[str, anyio.Event] = {}  # sentences being synthesized ahead

    async def prepare_reply(self, participant_id: str, deltas: AsyncIterable[str]) -> None:
        """Synthesize the first sentence of the reply streamed as ``deltas``."""
        if self.tts is None or not participant_id.startswith(self.prefix):
            return
        text = await first_piece(deltas, SentenceSplitter())
        if not text or text in self._audio or text in self._underway:
            return
        done = self._underway[text] = anyio.Event()
        try:
            self._audio[text] = await anyio.to_thread.run_sync(self.tts.synthesize, text)
        except NothingToSpeakError:
            return
        finally:
            del self._underway[text]
            done.set()  # a synthesize waiting for it takes it now
        while len(self._audio) > PREPARED_KEPT:
            del self._audio[next(iter(self._audio))]

    async def take(self, sentence: str) -> Synthesis | None:
        """The prepared audio of exactly ``sentence`` (used once; awaited while its
        synthesis is under way), else None."""
        text = speakable(sentence)
        underway = self._underway.get(text)
        if underway is not None:
            await underway.wait()
        found = self._audio.pop(text, None)
        self.used += found is not None
        return found


async def speak_sentence(
    write: Write, tts: TextToSpeech, sentence: str, prepared: PreparedSpeech | None = None
) -> bool:
    """One sentence as ``audio-start``, ``audio-chunk``..., ``audio-stop`` (from its
    prepared audio when there is one); False when there was nothing to speak in it."""
    synthesis = await prepared.take(sentence) if prepared is not None else None
    try:
        if synthesis is None:
            synthesis = await anyio.to_thread.run_sync(tts.synthesize, sentence)
    except NothingToSpeakError:
        return False
    rate = synthesis.sample_rate
    await write(AudioStart(rate=rate, width=2, channels=1).event())
    for piece in chunk_pcm(float_to_pcm16(synthesis.audio), rate, CHUNK_MS):
        await write(AudioChunk(rate=rate, width=2, channels=1, audio=piece).event())
    await write(AudioStop().event())
    return True


class SynthesizeStream:
    """The streaming ``synthesize`` requests of one connection."""

    def __init__(
        self,
        write: Write,
        tts: TextToSpeech | None,
        max_chars: int,
        prepared: PreparedSpeech | None = None,
    ) -> None:
        self.write = write
        self.tts = tts
        self.max_chars = max_chars  # text one stream may carry
        self.prepared = prepared
        self._splitter: SentenceSplitter | None = None
        self._chars = 0

    @property
    def open(self) -> bool:
        return self._splitter is not None

    async def on_event(self, event: Event) -> bool:
        """Handle a streaming synthesize event; False for any other event."""
        if SynthesizeStart.is_type(event.type):
            if self.tts is None:
                raise ClientError("this server runs without tts")
            self._splitter, self._chars = SentenceSplitter(), 0
        elif SynthesizeChunk.is_type(event.type):
            await self._chunk(event)
        elif SynthesizeStop.is_type(event.type):
            splitter = self._need_stream("synthesize-stop")
            self._splitter = None
            for sentence in splitter.flush():
                await self._speak(sentence)
            await self.write(SynthesizeStopped().event())
        elif Synthesize.is_type(event.type):
            return self.open  # the whole text again, for servers without streaming
        else:
            return False
        return True

    def _need_stream(self, what: str) -> SentenceSplitter:
        if self._splitter is None:
            raise ClientError(f"{what} without synthesize-start")
        return self._splitter

    async def _chunk(self, event: Event) -> None:
        splitter = self._need_stream("synthesize-chunk")
        text = (event.data or {}).get("text")
        if not isinstance(text, str):
            raise ClientError("synthesize-chunk needs a text string")
        self._chars += len(text)
        if self._chars > self.max_chars:
            self._splitter = None
            raise ClientError(
                f"synthesize stream longer than {self.max_chars} characters; it was dropped"
            )
        for sentence in splitter.feed(text):
            await self._speak(sentence)

    async def _speak(self, sentence: str) -> None:
        assert self.tts is not None
        await speak_sentence(self.write, self.tts, sentence, self.prepared)


async def write_transcript(write: Write, text: str, language: str = "en") -> None:
    """The recognised text as a transcript stream (a chunk per sentence), then whole."""
    await write(TranscriptStart(language=language).event())
    splitter = SentenceSplitter()
    for i, sentence in enumerate([*splitter.feed(text), *splitter.flush()]):
        await write(TranscriptChunk(text=sentence if i == 0 else " " + sentence).event())
    await write(TranscriptStop().event())
    await write(Transcript(text=text, language=language).event())


async def synthesize_whole(
    write: Write,
    tts: TextToSpeech,
    text: str,
    limit: int,
    gone: Callable[[], bool],
    prepared: PreparedSpeech | None = None,
) -> None:
    """A ``synthesize``, spoken sentence by sentence: the voice's lock is held one sentence
    at a time (so other participants' speech interleaves), and a requester who left
    (``gone()``) stops it. A sentence with prepared audio is spoken from it."""
    if len(text) > limit:
        raise ClientError(f"synthesize text is {len(text)} characters; the limit is {limit}")
    if not speakable(text):
        raise ClientError("nothing to speak in that text")
    splitter = SentenceSplitter()
    started = False
    for sentence in [*splitter.feed(text), *splitter.flush()]:
        if gone():
            return  # the requester left: stop here
        synthesis = await prepared.take(sentence) if prepared is not None else None
        try:
            if synthesis is None:
                synthesis = await anyio.to_thread.run_sync(tts.synthesize, sentence)
        except NothingToSpeakError:
            continue
        rate = synthesis.sample_rate
        if not started:
            await write(AudioStart(rate=rate, width=2, channels=1).event())
            started = True
        for piece in chunk_pcm(float_to_pcm16(synthesis.audio), rate, CHUNK_MS):
            await write(AudioChunk(rate=rate, width=2, channels=1, audio=piece).event())
    if not started:
        raise ClientError("nothing to speak in that text")
    await write(AudioStop().event())
