"""The listener's side of a recognizer that takes an utterance as it is spoken (a
:class:`~edge.voice.StreamingSpeechToText`, e.g. a remote Wyoming server): one stream per
utterance, opened at confirmed speech, fed each chunk, and handed to the final pass at the
endpoint. Without such a recognizer every method here does nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from anyio.abc import TaskGroup

from ._endpoint import Endpointer
from ._stt import SpeechToText, StreamingSpeechToText


class UtteranceStream:
    """The current utterance's stream to ``stt`` (none when ``stt`` does not stream)."""

    def __init__(self, stt: SpeechToText, endpointer: Endpointer) -> None:
        self._stt = stt
        self._endpointer = endpointer
        self._stream: Any = None
        self._fresh = False  # nothing sent to it yet

    def open(self, tg: TaskGroup | None, on_partial: Callable[[str], None]) -> None:
        """Confirmed speech: a new stream (the previous one, if any, is cancelled)."""
        self.cancel()
        if not isinstance(self._stt, StreamingSpeechToText) or tg is None:
            return
        self._stream = self._stt.open_stream(on_partial)
        self._fresh = True
        tg.start_soon(self._stream.run)

    def cancel(self) -> None:
        if self._stream is not None:
            self._stream.cancel()
        self._stream = None

    def feed(self, chunk: np.ndarray, unconsumed: int) -> None:
        """Send ``chunk`` (its last ``unconsumed`` samples not yet in the endpointer's
        windows); the first time, the utterance so far (pre-roll included) before it."""
        if self._stream is None:
            return
        if self._fresh:
            self._fresh = False
            audio, _ = self._endpointer.utterance_audio()
            self._stream.feed(np.concatenate([audio, chunk[len(chunk) - unconsumed :]]))
        else:
            self._stream.feed(chunk)

    @property
    def gives_partials(self) -> bool:
        """Partial transcripts come from the stream (the server has streamed them)."""
        stt = self._stt
        return (
            self._stream is not None
            and isinstance(stt, StreamingSpeechToText)
            and (stt.partials_streamed)
        )

    def take(self, audio: np.ndarray) -> Any:
        """The endpoint: the stream (None without one) with all of ``audio`` sent,
        handed to the final pass; the next utterance opens its own."""
        stream, self._stream = self._stream, None
        if stream is not None and stream.samples < len(audio):  # the end's chunk
            stream.feed(audio[stream.samples :])
        return stream
