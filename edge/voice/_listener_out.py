"""What a :class:`~edge.voice.Listener` tells its owner, and how: the hooks it calls, the
one ordered queue they are called from, the final transcript and each utterance's stats."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import anyio

from edge.runtime import TRACES

from ._endpoint import UtteranceEnded
from ._messages import Transcript
from ._pause import Pass

log = logging.getLogger(__name__)


class ListenerHooks(Protocol):
    """What the listener tells its owner."""

    def speech_started(self, participant_id: str) -> None:
        """Confirmed speech began (barge-in point); must not block."""

    async def transcript(self, participant_id: str, transcript: Transcript) -> None: ...

    async def query(self, participant_id: str, text: str, timestamp_us: int) -> None: ...

    async def speculate(self, participant_id: str, text: str, utterance: int) -> None:
        """The words so far, during a pause that may end the utterance ("" retracts)."""


async def publish_guess(
    hooks: ListenerHooks, participant_id: str, text: str, utterance: int
) -> None:
    try:
        await hooks.speculate(participant_id, text, utterance)
    except Exception:
        log.exception("publishing a guess for %s failed", participant_id)


class Outbox:
    """Transcripts, guesses and queries leave through one ordered queue."""

    def __init__(self, participant_id: str) -> None:
        self.participant_id = participant_id
        self._send, self._receive = anyio.create_memory_object_stream[
            Callable[[], Awaitable[None]]
        ](math.inf)

    def put(self, job: Callable[[], Awaitable[None]]) -> None:
        """Queue ``job`` (unbounded: keeps the order of enqueueing). Once the listener has
        closed (its participant left while a pass ran) there is nobody to tell: dropped."""
        try:
            self._send.send_nowait(job)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            log.debug("%s left: their late voice input is dropped", self.participant_id)

    async def run(self) -> None:
        async with self._receive:
            async for job in self._receive:
                try:
                    await job()
                except Exception:
                    log.exception("publishing voice input for %s failed", self.participant_id)


@dataclass
class UtteranceStats:
    """Timing of one finished utterance, for benchmarks."""

    utterance: int
    text: str
    audio_s: float
    speech_end_at: float  # perf_counter when the endpoint was detected
    final_ready_at: float  # perf_counter when the final text was known
    reused_pass: bool
    passes: int
    final_pass_started_at: float = 0.0  # perf_counter when the final text's pass began
    final_pass_s: float = 0.0  # model time of that pass

    @classmethod
    def of(
        cls, job: Pass, audio_s: float, ended_at: float, reused: Pass | None, passes: int
    ) -> UtteranceStats:
        """The stats of an utterance whose final text came from ``job`` (``reused``: the
        pass already under way at the endpoint, if any; ``passes`` run before it)."""
        return cls(
            job.utterance,
            job.result.text if job.result else "",
            audio_s,
            ended_at,
            time.perf_counter(),
            job is reused,
            passes + (job is not reused),
            job.started_at,
            job.result.elapsed_s if job.result else 0.0,
        )

    @property
    def head_start_s(self) -> float:
        """How long before the endpoint the final text's pass began (negative: after)."""
        return self.speech_end_at - self.final_pass_started_at


def final_transcript(
    participant_id: str, job: Pass, event: UtteranceEnded, start_us: int
) -> Transcript:
    """The final transcript of ``job``'s utterance (its error when no text came)."""
    TRACES.mark(participant_id, "final_transcript", kind=job.kind)
    return Transcript(
        text=job.result.text if job.result else "",
        utterance=job.utterance,
        final=True,
        truncated=event.truncated,
        speech_start_us=start_us,
        error=job.error if job.result is None else None,
    )
