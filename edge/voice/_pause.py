"""Recognition during the pause, for every voice: transcription passes over an utterance
still in progress, kept by utterance.

A voice (a participant's :class:`~edge.voice.Listener`, a Wyoming ``asr`` recording)
transcribes its utterance so far while its speaker pauses, so that the words are known,
or nearly, when the utterance ends. :class:`PauseRecognizer` holds one voice's passes: it
starts them, finds the one that hears an utterance's end as a pass at the endpoint would
(reused instead of a fresh pass, awaited if still running), and marks those still queued
stale once nothing can use them (skipped when they reach the model).

Every voice's passes run through one :class:`Recognizer`: the model, the limiter that
lets one pass at a time reach it (or as many as a model that orders its own callers
takes), what a pass costs here, and a bound on each pass. A pass that holds the limiter
longer than ``timeout_s`` (a stuck remote server, a pass starved at the compute gate) is
abandoned: the limiter goes to the next pass, the utterance falls back to a fresh pass or
reports the failure, and whatever the abandoned thread returns later is dropped.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import numpy as np

from edge.runtime import NORMAL, TRACES, URGENT, YieldedToUrgentError, owned_by, urgency, yielding

from ._config import PASS_TIMEOUT_S
from ._remote import REMOTE_ERRORS, RemoteSpeechError
from ._stt import FullWindowSpeechToText, Recognition, SpeechToText

log = logging.getLogger(__name__)


class PassTimeoutError(RuntimeError):
    """A pass held the recognizer past its bound and was abandoned."""


@dataclass
class Pass:
    """One transcription pass over an utterance (so far)."""

    utterance: int
    covers: int  # stream sample up to which the pass's audio goes
    kind: str  # partial | speculative | final
    done: anyio.Event = field(default_factory=anyio.Event)
    result: Recognition | None = None
    stale: bool = False  # overtaken before it reached the model: skipped
    started: bool = False  # reached the model
    started_at: float = 0.0
    queued_at: float = field(default_factory=time.perf_counter)
    speculative: bool = False  # its words are the pause's guess (reported when done)
    awaited: bool = False  # reused for an utterance's final text: someone waits for it
    cut_for: int = -1  # the speech end its audio was cut for, as at the endpoint (if it was)
    guess: bool = False  # a partial whose words are offered as a guess when done
    error: str | None = None  # why no result came (named in the final transcript)

    @property
    def urgent(self) -> bool:
        """Someone may be waiting for it (all but a plain partial)."""
        return self.kind != "partial" or self.speculative or self.awaited

    def hears(self, speech_end: int, pad: int) -> bool:
        """Whether it hears what a pass at the endpoint would: the speech up to
        ``speech_end`` and the ``pad`` after it (its audio cut for that end, or heard)."""
        return self.covers >= speech_end and (
            self.cut_for == speech_end or self.covers >= speech_end + pad
        )


class PassCost:
    """Running average of how long one transcription pass takes on this device (shared by
    every voice; 0 until measured)."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds

    def record(self, elapsed_s: float) -> None:
        self.seconds = elapsed_s if self.seconds == 0 else 0.7 * self.seconds + 0.3 * elapsed_s


def recognize(
    stt: SpeechToText,
    audio: np.ndarray,
    *,
    full_window: bool,
    urgent: bool,
    participant_id: str = "",
    gate_owner: str | None = None,
    still_partial: Callable[[], bool] | None = None,
) -> Recognition:
    """One pass over ``audio`` (Whisper's whole window where asked and offered), ahead of
    others' steps when ``urgent`` (someone may be waiting for it). Otherwise (a partial)
    it gives way to urgent work at the compute gate (:class:`YieldedToUrgentError`): while
    it waited there it would hold the recognizer, and a pass that may end someone's
    turn would queue behind it; a recognizer that can stop between its parts stops there
    too while ``still_partial`` (nobody came to wait for the pass meanwhile). The gate's
    trace names it ``gate_owner`` (default: ``voice:<participant_id>``)."""
    gives_way = contextlib.nullcontext() if urgent else yielding(still_partial)  # never a wait
    owner = owned_by(gate_owner or f"voice:{participant_id}")  # whose pass, in the gate's trace
    TRACES.mark(participant_id, "pass_started", urgent=urgent)
    with urgency(URGENT if urgent else NORMAL), gives_way, owner:
        if full_window and isinstance(stt, FullWindowSpeechToText):
            return stt.transcribe_full(audio)
        return stt.transcribe(audio)


@dataclass
class Recognizer:
    """The recognizer every voice's passes share: ``stt``, the ``limiter`` that admits
    passes to it, their ``cost`` and the ``timeout_s`` bound on each;
    ``full_window``: a pause's pass uses Whisper's whole window."""

    stt: SpeechToText
    limiter: anyio.CapacityLimiter
    cost: PassCost = field(default_factory=PassCost)
    timeout_s: float = PASS_TIMEOUT_S
    full_window: bool = False

    @classmethod
    def of(
        cls, stt: SpeechToText, *, timeout_s: float = PASS_TIMEOUT_S, full_window: bool = False
    ) -> Recognizer:
        # a recognizer that orders its own callers takes every pass at once: a pass that
        # ends a turn then waits at the gate, where a partial gives way to it, never
        # behind a partial waiting there
        limiter = anyio.CapacityLimiter(getattr(stt, "concurrent_callers", 1))
        return cls(stt, limiter, PassCost(), timeout_s, full_window)

    @property
    def busy(self) -> bool:
        """A pass holds the model (another voice's, perhaps)."""
        return self.limiter.borrowed_tokens > 0

    async def warm_up(self) -> None:
        """Two passes over a second of silence: the first pays the model's one-time cost
        (a freshly loaded Whisper's first pass took 1.1-3.9 s on the 2-core host, against
        0.2-0.4 s after it), the second is the first measure of :attr:`cost`. Measured
        by the first, partial transcripts stayed off for the first utterances."""
        silence = np.zeros(self.stt.sample_rate, np.float32)
        try:
            await self.transcribe(silence, "")
            warm = await self.transcribe(silence, "")
        except RemoteSpeechError as exc:  # a remote recognizer down at start: timed later
            log.warning("no warm-up transcription: %s", exc)
        else:
            self.cost.seconds = warm.elapsed_s

    async def transcribe(
        self, audio: np.ndarray, owner: str, gate_owner: str | None = None
    ) -> Recognition:
        """One pass over a whole utterance now (someone waits for it); raises what the
        model raised, or :class:`PassTimeoutError`."""
        result = await self.run(Pass(-1, len(audio), "final"), audio, owner, gate_owner)
        assert result is not None  # only a pass marked stale is skipped
        return result

    async def run(
        self, job: Pass, audio: np.ndarray, owner: str, gate_owner: str | None = None
    ) -> Recognition | None:
        """``job`` over ``audio`` for ``owner`` (None: it went stale while queued); raises
        what the model raised, or :class:`PassTimeoutError`. Cancelling it waits for a
        pass under way (it ends within the bound)."""
        async with self.limiter:
            with anyio.CancelScope(shield=True) as bound:
                bound.deadline = anyio.current_time() + self.timeout_s
                return await anyio.to_thread.run_sync(
                    self._in_thread, job, audio, owner, gate_owner, abandon_on_cancel=True
                )
        job.stale = True  # when still queued in the model, it is skipped there
        raise PassTimeoutError(f"transcription took longer than {self.timeout_s:g} s")

    def _in_thread(
        self, job: Pass, audio: np.ndarray, owner: str, gate_owner: str | None
    ) -> Recognition | None:
        if job.stale:
            return None
        job.started, job.started_at = True, time.perf_counter()
        full = self.full_window and job.kind == "speculative"
        result = recognize(
            self.stt,
            audio,
            full_window=full,
            urgent=job.urgent,
            participant_id=owner,
            gate_owner=gate_owner,
            still_partial=lambda: not job.urgent,
        )
        self.cost.record(result.elapsed_s)
        return result


class PauseRecognizer:
    """One voice's passes, kept by utterance; see the module docstring."""

    def __init__(self, recognizer: Recognizer, owner: str, gate_owner: str | None = None) -> None:
        self.recognizer = recognizer
        self.owner = owner  # whose passes (a participant id, in logs and traces)
        self.gate_owner = gate_owner  # their name in the compute gate's trace
        self.passes: list[Pass] = []

    @property
    def running(self) -> bool:
        """One of this voice's passes is queued or running."""
        return any(not p.done.is_set() for p in self.passes)

    def latest(self, kind: str) -> Pass | None:
        return next((p for p in reversed(self.passes) if p.kind == kind), None)

    def start(
        self,
        spawn: Callable[..., Any],
        job: Pass,
        audio: np.ndarray,
        then: Callable[[Pass], None] | None = None,
    ) -> Pass:
        """Run ``job`` in a task ``spawn`` starts (a task group's ``start_soon``) and call
        ``then`` with it when done; a pass that may end the utterance makes those still
        queued stale."""
        if job.kind != "partial":
            self.drop_waiting()
        self.passes.append(job)

        async def run() -> None:
            await self.run(job, audio)
            if then is not None:
                then(job)

        spawn(run)
        return job

    async def run(self, job: Pass, audio: np.ndarray) -> None:
        """Run ``job`` now; a failure is logged and named in :attr:`Pass.error`."""
        TRACES.mark(self.owner, "pass_queued", kind=job.kind)
        try:
            job.result = await self.recognizer.run(job, audio, self.owner, self.gate_owner)
        except YieldedToUrgentError:  # not run, as if overtaken: the endpoint reuses another
            job.started, job.stale = False, True
            log.debug("%s: %s pass gave way to urgent work", self.owner, job.kind)
        except (*REMOTE_ERRORS, PassTimeoutError) as exc:
            job.error = str(exc)
            log.warning("transcription failed for %s: %s", self.owner, exc)
        except Exception:
            log.exception("transcription failed for %s", self.owner)
        finally:
            job.done.set()
        _log_pass(self.owner, job, len(audio) / self.recognizer.stt.sample_rate)

    def covering(self, utterance: int, speech_end: int, pad: int) -> Pass | None:
        """A pass of ``utterance`` still to run or running that hears ``speech_end``."""
        return next(
            (
                p
                for p in self.passes
                if p.utterance == utterance
                and not p.stale
                and not p.done.is_set()
                and p.hears(speech_end, pad)
            ),
            None,
        )

    def reusable(self, utterance: int, speech_end: int, pad: int) -> Pass | None:
        """The newest pass of ``utterance`` that hears its speech up to ``speech_end`` as
        a pass at the endpoint would, and ran (or will)."""
        return next(
            (
                p
                for p in reversed(self.passes)
                if p.utterance == utterance
                and p.hears(speech_end, pad)
                and (p.started or not p.stale)
            ),
            None,
        )

    def drop_waiting(self, keep: Pass | None = None) -> None:
        """Passes still queued for the model are skipped when they get there."""
        for p in self.passes:
            if p is not keep and not p.done.is_set():
                p.stale = True

    def end(self, utterance: int, speech_end: int, pad: int) -> tuple[Pass | None, int]:
        """``utterance`` ended at ``speech_end``: the pass to reuse for its final text
        (None: a fresh one runs) and how many of its passes ran or will; the others
        still queued go stale, and the finished ones are forgotten."""
        reuse = self.reusable(utterance, speech_end, pad)
        if reuse is not None:
            reuse.awaited = True  # a partial no longer gives way: the turn waits for it
        self.drop_waiting(keep=reuse)
        count = sum(1 for p in self.passes if p.utterance == utterance and not p.stale)
        self.passes = [p for p in self.passes if not p.done.is_set() and p is not reuse]
        return reuse, count

    async def final(
        self, reuse: Pass | None, job: Pass, audio: np.ndarray, stream: Any = None
    ) -> Pass:
        """The pass that gives an ended utterance's text: ``reuse`` when it gave one,
        else ``job``: the result of the utterance's ``stream`` (a recognizer that takes
        it as spoken), or, without one or when it failed, a pass over ``audio`` now
        (one whole request: nothing lost)."""
        if reuse is not None:
            await reuse.done.wait()
            if reuse.result is not None:
                return reuse
        if not await _final_from_stream(stream, job):
            await self.run(job, audio)
        return job


async def _final_from_stream(stream: Any, job: Pass) -> bool:
    """``job``'s result from the utterance's stream; False when there is none or it
    failed (the caller then sends the utterance whole)."""
    if stream is None:
        return False
    job.started, job.started_at = True, time.perf_counter()
    try:
        job.result = await stream.finish()
    except REMOTE_ERRORS as exc:
        log.warning("%s; the utterance is sent whole", exc)
        job.started = False
        return False
    job.done.set()
    return True


def _log_pass(owner: str, job: Pass, audio_s: float) -> None:
    """One debug line per pass: its kind, audio, time queued for the model and run (and
    the pass's end in the turn's trace)."""
    TRACES.mark(owner, "pass_done", kind=job.kind, ran=job.started)
    if not log.isEnabledFor(logging.DEBUG):
        return
    if not job.started:
        log.debug("%s: %s pass skipped (overtaken)", owner, job.kind)
        return
    log.debug(
        "%s: %s pass of utterance %d over %.2f s of audio: queued %.3f s, ran %.3f s: %r",
        owner,
        job.kind,
        job.utterance,
        audio_s,
        job.started_at - job.queued_at,
        job.result.elapsed_s if job.result is not None else -1.0,
        job.result.text if job.result is not None else None,
    )
