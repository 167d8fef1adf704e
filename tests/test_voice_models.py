"""The voice loop with the real default models: Silero VAD, Whisper tiny.en, Piper joe.

No microphone: Piper speaks the questions, the pipeline hears them in real-time-sized
chunks (published as fast as possible), and Whisper checks what Piper said.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np
import pytest

from edge.bench import voiced_span
from edge.device import load_profiles
from edge.interaction import (
    INTERRUPTED_TOPIC,
    USER_QUERY_TOPIC,
    VOICE_OUTPUT_TOPIC,
    ResponseOutput,
)
from edge.llm import ScriptedLLM, ScriptedReply
from edge.runtime import AgentRuntime
from edge.voice import (
    AUDIO_OUTPUT_TOPIC,
    Endpointer,
    PiperTTS,
    SileroVAD,
    SimulatedSpeaker,
    UtteranceEnded,
    VadConfig,
    VoiceConfig,
    VoicePipeline,
    WhisperSTT,
    resample,
)
from tests.voice_helpers import (
    Recorder,
    audio_after_interruption,
    heard_as,
    spoken_service,
    wait_for,
    words,
)

pytestmark = [pytest.mark.anyio, pytest.mark.model]

QUESTION = "What is the capital of France?"
SECOND = "Stop. What time is it now?"


@pytest.fixture(scope="module")
def spoken(models: tuple[WhisperSTT, PiperTTS]) -> dict[str, np.ndarray]:
    _, tts = models
    return {text: tts.synthesize(text).audio for text in (QUESTION, SECOND)}


def build(
    models: tuple[WhisperSTT, PiperTTS], config: VoiceConfig | None = None
) -> tuple[AgentRuntime, VoicePipeline, SimulatedSpeaker, Recorder]:
    stt, tts = models
    runtime = AgentRuntime()
    voice = VoicePipeline(stt=stt, tts=tts, config=config or VoiceConfig(playback_speed=0))
    client = SimulatedSpeaker("p1")
    recorder = Recorder(USER_QUERY_TOPIC, INTERRUPTED_TOPIC, VOICE_OUTPUT_TOPIC, AUDIO_OUTPUT_TOPIC)
    runtime.register("voice", voice)
    runtime.register("client", client)
    runtime.register("recorder", recorder)
    return runtime, voice, client, recorder


def test_silero_vad_on_speech_and_silence(models, spoken) -> None:  # type: ignore[no-untyped-def]
    speech = resample(spoken[QUESTION], 22_050, 16_000)
    vad = SileroVAD()
    probs = vad.process(np.concatenate([np.zeros(8_000, np.float32), speech]))
    assert probs[:10].max() < 0.2 and (probs > 0.5).mean() > 0.4
    vad.reset()
    assert vad.process(np.zeros(16_000, np.float32)).max() < 0.2


def test_a_quick_one_word_answer_is_an_utterance(models, spoken) -> None:  # type: ignore[no-untyped-def]
    """A quick "Done." is 0.22-0.26 s of speech to Silero, under the 250 ms that confirms
    speech while it lasts (the chaos test's second voice lost its fifth "Done." so: no
    transcript, no error). Each short word that ends still makes an utterance."""
    _, tts = models
    kept = tts.length_scale
    tts.length_scale = 0.85  # the chaos test's quick voice, pitched up
    try:
        said = {t: tts.synthesize(t) for t in ("Done.", QUESTION)}
    finally:
        tts.length_scale = kept
    pcm = {t: resample(s.audio, int(s.sample_rate * 1.08), 16_000) for t, s in said.items()}
    vad, endpointer = SileroVAD(), Endpointer(VadConfig())
    ended = 0
    for text in ("Done.", "Done.", QUESTION, "Done.", "Done."):
        silence = np.zeros(16_000, np.float32)
        audio = np.concatenate([silence[:3_200], pcm[text], silence])
        events = endpointer.feed(audio, vad.process(audio))
        ended += sum(isinstance(e, UtteranceEnded) for e in events)
    assert ended == 5


def test_no_profile_ends_a_question_at_a_pause_inside_it(models) -> None:  # type: ignore[no-untyped-def]
    """A 0.35 s pause inside "What is the capital of Italy, … and what is it famous for?"
    (each half trimmed to its voiced span plus 50 ms, as ``benchmarks/versus_chain.py``
    joins them) is 11 or 12 silent 32 ms windows to Silero, depending on where the
    windows fall. Whisper writes the first half as a whole question, so the shortest end
    silence applies there: every profile's must outlast the pause (400 ms is 13 windows;
    384 ms ended this question at its pause in a probe)."""
    _, tts = models
    halves = []
    for text in ("What is the capital of Italy,", "and what is it famous for?"):
        said = tts.synthesize(text)
        audio = resample(said.audio, said.sample_rate, 16_000)
        start, end = voiced_span(audio, 16_000)
        halves.append(audio[int(start * 16_000) : int((end + 0.05) * 16_000)])
    pause = np.zeros(int(0.35 * 16_000), np.float32)
    for name, profile in load_profiles().items():
        vad_config = VoiceConfig.for_device(profile.audio).vad
        for lead in (0, 160, 320, 480):  # where the 512-sample windows fall
            audio = np.concatenate([np.zeros(4_800 + lead, np.float32), halves[0], pause])
            audio = np.concatenate([audio, halves[1]])
            vad, endpointer = SileroVAD(), Endpointer(vad_config)
            ended = 0
            for at in range(0, len(audio), 800):  # 50 ms frames
                frame = audio[at : at + 800]
                events = endpointer.feed(frame, vad.process(frame))
                if endpointer.silence_samples:  # a pause: its words read as complete
                    events += endpointer.adapt(True)
                ended += sum(isinstance(e, UtteranceEnded) for e in events)
            assert ended == 0, f"{name} ended the question at its pause (lead {lead})"


def test_a_short_word_is_heard_once(models) -> None:  # type: ignore[no-untyped-def]
    """Whisper loops on a sub-second clip: a quick "Done." (the utterance the endpointer
    hands over, pre-roll and pad around it) came back as "Done. Done. Done. Done. Done.
    Done. Done.", and the notes agent or the model got that as the person's words."""
    stt, tts = models
    said = tts.synthesize("Done.")
    audio = resample(said.audio, said.sample_rate, 16_000)
    start, end = voiced_span(audio, 16_000)
    quiet = np.zeros(16_000, np.float32)
    for pad_s in (0.15, 0.6):
        clip = np.concatenate(
            [
                quiet[:4_800],
                audio[int(start * 16_000) : int(end * 16_000)],
                quiet[: int(pad_s * 16_000)],
            ]
        )
        assert stt.transcribe(clip).text.lower().count("done") == 1


async def test_spoken_question_is_heard(models, spoken) -> None:  # type: ignore[no-untyped-def]
    runtime, voice, client, rec = build(models)
    async with voice, runtime:
        await client.speak(runtime, spoken[QUESTION], 22_050, realtime=False)
        await wait_for(lambda: rec.messages(USER_QUERY_TOPIC), 20)
        assert words(rec.messages(USER_QUERY_TOPIC)[0].text) == words(QUESTION)
        assert client.final_transcripts == [rec.messages(USER_QUERY_TOPIC)[0].text]


async def test_spoken_reply_transcribes_back(models) -> None:  # type: ignore[no-untyped-def]
    stt, _ = models
    text = "Paris is the capital of France. It is a large and beautiful city."
    runtime, voice, client, _ = build(models)
    async with voice, runtime:
        for i, word in enumerate(text.split(" ")):
            await runtime.publish(
                VOICE_OUTPUT_TOPIC,
                ResponseOutput(
                    text=(" " if i else "") + word,
                    request_id="r1",
                    source="conversation",
                    sequence=i,
                    final=False,
                ),
                participant_id="p1",
            )
        await runtime.publish(
            VOICE_OUTPUT_TOPIC,
            ResponseOutput(
                text="", request_id="r1", source="conversation", sequence=99, final=True
            ),
            participant_id="p1",
        )
        answer = await client.answer(limit_s=30)
    assert answer.texts == ["Paris is the capital of France.", "It is a large and beautiful city."]
    heard = stt.transcribe(resample(answer.audio, answer.sample_rate, 16_000)).text
    assert heard_as(heard, text)


async def test_first_audio_leaves_before_the_llm_finishes(models, spoken) -> None:  # type: ignore[no-untyped-def]
    reply = "Paris is the capital. It has many museums. The food is good too."
    llm = ScriptedLLM([ScriptedReply(reply, delay_s=0.3)])  # ~4 s for the whole reply
    stt, tts = models
    rec = Recorder(VOICE_OUTPUT_TOPIC)
    async with spoken_service(
        llm, stt=stt, tts=tts, config=VoiceConfig(playback_speed=0), participant="p1", recorder=rec
    ) as (service, client):
        await client.speak(service.runtime, spoken[QUESTION], 22_050, realtime=False)
        answer = await client.answer(limit_s=30)
    llm_done = next(at for m, _, at in rec.seen[VOICE_OUTPUT_TOPIC.name] if m.final)
    assert answer.first_audio_at is not None and answer.first_audio_at < llm_done
    assert answer.texts == [
        "Paris is the capital.",
        "It has many museums.",
        "The food is good too.",
    ]
    assert words(llm.requests[0].messages[-1].content)[-len(words(QUESTION)) :] == words(QUESTION)


async def test_barge_in_stops_playback_and_starts_a_new_turn(models, spoken) -> None:  # type: ignore[no-untyped-def]
    config = VoiceConfig(playback_speed=1.0, playback_lead_s=0.1, partial_interval_s=0)
    runtime, voice, client, rec = build(models, config)
    long_reply = " ".join(["This sentence keeps the speaker busy for a while."] * 8)
    async with voice, runtime:
        for i, word in enumerate(long_reply.split(" ")):
            await runtime.publish(
                VOICE_OUTPUT_TOPIC,
                ResponseOutput(
                    text=(" " if i else "") + word,
                    request_id="r1",
                    source="conversation",
                    sequence=i,
                    final=False,
                ),
                participant_id="p1",
            )
        await wait_for(lambda: len(client.heard) >= 5, 20)
        await client.speak(runtime, spoken[SECOND], 22_050, realtime=False)
        await wait_for(lambda: rec.messages(USER_QUERY_TOPIC), 20)
        assert rec.messages(INTERRUPTED_TOPIC)[0].request_id == "r1"
        assert words(rec.messages(USER_QUERY_TOPIC)[0].text) == words(SECOND)
        # a positive event after the interruption: the next turn's reply is spoken in full
        await runtime.publish(
            VOICE_OUTPUT_TOPIC,
            ResponseOutput(text="It is noon.", request_id="r2", source="conversation", final=True),
            participant_id="p1",
        )
        await wait_for(lambda: any(h.chunk.final for h in client.heard), 20)
    assert len(audio_after_interruption(rec, "r1")) <= 1  # at most the chunk in flight
    assert not any(h.chunk.final and h.chunk.request_id == "r1" for h in client.heard)
    assert [h.chunk.request_id for h in client.heard if h.chunk.final] == ["r2"]


async def test_fitted_encoder_window_hears_the_same_words_faster(models, spoken) -> None:  # type: ignore[no-untyped-def]
    """The default encoder window (the utterance plus 1 s, at least 10 s) against
    Whisper's full 30 s, on the real model: the same words, in less time."""
    fitted, _ = models
    assert fitted.encoder_window_s == 10.0
    full = WhisperSTT(fitted.model_path, encoder_window_s=None, cpu_threads=fitted.cpu_threads)
    audio = resample(spoken[QUESTION], 22_050, 16_000)
    fitted.transcribe(audio)
    full.transcribe(audio)  # both loaded and warm
    a, b = fitted.transcribe(audio), full.transcribe(audio)
    assert words(a.text) == words(b.text) == words(QUESTION)
    assert a.elapsed_s < b.elapsed_s


def test_piper_synthesis_runs_alone_among_heavy_steps_and_does_not_spin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Beside a llama.cpp step on two cores, onnxruntime's threads and llama.cpp's slowed
    each other about twofold: a synthesis holds the compute gate, and its session's threads
    stop spin-waiting when a run ends: no CPU time after it."""
    from edge.runtime import COMPUTE_GATE

    monkeypatch.setattr(COMPUTE_GATE, "enabled", True)
    tts = PiperTTS()
    tts.load()
    voice = tts._voice
    options = voice.session.get_session_options()
    assert options.get_session_config_entry("session.force_spinning_stop") == "1"
    held: list[bool] = []
    synthesize = voice.synthesize

    def checked(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        held.append(COMPUTE_GATE._lock.locked())
        return synthesize(*args, **kwargs)

    monkeypatch.setattr(voice, "synthesize", checked)
    result = tts.synthesize("Hello there.")
    assert held == [True] and result.audio.size > 0
    assert not COMPUTE_GATE._lock.locked()
    cpu = time.process_time()
    time.sleep(0.2)
    assert time.process_time() - cpu < 0.02  # a spin would burn most of a core here


def test_a_partial_under_way_stops_after_its_encoder_for_a_pass_that_ends_a_turn(
    models, spoken, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """A partial pass already holding Whisper when a pass that may end a turn comes (the
    push-to-talk release a moment after a partial started) stops between its encoder and
    its decoder, so the final pass waits for an encoder, not a whole decode. Nobody
    waiting, or a partial someone came to wait for, runs to its end."""
    import threading

    from edge.runtime import COMPUTE_GATE, URGENT, YieldedToUrgentError, urgency, yielding

    monkeypatch.setattr(COMPUTE_GATE, "enabled", False)  # the final waits at Whisper's own lock
    stt, _ = models
    audio = resample(spoken[QUESTION], 22_050, 16_000)
    stt.transcribe(audio)  # loaded and warm

    def partial(still: bool) -> str:
        with yielding(lambda: still):
            try:
                return stt.transcribe(audio).text
            except YieldedToUrgentError:
                return "gave way"

    def with_a_final_arriving(still: bool) -> tuple[str, str]:
        finals: list[str] = []

        def final() -> None:
            with urgency(URGENT):
                finals.append(stt.transcribe(audio).text)

        arriving = threading.Thread(target=final)
        started = threading.Event()
        original = stt._lock.hold

        @contextlib.contextmanager
        def hold(*args, **kwargs):  # type: ignore[no-untyped-def]
            with original(*args, **kwargs) as waited:
                started.set()  # the partial holds Whisper: the final arrives now
                yield waited

        monkeypatch.setattr(stt._lock, "hold", hold)
        result: list[str] = []
        runner = threading.Thread(target=lambda: result.append(partial(still)))
        runner.start()
        assert started.wait(5)
        monkeypatch.setattr(stt._lock, "hold", original)
        arriving.start()
        runner.join(10)
        arriving.join(10)
        return result[0], finals[0]

    assert words(partial(True)) == words(QUESTION)  # nobody waits: it runs to its end
    gave, final = with_a_final_arriving(still=True)
    assert gave == "gave way" and words(final) == words(QUESTION)
    kept, final = with_a_final_arriving(still=False)  # awaited meanwhile: it goes on
    assert words(kept) == words(final) == words(QUESTION)
