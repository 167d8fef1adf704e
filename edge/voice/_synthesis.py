"""One speaker's text → audio at one output rate: the voice's calls in a worker thread,
first-sentence-first across participants, over a reply's stream where the voice streams
replies (a remote Wyoming ``tts``), failures logged and reported, never raised."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

import anyio
import numpy as np

from edge.runtime import (
    FIRST_PIECES,
    NORMAL,
    TRACES,
    URGENT,
    YieldedToUrgentError,
    owned_by,
    turn_started,
    urgency,
    yielding,
)

from ._audio import resample
from ._remote import REMOTE_ERRORS
from ._tts import NothingToSpeakError, StreamingTextToSpeech, TextToSpeech

log = logging.getLogger(__name__)

SpeechFailure = Callable[["str | None", str], None]  # (request id, message)

FIRST_AUDIO_WAIT_S = 1.0
"""The longest a sentence synthesized ahead waits for others' first sentences."""
YIELD_RETRY_S = 0.02
"""How soon a sentence synthesized ahead that gave way to urgent work asks again."""
STALE_WAIT_S = 10.0
"""A turn still waiting for its first audio after this long is no longer waited for."""


class FirstAudio:
    """The participants of a pipeline whose turn waits for its first audio. While one
    does, the sentences others' speakers synthesize ahead wait (at most
    :data:`FIRST_AUDIO_WAIT_S`): the device's model steps go to the answer and the first
    sentence someone waits for in silence, so everyone hears their first sentence before
    anyone hears a second one made ahead of time.

    A turn counts from its pause's guess (:meth:`expect`: its answer starts then, and its
    first piece is prepared), not only from its query: a sentence made ahead (up to
    ~0.25 s of both cores) started between the two would hold up that answer's steps."""

    def __init__(self) -> None:
        self._waiting: dict[str, float] = {}  # participant -> since (perf_counter)
        self._guessed: set[str] = set()  # entries from a pause's guess, not yet a query
        self._changed = anyio.Event()

    def wait_for(self, participant_id: str) -> None:
        """``participant_id`` began a turn whose speech they will hear."""
        self._guessed.discard(participant_id)
        self._waiting[participant_id] = time.perf_counter()

    def expect(self, participant_id: str) -> None:
        """A pause of ``participant_id``'s gave a guess: their answer is being made."""
        if participant_id not in self._waiting:
            self._guessed.add(participant_id)
            self._waiting[participant_id] = time.perf_counter()

    def retract(self, participant_id: str) -> None:
        """Their guess was withdrawn (speech resumed): no turn of theirs waits, unless a
        query began one."""
        if participant_id in self._guessed:
            self._guessed.discard(participant_id)
            self.heard(participant_id)

    def heard(self, participant_id: str) -> None:
        """Their first audio went out (or the turn ended, or they left)."""
        self._guessed.discard(participant_id)
        if self._waiting.pop(participant_id, None) is not None:
            self._changed.set()
            self._changed = anyio.Event()

    def since(self, participant_id: str) -> float | None:
        """When ``participant_id``'s turn began waiting for its first audio (its place in
        the compute gate's line), if it does."""
        return self._waiting.get(participant_id)

    def others_waiting(self, participant_id: str) -> bool:
        stale = time.perf_counter() - STALE_WAIT_S
        return any(p != participant_id and t > stale for p, t in self._waiting.items())

    async def after_others(self, participant_id: str) -> None:
        """Return once nobody else waits for a first sentence (or after the bound)."""
        with anyio.move_on_after(FIRST_AUDIO_WAIT_S):
            while self.others_waiting(participant_id):
                changed = self._changed
                with anyio.move_on_after(0.25):  # a stale entry expires without an event
                    await changed.wait()


class Synthesis:
    """Speech for one participant from ``tts``, resampled to the first rate it gave
    (or ``output_rate``)."""

    def __init__(
        self,
        participant_id: str,
        tts: TextToSpeech,
        limiter: anyio.CapacityLimiter,
        output_rate: int | None = None,
        on_failure: SpeechFailure | None = None,
    ) -> None:
        self.participant_id = participant_id
        self.tts = tts
        self._limiter = limiter
        self.out_rate = output_rate
        self._on_failure = on_failure  # a remote voice failed on a request's sentence
        self.first_audio: FirstAudio | None = None  # whose first sentences go first

    @property
    def streams_replies(self) -> bool:
        """The voice speaks a reply's sentences over one stream (:meth:`end_reply` ends it)."""
        return isinstance(self.tts, StreamingTextToSpeech)

    @property
    def rate(self) -> int:
        return self.out_rate or self.tts.sample_rate

    async def __call__(
        self, text: str, request_id: str | None = None, head: bool = False
    ) -> np.ndarray:
        """``text``'s audio (empty when there is nothing to speak or it failed); ``head``:
        a listener waits for it in silence, so it goes before others' later sentences."""
        TRACES.mark(self.participant_id, "synthesis_asked", once=True, head=head)
        if head:
            FIRST_PIECES.spoken(self.participant_id)  # the answer's later words can wait
        try:
            if head or self.first_audio is None:
                return await self._in_thread(text, request_id, head, False)
            return await self._ahead(text, request_id)
        except NothingToSpeakError:
            pass
        except REMOTE_ERRORS as exc:
            log.warning("speech synthesis failed for %s: %s", self.participant_id, exc)
            if request_id is not None and self._on_failure is not None:
                self._on_failure(request_id, str(exc))
        except Exception:
            log.exception("speech synthesis failed for %s", self.participant_id)
        return np.zeros(0, dtype=np.float32)

    async def _ahead(self, text: str, request_id: str | None) -> np.ndarray:
        """A sentence made ahead: after others' first sentences, and giving way to urgent
        work at the compute gate instead of waiting in line there (taking the gate in a
        gap of an answer's first steps, it would hold them up for its whole synthesis),
        until :data:`FIRST_AUDIO_WAIT_S` has passed; then it waits in line."""
        assert self.first_audio is not None
        deadline = time.perf_counter() + FIRST_AUDIO_WAIT_S
        while True:
            with anyio.move_on_after(deadline - time.perf_counter()):
                await self.first_audio.after_others(self.participant_id)
            gives_way = time.perf_counter() < deadline
            try:
                return await self._in_thread(text, request_id, False, gives_way)
            except YieldedToUrgentError:
                await anyio.sleep(YIELD_RETRY_S)

    async def _in_thread(
        self, text: str, request_id: str | None, head: bool, gives_way: bool
    ) -> np.ndarray:
        return await anyio.to_thread.run_sync(
            self._speak, text, request_id, head, gives_way, limiter=self._limiter
        )

    def _speak(
        self, text: str, request_id: str | None, head: bool, gives_way: bool = False
    ) -> np.ndarray:
        since = self.first_audio.since(self.participant_id) if self.first_audio else None
        with (
            urgency(URGENT if head else NORMAL),  # first-sentence-first across participants
            turn_started(since),  # among first sentences, the longest waiting listener's
            owned_by(f"voice:{self.participant_id}"),
            yielding() if gives_way else contextlib.nullcontext(),
        ):
            TRACES.mark(self.participant_id, "synthesis_started", once=True, head=head)
            if request_id is not None and isinstance(self.tts, StreamingTextToSpeech):
                result = self.tts.synthesize_in(request_id, text)  # over the reply's stream
            else:
                result = self.tts.synthesize(text)
        TRACES.mark(self.participant_id, "synthesis_done", once=True)
        rate = self.out_rate or result.sample_rate
        self.out_rate = rate
        return resample(result.audio, result.sample_rate, rate)

    def end_reply(self, request_id: str, *, interrupted: bool = False) -> None:
        """A voice that streams replies closes ``request_id``'s stream (interrupted: it
        asks for nothing more)."""
        if isinstance(self.tts, StreamingTextToSpeech):
            self.tts.end_reply(request_id, interrupted=interrupted)
