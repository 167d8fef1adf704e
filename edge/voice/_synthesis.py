"""One speaker's text → audio at one output rate: the voice's calls in a worker thread,
first-sentence-first across participants, over a reply's stream where the voice streams
replies (a remote Wyoming ``tts``), failures logged and reported, never raised."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio
import numpy as np

from edge.runtime import NORMAL, TRACES, URGENT, owned_by, urgency

from ._audio import resample
from ._remote import REMOTE_ERRORS
from ._tts import NothingToSpeakError, StreamingTextToSpeech, TextToSpeech

log = logging.getLogger(__name__)

SpeechFailure = Callable[["str | None", str], None]  # (request id, message)

FIRST_AUDIO_WAIT_S = 1.0
"""The longest a sentence synthesized ahead waits for others' first sentences."""
STALE_WAIT_S = 10.0
"""A turn still waiting for its first audio after this long is no longer waited for."""


class FirstAudio:
    """The participants of a pipeline whose turn waits for its first audio. While one
    does, the sentences others' speakers synthesize ahead wait (at most
    :data:`FIRST_AUDIO_WAIT_S`): the device's model steps go to the answer and the first
    sentence someone waits for in silence, so everyone hears their first sentence before
    anyone hears a second one made ahead of time."""

    def __init__(self) -> None:
        self._waiting: dict[str, float] = {}  # participant -> since (monotonic)
        self._changed = anyio.Event()

    def wait_for(self, participant_id: str) -> None:
        """``participant_id`` began a turn whose speech they will hear."""
        self._waiting[participant_id] = time.monotonic()

    def heard(self, participant_id: str) -> None:
        """Their first audio went out (or the turn ended, or they left)."""
        if self._waiting.pop(participant_id, None) is not None:
            self._changed.set()
            self._changed = anyio.Event()

    def others_waiting(self, participant_id: str) -> bool:
        stale = time.monotonic() - STALE_WAIT_S
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
        if not head and self.first_audio is not None:  # made ahead: others' first go first
            await self.first_audio.after_others(self.participant_id)
        TRACES.mark(self.participant_id, "synthesis_asked", once=True, head=head)
        try:
            return await anyio.to_thread.run_sync(
                self._speak, text, request_id, head, limiter=self._limiter
            )
        except NothingToSpeakError:
            pass
        except REMOTE_ERRORS as exc:
            log.warning("speech synthesis failed for %s: %s", self.participant_id, exc)
            if request_id is not None and self._on_failure is not None:
                self._on_failure(request_id, str(exc))
        except Exception:
            log.exception("speech synthesis failed for %s", self.participant_id)
        return np.zeros(0, dtype=np.float32)

    def _speak(self, text: str, request_id: str | None, head: bool) -> np.ndarray:
        with (
            urgency(URGENT if head else NORMAL),  # first-sentence-first across participants
            owned_by(f"voice:{self.participant_id}"),
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
