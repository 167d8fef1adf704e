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

The passes themselves are the voice's :class:`~edge.voice._pause.PauseRecognizer`'s
(kept by utterance, run on the recognizer every voice shares); this module decides when
they start and what their words become. Transcripts and queries leave through one
ordered queue (:mod:`._listener_out`), so a participant's partials, final transcript and
query arrive in order even though passes overlap.
"""

from __future__ import annotations

import time
from collections import deque
from functools import partial
from typing import Protocol

import anyio
import numpy as np
from anyio.abc import TaskGroup

from edge.runtime import TRACES

from ._audio import cut_or_pad
from ._config import VoiceConfig
from ._endpoint import (
    Endpointer,
    Event,
    SpeechPaused,
    SpeechResumed,
    SpeechStarted,
    UtteranceEnded,
)
from ._listener_out import (
    ListenerHooks,
    Outbox,
    UtteranceStats,
    final_transcript,
    publish_guess,
)
from ._listener_stream import UtteranceStream
from ._messages import Transcript
from ._pause import Pass, PauseRecognizer, Recognizer
from ._sentences import clearly_continues, end_verdict

__all__ = ["Listener", "ListenerHooks", "UtteranceStats", "VoiceActivity"]


class VoiceActivity(Protocol):
    window: int

    def process(self, audio: np.ndarray) -> np.ndarray: ...


def _as_at_endpoint(audio: np.ndarray, audio_start: int, ep: Endpointer) -> tuple[np.ndarray, int]:
    """A pause's audio (from stream sample ``audio_start``) as the endpoint would cut it:
    the pad after the end of the last speech, the part not heard yet filled with
    silence. Whisper tiny's reading of a last word changes with the silence after it (the
    same "France" heard as "friends" with 100 ms instead of 150), so a pause's pass that
    serves as the final one hears what a pass at the endpoint would. Returns the audio
    and the speech end it was cut for."""
    want = ep.last_voiced_end + ep.pad_samples - audio_start
    return cut_or_pad(audio, want), ep.last_voiced_end


class Listener:
    """Turns one participant's audio into transcripts and queries; see the module doc.
    Its passes are a :class:`PauseRecognizer`'s over the shared ``recognizer``."""

    def __init__(
        self,
        participant_id: str,
        config: VoiceConfig,
        vad: VoiceActivity,
        recognizer: Recognizer,
        hooks: ListenerHooks,
    ) -> None:
        self.participant_id = participant_id
        self.config = config
        self._vad = vad
        self._hooks = hooks
        self._rate = recognizer.stt.sample_rate
        self._endpointer = Endpointer(config.vad, self._rate, vad.window)
        self._fed = 0
        self._anchor = (0, 0)  # (stream sample, wall time us) of the latest chunk start
        self._utterance = 0
        self._released_at = 0  # self._utterance at the latest push-to-talk release
        self._speech_start_us = 0
        self._pauses = PauseRecognizer(recognizer, participant_id)
        self._last_partial_covers = 0
        self._speculated = True  # a speculative pass was started for the current pause
        self._spoken_guess = ""  # speculative text handed out for the current pause
        self._final_pending: set[int] = set()  # ended utterances whose final is not out
        self._tg: TaskGroup | None = None
        self._outbox = Outbox(participant_id)
        self.stats: deque[UtteranceStats] = deque(maxlen=100)  # the latest utterances
        self._stream = UtteranceStream(recognizer.stt, self._endpointer)

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
        """Push-to-talk pressed: only :meth:`end_utterance` (or the length cap) ends it."""
        self._endpointer.hold()

    def end_utterance(self) -> None:
        """End the current utterance now (push-to-talk release), reusing a pass that covers
        it; the latest partial's words, when they missed little of the speech, are offered
        as a guess while the final pass runs."""
        if self._endpointer.speaking:
            self._guess_from_partial(self._endpointer.position)
        self._handle(self._endpointer.finish())
        if self._utterance == self._released_at:  # no utterance since the last release
            self._nothing_heard()
        self._released_at = self._utterance

    def _nothing_heard(self) -> None:
        """A release with no speech: an empty final transcript (no query) says so."""
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
                TRACES.start(self.participant_id, utterance=self._utterance)
                self._stream.open(self._tg, partial(self._streamed_partial, self._utterance))
                self._hooks.speech_started(self.participant_id)
            elif isinstance(event, SpeechPaused):
                self._speculated = False
            elif isinstance(event, SpeechResumed):
                self._pauses.drop_waiting()  # they cannot cover the utterance's end now
                self._offer("")
            elif isinstance(event, UtteranceEnded):
                TRACES.mark(self.participant_id, "vad_end", utterance=self._utterance)
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
        covering = self._pauses.covering(self._utterance, ep.last_voiced_end, ep.pad_samples)
        if covering is not None:
            covering.speculative = True  # already under way over the whole pause
        else:
            self._start_pass("speculative")

    def _maybe_partial(self) -> None:
        interval, pauses = self.config.partial_interval_s, self._pauses
        if interval <= 0 or self._tg is None or self._stream.gives_partials:
            return
        if pauses.running or pauses.recognizer.busy:
            return  # the model is busy (another participant's pass?): never queue a partial
        if pauses.recognizer.cost.seconds > min(interval, self.config.vad.end_silence_ms / 1000):
            return  # a pass in flight at a pause delays the final one: only while it is short
        ep = self._endpointer
        if ep.silence_samples > 0 and (
            self.config.speculative_final  # its pass is due soon: none may hold it up
            or pauses.reusable(self._utterance, ep.last_voiced_end, 0)  # heard all
        ):
            return
        if ep.position - self._last_partial_covers >= interval * self._rate:
            self._start_pass("partial")

    def _start_pass(self, kind: str) -> None:
        audio, audio_start = self._endpointer.utterance_audio()
        if self._tg is None or not len(audio):
            return
        job = Pass(self._utterance, audio_start + len(audio), kind)
        if kind == "speculative":  # it may serve as the final pass: hear what that one would
            job.speculative = True
            audio, job.cut_for = _as_at_endpoint(audio, audio_start, self._endpointer)
        elif kind == "partial":
            self._last_partial_covers = job.covers
        self._pauses.start(self._tg.start_soon, job, audio, self._pass_done)

    def _pass_done(self, job: Pass) -> None:
        text = job.result.text if job.result is not None else None
        if job.speculative and text is not None:
            self._speculative_result(job, text)
        elif job.guess and text is not None:
            self._partial_guess(job, text)
        if job.kind == "partial" and text:
            self._publish_partial(text, job.utterance)

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

    def _speculative_result(self, job: Pass, text: str) -> None:
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
        job = self._pauses.latest("partial")
        if job is None or job.utterance != self._utterance or job.stale:
            return
        if speech_end - job.covers > gap or not self.config.speculative_final:
            return
        if not job.done.is_set():
            job.guess = True
        elif job.result is not None:
            self._partial_guess(job, job.result.text)

    def _partial_guess(self, job: Pass, text: str) -> None:
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
                publish_guess, self._hooks, self.participant_id, text, job.utterance
            )

    def _offer(self, text: str) -> None:
        """Hand out ``text`` as the current pause's guess ("" retracts one)."""
        if text != self._spoken_guess:
            self._spoken_guess = text
            self._outbox.put(
                partial(self._hooks.speculate, self.participant_id, text, self._utterance)
            )

    def _finish(self, event: UtteranceEnded) -> None:
        utterance, ended_at, start_us = self._utterance, time.perf_counter(), self._speech_start_us
        end = event.speech_end_sample
        reuse, passes = self._pauses.end(utterance, end, self._endpointer.pad_samples)
        self._utterance += 1
        self._final_pending.add(utterance)
        audio = event.audio
        stream = self._stream.take(audio)

        async def finalize() -> None:
            try:
                job = await self._pauses.final(reuse, Pass(utterance, end, "final"), audio, stream)
            finally:  # cancelled (the participant left) or failed: no final pending either way
                self._final_pending.discard(utterance)
                if stream is not None:
                    stream.cancel()
            stats = UtteranceStats.of(job, len(audio) / self._rate, ended_at, reuse, passes)
            self.stats.append(stats)
            final = final_transcript(self.participant_id, job, event, start_us)
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
