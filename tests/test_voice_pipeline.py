"""The voice pipeline on the runtime, with fake VAD/STT/TTS (fast, no models)."""

from __future__ import annotations

import time

import anyio
import numpy as np
import pytest

from edge.interaction import (
    INTERRUPTED_TOPIC,
    PARTICIPANT_LEFT_TOPIC,
    USER_QUERY_TOPIC,
    VOICE_OUTPUT_TOPIC,
    Interrupted,
    ParticipantLeft,
    ResponseOutput,
)
from edge.llm import ScriptedLLM, ScriptedReply
from edge.runtime import AgentRuntime
from edge.voice import (
    AUDIO_INPUT_TOPIC,
    AUDIO_OUTPUT_TOPIC,
    TRANSCRIPT_TOPIC,
    AudioFormatError,
    AudioInput,
    Recognition,
    VadConfig,
    VoiceConfig,
    VoicePipeline,
    float_to_pcm16,
    resample,
)
from tests.voice_helpers import (
    EnergyVAD,
    Recorder,
    ToneSTT,
    ToneTTS,
    audio_after_interruption,
    silence,
    spoken_service,
    tone,
    wait_for,
)

pytestmark = pytest.mark.anyio

FAST_VAD = VadConfig(min_speech_ms=96, end_silence_ms=300, pre_roll_ms=100, pad_ms=50)


def make(
    config: VoiceConfig | None = None, stt: ToneSTT | None = None
) -> tuple[AgentRuntime, VoicePipeline, Recorder, ToneTTS]:
    runtime = AgentRuntime()
    tts = ToneTTS()
    voice = VoicePipeline(
        stt=stt or ToneSTT(),
        tts=tts,
        vad_factory=EnergyVAD,
        config=config or VoiceConfig(vad=FAST_VAD, partial_interval_s=0.3, playback_speed=0),
    )
    recorder = Recorder(USER_QUERY_TOPIC, TRANSCRIPT_TOPIC, AUDIO_OUTPUT_TOPIC, INTERRUPTED_TOPIC)
    runtime.register("voice", voice)
    runtime.register("recorder", recorder)
    return runtime, voice, recorder, tts


async def feed(
    runtime: AgentRuntime,
    audio: np.ndarray,
    participant: str = "p1",
    rate: int = 16_000,
    chunk_ms: int = 100,
    channels: int = 1,
    pause_s: float = 0.0,
) -> None:
    """Publish ``audio`` in real-time-sized chunks, as fast as possible (or ``pause_s``
    between chunks)."""
    pcm = float_to_pcm16(audio)
    step = rate * chunk_ms // 1000 * 2 * channels
    for i in range(0, len(pcm), step):
        await runtime.publish(
            AUDIO_INPUT_TOPIC,
            AudioInput(pcm=pcm[i : i + step], sample_rate=rate, channels=channels),
            participant_id=participant,
        )
        await anyio.sleep(pause_s)


def utterance(freq: float = 440.0) -> np.ndarray:
    return np.concatenate([silence(0.3), tone(0.8, freq), silence(0.6)])


async def test_speech_becomes_a_query_with_partials_and_reused_final() -> None:
    runtime, voice, rec, _ = make()
    async with voice, runtime:
        before = time.time_ns() // 1000
        await feed(runtime, utterance(), pause_s=0.01)  # 10x real time: partials keep up
        await wait_for(lambda: rec.messages(USER_QUERY_TOPIC))
        query = rec.messages(USER_QUERY_TOPIC)[0]
        assert query.text == "tone 440"
        assert query.timestamp_us is not None and query.timestamp_us >= before - 2_000_000
        finals = [t for t in rec.messages(TRANSCRIPT_TOPIC) if t.final]
        assert [t.text for t in finals] == ["tone 440"]
        partials = [t for t in rec.messages(TRANSCRIPT_TOPIC) if not t.final]
        assert partials and all(t.utterance == 0 and t.text == "tone 440" for t in partials)
        listener, _ = voice.session("p1")
        assert listener.stats[0].reused_pass  # the pass started at the pause was reused
        _, meta, _ = rec.seen[USER_QUERY_TOPIC.name][0]
        assert meta.participant_id == "p1" and meta.source == "voice"


async def test_no_partial_pass_starts_once_speech_pauses() -> None:
    """A partial started in the pause (due there by ``partial_interval_s``) would hold up the
    speculative pass that becomes the final transcript: the pause gets that one pass only."""
    stt = ToneSTT()
    config = VoiceConfig(
        vad=FAST_VAD, partial_interval_s=0.25, speculative_after_ms=200, playback_speed=0
    )
    runtime, voice, rec, _ = make(config, stt=stt)
    async with voice, runtime:
        await feed(runtime, utterance(), pause_s=0.01)
        await wait_for(lambda: rec.messages(USER_QUERY_TOPIC))
        whole = [s for s in stt.calls if s >= 0.9]  # passes over all of the speech
        assert len(whole) == 1, stt.calls
        listener, _ = voice.session("p1")
        assert listener.stats[0].reused_pass


class FullWindowToneSTT(ToneSTT):
    """Records which passes asked for the whole window."""

    def __init__(self) -> None:
        super().__init__()
        self.full_calls: list[float] = []

    def transcribe_full(self, audio: np.ndarray) -> Recognition:
        self.full_calls.append(len(audio) / 16_000)
        return self.transcribe(audio)


@pytest.mark.parametrize("full_window", [False, True])
async def test_only_the_pause_pass_may_decode_with_the_whole_window(full_window: bool) -> None:
    """By default every pass is fitted; ``full_window_pause_pass`` gives the pass started
    in a pause (whose text is the final transcript) Whisper's whole window."""
    stt = FullWindowToneSTT()
    config = VoiceConfig(
        vad=FAST_VAD,
        partial_interval_s=0.3,
        playback_speed=0,
        full_window_pause_pass=full_window,
    )
    runtime, voice, rec, _ = make(config, stt=stt)
    async with voice, runtime:
        await feed(runtime, utterance(), pause_s=0.01)
        await wait_for(lambda: rec.messages(USER_QUERY_TOPIC))
        listener, _ = voice.session("p1")
        assert listener.stats[0].reused_pass  # the final transcript is the pause pass's
    assert len(stt.full_calls) == (1 if full_window else 0)
    assert len(stt.calls) > len(stt.full_calls)  # partials


async def test_two_utterances_in_order() -> None:
    runtime, voice, rec, _ = make()
    async with voice, runtime:
        await feed(runtime, np.concatenate([utterance(440), utterance(880)]))
        await wait_for(lambda: len(rec.messages(USER_QUERY_TOPIC)) == 2)
        assert [q.text for q in rec.messages(USER_QUERY_TOPIC)] == ["tone 440", "tone 880"]
        finals = [t.utterance for t in rec.messages(TRANSCRIPT_TOPIC) if t.final]
        assert finals == [0, 1]


async def test_other_rates_and_stereo_are_converted() -> None:
    runtime, voice, rec, _ = make()
    async with voice, runtime:
        audio48 = resample(utterance(), 16_000, 48_000)
        stereo = np.stack([audio48, audio48], axis=1).reshape(-1)
        await feed(runtime, stereo, rate=48_000, channels=2)
        await wait_for(lambda: rec.messages(USER_QUERY_TOPIC))
        assert rec.messages(USER_QUERY_TOPIC)[0].text == "tone 440"


async def test_bad_audio_is_refused_and_the_session_goes_on() -> None:
    runtime, voice, rec, _ = make()
    async with voice, runtime:
        for bad, message in [
            (AudioInput(pcm=b"\x00\x01", sample_width=1), "16-bit"),
            (AudioInput(pcm=b"\x00\x01\x02"), "whole number"),
            (AudioInput(pcm=b"\x00\x00", sample_rate=4_000), "sample rate"),
            (AudioInput(pcm=b"\x00\x00" * 3, channels=3), "mono or stereo"),
        ]:
            with pytest.raises(ExceptionGroup) as info:
                await runtime.publish(AUDIO_INPUT_TOPIC, bad, participant_id="p1")
            assert info.group_contains(AudioFormatError, match=message)
        with pytest.raises(ExceptionGroup) as info:
            await runtime.publish(AUDIO_INPUT_TOPIC, AudioInput(pcm=b"\x00\x00"))
        assert info.group_contains(ValueError, match="participant")
        await runtime.publish(AUDIO_INPUT_TOPIC, AudioInput(pcm=b""), participant_id="p1")
        await feed(runtime, utterance())
        await wait_for(lambda: rec.messages(USER_QUERY_TOPIC))
        assert rec.messages(USER_QUERY_TOPIC)[0].text == "tone 440"


async def test_silence_and_noise_publish_nothing() -> None:
    stt = ToneSTT()
    runtime, voice, rec, _ = make(stt=stt)
    async with voice, runtime:
        await feed(runtime, silence(2.0))
        rng = np.random.default_rng(0)
        await feed(runtime, (rng.standard_normal(16_000) * 0.003).astype(np.float32))
        # a positive event after them: a real utterance is heard, and it is the only one
        await feed(runtime, utterance(660))
        await wait_for(lambda: rec.messages(USER_QUERY_TOPIC))
        assert [q.text for q in rec.messages(USER_QUERY_TOPIC)] == ["tone 660"]
        listener, _ = voice.session("p1")
        assert len(listener.stats) == 1  # silence and noise made no utterance
        assert all(seconds < 1.5 for seconds in stt.calls)  # only the tone was recognized


async def test_quiet_speech_gives_an_empty_final_and_no_query() -> None:
    runtime, voice, rec, _ = make()
    async with voice, runtime:
        # loud enough for the energy VAD, too quiet for the fake recognizer
        await feed(runtime, np.concatenate([tone(0.8, level=0.03), silence(0.6)]))
        await wait_for(lambda: any(t.final for t in rec.messages(TRANSCRIPT_TOPIC)))
        assert [t.text for t in rec.messages(TRANSCRIPT_TOPIC) if t.final] == [""]
        assert rec.messages(USER_QUERY_TOPIC) == []


async def test_over_long_utterance_is_cut_and_flagged() -> None:
    config = VoiceConfig(
        vad=VadConfig(min_speech_ms=96, end_silence_ms=300, max_utterance_s=1.5),
        partial_interval_s=0,
    )
    runtime, voice, rec, _ = make(config)
    async with voice, runtime:
        await feed(runtime, np.concatenate([tone(2.5), silence(0.6)]))
        await wait_for(lambda: len(rec.messages(USER_QUERY_TOPIC)) == 2)
        finals = [t for t in rec.messages(TRANSCRIPT_TOPIC) if t.final]
        assert [t.truncated for t in finals] == [True, False]


async def test_participants_are_independent() -> None:
    runtime, voice, rec, _ = make()
    async with voice, runtime:
        with pytest.raises(ExceptionGroup):
            await runtime.publish(AUDIO_INPUT_TOPIC, AudioInput(pcm=b"\x01"), participant_id="p2")
        async with anyio.create_task_group() as tg:
            tg.start_soon(feed, runtime, utterance(440), "p1")
            tg.start_soon(feed, runtime, utterance(880), "p2")
        await wait_for(lambda: len(rec.messages(USER_QUERY_TOPIC)) == 2)
        by = {meta.participant_id: q.text for q, meta, _ in rec.seen[USER_QUERY_TOPIC.name]}
        assert by == {"p1": "tone 440", "p2": "tone 880"}


def audio_of(rec: Recorder, participant: str = "p1") -> list:  # type: ignore[type-arg]
    return [
        m for m, meta, _ in rec.seen[AUDIO_OUTPUT_TOPIC.name] if meta.participant_id == participant
    ]


async def reply(
    runtime: AgentRuntime,
    text: str,
    request_id: str,
    source: str = "conversation",
    participant: str = "p1",
    final: bool = True,
) -> None:
    words = text.split(" ")
    for i, word in enumerate(words):
        await runtime.publish(
            VOICE_OUTPUT_TOPIC,
            ResponseOutput(
                text=(" " if i else "") + word,
                request_id=request_id,
                source=source,
                sequence=i,
                final=False,
            ),
            participant_id=participant,
            source=source,
        )
    if final:
        await runtime.publish(
            VOICE_OUTPUT_TOPIC,
            ResponseOutput(
                text="", request_id=request_id, source=source, sequence=len(words), final=True
            ),
            participant_id=participant,
            source=source,
        )


async def test_reply_is_spoken_sentence_by_sentence_in_order() -> None:
    runtime, voice, rec, tts = make()
    async with voice, runtime:
        await reply(runtime, "Hello there. The sky is blue! **Bye** now?", "r1")
        await wait_for(lambda: any(c.final for c in audio_of(rec)))
        chunks = audio_of(rec)
        assert tts.spoken == ["Hello there.", "The sky is blue!", "Bye now?"]
        assert [c.sequence for c in chunks] == list(range(len(chunks)))
        assert [c.final for c in chunks] == [False] * (len(chunks) - 1) + [True]
        assert [c.text for c in chunks if c.text] == tts.spoken
        assert {c.request_id for c in chunks} == {"r1"}
        assert all(c.sample_rate == 16_000 for c in chunks)
        assert all(len(c.pcm) <= 1600 * 2 for c in chunks)  # 100 ms chunks


async def test_unspeakable_reply_ends_with_an_empty_final_chunk() -> None:
    runtime, voice, rec, tts = make()
    async with voice, runtime:
        await reply(runtime, "🙂 ...", "r1")
        await wait_for(lambda: audio_of(rec))
        chunks = audio_of(rec)
        assert tts.spoken == []
        assert [(c.pcm, c.final) for c in chunks] == [(b"", True)]


async def test_output_rate_is_what_the_client_asked() -> None:
    runtime, voice, rec, _ = make(VoiceConfig(vad=FAST_VAD, output_rate=24_000, playback_speed=0))
    async with voice, runtime:
        await reply(runtime, "One two three four five.", "r1")
        await wait_for(lambda: any(c.final for c in audio_of(rec)))
        chunks = audio_of(rec)
        assert {c.sample_rate for c in chunks} == {24_000}
        total = sum(len(c.pcm) for c in chunks) // 2
        assert abs(total - 0.5 * 24_000) < 100


async def test_router_text_plays_before_the_destination() -> None:
    config = VoiceConfig(vad=FAST_VAD, playback_speed=1.0, playback_lead_s=0.0)
    runtime, voice, rec, _ = make(config)
    async with voice, runtime:
        # something already playing, so the turn's segments queue up behind it
        await runtime.publish(
            VOICE_OUTPUT_TOPIC, ResponseOutput(text="Welcome back."), participant_id="p1"
        )
        await reply(runtime, "The answer is four.", "r1", source="conversation")
        await reply(runtime, "Let me check.", "r1", source="router")
        await wait_for(
            lambda: any(c.final and c.source == "conversation" for c in audio_of(rec)), limit=8
        )
        order = [c.source or "standalone" for c in audio_of(rec) if c.text]
        assert order == ["standalone", "router", "conversation"]


async def test_barge_in_stops_output_within_one_chunk_and_starts_a_new_turn() -> None:
    config = VoiceConfig(
        vad=FAST_VAD, partial_interval_s=0, playback_speed=1.0, playback_lead_s=0.1
    )
    runtime, voice, rec, _ = make(config)
    async with voice, runtime:
        await reply(runtime, " ".join(["word"] * 40) + ".", "r1")  # 4 s of speech
        await wait_for(lambda: len(audio_of(rec)) >= 3)
        await feed(runtime, tone(0.3, 660))  # speech: confirmed after 96 ms
        await wait_for(lambda: rec.messages(INTERRUPTED_TOPIC))
        interrupted = rec.messages(INTERRUPTED_TOPIC)[0]
        assert interrupted.request_id == "r1" and interrupted.reason == "barge-in"
        await reply(runtime, "More of the old answer.", "r1")  # superseded: dropped
        await feed(runtime, silence(0.6))
        await wait_for(lambda: rec.messages(USER_QUERY_TOPIC))
        assert rec.messages(USER_QUERY_TOPIC)[0].text == "tone 660"
        assert not any(c.final for c in audio_of(rec))
        await reply(runtime, "New answer.", "r2")  # the next turn is spoken
        await wait_for(lambda: any(c.final and c.request_id == "r2" for c in audio_of(rec)))
    assert len(audio_after_interruption(rec, "r1")) <= 1  # at most the chunk in flight


async def test_speech_without_playback_does_not_interrupt() -> None:
    runtime, voice, rec, _ = make()
    async with voice, runtime:
        await feed(runtime, utterance())
        await wait_for(lambda: rec.messages(USER_QUERY_TOPIC))
        assert rec.messages(INTERRUPTED_TOPIC) == []


async def test_external_interrupt_stops_output() -> None:
    config = VoiceConfig(vad=FAST_VAD, playback_speed=1.0, playback_lead_s=0.1)
    runtime, voice, rec, _ = make(config)
    async with voice, runtime:
        await reply(runtime, " ".join(["word"] * 40) + ".", "r1")
        await wait_for(lambda: len(audio_of(rec)) >= 2)
        await runtime.publish(
            INTERRUPTED_TOPIC,
            Interrupted(reason="stop button"),
            participant_id=None,
            source="server",
        )
        # a positive event after the interruption: the next reply is spoken in full
        await reply(runtime, "New answer.", "r2")
        await wait_for(lambda: any(c.final and c.request_id == "r2" for c in audio_of(rec)))
    assert len(audio_after_interruption(rec, "r1")) <= 1  # at most the chunk in flight
    assert not any(c.final and c.request_id == "r1" for c in audio_of(rec))


async def test_participant_left_drops_the_session() -> None:
    runtime, voice, _, _ = make()
    async with voice, runtime:
        await feed(runtime, tone(0.2))
        assert voice.participants() == ["p1"]
        await runtime.publish(
            PARTICIPANT_LEFT_TOPIC, ParticipantLeft(reason="bye"), participant_id="p1"
        )
        assert voice.participants() == []


async def test_first_audio_leaves_before_a_slow_reply_finishes() -> None:
    text = "The first sentence is short. Then comes a second one. And a third to end."
    llm = ScriptedLLM([ScriptedReply(text, delay_s=0.06)])
    rec = Recorder(VOICE_OUTPUT_TOPIC, AUDIO_OUTPUT_TOPIC)
    config = VoiceConfig(vad=FAST_VAD, partial_interval_s=0.3, playback_speed=0)
    async with spoken_service(
        llm, stt=ToneSTT(), tts=ToneTTS(), config=config, vad_factory=EnergyVAD, recorder=rec
    ) as (service, _):
        await feed(service.runtime, utterance())
        await wait_for(lambda: any(c.final for c in audio_of(rec)), limit=8)
        frames = rec.seen[VOICE_OUTPUT_TOPIC.name]
        third = next(at for m, _, at in frames if "And" in m.text)  # third sentence starts
        first_audio = next(at for m, _, at in rec.seen[AUDIO_OUTPUT_TOPIC.name] if m.pcm)
        assert first_audio < third  # order: spoken before the reply's last sentence began
        assert llm.requests[0].messages[-1].content.endswith("tone 440")


async def test_slow_recognizer_throttles_partials_and_still_finalizes() -> None:
    stt = ToneSTT(delay_s=0.25)
    config = VoiceConfig(vad=FAST_VAD, partial_interval_s=0.1, playback_speed=0)
    runtime, voice, rec, _ = make(config, stt=stt)
    async with voice, runtime:
        fed_at = time.perf_counter()
        await feed(runtime, np.concatenate([tone(3.0), silence(0.6)]), pause_s=0.02)
        feeding_s = time.perf_counter() - fed_at
        await wait_for(lambda: rec.messages(USER_QUERY_TOPIC))
        assert rec.messages(USER_QUERY_TOPIC)[0].text == "tone 440"
    # 3 s of speech at 0.1 s intervals would be 30 partials. The recognizer takes 0.25 s a
    # call, so throttled partials cannot outnumber the calls that fit in the time the
    # audio took to arrive (measured here), plus one in flight and the final.
    assert len(stt.calls) <= feeding_s / 0.25 + 2, (stt.calls, feeding_s)
    assert len(stt.calls) < 30


class ColdStartSTT(ToneSTT):
    """Its first pass pays a one-time start-up cost: a freshly loaded Whisper's first pass
    took 1.1-3.9 s on the 2-core host, against 0.2-0.4 s for the same audio after it."""

    def __init__(self) -> None:
        super().__init__()
        self.cold = True

    def transcribe(self, audio: np.ndarray) -> Recognition:
        result = super().transcribe(audio)
        elapsed, self.cold = (2.0 if self.cold else 0.05), False
        return Recognition(result.text, result.audio_s, elapsed)


async def test_the_first_utterance_after_start_has_partials() -> None:
    """The start-up's warm-up pays the recognizer's one-time cost before it measures a
    pass, so partial transcripts are on from the first utterance (the cold pass, taken as
    the measure, had switched them off for the first utterances)."""
    runtime, voice, rec, _ = make(stt=ColdStartSTT())
    async with voice, runtime:
        await voice.load()
        await feed(runtime, utterance(), pause_s=0.01)
        await wait_for(lambda: rec.messages(USER_QUERY_TOPIC))
        partials = [t for t in rec.messages(TRANSCRIPT_TOPIC) if not t.final]
        assert partials and {t.utterance for t in partials} == {0}
        assert voice.stt_cost.seconds == pytest.approx(0.05)  # the warm passes' measure


async def test_a_new_turn_supersedes_unspoken_replies_to_earlier_turns() -> None:
    runtime, voice, rec, tts = make()
    async with voice, runtime:
        await feed(runtime, np.concatenate([utterance(440), utterance(880)]))
        await wait_for(lambda: len(rec.messages(USER_QUERY_TOPIC)) == 2)
        first, second = (meta.message_id for _, meta, _ in rec.seen[USER_QUERY_TOPIC.name])
        await reply(runtime, "Old answer.", first)  # late reply to the earlier turn
        await reply(runtime, "New answer.", second)
        await wait_for(lambda: any(c.final for c in audio_of(rec)))
        assert {c.request_id for c in audio_of(rec)} == {second}
        assert tts.spoken == ["New answer."]


async def test_a_short_pause_keeps_one_utterance() -> None:
    runtime, voice, rec, _ = make()
    async with voice, runtime:
        audio = np.concatenate([tone(0.5), silence(0.2), tone(0.5), silence(0.6)])
        await feed(runtime, audio, pause_s=0.01)
        # a positive event after it: the next utterance is heard (a split first one would
        # have given two "tone 440" queries before this)
        await feed(runtime, utterance(880), pause_s=0.01)
        await wait_for(lambda: len(rec.messages(USER_QUERY_TOPIC)) >= 2)
        assert [q.text for q in rec.messages(USER_QUERY_TOPIC)] == ["tone 440", "tone 880"]
        listener, _ = voice.session("p1")
        assert listener.stats[0].audio_s > 1.0  # both halves in one utterance


class FlakySTT(ToneSTT):
    """Fails on the first utterance's audio (a 440 Hz tone), works on others."""

    def transcribe(self, audio: np.ndarray):  # type: ignore[no-untyped-def]
        result = super().transcribe(audio)
        if result.text == "tone 440":
            raise RuntimeError("model failure")
        return result


async def test_a_recognizer_failure_loses_only_that_utterance() -> None:
    config = VoiceConfig(vad=FAST_VAD, partial_interval_s=0, playback_speed=0)
    runtime, voice, rec, _ = make(config, stt=FlakySTT())
    async with voice, runtime:
        await feed(runtime, np.concatenate([utterance(440), utterance(880)]))
        await wait_for(lambda: rec.messages(USER_QUERY_TOPIC))
        await wait_for(lambda: len([t for t in rec.messages(TRANSCRIPT_TOPIC) if t.final]) == 2)
        assert [q.text for q in rec.messages(USER_QUERY_TOPIC)] == ["tone 880"]
        assert [t.text for t in rec.messages(TRANSCRIPT_TOPIC) if t.final] == ["", "tone 880"]


async def test_a_synthesis_failure_skips_only_that_sentence() -> None:
    runtime, voice, rec, tts = make()

    def synthesize(text: str):  # type: ignore[no-untyped-def]
        if "broken" in text:
            raise RuntimeError("voice failure")
        return ToneTTS.synthesize(tts, text)

    tts.synthesize = synthesize  # type: ignore[method-assign]
    async with voice, runtime:
        await reply(runtime, "First one. A broken one. Last one.", "r1")
        await wait_for(lambda: any(c.final for c in audio_of(rec)))
        assert [c.text for c in audio_of(rec) if c.text] == ["First one.", "Last one."]


async def test_no_pass_after_the_pause_pass_while_nothing_is_said() -> None:
    """Once the pass started in a pause covers the last speech, the rest of the pause adds
    only silence: no partial runs over it (it would hold the model at the endpoint and
    could word the final transcript differently from the pause's guess), and the endpoint
    reuses the pause pass."""
    stt = ToneSTT()
    config = VoiceConfig(
        vad=FAST_VAD.model_copy(update={"end_silence_ms": 1200}),
        partial_interval_s=0.3,
        playback_speed=0,
    )
    runtime, voice, rec, _ = make(config, stt=stt)
    async with voice, runtime:
        audio = np.concatenate([silence(0.3), tone(0.8), silence(1.5)])
        await feed(runtime, audio, pause_s=0.02)  # 5x real time: every pass keeps up
        await wait_for(lambda: rec.messages(USER_QUERY_TOPIC))
        listener, _ = voice.session("p1")
        assert listener.stats[0].reused_pass
    speech_end = 0.1 + 0.8  # pre-roll and speech
    assert max(stt.calls) < speech_end + 0.3, stt.calls  # the pause pass, not later ones


async def test_the_pause_pass_starts_at_the_second_silent_window() -> None:
    """By default the pass over a pause starts once two VAD windows (64 ms) are silent: a
    gap of one window between words starts none, and a real pause is not held back to a
    third window (96 ms), which made the pause's answer a window later on every turn while
    it skipped only the gaps of two windows between words."""
    stt = ToneSTT()
    vad = FAST_VAD.model_copy(update={"end_silence_ms": 2000})
    runtime, voice, _, _ = make(VoiceConfig(vad=vad, partial_interval_s=0, playback_speed=0), stt)
    window = 512 / 16_000
    speech = [silence(10 * window), tone(16 * window), silence(window), tone(16 * window)]
    async with voice, runtime:
        await feed(runtime, np.concatenate(speech), chunk_ms=32)
        await feed(runtime, silence(window), chunk_ms=32)
        await anyio.sleep(0.2)
        assert stt.calls == []  # one silent window: no pass
        await feed(runtime, silence(window), chunk_ms=32)
        await wait_for(lambda: stt.calls, limit=30)


async def test_the_pause_pass_hears_the_silence_a_final_pass_would() -> None:
    """The pass started in a pause may serve as the final one, so it hears what a pass at
    the endpoint would: the pad after the last speech, the part not yet heard as silence.
    Whisper tiny read the benchmark's "France" as "friends" with 100 ms after it instead of
    the final pass's 150 ms."""

    class KeepingSTT(ToneSTT):
        def __init__(self) -> None:
            super().__init__()
            self.audios: list[np.ndarray] = []

        def transcribe(self, audio: np.ndarray) -> Recognition:
            self.audios.append(audio)
            return super().transcribe(audio)

    stt = KeepingSTT()
    vad = FAST_VAD.model_copy(update={"end_silence_ms": 2000, "pad_ms": 300})
    runtime, voice, _, _ = make(VoiceConfig(vad=vad, partial_interval_s=0, playback_speed=0), stt)
    async with voice, runtime:
        await feed(runtime, np.concatenate([silence(0.3), tone(0.8), silence(0.15)]), chunk_ms=32)
        await wait_for(lambda: stt.audios, limit=30)
    audio = stt.audios[0]
    trailing = (len(audio) - np.flatnonzero(np.abs(audio) > 0.05)[-1]) / 16_000
    assert 0.28 <= trailing <= 0.34, trailing  # heard 0.15 s of it, the rest filled in
