"""Wyoming ``asr`` then ``handle`` with the real default models (Whisper, Piper, the local
LLM) on 127.0.0.1: the answer started on the recording's words before ``handle`` is
adopted when ``handle`` brings them, and a discarded one is never heard or recorded."""

from __future__ import annotations

import anyio
import numpy as np
import pytest
from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.tts import Synthesize

from edge.decisions import ScriptedDecisions
from edge.llm import LlamaCppLLM
from edge.server import EdgeService, SpeechParts
from edge.voice import float_to_pcm16, resample
from tests.server_helpers import (
    ask_handled,
    read_spoken,
    read_transcript,
    settings,
    wait_for,
    wyoming_client,
)
from tests.voice_helpers import heard_as

pytestmark = [pytest.mark.anyio, pytest.mark.model]

RATE = 16_000
CONTEXT = {"conversation_id": "01HAMODELS"}
PID = "wyoming:01HAMODELS"


def service(models) -> EdgeService:  # type: ignore[no-untyped-def]
    stt, tts = models
    return EdgeService(
        settings(voice=True, wyoming_port=0),
        llm=LlamaCppLLM(n_ctx=2048, default_max_tokens=40),
        decisions=ScriptedDecisions(default="conversation"),
        speech=SpeechParts(stt=stt, tts=tts),
    )


def client(svc: EdgeService) -> AsyncTcpClient:
    return wyoming_client(svc, read_timeout=120)


async def ask(svc: EdgeService, text: str) -> str:
    return await ask_handled(svc, text, CONTEXT, read_timeout=120)


async def transcribe(svc: EdgeService, tts, text: str) -> str:  # type: ignore[no-untyped-def]
    spoken = tts.synthesize(text)
    audio = resample(spoken.audio, spoken.sample_rate, RATE)
    pcm = float_to_pcm16(np.concatenate([audio, np.zeros(int(0.8 * RATE), np.float32)]))
    async with client(svc) as c:
        await c.write_event(Transcribe(language="en", context=CONTEXT).event())
        await c.write_event(AudioStart(rate=RATE, width=2, channels=1).event())
        for at in range(0, len(pcm), 3200):  # 100 ms chunks, faster than real time
            await c.write_event(
                AudioChunk(rate=RATE, width=2, channels=1, audio=pcm[at : at + 3200]).event()
            )
            await anyio.sleep(0.01)
        await c.write_event(AudioStop().event())
        _, heard = await read_transcript(c)
    return heard


async def test_a_discarded_early_answer_is_never_heard_or_recorded(models) -> None:  # type: ignore[no-untyped-def]
    svc = service(models)
    async with svc:
        await ask(svc, "Hello.")
        heard = await transcribe(svc, models[1], "What is the capital of France?")
        assert heard_as(heard, "What is the capital of France?")
        await wait_for(lambda: svc.answers.stats.started, limit=60)
        answer = await ask(svc, "How many legs does a spider have?")  # other words
        async with client(svc) as c:
            await c.write_event(Synthesize(text=answer).event())
            await read_spoken(c, until_stopped=False)
        assert svc.answers.stats.discarded >= 1 and svc.answers.stats.adopted == 0
        assert svc.wyoming.backend.prepared.used == 0  # type: ignore[union-attr]
        await wait_for(lambda: len(svc.router.history(PID)) == 2, limit=30)
        rendered = svc.context.render(PID)
        history = [e.user for e in svc.router.history(PID)]
    assert "capital" not in rendered.lower() and "spider" in rendered
    assert history == ["Hello.", "How many legs does a spider have?"]


async def test_the_handle_with_the_recordings_words_adopts_the_early_answer(models) -> None:  # type: ignore[no-untyped-def]
    svc = service(models)
    async with svc:
        await ask(svc, "Hello.")
        heard = await transcribe(svc, models[1], "What is the capital of France?")
        await wait_for(lambda: svc.answers.stats.started, limit=60)
        answer = await ask(svc, heard)
        assert answer
        assert svc.answers.stats.adopted == 1
        await wait_for(lambda: len(svc.router.history(PID)) == 2, limit=30)
        assert [e.user for e in svc.router.history(PID)] == ["Hello.", heard]
