"""Wyoming ``asr``'s speculation: the voice's pause recognizer on a recording.

Home Assistant streams the microphone until its own VAD has heard a stretch of silence,
then sends ``audio-stop``. Each recording is one utterance of the service's voice: a
:class:`~edge.voice.RecordingPauses` transcribes it during the client's silence, its
passes run on the voice pipeline's shared recognizer (:class:`~edge.voice.Recognizer`)
beside the listeners' own, and its words are a guess keyed by that utterance
(``wyoming:<n>``), not by the participant they may be for.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from edge.voice import PauseRecognizer, Recognizer, RecordingPauses, VoiceConfig

_RECORDINGS = itertools.count(1)  # each recording's utterance number, in this process


def next_recording() -> int:
    return next(_RECORDINGS)


@dataclass(frozen=True)
class AsrSpeculation:
    """How Wyoming ``asr`` speculates: the VAD to listen with, and the voice's settings
    (its VAD thresholds and pad, the pause that starts a pass)."""

    vad_factory: Callable[[], Any]
    config: VoiceConfig = field(default_factory=VoiceConfig)

    def start(
        self,
        recognizer: Recognizer,
        spawn: Callable[..., None],
        utterance: int,
        on_text: Callable[[str], None] | None = None,
    ) -> RecordingPauses:
        """Follow recording ``utterance``'s pauses (passes started with ``spawn``)."""
        return RecordingPauses(
            PauseRecognizer(recognizer, f"wyoming:{utterance}", gate_owner="wyoming"),
            spawn,
            self.vad_factory(),
            utterance,
            config=self.config,
            on_text=on_text,
        )
