"""One speaker's text → audio at one output rate: the voice's calls in a worker thread,
first-sentence-first across participants, over a reply's stream where the voice streams
replies (a remote Wyoming ``tts``), failures logged and reported, never raised."""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import numpy as np

from edge.runtime import NORMAL, TRACES, URGENT, owned_by, urgency

from ._audio import resample
from ._remote import REMOTE_ERRORS
from ._tts import NothingToSpeakError, StreamingTextToSpeech, TextToSpeech

log = logging.getLogger(__name__)

SpeechFailure = Callable[["str | None", str], None]  # (request id, message)


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
