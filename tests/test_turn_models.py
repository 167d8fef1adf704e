"""The overlapped turn with the real default models over WebSocket on 127.0.0.1: a
speculation discarded because the speaker went on, push-to-talk, a mid-sentence pause."""

from __future__ import annotations

import anyio
import numpy as np
import pytest

from edge.decisions import ScriptedDecisions
from edge.llm import LlamaCppLLM, ScriptedLLM
from edge.server import AudioFormat, EdgeClient, EdgeService, SpeechParts
from edge.voice import (
    SPECULATION_TOPIC,
    TRANSCRIPT_TOPIC,
    PiperTTS,
    VadConfig,
    VoiceConfig,
    chunk_pcm,
    float_to_pcm16,
    resample,
)
from tests.server_helpers import settings, wait_for
from tests.voice_helpers import Recorder, heard_as, words

pytestmark = [pytest.mark.anyio, pytest.mark.model]

RATE = 16_000


def spoken(tts: PiperTTS, text: str) -> np.ndarray:
    """Piper's speech at 16 kHz, trimmed to its voiced part (plus 50 ms)."""
    result = tts.synthesize(text)
    audio = resample(result.audio, result.sample_rate, RATE)
    loud = np.flatnonzero(np.abs(audio) > 0.02)
    return audio[max(loud[0] - 800, 0) : loud[-1] + 800]


def gap(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * RATE), np.float32)


def service(models, llm, vad: VadConfig) -> EdgeService:  # type: ignore[no-untyped-def]
    stt, tts = models
    return EdgeService(
        settings(voice=True),
        llm=llm,
        decisions=ScriptedDecisions(default="conversation"),
        speech=SpeechParts(
            stt=stt,
            tts=tts,
            config=VoiceConfig(
                vad=vad, playback_speed=0, partial_interval_s=0, speculative_after_ms=100
            ),
        ),
    )


async def send(client: EdgeClient, audio: np.ndarray) -> None:
    for piece in chunk_pcm(float_to_pcm16(audio), RATE, 100):
        await client.send_audio(piece)


def client_for(svc: EdgeService, pid: str) -> EdgeClient:
    return EdgeClient(
        svc.websocket_url, participant_id=pid, audio=AudioFormat(sample_rate=RATE), want_audio=True
    )


async def test_a_speculation_the_speaker_talks_past_is_discarded_unseen(models) -> None:  # type: ignore[no-untyped-def]
    _, tts = models
    head, tail = spoken(tts, "What is the capital"), spoken(tts, "of France?")
    # a long end silence, so the test (not the machine's speed) decides when speech resumes
    vad = VadConfig(end_silence_ms=1000, min_end_silence_ms=800, max_end_silence_ms=1500)
    llm = LlamaCppLLM(n_ctx=2048, default_max_tokens=40)
    svc = service(models, llm, vad)
    guesses = Recorder(SPECULATION_TOPIC)
    svc.runtime.register("guesses", guesses)
    async with svc, client_for(svc, "speaker") as client:
        await send(client, np.concatenate([head, gap(0.5)]))
        await wait_for(lambda: guesses.messages(SPECULATION_TOPIC), limit=60)
        await wait_for(lambda: svc.answers.stats.started, limit=60)  # the answer began
        await send(client, np.concatenate([tail, gap(2.0)]))  # ...but they went on
        turn = await client.collect_turn(limit_s=120)
        history = svc.router.history("speaker")
    assert heard_as(guesses.messages(SPECULATION_TOPIC)[0].text, "What is the capital")
    # one query: the whole sentence (Piper's noise is random: Whisper may blur a word)
    assert heard_as(turn.query, "What is the capital of France?")
    assert turn.text and turn.audio  # the real turn was answered and spoken
    assert {header.request_id for header, _ in turn.audio} == {turn.request_id}
    assert [e.user for e in history] == [turn.query]  # the only recorded exchange
    assert svc.answers.stats.discarded >= 1


async def test_a_confirmed_speculation_speaks_its_prepared_first_clause(models) -> None:  # type: ignore[no-untyped-def]
    _, tts = models
    question = spoken(tts, "What is the capital of France?")
    vad = VadConfig(end_silence_ms=1000, min_end_silence_ms=800, max_end_silence_ms=1500)
    reply = "Paris is the capital of France, and its largest city."
    svc = service(models, ScriptedLLM(default=reply), vad)
    async with svc, client_for(svc, "sure") as client:
        await send(client, np.concatenate([question, gap(0.5)]))  # a pause, not the end yet
        await wait_for(lambda: svc.answers.stats.started, limit=60)
        speaker = svc.voice.session("sure")[1]
        await wait_for(lambda: speaker.prepared, limit=60)  # the first clause, synthesized
        await send(client, gap(2.0))  # the endpoint confirms the same words
        turn = await client.collect_turn(limit_s=60)
    assert svc.answers.stats.adopted == 1
    assert speaker.prepared_used == 1  # spoken from the audio made during the pause
    first = next(header.text for header, _ in turn.audio if header.text)
    assert first == "Paris is the capital of France,"
    assert turn.text == reply


async def test_push_to_talk_release_ends_the_utterance_at_once(models) -> None:  # type: ignore[no-untyped-def]
    _, tts = models
    question = spoken(tts, "Turn on the lights in the lab.")
    vad = VadConfig(end_silence_ms=5000)  # only the release can end it within the test
    async with service(models, ScriptedLLM(default="Lights on."), vad) as svc:
        async with client_for(svc, "ptt") as client:
            await send(client, np.concatenate([question, gap(0.3)]))
            await client.end_of_utterance()
            turn = await client.collect_turn(limit_s=60)
    assert heard_as(turn.query, "Turn on the lights in the lab.")  # the whole utterance
    assert [words(t.text) for t in turn.transcripts if t.final] == [words(turn.query)]
    assert turn.text == "Lights on."


async def test_a_350_ms_pause_mid_sentence_keeps_one_utterance(models) -> None:  # type: ignore[no-untyped-def]
    _, tts = models
    first, second = "What is the capital of Italy,", "and what is it famous for?"
    audio = np.concatenate([spoken(tts, first), gap(0.35), spoken(tts, second), gap(1.5)])
    vad = VadConfig(end_silence_ms=600, min_end_silence_ms=400, max_end_silence_ms=900)
    async with service(models, ScriptedLLM(default="Rome."), vad) as svc:
        async with client_for(svc, "pause") as client:
            await client.speak(float_to_pcm16(audio), realtime=True, trailing_silence_s=0)
            turn = await client.collect_turn(limit_s=60)
    finals = [t.text for t in turn.transcripts if t.final]
    assert len(finals) == 1
    assert heard_as(turn.query, f"{first} {second}")  # both halves, in one query


async def test_a_held_sentence_with_a_long_pause_is_one_utterance(models) -> None:  # type: ignore[no-untyped-def]
    """Issue 23: with Hold to talk held, a 1.5 s pause split the sentence in two and the
    first half was answered while the button was still down."""
    _, tts = models
    first, second = "Take a note.", "The centrifuge needs a new rotor."
    audio = np.concatenate([spoken(tts, first), gap(1.5), spoken(tts, second), gap(1.0)])
    vad = VadConfig(end_silence_ms=600, min_end_silence_ms=400, max_end_silence_ms=900)
    rec = Recorder(TRANSCRIPT_TOPIC)
    svc = service(models, ScriptedLLM(default="Noted."), vad)
    svc.runtime.register("recorder", rec)
    async with svc:
        async with client_for(svc, "holder") as client:
            await client.hold()
            await send(client, audio)
            await anyio.sleep(3.0)  # time for an endpoint and its transcription
            assert not any(t.final for t in rec.messages(TRANSCRIPT_TOPIC))  # still held
            await client.end_of_utterance()
            turn = await client.collect_turn(limit_s=60)
    assert heard_as(turn.query, f"{first} {second}")  # both halves, once, in one query
    assert [t.text for t in turn.transcripts if t.final] == [turn.query]
    assert turn.text == "Noted."
