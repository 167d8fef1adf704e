"""A simulated voice client: speaks recorded audio into the runtime, collects the answer.

:class:`SimulatedSpeaker` is an agent for one participant. Register it with the runtime, then
:meth:`SimulatedSpeaker.speak` publishes audio in real-time-sized chunks (sleeping in real
time, or as fast as possible) and :meth:`SimulatedSpeaker.answer` waits for the spoken reply.
``edge talk``, the benchmarks and the tests drive the whole voice loop with it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import anyio
import anyio.lowlevel
import numpy as np

from edge.runtime import Agent, AgentRuntime, HandlerContext

from ._audio import SAMPLE_WIDTH, float_to_pcm16, pcm16_to_float
from ._messages import (
    AUDIO_INPUT_TOPIC,
    AUDIO_OUTPUT_TOPIC,
    TRANSCRIPT_TOPIC,
    AudioInput,
    AudioOutput,
    Transcript,
)
from ._speaker import ROUTER_SOURCE


@dataclass
class HeardAudio:
    chunk: AudioOutput
    at: float  # perf_counter on arrival


@dataclass
class Answer:
    """The spoken reply to one turn, and when things happened (perf_counter seconds)."""

    audio: np.ndarray
    sample_rate: int
    texts: list[str]  # the sentences spoken, in order
    sources: list[str]
    spoke_until: float  # when the last input chunk was published
    first_audio_at: float | None
    done_at: float

    @property
    def duration_s(self) -> float:
        return len(self.audio) / self.sample_rate if self.sample_rate else 0.0


class SimulatedSpeaker(Agent):
    """One participant's microphone and speaker, in process.

    It is also a connection as the server's output hub sees one (``wants_audio`` and
    ``deliver``), so ``service.hub.attach(client.participant_id, client)`` makes an
    in-process ``EdgeService`` speak its replies (``edge talk``, the benchmarks)."""

    wants_audio = True

    def __init__(self, participant_id: str = "talk", chunk_ms: int = 100) -> None:
        super().__init__()
        self.participant_id = participant_id
        self.chunk_ms = chunk_ms
        self.heard: list[HeardAudio] = []
        self.transcripts: list[Transcript] = []
        self._changed = anyio.Event()
        self.add_handler(AUDIO_OUTPUT_TOPIC, self._on_audio)
        self.add_handler(TRANSCRIPT_TOPIC, self._on_transcript)
        self._spoke_until = 0.0

    async def _on_audio(self, chunk: AudioOutput, ctx: HandlerContext) -> None:
        if ctx.metadata.participant_id == self.participant_id:
            self.heard.append(HeardAudio(chunk, time.perf_counter()))
            self._wake()

    async def _on_transcript(self, transcript: Transcript, ctx: HandlerContext) -> None:
        if ctx.metadata.participant_id == self.participant_id:
            self.transcripts.append(transcript)
            self._wake()

    def deliver(self, message: object, payload: bytes | None = None) -> None:
        """The hub's JSON frames: not needed, the answer is collected as audio."""

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    @property
    def final_transcripts(self) -> list[str]:
        return [t.text for t in self.transcripts if t.final]

    async def speak(
        self,
        runtime: AgentRuntime,
        audio: np.ndarray,
        sample_rate: int,
        *,
        realtime: bool = True,
        trailing_silence_s: float = 1.0,
    ) -> None:
        """Publish ``audio`` (mono float) then ``trailing_silence_s`` of silence, in chunks."""
        padded = np.concatenate(
            [
                np.asarray(audio, np.float32),
                np.zeros(int(trailing_silence_s * sample_rate), np.float32),
            ]
        )
        pcm = float_to_pcm16(padded)
        step = max(1, sample_rate * self.chunk_ms // 1000) * SAMPLE_WIDTH
        started = time.perf_counter()
        for n, i in enumerate(range(0, len(pcm), step)):
            if realtime:
                await anyio.sleep(
                    max(0.0, started + n * self.chunk_ms / 1000 - time.perf_counter())
                )
            await runtime.publish(
                AUDIO_INPUT_TOPIC,
                AudioInput(pcm=pcm[i : i + step], sample_rate=sample_rate),
                participant_id=self.participant_id,
                source="client",
            )
            self._spoke_until = time.perf_counter()
            if not realtime:
                await anyio.lowlevel.checkpoint()

    async def answer(self, *, since: int = 0, limit_s: float = 60.0) -> Answer:
        """Wait for the end of a spoken reply (a final chunk from a non-router source) among
        chunks heard from index ``since`` on, and return it."""
        with anyio.fail_after(limit_s):
            while not any(
                h.chunk.final and h.chunk.source != ROUTER_SOURCE for h in self.heard[since:]
            ):
                await self._changed.wait()
        heard = self.heard[since:]
        rate = next((h.chunk.sample_rate for h in heard if h.chunk.pcm), 0)
        audio = [pcm16_to_float(h.chunk.pcm) for h in heard if h.chunk.pcm]
        first = next((h.at for h in heard if h.chunk.pcm), None)
        return Answer(
            audio=np.concatenate(audio) if audio else np.zeros(0, np.float32),
            sample_rate=rate,
            texts=[h.chunk.text for h in heard if h.chunk.text],
            sources=[h.chunk.source for h in heard if h.chunk.text],
            spoke_until=self._spoke_until,
            first_audio_at=first,
            done_at=heard[-1].at,
        )
