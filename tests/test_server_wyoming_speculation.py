"""Wyoming ``asr`` then ``handle`` (as Home Assistant drives them), scripted model, tone
voice: a ``transcribe`` naming an active conversation starts the answer to the
recording's words while the client waits out its silence; the ``handle`` bringing the
same words adopts it, other words discard it unseen and unrecorded."""

from __future__ import annotations

import anyio
import numpy as np
import pytest
from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.tts import Synthesize

from edge.decisions import ScriptedDecisions
from edge.llm import ScriptedLLM, ScriptedReply
from edge.server import EdgeService, SpeechParts
from edge.voice import float_to_pcm16
from tests.server_helpers import (
    ask_handled,
    read_spoken,
    read_transcript,
    settings,
    wait_for,
    wyoming_client,
)
from tests.voice_helpers import EnergyVAD, ToneSTT, ToneTTS, silence, tone

pytestmark = pytest.mark.anyio

CONTEXT = {"conversation_id": "01HASPEC"}


def reply(messages) -> ScriptedReply:  # type: ignore[no-untyped-def]
    return ScriptedReply(f"You said: {messages[-1].content}. That is all.", delay_s=0.01)


def service(llm: ScriptedLLM) -> EdgeService:
    return EdgeService(
        settings(voice=True, wyoming_port=0),
        llm=llm,
        decisions=ScriptedDecisions(default="conversation"),
        speech=SpeechParts(stt=ToneSTT(), tts=ToneTTS(), vad_factory=EnergyVAD),
    )


def client(svc: EdgeService) -> AsyncTcpClient:
    return wyoming_client(svc, read_timeout=10)


async def ask(svc: EdgeService, text: str) -> str:
    return await ask_handled(svc, text, CONTEXT, read_timeout=10)


async def transcribe(
    svc: EdgeService, context: dict | None = CONTEXT, pieces: tuple = ((0.6, 440.0), (0.7, 0))
) -> str:
    audio = float_to_pcm16(np.concatenate([tone(s, f) if f else silence(s) for s, f in pieces]))
    async with client(svc) as c:
        await c.write_event(Transcribe(language="en", context=context).event())
        await c.write_event(AudioStart(rate=16000, width=2, channels=1).event())
        for at in range(0, len(audio), 3200):
            chunk = AudioChunk(rate=16000, width=2, channels=1, audio=audio[at : at + 3200])
            await c.write_event(chunk.event())
            await anyio.sleep(0.01)
        await c.write_event(AudioStop().event())
        _, text = await read_transcript(c)
    return text


async def test_the_handle_bringing_the_recordings_words_adopts_the_answer_started_early() -> None:
    llm = ScriptedLLM(reply)
    svc = service(llm)
    async with svc:
        await ask(svc, "hello")  # the conversation is active (its context loaded)
        assert await transcribe(svc) == "tone 440"
        await wait_for(lambda: svc.answers.stats.started == 1)  # before handle
        assert len(llm.requests) == 2
        assert await ask(svc, "tone 440") == "You said: tone 440."
        stats = svc.answers.stats
        assert (stats.started, stats.adopted, stats.discarded) == (1, 1, 0)
        assert len(llm.requests) == 2  # the turn's answer is the early one


async def test_a_handle_with_other_words_discards_the_early_answer_unseen() -> None:
    llm = ScriptedLLM(reply)
    svc = service(llm)
    async with svc:
        await ask(svc, "hello")
        await transcribe(svc)
        await wait_for(lambda: svc.answers.stats.started == 1)
        assert await ask(svc, "something else") == "You said: something else."
        assert svc.answers.stats.discarded == 1 and svc.answers.stats.adopted == 0
        rendered = svc.context.render("wyoming:01HASPEC")
        assert "tone 440" not in rendered and "something else" in rendered


async def test_without_a_conversation_id_the_address_last_conversation_is_guessed() -> None:
    """Home Assistant's ``transcribe`` may name no conversation: the one this client last
    asked for is the likely one, and its next handle adopts the early answer."""
    llm = ScriptedLLM(reply)
    svc = service(llm)
    async with svc:
        await ask(svc, "hello")
        await transcribe(svc, context=None)
        await wait_for(lambda: svc.answers.stats.started == 1)
        assert await ask(svc, "tone 440") == "You said: tone 440."
        assert svc.answers.stats.adopted == 1 and len(llm.requests) == 2


async def test_no_early_answer_without_an_active_conversation() -> None:
    svc = service(ScriptedLLM(reply))
    async with svc:
        await transcribe(svc)  # this conversation never asked: nothing of it is loaded
        await transcribe(svc, context=None)
        await anyio.sleep(0.2)
        assert svc.answers.stats.started == 0


async def speak(svc: EdgeService, text: str) -> None:
    async with client(svc) as c:
        await c.write_event(Synthesize(text=text).event())
        await read_spoken(c, until_stopped=False)


async def test_the_following_synthesize_speaks_the_first_sentence_prepared_ahead() -> None:
    svc = service(ScriptedLLM(reply))
    tts = svc.voice.tts  # type: ignore[union-attr]
    async with svc:
        await ask(svc, "hello")
        await transcribe(svc)
        prepared = svc.wyoming.backend.prepared  # type: ignore[union-attr]
        await wait_for(lambda: "You said: tone 440." in tts.spoken)  # before handle
        answer = await ask(svc, "tone 440")
        await speak(svc, answer)
        assert prepared.used == 1
        assert tts.spoken.count("You said: tone 440.") == 1  # synthesized once, ahead


async def test_a_discarded_answers_prepared_speech_is_never_sent() -> None:
    svc = service(ScriptedLLM(reply))
    tts = svc.voice.tts  # type: ignore[union-attr]
    async with svc:
        await ask(svc, "hello")
        await transcribe(svc)
        await wait_for(lambda: "You said: tone 440." in tts.spoken)
        answer = await ask(svc, "something else")
        await speak(svc, answer)
        assert svc.wyoming.backend.prepared.used == 0  # type: ignore[union-attr]


async def test_words_of_a_pause_the_speaker_talked_past_are_retracted() -> None:
    llm = ScriptedLLM(reply)
    svc = service(llm)
    async with svc:
        await ask(svc, "hello")
        heard = await transcribe(svc, pieces=((0.4, 440.0), (0.5, 0), (0.6, 880.0), (0.4, 0)))
        assert heard == "tone 880"
        await wait_for(lambda: any(r.messages[-1].content == "tone 880" for r in llm.requests))
        # the pause's words (when their pass ended before speech resumed) were retracted
        early = [r for r in llm.requests[1:] if r.messages[-1].content == "tone 440"]
        assert all(r.cancelled for r in early)
        assert await ask(svc, "tone 880") == "You said: tone 880."
        assert (svc.answers.stats.adopted, svc.answers.stats.discarded) == (1, len(early))


async def test_each_recordings_guess_is_keyed_by_its_utterance_on_the_voices_recognizer() -> None:
    """A recording is an utterance of its own: two recordings of the same words for one
    conversation give two guesses (``wyoming:<n>``), both for its participant; their
    passes run on the voice pipeline's recognizer, beside the listeners' passes."""
    svc = service(ScriptedLLM(reply))
    async with svc:
        backend = svc.wyoming.backend  # type: ignore[union-attr]
        assert backend.recognizer is svc.voice.recognizer  # type: ignore[union-attr]
        seen: list[tuple[str, str, str]] = []
        provisional = backend.provisional
        assert provisional is not None

        def spy(participant_id: str, utterance: str, text: str) -> None:
            seen.append((participant_id, utterance, text))
            provisional(participant_id, utterance, text)

        backend.provisional = spy
        await ask(svc, "hello")
        assert await transcribe(svc) == await transcribe(svc) == "tone 440"
    keys = [utterance for _, utterance, text in seen if text == "tone 440"]
    assert len(set(keys)) == 2 and all(k.startswith("wyoming:") for k in keys), seen
    assert {participant for participant, _, _ in seen} == {"wyoming:01HASPEC"}
