"""A Wyoming client that closes early leaves nothing running for it (scripted models)."""

from __future__ import annotations

import pytest
from wyoming.asr import Transcript
from wyoming.handle import HandledChunk

from edge.decisions import ScriptedDecisions
from edge.interaction import INTERRUPTED_TOPIC
from edge.llm import ScriptedLLM, ScriptedReply
from edge.server import EdgeService
from tests.server_helpers import settings, wait_for, wyoming_client
from tests.voice_helpers import Recorder

pytestmark = pytest.mark.anyio


async def test_a_handle_client_gone_mid_answer_stops_its_turn() -> None:
    """Home Assistant closes the connection after the answer's first words: the turn is
    interrupted (the model's steps go to others), not generated to its end for nobody."""
    story = " ".join(f"Part {i} of a long story." for i in range(200))
    llm = ScriptedLLM([ScriptedReply(story, delay_s=0.02)])
    service = EdgeService(
        settings(wyoming_port=0), llm=llm, decisions=ScriptedDecisions(default="conversation")
    )
    interrupts = Recorder(INTERRUPTED_TOPIC)
    service.runtime.register("interrupts", interrupts)
    async with service:
        async with wyoming_client(service, read_timeout=10) as client:
            context = {"conversation_id": "kitchen"}
            await client.write_event(Transcript(text="tell me a story", context=context).event())
            while (event := await client.read_event()) is not None:
                if HandledChunk.is_type(event.type):
                    break  # gone after the first words
        await wait_for(lambda: interrupts.seen[INTERRUPTED_TOPIC.name], limit=20)
        (message, meta, _), *_ = interrupts.seen[INTERRUPTED_TOPIC.name]
        assert message.reason == "client" and meta.participant_id == "wyoming:kitchen"
