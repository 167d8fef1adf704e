"""The overlapped spoken turn, with scripted models: adaptive endpointing, push-to-talk,
speculative answers that are adopted or silently discarded."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import numpy as np
import pytest

from edge.decisions import ChoiceAnswer, PreparingDecisions, ScriptedDecisions
from edge.interaction import USER_QUERY_TOPIC, VOICE_OUTPUT_TOPIC
from edge.llm import GenerationOptions, ScriptedLLM, ScriptedReply
from edge.server import EdgeClient, EdgeService, SpeechParts
from edge.server._protocol import AudioFormat
from edge.speculation import Guess, PrefetchingDecisions, SpeculativeAnswers
from edge.voice import (
    AUDIO_OUTPUT_TOPIC,
    SPECULATION_TOPIC,
    TRANSCRIPT_TOPIC,
    Endpointer,
    SimulatedSpeaker,
    SpeechPaused,
    SpeechResumed,
    UtteranceEnded,
    VadConfig,
    VoiceConfig,
    chunk_pcm,
    float_to_pcm16,
    sounds_complete,
)
from tests.server_helpers import settings, tone_service
from tests.voice_helpers import EnergyVAD, Recorder, ToneSTT, ToneTTS, silence, tone, wait_for

pytestmark = pytest.mark.anyio

WINDOW = 512  # 32 ms at 16 kHz


def windows(probabilities: list[float]) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(len(probabilities) * WINDOW, np.float32), np.array(probabilities)


def ms(count_ms: int, p: float) -> list[float]:
    return [p] * (count_ms // 32)


ADAPTIVE = VadConfig(
    min_speech_ms=96,
    end_silence_ms=600,
    min_end_silence_ms=400,
    max_end_silence_ms=900,
    pre_roll_ms=0,
    pad_ms=0,
)


# -- endpointing ------------------------------------------------------------------------


def test_sounds_complete() -> None:
    assert sounds_complete("What is the capital of France?")
    assert sounds_complete("Turn on the lights.")
    assert not sounds_complete("What is the capital of")
    assert not sounds_complete("Tell me about the.")
    assert not sounds_complete("So, um,")
    assert not sounds_complete("")


def test_end_verdict_trusts_a_question_mark_more_than_a_period() -> None:
    from edge.voice._sentences import end_verdict

    assert end_verdict("What is the capital of France?") is True
    assert end_verdict("Stop!") is True
    assert end_verdict("It turns orange and red at sunset.") is None  # maybe a comma pause
    assert end_verdict("What is the capital of") is False
    assert end_verdict("at sunset,") is False


def test_a_question_ending_in_a_stranded_preposition_gets_the_neutral_end_silence() -> None:
    """Whisper tiny writes "... famous for" without its question mark: the longest end
    silence (mid-phrase) made such turns wait 0.9 s; a pause inside a question keeps it."""
    from edge.voice._sentences import clearly_continues, end_verdict

    for whole in (
        "What is the capital of Italy and what is it famous for",
        "Who did you go with",
        "What are you looking for",
        "What is this song about",
    ):
        assert end_verdict(whole) is None, whole
        assert end_verdict(whole + "?") is True
        assert not clearly_continues(whole)  # its answer may be prepared in the pause
    for partway in (
        "What is the capital of",
        "What is the weather in",
        "What is the best present for the",
        "What for",
        "Tell me about",
        "I am looking for",
    ):
        assert end_verdict(partway) is False, partway
        assert clearly_continues(partway), partway


def test_a_complete_sentence_shortens_the_end_silence() -> None:
    ep = Endpointer(ADAPTIVE)
    ep.feed(*windows(ms(640, 0.9) + ms(320, 0.0)))
    assert ep.speaking
    assert ep.adapt(complete=True) == []  # 320 ms of pause < 400 ms
    events = ep.feed(*windows(ms(96, 0.0)))
    assert [type(e) for e in events] == [UtteranceEnded]


def test_adapting_after_the_short_bound_ends_at_once() -> None:
    ep = Endpointer(ADAPTIVE)
    ep.feed(*windows(ms(640, 0.9) + ms(448, 0.0)))
    assert [type(e) for e in ep.adapt(complete=True)] == [UtteranceEnded]


def test_mid_phrase_lengthens_the_end_silence_and_keeps_a_pause() -> None:
    ep = Endpointer(ADAPTIVE)
    ep.feed(*windows(ms(640, 0.9) + ms(320, 0.0)))
    ep.adapt(complete=False)
    assert ep.feed(*windows(ms(480, 0.0))) == []  # 800 ms of pause: still one utterance
    events = ep.feed(*windows(ms(320, 0.9) + ms(960, 0.0)))
    assert [type(e) for e in events] == [SpeechResumed, SpeechPaused, UtteranceEnded]
    assert ep.end_silence_samples == 600 * 16  # back to the neutral value


def test_a_350_ms_mid_sentence_pause_never_ends_the_utterance() -> None:
    for complete in (True, False):
        ep = Endpointer(ADAPTIVE)
        ep.feed(*windows(ms(640, 0.9) + ms(160, 0.0)))
        ep.adapt(complete=complete)  # even a wrong "complete" guess waits 400 ms
        events = ep.feed(*windows(ms(192, 0.0) + ms(640, 0.9) + ms(960, 0.0)))
        ended = [e for e in events if isinstance(e, UtteranceEnded)]
        assert len(ended) == 1


def test_finish_ends_the_utterance_at_once() -> None:
    ep = Endpointer(ADAPTIVE)
    ep.feed(*windows(ms(640, 0.9)))
    events = ep.finish()
    assert [type(e) for e in events] == [UtteranceEnded]
    assert not ep.speaking
    assert ep.finish() == []  # nothing to end


# -- speculative requests ------------------------------------------------------------------


GUESS = Guess("voice:0", "capital of France?")


async def test_an_adopted_speculation_is_the_same_stream_and_runs_once() -> None:
    llm = ScriptedLLM([ScriptedReply("Paris is the capital.", delay_s=0.01)])
    messages = [{"role": "user", "content": "capital of France?"}]
    async with SpeculativeAnswers(llm) as speculative:
        speculative.speculate("p1", GUESS, messages, GenerationOptions(max_tokens=20))
        await wait_for(lambda: speculative.stats.started == 1)
        assert speculative.confirm("p1", GUESS)
        stream = speculative.stream(messages, max_tokens=20, cache_key="p1")
        async with stream:
            text = "".join([d async for d in stream])
    assert text == "Paris is the capital."
    assert len(llm.requests) == 1
    stats = speculative.stats
    assert (stats.started, stats.adopted, stats.discarded) == (1, 1, 0)
    assert stats.last_started_unix > 0


async def test_a_request_before_confirmation_discards_the_speculation() -> None:
    llm = ScriptedLLM(default=ScriptedReply("one two three four five six", delay_s=0.05))
    async with SpeculativeAnswers(llm) as speculative:
        guess = Guess("voice:0", "capital of")
        speculative.speculate("p1", guess, [{"role": "user", "content": "capital of"}])
        await anyio.sleep(0.05)
        stream = speculative.stream(
            [{"role": "user", "content": "capital of Peru"}], cache_key="p1"
        )
        async with stream:
            assert "".join([d async for d in stream]) == "one two three four five six"
    stats = speculative.stats
    assert (stats.started, stats.adopted, stats.discarded) == (1, 0, 1)


async def test_prefetched_decisions_answer_the_same_question_once() -> None:
    from edge.decisions import ChoiceQuestion, Criterion

    inner = ScriptedDecisions(default="notes")
    prefetching = PrefetchingDecisions(inner)
    assert not isinstance(prefetching, PreparingDecisions)  # the scripted service cannot
    question = ChoiceQuestion(
        "take a note", (Criterion("notes", "notes"), Criterion("conversation", "talk"))
    )
    early = await prefetching.prefetch(question)
    assert isinstance(early, ChoiceAnswer)
    assert await prefetching.decide(question) is early
    assert prefetching.hits == 1
    assert (await prefetching.decide(question)).label == early.label  # asked again


# -- the whole turn, scripted models ------------------------------------------------------

TURN_VAD = VadConfig(
    min_speech_ms=96,
    end_silence_ms=500,
    min_end_silence_ms=300,
    max_end_silence_ms=700,
    pre_roll_ms=100,
    pad_ms=50,
)


def voice_service(llm: ScriptedLLM, **kw: object) -> EdgeService:
    """The service with scripted models; participant p1 (fed in process) wants audio."""
    config = VoiceConfig(
        vad=TURN_VAD, playback_speed=0, partial_interval_s=0, speculative_after_ms=96
    )
    service = tone_service(llm, config, **kw)
    service.hub.attach("p1", SimulatedSpeaker("p1"))
    return service


async def feed(service: EdgeService, audio: np.ndarray, pid: str = "p1") -> None:
    from edge.voice import AUDIO_INPUT_TOPIC, AudioInput

    for piece in chunk_pcm(float_to_pcm16(audio), 16_000, 100):
        await service.runtime.publish(
            AUDIO_INPUT_TOPIC, AudioInput(pcm=piece), participant_id=pid, source="test"
        )
        await anyio.lowlevel.checkpoint()


async def test_a_discarded_speculation_reaches_nobody_and_records_nothing() -> None:
    llm = ScriptedLLM(default=ScriptedReply("An answer in several words.", delay_s=0.05))
    service = voice_service(llm)
    rec = Recorder(SPECULATION_TOPIC, USER_QUERY_TOPIC, VOICE_OUTPUT_TOPIC, AUDIO_OUTPUT_TOPIC)
    service.runtime.register("recorder", rec)
    async with service:
        await feed(service, np.concatenate([tone(0.5, 440.0), silence(0.2)]))
        await wait_for(lambda: rec.messages(SPECULATION_TOPIC))  # guessed during the pause
        await wait_for(lambda: llm.requests)  # and the answer started
        await feed(service, np.concatenate([tone(1.2, 880.0), silence(1.0)]))  # went on
        await wait_for(lambda: any(m.final for m in rec.messages(AUDIO_OUTPUT_TOPIC)))
        queries = rec.seen[USER_QUERY_TOPIC.name]
        assert [q.text for q, _, _ in queries] == ["tone 880"]
        turn_id = queries[0][1].message_id
        assert {m.request_id for m in rec.messages(VOICE_OUTPUT_TOPIC)} == {turn_id}
        assert {m.request_id for m in rec.messages(AUDIO_OUTPUT_TOPIC)} == {turn_id}
        await wait_for(lambda: service.router.history("p1"))  # recorded (durably) after
        assert [e.user for e in service.router.history("p1")] == ["tone 880"]
        # guessed "tone 440", retracted when speech resumed, then guessed the real words
        guesses = [t.text for t in rec.messages(SPECULATION_TOPIC)]
        assert guesses[:2] == ["tone 440", ""]
        assert service.answers.stats.discarded >= 1
    assert llm.requests[0].messages[-1].content == "tone 440"
    assert llm.requests[0].cancelled  # stopped at the next token


async def test_a_confirmed_speculation_is_adopted_not_asked_twice() -> None:
    llm = ScriptedLLM(default=ScriptedReply("An answer.", delay_s=0.01))
    service = voice_service(llm)
    rec = Recorder(SPECULATION_TOPIC, USER_QUERY_TOPIC, AUDIO_OUTPUT_TOPIC)
    service.runtime.register("recorder", rec)
    async with service:
        await feed(service, np.concatenate([tone(0.5, 440.0), silence(0.2)]))
        await wait_for(lambda: rec.messages(SPECULATION_TOPIC))
        await feed(service, silence(0.8))  # the endpoint confirms the same words
        await wait_for(lambda: any(m.final for m in rec.messages(AUDIO_OUTPUT_TOPIC)))
        assert [q.text for q in rec.messages(USER_QUERY_TOPIC)] == ["tone 440"]
        assert service.answers.stats.adopted == 1
    assert len(llm.requests) == 1  # the turn's answer is the speculative one


async def test_push_to_talk_ends_the_utterance_at_once() -> None:
    service = voice_service(ScriptedLLM(default="Heard you."))
    rec = Recorder(TRANSCRIPT_TOPIC)
    service.runtime.register("recorder", rec)
    async with service:
        async with EdgeClient(
            service.websocket_url,
            participant_id="ptt",
            audio=AudioFormat(sample_rate=16_000),
            want_audio=True,
        ) as client:
            for piece in chunk_pcm(float_to_pcm16(tone(0.6, 440.0)), 16_000, 100):
                await client.send_audio(piece)  # no trailing silence: still talking
            await anyio.sleep(0.3)
            assert not any(t.final for t in rec.messages(TRANSCRIPT_TOPIC))
            await client.end_of_utterance()  # no silence follows: only this ends it
            heard = await client.collect_turn(limit_s=10)
            assert heard.query == "tone 440"
            assert heard.text == "Heard you."
        health = service.websocket.health()
        assert set(health["speculation"]) == {
            "started",
            "adopted",
            "discarded",
            "last_started_unix",
        }


async def test_speech_stopping_offers_the_latest_partial_before_a_covering_pass() -> None:
    """The partial running as speech stops is the pause's first guess: it is handed out
    one Whisper pass before the pass over the whole utterance gives the final words."""
    stt = ToneSTT(delay_s=0.2)
    service = EdgeService(
        settings(voice=True),
        llm=ScriptedLLM(default="An answer."),
        decisions=ScriptedDecisions(default="conversation"),
        speech=SpeechParts(
            stt=stt,
            tts=ToneTTS(),
            config=VoiceConfig(
                vad=TURN_VAD,
                playback_speed=0,
                partial_interval_s=0.3,
                speculative_after_ms=96,
                partial_guess_gap_ms=5000,  # fed faster than real time: any partial qualifies
            ),
            vad_factory=EnergyVAD,
        ),
    )
    rec = Recorder(SPECULATION_TOPIC, TRANSCRIPT_TOPIC)
    service.runtime.register("recorder", rec)
    async with service:
        calls = len(stt.calls)  # the warm-up transcription
        await feed(service, tone(1.0, 440.0))
        await wait_for(lambda: len(stt.calls) > calls)  # a partial is running
        await feed(service, silence(1.0))
        await wait_for(lambda: any(t.final for t in rec.messages(TRANSCRIPT_TOPIC)))
    guesses = rec.seen[SPECULATION_TOPIC.name]
    final_at = next(at for t, _, at in rec.seen[TRANSCRIPT_TOPIC.name] if t.final)
    assert guesses and guesses[0][0].text == "tone 440"
    assert guesses[0][2] < final_at  # offered before the final words were known
    heard = stt.calls[calls:]
    assert len(heard) >= 2 and heard[0] < heard[-1]  # from the partial: shorter audio


async def test_prepared_speech_is_used_by_a_matching_reply_and_never_sent_alone() -> None:
    from edge.interaction import ResponseOutput
    from edge.voice import Speaker

    tts, sent = ToneTTS(), []

    async def publish(chunk, correlation_id) -> None:  # type: ignore[no-untyped-def]
        sent.append(chunk)

    speaker = Speaker("p1", VoiceConfig(playback_speed=0), tts, anyio.CapacityLimiter(1), publish)
    async with anyio.create_task_group() as tg:
        await tg.start(speaker.run)
        speaker.prepare("Words nobody asks for.")  # a dropped guess's, not synthesized yet
        speaker.prepare("Paris is the capital,")  # the newer guess's first piece replaces it
        await wait_for(lambda: len(tts.spoken) == 1)
        speaker.prepare("An older guess, made already.")
        await wait_for(lambda: len(tts.spoken) == 2)
        speaker.prepare("Paris is the capital,")  # made speech is kept
        await anyio.sleep(0.05)
        assert tts.spoken == ["Paris is the capital,", "An older guess, made already."]
        assert sent == []  # prepared speech is never published on its own
        reply = "Paris is the capital, and the largest city, of France."
        speaker.on_output(ResponseOutput(text=reply, request_id="r1", source="conversation"))
        end = ResponseOutput(text="", request_id="r1", source="conversation", final=True)
        speaker.on_output(end)
        await wait_for(lambda: any(c.final for c in sent))
        tg.cancel_scope.cancel()
    assert tts.spoken.count("Paris is the capital,") == 1  # synthesized once, ahead
    assert speaker.prepared_used == 1
    assert next(c.text for c in sent if c.text) == "Paris is the capital,"
    assert all("nobody" not in c.text and "older" not in c.text for c in sent)


async def test_held_deltas_are_read_without_adopting_or_discarding() -> None:
    llm = ScriptedLLM(default=ScriptedReply("One two three.", delay_s=0.01))
    async with SpeculativeAnswers(llm) as speculative:
        messages = [{"role": "user", "content": "count"}]
        speculative.speculate("p", Guess("voice:0", "count"), messages)
        held = "".join([d async for d in speculative.held("p")])
        assert held == "One two three." and speculative.pending("p")
        assert speculative.confirm("p", Guess("voice:0", "count"))
        adopted = "".join([d async for d in speculative.stream(messages, cache_key="p")])
        assert adopted == held
        assert (speculative.stats.adopted, speculative.stats.discarded) == (1, 0)
    assert [d async for d in speculative.held("nobody")] == []


async def test_a_speculation_generates_only_a_little_ahead_until_adopted() -> None:
    words_ = " ".join(f"w{i}" for i in range(12))
    llm = ScriptedLLM(default=ScriptedReply(words_, delay_s=0.01))
    async with SpeculativeAnswers(llm, ahead_deltas=3) as speculative:
        messages = [{"role": "user", "content": "count"}]
        speculative.speculate("p", Guess("voice:0", "count"), messages)
        ahead = [d async for d in _first(speculative.held("p"), 3)]
        await anyio.sleep(0.2)  # far longer than the rest would take to generate
        assert llm.requests[0].output == "".join(ahead)  # paused after three words
        assert speculative.confirm("p", Guess("voice:0", "count"))
        adopted = "".join([d async for d in speculative.stream(messages, cache_key="p")])
    assert adopted == words_ and adopted.startswith("".join(ahead))


async def _first(deltas, n: int):  # type: ignore[no-untyped-def]
    count = 0
    async for delta in deltas:
        yield delta
        count += 1
        if count == n:
            return


async def test_a_held_floor_keeps_a_long_pause_inside_the_utterance() -> None:
    """Issue 23: with Hold to talk held, a 1.5 s pause ended the utterance and the turn was
    answered while the button was down. While the client holds the floor only its
    end_of_utterance ends the turn."""
    service = voice_service(ScriptedLLM(default="Heard you."))
    rec = Recorder(TRANSCRIPT_TOPIC, USER_QUERY_TOPIC)
    service.runtime.register("recorder", rec)
    held = np.concatenate([tone(0.6, 440.0), silence(1.5), tone(0.6, 440.0), silence(1.0)])
    async with service:
        async with EdgeClient(
            service.websocket_url,
            participant_id="holder",
            audio=AudioFormat(sample_rate=16_000),
            want_audio=True,
        ) as client:
            await client.hold()
            for piece in chunk_pcm(float_to_pcm16(held), 16_000, 100):
                await client.send_audio(piece)
            await anyio.sleep(0.5)  # every pause above is past the 0.7 s end silence
            assert not rec.messages(USER_QUERY_TOPIC)
            assert not any(t.final for t in rec.messages(TRANSCRIPT_TOPIC))
            await client.end_of_utterance()
            heard = await client.collect_turn(limit_s=10)
            assert heard.query == "tone 440" and heard.text == "Heard you."
            listener = service.voice.session("holder")[0]  # type: ignore[union-attr]
            assert listener.stats[-1].audio_s > 2.5  # both tones and the pause between them
            # released: silence ends the next utterance again
            after = np.concatenate([tone(0.6), silence(1.0)])
            for piece in chunk_pcm(float_to_pcm16(after), 16_000, 100):
                await client.send_audio(piece)
            assert (await client.collect_turn(limit_s=10)).query == "tone 440"
        assert len(rec.messages(USER_QUERY_TOPIC)) == 2


async def test_after_end_of_utterance_nothing_waits_for_a_timer() -> None:
    """The client's end_of_utterance is a certain endpoint: with an 8 s end silence (and
    its bounds) and no pause pass, the reply still starts at once after the release (the
    bound is half that silence, not a speed: a loaded machine is slow, not 8 s slow)."""
    slow = VadConfig(
        min_speech_ms=96,
        end_silence_ms=8000,
        min_end_silence_ms=8000,
        max_end_silence_ms=8000,
        pre_roll_ms=100,
        pad_ms=50,
    )
    config = VoiceConfig(
        vad=slow, playback_speed=0, partial_interval_s=0, speculative_after_ms=10_000
    )
    service = tone_service(ScriptedLLM(default="Heard you."), config)
    async with service:
        async with EdgeClient(
            service.websocket_url,
            participant_id="ptt",
            audio=AudioFormat(sample_rate=16_000),
            want_audio=True,
        ) as client:
            for piece in chunk_pcm(float_to_pcm16(tone(0.6, 440.0)), 16_000, 100):
                await client.send_audio(piece)
            released = anyio.current_time()
            await client.end_of_utterance()
            heard = await client.collect_turn(limit_s=20)
            assert heard.query == "tone 440" and heard.text == "Heard you."
            assert anyio.current_time() - released < 4.0  # not the 8 s silence


def test_an_indirect_questions_opener_alone_gets_the_neutral_end_silence() -> None:
    """ "Can you tell me?" reads whole, but a speaker pausing there goes on with the question
    itself: the shortest end silence would cut "which mountain is the tallest" off."""
    from edge.voice._sentences import end_verdict

    for opener in ("Can you tell me?", "Do you know?", "So, could you tell me?", "Tell me."):
        assert end_verdict(opener) is None, opener
    for whole in (
        "Can you tell me which mountain is the tallest in the world?",
        "What do you know?",
        "Do you know the way to the station?",
    ):
        assert end_verdict(whole) is True, whole
