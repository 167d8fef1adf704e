"""Several people at once on one voice pipeline (fake models): everyone's first sentence
before anyone's sentences made ahead."""

from __future__ import annotations

import threading

import anyio
import numpy as np
import pytest

from edge.interaction import USER_QUERY_TOPIC, UserQuery
from edge.runtime import COMPUTE_GATE, URGENT, current_urgency
from edge.voice import VoiceConfig
from tests.test_voice_pipeline import FAST_VAD, audio_of, feed, make, reply
from tests.voice_helpers import ToneSTT, silence, tone, wait_for

pytestmark = pytest.mark.anyio


async def test_a_waiting_first_sentence_goes_before_others_made_ahead(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """p1's long answer is playing (real time) while p2 asked and waits for theirs: p1's
    next sentences are not synthesized ahead until p2's first sentence has gone out."""
    import edge.voice._synthesis as synthesis

    monkeypatch.setattr(
        synthesis, "FIRST_AUDIO_WAIT_S", 60.0, raising=False
    )  # the bound: not reached here
    config = VoiceConfig(vad=FAST_VAD, partial_interval_s=0, playback_speed=1.0)
    runtime, voice, rec, tts = make(config)
    async with voice, runtime:
        for pid in ("p1", "p2"):
            await feed(runtime, tone(0.05), pid)  # both have a voice session
        await runtime.publish(USER_QUERY_TOPIC, UserQuery(text="hello"), participant_id="p2")
        await reply(runtime, "A one. A two. A three. A four.", "r1", participant="p1")
        await wait_for(lambda: audio_of(rec, "p1"))  # p1's first sentence plays
        await anyio.sleep(0.2)  # time enough to synthesize the next ones ahead
        assert tts.spoken == ["A one."]
        await reply(runtime, "B one. B two.", "r2", participant="p2")
        await wait_for(lambda: len(tts.spoken) >= 5, limit=20)
    assert tts.spoken[:2] == ["A one.", "B one."], tts.spoken  # then the ones made ahead


class GatedSTT(ToneSTT):
    """The tone recognizer, taking the compute gate as Whisper does, recording each pass
    it ran with whether it was urgent."""

    concurrent_callers = 16

    def __init__(self) -> None:
        super().__init__()
        self.ran: list[tuple[str, bool]] = []

    def transcribe(self, audio):  # type: ignore[no-untyped-def]
        urgent = current_urgency() == URGENT
        with COMPUTE_GATE.hold("stt urgent" if urgent else "stt"):
            result = super().transcribe(audio)
        self.ran.append((result.text, urgent))
        return result


async def test_a_turns_pass_never_waits_behind_anothers_partial_waiting_at_the_gate(
    monkeypatch,
) -> None:  # type: ignore[no-untyped-def]
    """A model step holds the gate; p1's partial pass waits there; p2 ends an utterance:
    p2's pass reaches the gate too (not held back by the partial's turn in the pipeline),
    the partial gives way, and p2's pass runs first when the step ends."""
    monkeypatch.setattr(COMPUTE_GATE, "enabled", True)
    stt = GatedSTT()
    runtime, voice, rec, _ = make(
        VoiceConfig(vad=FAST_VAD, partial_interval_s=0.3, playback_speed=0), stt=stt
    )
    gate = COMPUTE_GATE._lock
    held, release = threading.Event(), threading.Event()

    def step() -> None:
        with COMPUTE_GATE.hold("llm"):
            held.set()
            release.wait(10)

    async with voice, runtime:
        worker = threading.Thread(target=step)
        worker.start()
        try:
            assert held.wait(5)
            await feed(runtime, tone(1.0), "p1")  # speaking on: a partial pass is due
            await wait_for(lambda: gate._waiting)  # ... and waits at the gate
            await feed(runtime, np.concatenate([tone(0.8, 880), silence(0.6)]), "p2")
            await wait_for(lambda: any(level == URGENT for level, _ in gate._waiting))
        finally:
            release.set()
            worker.join(10)
        await wait_for(lambda: rec.messages(USER_QUERY_TOPIC))
    assert stt.ran[0] == ("tone 880", True), stt.ran
