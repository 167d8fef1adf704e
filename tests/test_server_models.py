"""The service with the real default models: a spoken session over WebSocket, and
Wyoming asr / tts / describe / handle through the ``wyoming`` client classes."""

from __future__ import annotations

import re

import numpy as np
import pytest
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.handle import Handled
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from edge.conversation import SYSTEM_PROMPT_KEY
from edge.decisions import ScriptedDecisions
from edge.llm import LlamaCppLLM
from edge.server import EdgeClient, EdgeService, SpeechParts
from edge.server._protocol import AudioFormat
from edge.voice import (
    PiperTTS,
    VoiceConfig,
    WhisperSTT,
    chunk_pcm,
    float_to_pcm16,
    pcm16_to_float,
    resample,
)
from tests.server_helpers import (
    LONG_REPLY,
    read_answer,
    read_spoken,
    read_transcript,
    receive_until,
    settings,
    speaking_a_long_reply,
    wait_for,
)
from tests.voice_helpers import heard_as, words

pytestmark = [pytest.mark.anyio, pytest.mark.model]

QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def question_pcm(models: tuple[WhisperSTT, PiperTTS]) -> tuple[bytes, int]:
    _, tts = models
    speech = tts.synthesize(QUESTION)
    silence = np.zeros(speech.sample_rate, dtype=np.float32)  # 1 s: the utterance ends
    return float_to_pcm16(np.concatenate([speech.audio, silence])), speech.sample_rate


def real_service(models: tuple[WhisperSTT, PiperTTS], **kw: object) -> EdgeService:
    stt, tts = models
    return EdgeService(
        settings(voice=True, **kw),
        llm=LlamaCppLLM(n_ctx=2048, default_max_tokens=40),
        decisions=ScriptedDecisions(default="conversation"),  # routing has its own tests
        speech=SpeechParts(stt=stt, tts=tts, config=VoiceConfig(playback_speed=0)),
    )


async def test_spoken_question_gets_transcript_text_and_audio(models, question_pcm) -> None:  # type: ignore[no-untyped-def]
    pcm, rate = question_pcm
    async with real_service(models) as service:
        async with EdgeClient(
            service.websocket_url,
            participant_id="headset",
            audio=AudioFormat(sample_rate=rate),
            want_audio=True,
        ) as client:
            assert client.welcome is not None and client.welcome.audio_out_rate == 22050
            await wait_for(lambda: "headset" in service.warmer.warmed, limit=30)
            for piece in chunk_pcm(pcm, rate, 100):
                await client.send_audio(piece)
            turn = await client.collect_turn(limit_s=60)
            metrics = service.conversation.last_metrics("headset")
    assert words(turn.query) == words(QUESTION)
    # the system prompt was evaluated when the participant joined
    assert metrics is not None and metrics.reused_tokens > 100
    finals = [t for t in turn.transcripts if t.final]
    assert finals and words(finals[-1].text) == words(QUESTION)
    assert turn.text  # the model answered
    assert turn.replies[-1].final
    assert turn.audio and all(h.sample_rate == 22050 for h, _ in turn.audio)
    assert turn.audio[-1][0].final
    seconds = len(turn.pcm) / 2 / 22050
    assert seconds > 0.5  # the reply was spoken


async def test_wyoming_describe_asr_tts_and_handle(models, question_pcm) -> None:  # type: ignore[no-untyped-def]
    pcm, rate = question_pcm
    async with real_service(models, wyoming_port=0) as service:
        assert service.wyoming is not None
        async with AsyncTcpClient(
            "127.0.0.1", service.wyoming.bound_port, read_timeout=60
        ) as client:
            await client.write_event(Describe().event())
            event = await client.read_event()
            assert event is not None
            info = Info.from_event(event)
            assert info.asr[0].models and info.tts[0].voices and info.handle[0].models

            await client.write_event(Transcribe(language="en").event())
            await client.write_event(AudioStart(rate=rate, width=2, channels=1).event())
            for piece in chunk_pcm(pcm, rate, 100):
                await client.write_event(
                    AudioChunk(rate=rate, width=2, channels=1, audio=piece).event()
                )
            await client.write_event(AudioStop().event())
            chunks, text = await read_transcript(client)  # streamed, then whole
            assert words(text) == words(QUESTION) and "".join(chunks) == text

            await client.write_event(Synthesize(text="The lab is open today.").event())
            event = await client.read_event()
            assert event is not None and AudioStart.is_type(event.type)
            start = AudioStart.from_event(event)
            audio = b""
            while True:
                event = await client.read_event()
                assert event is not None
                if AudioStop.is_type(event.type):
                    break
                audio += AudioChunk.from_event(event).audio
            assert start.rate == 22050 and len(audio) / 2 / start.rate > 0.5
            # what Piper said comes back word for word through Whisper
            stt, _ = models
            heard = stt.transcribe(resample(pcm16_to_float(audio), start.rate, 16_000))
            assert heard_as(heard.text, "The lab is open today.")

            await client.write_event(Transcript(text=QUESTION).event())
            chunks, event = await read_answer(client)
            assert event is not None and Handled.is_type(event.type), event
            assert Handled.from_event(event).text


async def test_wyoming_streams_handle_and_synthesize_with_real_models(models) -> None:  # type: ignore[no-untyped-def]
    """A handle client that reads the stream (Home Assistant reads only ``handled``) gets
    the answer as handled-chunks, and a synthesize stream (as Home Assistant sends one)
    speaks its first sentence before the text stream ends."""
    async with real_service(models, wyoming_port=0) as service:
        assert service.wyoming is not None
        port = service.wyoming.bound_port
        async with AsyncTcpClient("127.0.0.1", port, read_timeout=60) as client:
            await client.write_event(Transcript(text=QUESTION).event())
            chunks, event = await read_answer(client)
            assert event is not None and Handled.is_type(event.type), event
            assert len(chunks) > 1 and "".join(chunks) == Handled.from_event(event).text

        first, second = "The lab is open today. ", "It closes in the evening."
        async with AsyncTcpClient("127.0.0.1", port, read_timeout=60) as client:
            await client.write_event(SynthesizeStart().event())
            await client.write_event(SynthesizeChunk(text=first).event())
            spoken = await read_spoken(client, until_stopped=False)  # before synthesize-stop
            await client.write_event(SynthesizeChunk(text=second).event())
            await client.write_event(SynthesizeStop().event())
            spoken += await read_spoken(client)
        stt, _ = models
        heard = [stt.transcribe(resample(pcm16_to_float(pcm), 22050, 16_000)) for pcm in spoken]
        assert [words(h.text) for h in heard] == [words(first), words(second)]


async def test_product_path_routes_notes_and_questions_with_the_real_model() -> None:
    # the real decision service (no injected decisions), as `edge serve` runs it
    service = EdgeService(
        settings(voice=False, notes=True), llm=LlamaCppLLM(n_ctx=2048, default_max_tokens=40)
    )
    async with service, EdgeClient(service.websocket_url, participant_id="lab") as client:
        note = await client.ask("Take a note: the centrifuge needs a new rotor", limit_s=60)
        assert {r.source for r in note.replies} == {"notes"}
        saved = await client.ask("done", limit_s=60)
        assert saved.text == "Note saved."
        answer = await client.ask("What is the capital of France?", limit_s=60)
        assert {r.source for r in answer.replies} == {"conversation"} and answer.text
        await wait_for(lambda: "centrifuge needs a new rotor" in service.context.render("lab"))


async def test_a_first_turn_right_after_joining_reuses_the_system_prompt() -> None:
    """The service evaluates the system prompt once at start; a participant who asks before
    their join warm has run, while the model last evaluated something else, starts from it."""
    llm = LlamaCppLLM(n_ctx=2048, default_max_tokens=16)
    service = EdgeService(
        settings(voice=False), llm=llm, decisions=ScriptedDecisions(default="conversation")
    )
    async with service:
        assert SYSTEM_PROMPT_KEY in held(llm)
        await llm.score("Completely unrelated words.", ["A"], cache_key="elsewhere")
        async with EdgeClient(service.websocket_url, participant_id="early") as client:
            assert (await client.ask("What is the capital of France?", limit_s=60)).text
            metrics = service.conversation.last_metrics("early")
    assert metrics is not None and metrics.reused_tokens > 100


async def test_a_first_turn_after_the_join_warm_evaluates_only_its_request() -> None:
    """The join warm evaluates the participant's context and the current time on top of
    the system prompt, so their first answer evaluates the request and the template only
    (without it, some 30 tokens of context more; if the clock turns a minute between the
    warm and the question, the time's last digits and what follows them are new too)."""
    llm = LlamaCppLLM(n_ctx=2048, default_max_tokens=16)
    service = EdgeService(
        settings(voice=False), llm=llm, decisions=ScriptedDecisions(default="conversation")
    )
    question = "What is the capital of France?"
    async with service, EdgeClient(service.websocket_url, participant_id="joined") as client:
        await wait_for(lambda: "joined" in service.warmer.warmed, limit=30)
        assert (await client.ask(question, limit_s=60)).text
        metrics = service.conversation.last_metrics("joined")
        request = len(llm._engine.tokenize_prompt(question))
    assert metrics is not None
    assert metrics.prompt_tokens - metrics.reused_tokens <= request + 16  # a minute may turn


def held(llm: LlamaCppLLM) -> set[str]:
    """The keys whose tokens the model holds: saved states and the live context's."""
    return set(llm.cached_keys()) | {llm._engine.owner or ""}


async def test_forget_drops_the_participants_saved_model_states() -> None:
    """Forgetting erases what the model keeps for a participant too: their conversation's
    prompt state and the routing decision state prepared for their next turn."""
    llm = LlamaCppLLM(n_ctx=2048, default_max_tokens=24)
    service = EdgeService(settings(voice=False, notes=True), llm=llm)  # two destinations
    async with service:
        async with EdgeClient(service.websocket_url, participant_id="erased") as client:
            answer = await client.ask("My locker code is 4711. What is a locker?", limit_s=60)
            assert answer.text
            mine = {"erased", "decisions:erased"}
            await wait_for(lambda: mine <= held(llm), limit=60)
            await client.forget()
        assert not mine & held(llm)
        async with EdgeClient(service.websocket_url, participant_id="other") as client:
            assert (await client.ask("Hello there.", limit_s=60)).text  # the model still works


async def test_a_greeting_gets_a_short_reply_without_the_prompts_scaffolding() -> None:
    """Issue 23: "hi" got a 200-word ramble, replies carried "Current time: …", "(No earlier
    conversation or context.)" or an "Assistant:" prefix. The instructions ask for one to
    three short sentences: what reaches the participant and their store respects that."""
    scaffolding = ("Current time:", "No earlier conversation", "Assistant:", "Context:")
    service = EdgeService(
        settings(voice=False),
        llm=LlamaCppLLM(n_ctx=2048, temperature=0.0),
        decisions=ScriptedDecisions(default="conversation"),
    )
    async with service, EdgeClient(service.websocket_url, participant_id="greeter") as client:
        for question in ("hi", "tell me about yourself"):
            reply = (await client.ask(question, limit_s=120)).text
            assert reply and not any(s in reply for s in scaffolding), reply
            ends = re.findall(r"[.!?]+(?=\s|$)", reply.strip())
            assert len(ends) <= 3 and len(reply.split()) <= 90, reply
        stored = [r.assistant for r in service.store.history("greeter")[0]]
        assert len(stored) == 2 and not any(s in a for a in stored for s in scaffolding)


async def test_the_device_default_batches_and_refuses_a_message_too_long_for_a_sequence() -> None:
    """The CI profile serves its participants batched, each sequence holding the window its
    budgets need; a typed turn longer than that gets a clear ``too_long`` error, and the
    participant's next turn is answered."""
    from edge.device import load_device_config
    from edge.server._protocol import MAX_TEXT_CHARS

    device = load_device_config("ci-2core-24gb")
    assert device.llm_config().sequences == 8
    service = EdgeService(settings(voice=False), device=device)
    errors = []

    def seen(message: object) -> None:
        if getattr(message, "type", None) == "error":
            errors.append(message)

    async with service, EdgeClient(service.websocket_url, participant_id="long") as client:
        long = ("Tell me about bees and the flowers they visit. " * 400)[:MAX_TEXT_CHARS]
        await client.ask(long, limit_s=60, on_message=seen)
        assert [e.code for e in errors] == ["too_long"], errors
        assert "too long" in errors[0].message and "context window is" in errors[0].message
        answer = await client.ask("What do bees make?", limit_s=60)
        assert answer.text.strip()


async def test_a_quick_stop_spoken_over_a_reply_interrupts_it_and_is_heard_once(models) -> None:  # type: ignore[no-untyped-def]
    """A person says a quick "Stop." while the reply plays, through ``edge serve`` with
    the real Silero and Whisper: 0.2-0.3 s of speech, under the 250 ms that confirms a
    longer run. The reply stops (a barge-in), and the next turn's words are "Stop." once
    (Whisper looped on it: "Stop. Stop. Stop. ...")."""
    from edge.llm import ScriptedLLM
    from edge.server._protocol import InterruptedMessage

    stt, tts = models
    kept = tts.length_scale
    tts.length_scale = 0.85  # a quick voice
    try:
        said = tts.synthesize("Stop.")
    finally:
        tts.length_scale = kept
    stop = resample(said.audio, said.sample_rate, 16_000)
    pcm = float_to_pcm16(
        np.concatenate([np.zeros(4_800, np.float32), stop, np.zeros(16_000, np.float32)])
    )
    service = EdgeService(
        settings(voice=True),
        llm=ScriptedLLM([LONG_REPLY], default="Stopped."),
        decisions=ScriptedDecisions(default="conversation"),
        speech=SpeechParts(stt=stt, tts=tts, config=VoiceConfig(playback_speed=1.0)),
    )
    async with (
        service,
        EdgeClient(
            service.websocket_url,
            participant_id="p",
            audio=AudioFormat(sample_rate=16_000),
            want_audio=True,
        ) as client,
    ):
        await speaking_a_long_reply(client, 30)
        for piece in chunk_pcm(pcm, 16_000, 100):
            await client.send_audio(piece)
        interrupted = await receive_until(client, InterruptedMessage, 30)
        assert interrupted.reason == "barge-in"
        turn = await client.collect_turn(limit_s=30)
    assert turn.query.strip(" .!").lower() == "stop", turn.query
    assert turn.text == "Stopped."
