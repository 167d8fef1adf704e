"""A room full of people: four Piper voices join, speak, barge in, hold to talk, dictate
notes, drop their link, resume and leave at random (a fixed seed) for a bounded time,
against the real VAD and Whisper; replies are scripted text spoken as tones (see
``tests/chaos_helpers.py``). ``make test`` runs it briefly (3 s to warm up, then 5 s of one
seed: about 13 actions and 15 exchanges, 22 s in all); ``make chaos`` runs it long
(``EDGE_CHAOS_S`` seconds, ``EDGE_CHAOS_SEEDS`` seeds)."""

from __future__ import annotations

import logging
import os

import pytest

from edge.decisions import ScriptedDecisions
from edge.llm import ScriptedLLM
from edge.server import EdgeService, SpeechParts
from edge.voice import VoiceConfig
from tests.chaos_helpers import check_room, record_voices, room, rss_mb, run_room
from tests.server_helpers import answer_for, settings
from tests.voice_helpers import ToneTTS, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.model]

SECONDS = float(os.environ.get("EDGE_CHAOS_S", "5"))  # `make chaos`: 300, on three seeds
SEEDS = [int(s) for s in os.environ.get("EDGE_CHAOS_SEEDS", "7").split(",")]
MEMORY_GROWTH_MB = 150  # over the run, after the first round warmed everything up


@pytest.fixture(scope="module")
def voices(models):  # type: ignore[no-untyped-def]
    return record_voices(models[1])


def room_service(models, data_dir) -> EdgeService:  # type: ignore[no-untyped-def]
    def choose(question):  # type: ignore[no-untyped-def]
        return "notes" if question.text.lower().startswith("take a note") else "conversation"

    return EdgeService(
        settings(voice=True, notes=True, data_dir=data_dir),
        llm=ScriptedLLM(answer_for),
        decisions=ScriptedDecisions(choose),
        speech=SpeechParts(stt=models[0], tts=ToneTTS(), config=VoiceConfig()),
    )


@pytest.mark.parametrize("seed", SEEDS)
async def test_a_room_full_of_people(models, voices, seed, tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.ERROR)
    service = room_service(models, tmp_path)
    async with service:
        people = room(service, voices, seed)
        await run_room(people, min(SECONDS, 3.0))  # warm-up round
        before = rss_mb()
        await run_room(people, SECONDS)
        grown = rss_mb() - before
        summary = await check_room(people)
        await wait_for(lambda: not service.voice.participants(), limit=30)  # type: ignore[union-attr]
    print(summary, f"memory grew {grown:.0f} MB")
    assert sum(s["exchanges"] for s in summary.values()) >= 4, summary
    assert grown < MEMORY_GROWTH_MB, grown
    failures = [r for r in caplog.records if "voice of" in r.getMessage()]
    assert not failures, failures
