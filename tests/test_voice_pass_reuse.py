"""Which pass the endpoint reuses as the final transcript (fake VAD/STT, no models).

A pass serves as the final one only when it heard what a pass at the endpoint would (the
pad after the last speech), and a pass that gave way at the compute gate never serves:
it has no result, so another one that heard the speech does."""

from __future__ import annotations

import anyio
import numpy as np
import pytest

from edge.interaction import USER_QUERY_TOPIC
from edge.runtime import AgentRuntime, YieldedToUrgentError
from edge.voice import (
    AUDIO_INPUT_TOPIC,
    TRANSCRIPT_TOPIC,
    AudioInput,
    Recognition,
    UtteranceStats,
    VadConfig,
    VoiceConfig,
    VoicePipeline,
    float_to_pcm16,
)
from tests.voice_helpers import EnergyVAD, Recorder, ToneSTT, ToneTTS, silence, tone, wait_for

pytestmark = pytest.mark.anyio

WINDOW = 512  # EnergyVAD's window and the chunk fed at a time: passes end on window edges
RATE = 16_000


def trailing_silence_s(audio: np.ndarray) -> float:
    loud = np.flatnonzero(np.abs(audio) > 0.05)
    return (len(audio) - loud[-1]) / RATE if len(loud) else len(audio) / RATE


async def speak(stt: CountingSTT, pad_ms: int) -> tuple[list[UtteranceStats], Recorder]:
    """One utterance (speech on window edges), a partial pass at every window; returns
    once its query is published."""
    vad = VadConfig(min_speech_ms=96, end_silence_ms=300, pre_roll_ms=96, pad_ms=pad_ms)
    config = VoiceConfig(
        vad=vad, partial_interval_s=0.03, speculative_final=False, playback_speed=0
    )
    runtime = AgentRuntime()
    voice = VoicePipeline(stt=stt, tts=ToneTTS(), vad_factory=EnergyVAD, config=config)
    recorder = Recorder(USER_QUERY_TOPIC, TRANSCRIPT_TOPIC)
    runtime.register("voice", voice)
    runtime.register("recorder", recorder)
    audio = np.concatenate(
        [silence(10 * WINDOW / RATE), tone(25 * WINDOW / RATE), silence(20 * WINDOW / RATE)]
    )
    pcm = float_to_pcm16(audio)
    async with voice, runtime:
        for i in range(0, len(pcm), 2 * WINDOW):
            calls = stt.started
            await runtime.publish(
                AUDIO_INPUT_TOPIC,
                AudioInput(pcm=pcm[i : i + 2 * WINDOW], sample_rate=RATE, channels=1),
                participant_id="p1",
            )
            await anyio.sleep(0.02)  # a partial started by this chunk usually ends meanwhile
            if stt.started > calls:
                await wait_for(lambda: stt.finished >= stt.started, limit=30)
        await wait_for(lambda: recorder.messages(USER_QUERY_TOPIC), limit=30)
        listener, _ = voice.session("p1")
        return list(listener.stats), recorder


class CountingSTT(ToneSTT):
    def __init__(self) -> None:
        super().__init__()
        self.started = self.finished = 0

    def transcribe(self, audio: np.ndarray) -> Recognition:
        self.started += 1
        try:
            return self.heard(audio)
        finally:
            self.finished += 1

    def heard(self, audio: np.ndarray) -> Recognition:
        return super().transcribe(audio)


async def test_a_partial_that_missed_the_pad_after_the_speech_is_not_the_final_pass() -> None:
    """Whisper reads a last word differently with less silence after it ("France" as
    "friends"): a partial that ran as speech stopped heard 0-32 ms of the 200 ms pad, so
    the final transcript comes from a pass that heard all of it."""

    class PadSensitive(CountingSTT):
        def heard(self, audio: np.ndarray) -> Recognition:
            result = super().heard(audio)
            if result.text and trailing_silence_s(audio) < 0.1:
                return Recognition("friends", result.audio_s, 0.0)
            return result

    stt = PadSensitive()
    _, recorder = await speak(stt, pad_ms=200)
    (final,) = [t for t in recorder.messages(TRANSCRIPT_TOPIC) if t.final]
    assert final.text == "tone 440"
    assert [q.text for q in recorder.messages(USER_QUERY_TOPIC)] == ["tone 440"]
    assert any(t.text == "friends" for t in recorder.messages(TRANSCRIPT_TOPIC))  # partials


async def test_a_partial_that_gave_way_is_not_reused_another_that_heard_the_end_is() -> None:
    """Every partial over speech still being spoken gives way to urgent work at the gate
    (as another participant's final pass would make it): none of them ran, so the partial
    that did hear the end of the speech and its pad is reused, with no extra final pass."""

    class GivesWayInSpeech(CountingSTT):
        def heard(self, audio: np.ndarray) -> Recognition:
            if trailing_silence_s(audio) < 0.01:  # over speech still being spoken
                raise YieldedToUrgentError("urgent work holds or waits for the gate")
            return super().heard(audio)

    stt = GivesWayInSpeech()
    stats, recorder = await speak(stt, pad_ms=30)
    (final,) = [t for t in recorder.messages(TRANSCRIPT_TOPIC) if t.final]
    assert final.text == "tone 440"
    assert stats[0].reused_pass, stt.calls


async def test_a_partial_reused_for_the_final_text_no_longer_gives_way() -> None:
    """A partial that heard the end is what the turn now waits for: it is urgent from the
    endpoint on, so it no longer stops for others' urgent work (``WhisperSTT`` stops a
    partial under way after its encoder when urgent work waits)."""
    from edge.voice._pause import Pass, PauseRecognizer, Recognizer

    pauses = PauseRecognizer(Recognizer.of(ToneSTT()), "p")
    heard, short = Pass(0, 16_000, "partial"), Pass(0, 8_000, "partial")
    pauses.passes += [short, heard]
    assert not heard.urgent and not short.urgent
    reuse, _ = pauses.end(0, 15_000, 0)
    assert reuse is heard and heard.urgent and not short.urgent
