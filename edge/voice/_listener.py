"""One participant's input side: 16 kHz audio → VAD → endpointing → transcripts.

Transcription is scheduled around the endpointer's events so the final transcript is
usually ready when the utterance ends:

* while the participant speaks, a partial transcript every ``partial_interval_s`` of
  new speech, only when the model is free (never queued behind other work), and none in a
  pause once a pass covers the speech before it (it would transcribe only more silence,
  hold the model at the endpoint and could word the final transcript unlike the guess);
* once a pause has lasted ``speculative_after_ms`` a *speculative final* pass over the
  utterance so far, which runs during the rest of the end-of-utterance silence; a pass
  already running that covers the pause (a partial started as speech stopped) serves as
  it, so the pause's words are known one Whisper pass after the speech stops, not two;
* a pause's words are handed out as a speculation (the owner may prepare the answer),
  unless they clearly continue (a trailing comma or "the", "and", ...);
* at the endpoint, the newest pass that covers the last speech window is reused (awaited
  if still running); only when none does (speech resumed, or the cap cut the utterance)
  is a fresh pass run.

Transcripts and queries leave through one ordered queue, so a participant's partials,
final transcript and query arrive in order even though passes overlap.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import anyio
import numpy as np
from anyio.abc import TaskGroup

from edge.runtime import NORMAL, URGENT, YieldedToUrgentError, urgency, yielding

from ._config import VoiceConfig
from ._endpoint import (
    Endpointer,
    Event,
    SpeechPaused,
    SpeechResumed,
    SpeechStarted,
    UtteranceEnded,
)
from ._listener_stream import UtteranceStream
from ._messages import Transcript
from ._remote import REMOTE_ERRORS
from ._sentences import clearly_continues, end_verdict
from ._stt import FullWindowSpeechToText, Recognition, SpeechToText

log = logging.getLogger(__name__)


class VoiceActivity(Protocol):
    window: int

    def process(self, audio: np.ndarray) -> np.ndarray: ...


async def _publish_guess(
    hooks: ListenerHooks, participant_id: str, text: str, utterance: int
) -> None:
    try:
        await hooks.speculate(participant_id, text, utterance)
    except Exception:
        log.exception("publishing a guess for %s failed", participant_id)


class ListenerHooks(Protocol):
    """What the listener tells its owner."""

    def speech_started(self, participant_id: str) -> None:
        """Confirmed speech began (barge-in point); must not block."""

    async def transcript(self, participant_id: str, transcript: Transcript) -> None: ...

    async def query(self, participant_id: str, text: str, timestamp_us: int) -> None: ...

    async def speculate(self, participant_id: str, text: str, utterance: int) -> None:
        """The words so far, during a pause that may end the utterance ("" retracts)."""


class PassCost:
    """Running average of how long one transcription pass takes on this device (shared by
    the participants of a pipeline; 0 until measured)."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds

    def record(self, elapsed_s: float) -> None:
        self.seconds = elapsed_s if self.seconds == 0 else 0.7 * self.seconds + 0.3 * elapsed_s


@dataclass
class _Pass:
    utterance: int
    covers: int  # stream sample up to which the pass's audio goes
    kind: str  # partial | speculative | final
    done: anyio.Event = field(default_factory=anyio.Event)
    result: Recognition | None = None
    stale: bool = False  # a partial overtaken before it reached the model: skipped
    started: bool = False  # reached the model
    started_at: float = 0.0
    queued_at: float = field(default_factory=time.perf_counter)
    speculative: bool = False  # its words are the pause's guess (reported when done)
    cut_for: int = -1  # the speech end its audio was cut for, as at the endpoint (if it was)
    guess: bool = False  # a partial whose words are offered as a guess when done
    error: str | None = None  # a remote recognizer's failure (named in the final transcript)


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
        cls, job: _Pass, audio_s: float, ended_at: float, reused: _Pass | None, passes: int
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


def _log_pass(participant_id: str, job: _Pass, audio_s: float) -> None:
    """One debug line per pass: its kind, audio, time queued for the model and run."""
    if not log.isEnabledFor(logging.DEBUG):
        return
    if not job.started:
        log.debug("%s: %s pass skipped (overtaken)", participant_id, job.kind)
        return
    log.debug(
        "%s: %s pass of utterance %d over %.2f s of audio: queued %.3f s, ran %.3f s: %r",
        participant_id,
        job.kind,
        job.utterance,
        audio_s,
        job.started_at - job.queued_at,
        job.result.elapsed_s if job.result is not None else -1.0,
        job.result.text if job.result is not None else None,
    )


def _recognize(
    stt: SpeechToText, audio: np.ndarray, *, full_window: bool, urgent: bool
) -> Recognition:
    """One pass over ``audio`` (Whisper's whole window where asked and offered), ahead of
    others' steps when ``urgent`` (someone may be waiting for it). Otherwise (a partial)
    it gives way to urgent work at the compute gate (:class:`YieldedToUrgentError`): while
    it waited there it would hold the recognizer, and a pass that may end someone's
    turn would queue behind it."""
    gives_way = contextlib.nullcontext() if urgent else yielding()  # a partial: never a wait
    with urgency(URGENT if urgent else NORMAL), gives_way:
        if full_window and isinstance(stt, FullWindowSpeechToText):
            return stt.transcribe_full(audio)
        return stt.transcribe(audio)


def _as_at_endpoint(audio: np.ndarray, audio_start: int, ep: Endpointer) -> tuple[np.ndarray, int]:
    """A pause's audio (from stream sample ``audio_start``) as the endpoint would cut it:
    the pad after the end of the last speech, the part not heard yet filled with
    silence. Whisper tiny's reading of a last word changes with the silence after it (the
    same "France" heard as "friends" with 100 ms instead of 150), so a pause's pass that
    serves as the final one hears what a pass at the endpoint would. Returns the audio
    and the speech end it was cut for."""
    want = ep.last_voiced_end + ep.pad_samples - audio_start
    if len(audio) < want:
        audio = np.concatenate([audio, np.zeros(want - len(audio), dtype=np.float32)])
    return audio[:want], ep.last_voiced_end


def _hears(p: _Pass, speech_end: int, pad: int) -> bool:
    """Whether ``p`` hears what a pass at the endpoint would: the speech up to
    ``speech_end`` and the ``pad`` after it (its audio cut for that end, or heard)."""
    return p.covers >= speech_end and (p.cut_for == speech_end or p.covers >= speech_end + pad)


def _covering(passes: list[_Pass], utterance: int, speech_end: int, pad: int) -> _Pass | None:
    """A pass of ``utterance`` still to run or running that hears ``speech_end``."""
    return next(
        (
            p
            for p in passes
            if p.utterance == utterance
            and not p.stale
            and not p.done.is_set()
            and _hears(p, speech_end, pad)
        ),
        None,
    )


def _reusable(passes: list[_Pass], utterance: int, speech_end: int, pad: int) -> _Pass | None:
    """The newest pass of ``utterance`` that hears its speech up to ``speech_end`` as a
    pass at the endpoint would, and ran (or will)."""
    return next(
        (
            p
            for p in reversed(passes)
            if p.utterance == utterance
            and _hears(p, speech_end, pad)
            and (p.started or not p.stale)
        ),
        None,
    )


def _drop_waiting(passes: list[_Pass], keep: _Pass | None = None) -> None:
    """Passes still queued for the model are skipped when they get there."""
    for p in passes:
        if p is not keep and not p.done.is_set():
            p.stale = True


def _final_transcript(job: _Pass, event: UtteranceEnded, start_us: int) -> Transcript:
    """The final transcript of ``job``'s utterance (its error when no text came)."""
    return Transcript(
        text=job.result.text if job.result else "",
        utterance=job.utterance,
        final=True,
        truncated=event.truncated,
        speech_start_us=start_us,
        error=job.error if job.result is None else None,
    )


async def _final_from_stream(stream: Any, job: _Pass) -> bool:
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


class _Outbox:
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


class Listener:
    """Turns one participant's audio into transcripts and queries; see the module doc."""

    def __init__(
        self,
        participant_id: str,
        config: VoiceConfig,
        vad: VoiceActivity,
        stt: SpeechToText,
        limiter: anyio.CapacityLimiter,
        hooks: ListenerHooks,
        cost: PassCost | None = None,
    ) -> None:
        self.participant_id = participant_id
        self.config = config
        self._vad = vad
        self._stt = stt
        self._limiter = limiter
        self._hooks = hooks
        self._rate = stt.sample_rate
        self._endpointer = Endpointer(config.vad, self._rate, vad.window)
        self._fed = 0
        self._anchor = (0, 0)  # (stream sample, wall time us) of the latest chunk start
        self._utterance = 0
        self._released_at = 0  # self._utterance at the latest push-to-talk release
        self._speech_start_us = 0
        self._passes: list[_Pass] = []
        self._last_partial_covers = 0
        self._cost = cost if cost is not None else PassCost()
        self._speculated = True  # a speculative pass was started for the current pause
        self._spoken_guess = ""  # speculative text handed out for the current pause
        self._final_pending: set[int] = set()  # ended utterances whose final is not out
        self._tg: TaskGroup | None = None
        self._outbox = _Outbox(participant_id)
        self.stats: deque[UtteranceStats] = deque(maxlen=100)  # the latest utterances
        self._stream = UtteranceStream(stt, self._endpointer)

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Own the listener's background work until cancelled."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._outbox.run)
            task_status.started()
            await anyio.sleep_forever()

    @property
    def speaking(self) -> bool:
        return self._endpointer.speaking

    def feed(self, audio: np.ndarray, start_us: int) -> None:
        """Consume 16 kHz mono float32 audio whose first sample was captured at ``start_us``."""
        self._anchor = (self._fed, start_us)
        self._fed += len(audio)
        probabilities = self._vad.process(audio)
        self._handle(self._endpointer.feed(audio, probabilities))
        self._stream.feed(audio, self._fed - self._endpointer.position)
        if self._endpointer.speaking:
            self._maybe_speculate()
            self._maybe_partial()

    def hold(self) -> None:
        """Push-to-talk pressed: silence does not end the utterance until
        :meth:`end_utterance` (or the utterance length cap)."""
        self._endpointer.hold()

    def end_utterance(self) -> None:
        """End the current utterance now (push-to-talk release): its transcript and query
        follow at once, reusing a pass that covers it; the latest partial's words, when
        they missed little of the speech, are offered as a guess while the final pass runs."""
        if self._endpointer.speaking:
            self._guess_from_partial(self._endpointer.position)
        self._handle(self._endpointer.finish())
        if self._utterance == self._released_at:  # no utterance since the last release
            self._nothing_heard()
        self._released_at = self._utterance

    def _nothing_heard(self) -> None:
        """A release with no speech before it ends an empty utterance: its final transcript
        (empty text, no query) tells the participant that nothing was heard."""
        empty = Transcript(text="", utterance=self._utterance, final=True)
        self._utterance += 1
        self._outbox.put(partial(self._hooks.transcript, self.participant_id, empty))

    def _handle(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, SpeechStarted):
                base_sample, base_us = self._anchor  # the wall time of the speech's start
                self._speech_start_us = (
                    base_us + (event.start_sample - base_sample) * 1_000_000 // self._rate
                )
                self._last_partial_covers = event.start_sample
                self._stream.open(self._tg, partial(self._streamed_partial, self._utterance))
                self._hooks.speech_started(self.participant_id)
            elif isinstance(event, SpeechPaused):
                self._speculated = False
            elif isinstance(event, SpeechResumed):
                _drop_waiting(self._passes)  # they cannot cover the utterance's end now
                self._offer("")
            elif isinstance(event, UtteranceEnded):
                self._spoken_guess = ""  # the query itself confirms or replaces it
                self._finish(event)

    def _maybe_speculate(self) -> None:
        if self._speculated or not self.config.speculative_final:
            return
        wait = self.config.speculative_after_ms * self._rate // 1000
        ep = self._endpointer
        if ep.silence_samples < max(wait, 1):
            return
        self._speculated = True
        self._guess_from_partial(ep.last_voiced_end)
        covering = _covering(self._passes, self._utterance, ep.last_voiced_end, ep.pad_samples)
        if covering is not None:
            covering.speculative = True  # already under way over the whole pause
        else:
            self._start_pass("speculative")

    def _maybe_partial(self) -> None:
        interval = self.config.partial_interval_s
        if interval <= 0 or self._tg is None or self._stream.gives_partials:
            return
        if any(not p.done.is_set() for p in self._passes):
            return
        if self._limiter.borrowed_tokens >= self._limiter.total_tokens:
            return  # the model is busy (another participant): never queue a partial
        if self._cost.seconds > min(interval, self.config.vad.end_silence_ms / 1000):
            return  # a pass in flight at a pause delays the final one: only while it is short
        ep = self._endpointer
        paused = ep.silence_samples > 0
        if paused and (
            self.config.speculative_final  # its pass is due soon: none may hold it up
            or _reusable(self._passes, self._utterance, ep.last_voiced_end, 0)  # heard all
        ):
            return
        if ep.position - self._last_partial_covers >= interval * self._rate:
            self._start_pass("partial")

    def _start_pass(self, kind: str) -> _Pass | None:
        audio, audio_start = self._endpointer.utterance_audio()
        if self._tg is None or not len(audio):
            return None
        job = _Pass(
            self._utterance, audio_start + len(audio), kind, speculative=kind == "speculative"
        )
        if job.speculative:  # it may serve as the final pass: hear what that one would
            audio, job.cut_for = _as_at_endpoint(audio, audio_start, self._endpointer)
        if kind != "partial":
            _drop_waiting(self._passes)
        self._passes.append(job)
        if kind == "partial":
            self._last_partial_covers = job.covers
        self._tg.start_soon(self._run_pass, job, audio)
        return job

    def _transcribe(self, job: _Pass, audio: np.ndarray) -> Recognition | None:
        """In a worker thread: transcribe, unless the pass went stale while queued."""
        if job.stale:
            return None
        job.started = True
        job.started_at = time.perf_counter()
        full = self.config.full_window_pause_pass and job.kind == "speculative"
        ends_turn = job.kind != "partial" or job.speculative  # its speaker may be waiting
        result = _recognize(self._stt, audio, full_window=full, urgent=ends_turn)
        self._cost.record(result.elapsed_s)
        return result

    async def _run_pass(self, job: _Pass, audio: np.ndarray) -> None:
        try:
            job.result = await anyio.to_thread.run_sync(
                self._transcribe, job, audio, limiter=self._limiter
            )
        except YieldedToUrgentError:  # not run, as if overtaken: the endpoint reuses another
            job.started, job.stale = False, True
            log.debug("%s: %s pass gave way to urgent work", self.participant_id, job.kind)
        except REMOTE_ERRORS as exc:
            job.error = str(exc)
            log.warning("transcription failed for %s: %s", self.participant_id, exc)
        except Exception:
            log.exception("transcription failed for %s", self.participant_id)
        finally:
            job.done.set()
        _log_pass(self.participant_id, job, len(audio) / self._rate)
        if job.speculative and job.result is not None:
            self._speculative_result(job, job.result.text)
        elif job.guess and job.result is not None:
            self._partial_guess(job, job.result.text)
        if job.kind == "partial" and job.result and job.result.text:
            self._publish_partial(job.result.text, job.utterance)

    def _publish_partial(self, text: str, utterance: int) -> None:
        """A partial transcript of ``utterance``, unless it is finalized meanwhile."""
        start_us = self._speech_start_us

        async def send_partial() -> None:
            if utterance == self._utterance:
                await self._hooks.transcript(
                    self.participant_id,
                    Transcript(text=text, utterance=utterance, speech_start_us=start_us),
                )

        self._outbox.put(send_partial)

    def _speculative_result(self, job: _Pass, text: str) -> None:
        """A pause's transcript arrived before the endpoint: adapt the end silence to it
        (a complete question: shorter; mid-phrase: longer; a statement: unchanged) and hand
        it out as a guess."""
        ep = self._endpointer
        current = job.utterance == self._utterance and ep.speaking
        if not (current and ep.silence_samples and job.covers >= ep.last_voiced_end):
            return  # the endpoint came first, or speech resumed after the pass's audio
        self._offer(text if text and not clearly_continues(text) else "")
        verdict = end_verdict(text)
        if verdict is not None:
            self._handle(ep.adapt(verdict))

    def _guess_from_partial(self, speech_end: int) -> None:
        """Speech stopped (a pause past ``speculative_after_ms``, or push-to-talk release):
        the latest partial pass, if it missed at most ``partial_guess_gap_ms`` of the
        speech, offers its words as the guess now (or when it finishes), one Whisper pass
        before a covering pass could."""
        gap = self.config.partial_guess_gap_ms * self._rate // 1000
        job = next((p for p in reversed(self._passes) if p.kind == "partial"), None)
        if job is None or job.utterance != self._utterance or job.stale:
            return
        if speech_end - job.covers > gap or not self.config.speculative_final:
            return
        if not job.done.is_set():
            job.guess = True
        elif job.result is not None:
            self._partial_guess(job, job.result.text)

    def _partial_guess(self, job: _Pass, text: str) -> None:
        if not text or clearly_continues(text):
            return
        ep = self._endpointer
        if job.utterance == self._utterance:
            if ep.speaking and ep.silence_samples and not self._spoken_guess:
                self._offer(text)  # still paused, and no covering pass has spoken yet
        elif job.utterance in self._final_pending and self._tg is not None:
            # Ended while this partial ran: its final pass still runs, and the ordered
            # queue holds behind it, so the guess goes out now (still well before the query).
            self._tg.start_soon(
                _publish_guess, self._hooks, self.participant_id, text, job.utterance
            )

    def _offer(self, text: str) -> None:
        """Hand out ``text`` as the current pause's guess ("" retracts one)."""
        if text != self._spoken_guess:
            self._spoken_guess = text
            self._outbox.put(
                partial(self._hooks.speculate, self.participant_id, text, self._utterance)
            )

    def _finish(self, event: UtteranceEnded) -> None:
        utterance = self._utterance
        ended_at = time.perf_counter()
        start_us = self._speech_start_us
        pad = self._endpointer.pad_samples
        reuse = _reusable(self._passes, utterance, event.speech_end_sample, pad)
        _drop_waiting(self._passes, keep=reuse)
        passes = sum(1 for p in self._passes if p.utterance == utterance and not p.stale)
        self._passes = [p for p in self._passes if not p.done.is_set() and p is not reuse]
        self._utterance += 1
        self._final_pending.add(utterance)
        audio = event.audio
        stream = self._stream.take(audio)

        async def finalize() -> None:
            job = reuse
            try:
                if job is not None:
                    await job.done.wait()
                if job is None or job.result is None:
                    job = _Pass(utterance, event.speech_end_sample, "final")
                    if not await _final_from_stream(stream, job):
                        await self._run_pass(job, audio)  # one whole request: nothing lost
            finally:  # cancelled (the participant left) or failed: no final pending either way
                self._final_pending.discard(utterance)
                if stream is not None:
                    stream.cancel()
            stats = UtteranceStats.of(job, len(audio) / self._rate, ended_at, reuse, passes)
            self.stats.append(stats)
            final = _final_transcript(job, event, start_us)
            await self._hooks.transcript(self.participant_id, final)
            if text := final.text:
                await self._hooks.query(self.participant_id, text, start_us)

        self._outbox.put(finalize)

    def _streamed_partial(self, utterance: int, text: str) -> None:
        """The server streamed the words so far: a partial transcript (and, in a pause,
        the guess)."""
        if utterance != self._utterance or not text:
            return
        ep = self._endpointer
        if ep.speaking and ep.silence_samples and not clearly_continues(text):
            self._offer(text)
        self._publish_partial(text, utterance)
