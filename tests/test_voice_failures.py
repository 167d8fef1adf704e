"""Failures stay with their owner: one participant's voice leaving, failing or being
cancelled never ends the pipeline or another participant's session (fake models)."""

from __future__ import annotations

import threading

import anyio
import numpy as np
import pytest

from edge.interaction import PARTICIPANT_LEFT_TOPIC, USER_QUERY_TOPIC, ParticipantLeft
from edge.voice import SPEECH_FAILED_TOPIC, TRANSCRIPT_TOPIC, Recognition, Transcript, VoiceConfig
from tests.test_voice_pipeline import FAST_VAD, feed, make, utterance
from tests.voice_helpers import Recorder, ToneSTT, silence, tone, wait_for

pytestmark = pytest.mark.anyio


class HeldSTT(ToneSTT):
    """Holds every pass over a 440 Hz tone until :attr:`release` is set (the others run)."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = threading.Event()
        self.release = threading.Event()

    def transcribe(self, audio: np.ndarray) -> Recognition:
        result = super().transcribe(audio)
        if result.text == "tone 440":
            self.holding.set()
            self.release.wait(10)
        return result


def spoken(freq: float) -> np.ndarray:
    """An utterance that ends past the tests' 2 s end-of-utterance silence."""
    return np.concatenate([utterance(freq), silence(1.8)])


def queries_of(rec: Recorder, participant: str) -> list[str]:
    return [
        q.text
        for q, meta, _ in rec.seen[USER_QUERY_TOPIC.name]
        if meta.participant_id == participant
    ]


async def test_leaving_while_a_pause_pass_runs_leaves_the_others_answered() -> None:
    """p1 leaves while the pass over their pause runs; it finishes after their listener
    closed. p2, speaking before and after, is answered both times."""
    stt = HeldSTT()
    config = VoiceConfig(
        vad=FAST_VAD.model_copy(update={"end_silence_ms": 2000}),
        partial_interval_s=0,
        playback_speed=0,
    )
    runtime, voice, rec, _ = make(config, stt=stt)
    async with voice, runtime:
        await feed(runtime, spoken(880), "p2")
        await feed(runtime, np.concatenate([silence(0.3), tone(0.8), silence(0.3)]), "p1")
        await wait_for(stt.holding.is_set)  # p1's pause pass is in the recognizer
        await runtime.publish(
            PARTICIPANT_LEFT_TOPIC, ParticipantLeft(reason="bye"), participant_id="p1"
        )
        stt.release.set()  # the pass ends after p1's listener closed
        await anyio.sleep(0.05)
        await feed(runtime, spoken(660), "p2")
        await wait_for(lambda: len(queries_of(rec, "p2")) == 2)
        assert queries_of(rec, "p2") == ["tone 880", "tone 660"]
        assert voice.participants() == ["p2"]


async def test_a_listener_fault_ends_only_its_owners_session_with_an_error() -> None:
    """A fault in p1's listener task (here: its speech stream's background work) is
    logged with p1's id, becomes p1's ``SpeechFailed`` and closes p1's voice session only;
    p2 goes on being answered, and p1's next audio opens a fresh session."""
    runtime, voice, rec, _ = make()
    failures = Recorder(SPEECH_FAILED_TOPIC)
    runtime.register("failures", failures)
    async with voice, runtime:
        await feed(runtime, tone(0.2), "p1")
        listener, _ = voice.session("p1")

        async def broken() -> None:
            raise RuntimeError("listener fault")

        assert listener._tg is not None
        listener._tg.start_soon(broken)
        await wait_for(lambda: failures.seen[SPEECH_FAILED_TOPIC.name])
        (failure, meta, _), *more = failures.seen[SPEECH_FAILED_TOPIC.name]
        assert meta.participant_id == "p1" and not more
        assert "listener fault" in failure.message
        await wait_for(lambda: "p1" not in voice.participants())
        await feed(runtime, utterance(880), "p2")
        await feed(runtime, utterance(660), "p1")  # a fresh session for p1
        await wait_for(lambda: queries_of(rec, "p1") and queries_of(rec, "p2"))
        assert queries_of(rec, "p2") == ["tone 880"] and queries_of(rec, "p1") == ["tone 660"]


async def test_a_stuck_pass_gives_the_recognizer_back_after_its_bound() -> None:
    """p1's pass never returns (a hung recognizer call) while it holds the one-pass
    limiter: after ``pass_timeout_s`` it is abandoned, p2's speech is transcribed and
    answered, and p1's final transcript names the timeout (a turn ends, with its error)."""
    stt = HeldSTT()  # one caller at a time (no ``concurrent_callers``): one pass holds it
    config = VoiceConfig(vad=FAST_VAD, partial_interval_s=0, playback_speed=0, pass_timeout_s=0.3)
    runtime, voice, rec, _ = make(config, stt=stt)
    try:
        async with voice, runtime:
            await feed(runtime, utterance(440), "p1")
            await wait_for(stt.holding.is_set)  # p1's pass is stuck in the recognizer
            await feed(runtime, utterance(880), "p2")
            await wait_for(lambda: queries_of(rec, "p2"))
            assert queries_of(rec, "p2") == ["tone 880"] and not queries_of(rec, "p1")
            await wait_for(lambda: finals_of(rec, "p1"))
            (final,) = finals_of(rec, "p1")
            assert final.text == "" and "longer than 0.3 s" in (final.error or "")
    finally:
        stt.release.set()  # the abandoned threads end


def finals_of(rec: Recorder, participant: str) -> list[Transcript]:
    return [
        t
        for t, meta, _ in rec.seen[TRANSCRIPT_TOPIC.name]
        if meta.participant_id == participant and t.final
    ]
