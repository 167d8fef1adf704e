"""Load: 60 participants at once on the scripted model (loopback, bounded in time), over
plain ``ws://`` and over ``wss://``.

Every turn must come back complete (no lost turn), and each reply must carry its own
participant's words only (no cross-talk between participants).
"""

from __future__ import annotations

import os

import anyio
import pytest

from edge.decisions import ScriptedDecisions
from edge.llm import ScriptedLLM
from edge.server import EdgeClient, EdgeService
from tests.server_helpers import answer_for, settings

pytestmark = pytest.mark.anyio

PARTICIPANTS = int(os.environ.get("EDGE_LOAD_PARTICIPANTS", "60"))  # make soak: 200
TURNS = int(os.environ.get("EDGE_LOAD_TURNS", "3"))


@pytest.mark.parametrize("tls", [False, True], ids=["ws", "wss"])
async def test_sixty_participants_lose_no_turn_and_hear_only_their_own_answers(tls: bool) -> None:
    service = EdgeService(
        settings(max_sessions=PARTICIPANTS + 4, max_sessions_per_address=PARTICIPANTS + 4, tls=tls),
        llm=ScriptedLLM(answer_for),
        decisions=ScriptedDecisions(default="conversation"),
    )
    answers: dict[str, list[str]] = {}

    async def participant(n: int) -> None:
        pid = f"load-{n:02d}"
        async with EdgeClient(service.websocket_url, participant_id=pid) as client:
            for turn in range(TURNS):
                question = f"{pid} asks question {turn}"
                result = await client.ask(question, limit_s=60)
                assert not result.errors, result.errors
                answers.setdefault(pid, []).append(result.text)
            rendered = service.context.render(pid)  # this participant's history only
            assert f"{pid} asks question {TURNS - 1}" in rendered
            assert rendered.count(" asks question ") == rendered.count(f"{pid} asks question ")
            await client.send({"type": "bye"})

    async with service:
        with anyio.fail_after(90 + PARTICIPANTS * TURNS * 0.2):
            async with anyio.create_task_group() as tg:
                for n in range(PARTICIPANTS):
                    tg.start_soon(participant, n)
    assert len(answers) == PARTICIPANTS
    for pid, texts in answers.items():
        assert texts == [f"You said: {pid} asks question {t}. That is all." for t in range(TURNS)]
