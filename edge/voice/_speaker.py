"""One participant's output side: reply text streams → sentences → speech → audio chunks.

Reply frames (:class:`~edge.interaction.ResponseOutput`) arrive as text deltas of
streams identified by ``(request_id, source)``. Each stream has its own
:class:`SentenceSplitter`; every completed sentence becomes a *segment* in the
participant's play plan:

* segments play in arrival order, except that the router's segments for a request go
  ahead of that request's destination segments not yet playing (preambles and
  acknowledgments play first);
* a synthesis task works up to ``tts_lookahead`` segments ahead of the playing one, in
  a worker thread; a player task cuts each segment's audio into ``chunk_ms`` chunks and
  publishes them paced at ``playback_speed`` times real time, at most
  ``playback_lead_s`` ahead of the playing position;
* :meth:`Speaker.interrupt` empties the plan, wakes the player (which publishes nothing
  more for the old segments) and marks every request it knew as superseded: their later
  frames are dropped.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import anyio
import numpy as np

from edge.interaction import ResponseOutput
from edge.runtime import TRACES

from ._audio import float_to_pcm16
from ._config import VoiceConfig
from ._messages import AudioOutput
from ._sentences import SentenceSplitter, speakable
from ._synthesis import FirstAudio, SpeechFailure, Synthesis
from ._tts import TextToSpeech

log = logging.getLogger(__name__)

ROUTER_SOURCE = "router"
_SUPERSEDED_MEMORY = 512
_PREPARED_KEPT = 4

PublishAudio = Callable[[AudioOutput, "str | None"], Awaitable[None]]


@dataclass
class _Stream:
    request_id: str | None
    splitter: SentenceSplitter = field(default_factory=SentenceSplitter)
    open: bool = True


@dataclass(eq=False)
class _Segment:
    key: tuple[str, str]
    request_id: str | None
    source: str
    text: str
    final: bool
    correlation_id: str | None
    audio: np.ndarray | None = None
    started: bool = False
    claimed: bool = False
    ready: anyio.Event = field(default_factory=anyio.Event)


@dataclass(eq=False)
class _Prepared:
    """Speech synthesized ahead of any reply asking for it (see :meth:`Speaker.prepare`)."""

    text: str
    audio: np.ndarray | None = None
    claimed: bool = False


class Speaker:
    """Speaks one participant's replies; see the module docstring."""

    def __init__(
        self,
        participant_id: str,
        config: VoiceConfig,
        tts: TextToSpeech,
        limiter: anyio.CapacityLimiter,
        publish: PublishAudio,
        on_failure: SpeechFailure | None = None,
        first_audio: FirstAudio | None = None,
    ) -> None:
        self.participant_id = participant_id
        self.config = config
        self._synthesize = Synthesis(participant_id, tts, limiter, config.output_rate, on_failure)
        self._synthesize.first_audio = first_audio  # others' first sentences before ours ahead
        self._publish = publish
        self._streams: dict[tuple[str, str], _Stream] = {}
        self._sequence: dict[tuple[str, str], int] = {}  # next audio chunk number per stream
        self._plan: list[_Segment] = []
        self._changed = anyio.Event()
        self._stop = anyio.Event()
        self._superseded: set[str] = set()
        self._superseded_order: deque[str] = deque()
        self._standalone = itertools.count()
        self._generation = 0
        self._clock_start = 0.0
        self._sent_s = 0.0
        self.first_audio_at: dict[str, float] = {}  # request_id -> perf_counter of 1st chunk
        self._prepared: dict[str, _Prepared] = {}  # text -> speech made ahead, newest last
        self.prepared_used = 0  # segments spoken from prepared speech

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._synthesizer)
            tg.start_soon(self._player)
            task_status.started()
            await anyio.sleep_forever()

    # -- input ------------------------------------------------------------------------

    def on_output(self, frame: ResponseOutput, correlation_id: str | None = None) -> bool:
        """Take one reply frame; False when it was dropped (superseded request)."""
        rid = frame.request_id
        if rid is not None and rid in self._superseded:
            return False
        # a standalone message is a stream of its own (NUL keeps it apart from request ids)
        key = (rid if rid is not None else f"\0{next(self._standalone)}", frame.source)
        stream = self._streams.get(key)
        if stream is None or not stream.open:
            stream = self._streams[key] = _Stream(rid, self.config.splitter())
        sentences = stream.splitter.feed(frame.text)
        final = frame.final or rid is None
        if final:
            sentences += stream.splitter.flush()
            stream.open = False
        texts = [t for t in (speakable(s) for s in sentences) if t]
        if texts:
            TRACES.mark(self.participant_id, "first_sentence", once=True)
        if final and not texts:
            texts = [""]  # an end marker: the stream's final (empty) chunk
        for i, text in enumerate(texts):
            self._add(
                _Segment(
                    key, rid, frame.source, text, final and i == len(texts) - 1, correlation_id
                )
            )
        if final and rid is not None:
            self._end_reply_when_synthesized(rid)
        return True

    def prepare(self, text: str) -> None:
        """Synthesize ``text`` ahead of time, when nothing else waits for synthesis (a
        likely reply's first piece). Nothing is published: a later segment with exactly
        this text uses the audio instead of synthesizing it; the newest few are kept."""
        text = speakable(text)
        if not text or text in self._prepared or any(s.text == text for s in self._plan):
            return
        # one listener's newer likely reply supersedes the older ones still waiting (their
        # guesses were dropped): Piper's time goes to the newest; made speech is kept
        for stale in [p.text for p in self._prepared.values() if not p.claimed]:
            del self._prepared[stale]
        self._prepared[text] = _Prepared(text)
        while len(self._prepared) > _PREPARED_KEPT:
            del self._prepared[next(iter(self._prepared))]
        self._notify()

    @property
    def prepared(self) -> list[str]:
        """Texts whose speech is prepared (synthesized) and not yet used, oldest first."""
        return [p.text for p in self._prepared.values() if p.audio is not None]

    def _add(self, segment: _Segment) -> None:
        at = len(self._plan)
        if segment.source == ROUTER_SOURCE and segment.request_id is not None:
            for i, other in enumerate(self._plan):
                if (
                    other.request_id == segment.request_id
                    and other.source != ROUTER_SOURCE
                    and not other.started
                ):
                    at = i
                    break
        if not segment.text:
            segment.audio = np.zeros(0, dtype=np.float32)
            segment.ready.set()
        self._plan.insert(at, segment)
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    # -- state --------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        """Output is pending, playing, or a reply stream is still open."""
        return bool(self._plan) or self._audible() or any(s.open for s in self._streams.values())

    def _audible(self) -> bool:
        speed = self.config.playback_speed
        if speed <= 0 or self._sent_s == 0:
            return False
        return time.monotonic() < self._clock_start + self._sent_s / speed

    def interrupt(self) -> list[str]:
        """Stop all output now; returns the superseded request ids (oldest first)."""
        ids: list[str] = []
        known = [s.request_id for s in self._streams.values()]
        for rid in [*known, *(segment.request_id for segment in self._plan)]:
            if rid is not None and rid not in ids:
                ids.append(rid)
        for rid in ids:
            self._supersede(rid)
        self._plan.clear()
        self._streams.clear()
        self._sequence.clear()
        self._generation += 1
        self._clock_start, self._sent_s = time.monotonic(), 0.0
        self._stop.set()
        self._stop = anyio.Event()
        self._notify()
        return ids

    def drop(self, request_ids: Iterable[str]) -> None:
        """Supersede these requests: drop their speech and later frames (others' goes on)."""
        ids = set(request_ids)
        if not ids:
            return
        for rid in ids:
            self._supersede(rid)
        head = self._plan[0] if self._plan else None
        self._plan = [s for s in self._plan if s.request_id not in ids]
        for key in [k for k, stream in self._streams.items() if stream.request_id in ids]:
            del self._streams[key]
            self._sequence.pop(key, None)
        if head is not None and head.started and head.request_id in ids:
            self._generation += 1
            self._stop.set()
            self._stop = anyio.Event()
        self._notify()

    def _supersede(self, rid: str) -> None:
        if rid in self._superseded:
            return
        self._superseded.add(rid)
        self._synthesize.end_reply(rid, interrupted=True)  # its stream asks for nothing more
        self._superseded_order.append(rid)
        while len(self._superseded_order) > _SUPERSEDED_MEMORY:
            self._superseded.discard(self._superseded_order.popleft())

    # -- synthesis ----------------------------------------------------------------------

    def _next_to_synthesize(self) -> _Segment | None:
        for segment in self._plan[: self.config.tts_lookahead + 1]:
            if not segment.claimed and segment.audio is None:
                return segment
        return None

    async def _synthesizer(self) -> None:
        """Segments near the head of the plan first; prepared speech when none waits."""
        while True:
            segment = self._next_to_synthesize()
            if segment is None:
                early = next((p for p in self._prepared.values() if not p.claimed), None)
                if early is None:
                    await self._changed.wait()
                else:
                    early.claimed = True  # a likely reply's first piece: waited for soon
                    early.audio = await self._synthesize(early.text, head=True)
                continue
            segment.claimed = True
            early = self._prepared.pop(segment.text, None)
            if early is not None and early.audio is not None:
                segment.audio = early.audio  # made while the reply was still being decided
                self.prepared_used += 1
            else:
                head = bool(self._plan) and self._plan[0] is segment  # the listener waits
                segment.audio = await self._synthesize(segment.text, segment.request_id, head)
            segment.ready.set()
            self._notify()
            if segment.request_id is not None:
                self._end_reply_when_synthesized(segment.request_id)

    # -- playback -----------------------------------------------------------------------

    async def _player(self) -> None:
        while True:
            if not self._plan:
                await self._changed.wait()
                continue
            segment = self._plan[0]
            generation = self._generation
            while (
                not segment.ready.is_set()
                and generation == self._generation
                and self._plan
                and self._plan[0] is segment
            ):
                await self._changed.wait()
            if generation != self._generation or not self._plan or self._plan[0] is not segment:
                continue
            segment.started = True
            await self._play(segment, generation)
            if self._plan and self._plan[0] is segment:
                self._plan.pop(0)
                self._notify()  # the synthesizer may now work on the next segment in reach

    async def _play(self, segment: _Segment, generation: int) -> None:
        audio = segment.audio if segment.audio is not None else np.zeros(0, np.float32)
        rate = self._synthesize.rate
        step = max(1, rate * self.config.chunk_ms // 1000)
        pieces = [audio[i : i + step] for i in range(0, len(audio), step)]
        if not pieces:  # nothing audible (unspeakable text, or synthesis failed)
            if not segment.final:
                return
            pieces = [audio]  # the stream still ends with an empty final chunk
            segment.text = ""
        for i, piece in enumerate(pieces):
            if not await self._pace(generation) or generation != self._generation:
                return
            sequence = self._sequence.get(segment.key, 0)
            self._sequence[segment.key] = sequence + 1
            chunk = AudioOutput(
                pcm=float_to_pcm16(piece),
                sample_rate=rate,
                request_id=segment.request_id,
                source=segment.source,
                sequence=sequence,
                final=segment.final and i == len(pieces) - 1,
                text=segment.text if i == 0 else "",
            )
            if segment.request_id is not None and len(piece):
                self._first_audio(segment.request_id)
            try:
                await self._publish(chunk, segment.correlation_id)
            except Exception:  # a failing subscriber must not stop this participant's output
                log.exception("publishing audio for %s failed", self.participant_id)
            self._sent_s += len(piece) / rate
        if segment.final:
            self._sequence.pop(segment.key, None)
            stream = self._streams.get(segment.key)
            if stream is not None and not stream.open:
                del self._streams[segment.key]

    def _first_audio(self, request_id: str) -> None:
        if request_id not in self.first_audio_at:
            self.first_audio_at[request_id] = time.perf_counter()
            if len(self.first_audio_at) > _SUPERSEDED_MEMORY:
                del self.first_audio_at[next(iter(self.first_audio_at))]

    async def _pace(self, generation: int) -> bool:
        """Wait until the next chunk may be sent; False when interrupted meanwhile."""
        speed = self.config.playback_speed
        if speed <= 0:
            return generation == self._generation
        now = time.monotonic()
        if now >= self._clock_start + self._sent_s / speed:  # idle or underrun: restart
            self._clock_start, self._sent_s = now, 0.0
        ahead = self._sent_s / speed - (now - self._clock_start)
        wait = ahead - self.config.playback_lead_s
        if wait > 0:
            stop = self._stop
            with anyio.move_on_after(wait):
                await stop.wait()
        return generation == self._generation

    def _end_reply_when_synthesized(self, rid: str) -> None:
        """A voice that streams replies ends ``rid``'s stream once all of it is audio."""
        if not self._synthesize.streams_replies:
            return
        if any(s.request_id == rid and s.open for s in self._streams.values()):
            return
        if any(s.request_id == rid and s.audio is None for s in self._plan):
            return
        self._synthesize.end_reply(rid)
