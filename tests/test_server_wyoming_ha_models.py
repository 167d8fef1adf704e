"""Home Assistant's Wyoming sequence against the service with the real default models
(Whisper, Piper, the local LLM and its router) on 127.0.0.1, driven by the benchmark's own
Home Assistant client (``benchmarks/chain_paths.py``): ``asr`` with the question streamed
in real time and Home Assistant's 0.7 s of end silence, a ``transcript`` to ``handle``
with conversation_id, device_id and satellite_id, read as Home Assistant reads it, then
the whole answer to ``tts``. ``handled`` carries the whole answer (the one recorded, not a
part of it) within the Wyoming reply's one sentence; the answer was prepared whole in the
end silence and its first sentence's audio answers the ``synthesize``."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from edge.conversation import ReplyFilter
from edge.llm import LlamaCppLLM
from edge.server import EdgeService, SpeechParts
from edge.voice import float_to_pcm16, resample
from tests.server_helpers import settings, wait_for
from tests.voice_helpers import heard_as

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from chain_paths import (  # noqa: E402
    RATE,
    Utterance,
    WyomingPath,
    ha_handle_reply,
    wyoming_turn,
)

pytestmark = [pytest.mark.anyio, pytest.mark.model]

CONVERSATION = "01HAREPLAY"
PID = f"wyoming:{CONVERSATION}"


def utterance(tts, text: str) -> Utterance:  # type: ignore[no-untyped-def]
    spoken = tts.synthesize(text)
    audio = resample(spoken.audio, spoken.sample_rate, RATE)
    pcm = float_to_pcm16(np.concatenate([np.zeros(int(0.3 * RATE), np.float32), audio]))
    return Utterance("q", "short", text, pcm, len(pcm) / 2 / RATE)


def home_assistant(svc: EdgeService) -> WyomingPath:
    assert svc.wyoming is not None
    port = svc.wyoming.bound_port

    async def reply(text, out, marks):  # type: ignore[no-untyped-def]
        await ha_handle_reply(port, text, CONVERSATION, out, marks)

    return WyomingPath(port, port, True, reply)


def sentences_within(text: str, limit: int) -> bool:
    """Whether ``text`` has at most ``limit`` sentences, counted as the reply is bounded."""
    bounded = ReplyFilter(limit)
    return bounded.feed(text) + bounded.flush() == text


async def test_home_assistants_sequence_gets_the_whole_answer_in_handled(models) -> None:  # type: ignore[no-untyped-def]
    stt, tts = models
    svc = EdgeService(
        settings(voice=True, wyoming_port=0),
        llm=LlamaCppLLM(n_ctx=2048, default_max_tokens=80),
        speech=SpeechParts(stt=stt, tts=tts),
    )
    async with svc:
        path = home_assistant(svc)
        first = await wyoming_turn(path, utterance(tts, "Hello there."))
        assert first["handled"], first
        turn = await wyoming_turn(path, utterance(tts, "What is the capital of France?"))
        assert heard_as(turn["heard"][0], "What is the capital of France?")
        await wait_for(lambda: len(svc.router.history(PID)) == 2, limit=60)
        recorded = svc.router.history(PID)[-1].assistant
        prepared = svc.wyoming.backend.prepared  # type: ignore[union-attr]
        adopted, used = svc.answers.stats.adopted, prepared.used
    assert turn["events_read"] == ["handled"]  # as Home Assistant: no handled-chunk read
    assert "handled-chunk" in turn["events_skipped"]
    assert turn["handled"] and turn["answer"] == recorded  # the whole answer, recorded
    assert "Paris" in turn["answer"]
    assert sentences_within(turn["answer"], 1), turn["answer"]
    assert turn["total_s"] is not None  # its speech came
    assert adopted >= 1  # answered in the end silence, adopted by the handle
    assert used >= 1  # the synthesize spoke its first sentence from prepared audio
