"""What of the model's output reaches the participant (``edge.conversation._reply``): the
prompt's own lines never do, and a reply ends at the instructions' length."""

from __future__ import annotations

import re

import pytest
from server_helpers import settings

from edge.conversation._reply import ReplyFilter, sentence_bound
from edge.decisions import ScriptedDecisions
from edge.llm import ScriptedLLM, ScriptedReply
from edge.server import EdgeClient, EdgeService
from edge.server._settings import DEFAULT_INSTRUCTIONS

SCAFFOLDED = (
    "Current time: Wednesday 02 December 2026, 18:34\n"
    "(No earlier conversation or context.)\n"
    "Assistant: Hello! I am here to help. What do you need today? I can set timers, take "
    "notes and answer questions. I can also tell you about the weather. Just ask."
)
CLEAN = "Hello! I am here to help. What do you need today?"


def filtered(text: str, bound: int | None, pieces: str = r"\s*\S+") -> str:
    reply = ReplyFilter(bound)
    return "".join(reply.feed(p) for p in re.findall(pieces, text)) + reply.flush()


@pytest.mark.parametrize("pieces", [r"\s*\S+", r"(?s).", r"(?s).{1,7}"])
def test_scaffolding_is_dropped_however_the_stream_is_cut(pieces: str) -> None:
    assert filtered(SCAFFOLDED, 3, pieces) == CLEAN
    assert filtered("Context:\n\n[18:34] Assistant: Sure thing.", None, pieces) == "Sure thing."
    quoted = "[14:20] User: where is the key?\nAssistant: Under the mat."  # labels removed
    assert filtered(quoted, None, pieces) == "where is the key?\nUnder the mat."
    assert filtered("Context: the meeting is at 10.", None, pieces) == (
        "Context: the meeting is at 10."
    )
    long = "Dr. Okafor ordered 3.5 kits. They come Thursday. Ask J. Smith. Bye now."
    assert (
        filtered(long, 3, pieces)
        == "Dr. Okafor ordered 3.5 kits. They come Thursday. Ask J. Smith."
    )
    assert filtered("Hi", 3, pieces) == "Hi"


def test_the_bound_comes_from_the_instructions() -> None:
    assert sentence_bound(DEFAULT_INSTRUCTIONS) == 3  # "one to three short sentences"
    assert sentence_bound("Answer in a single sentence.") == 1
    assert sentence_bound("Use at most 4 short sentences.") == 4
    assert sentence_bound("Be brief.") is None
    assert sentence_bound("Reply in a few sentences.") is None  # no number stated


@pytest.mark.anyio
async def test_a_scaffolded_ramble_reaches_no_one_and_generation_stops() -> None:
    llm = ScriptedLLM(lambda messages: ScriptedReply(SCAFFOLDED, delay_s=0.002))
    service = EdgeService(settings(), llm=llm, decisions=ScriptedDecisions(default="conversation"))
    async with service as svc:
        async with EdgeClient(svc.websocket_url, participant_id="alice") as client:
            answer = await client.ask("hi")
            assert answer.text == CLEAN
            page = await client.history()
            assert [e["assistant"] for e in page.entries if e["kind"] == "exchange"] == [CLEAN]
        assert [r.assistant for r in svc.store.history("alice")[0]] == [CLEAN]
        request = llm.requests[-1]
        assert not request.completed  # the model was stopped at the third sentence


@pytest.mark.anyio
async def test_the_setting_lifts_or_sets_the_bound() -> None:
    for sentences, expected in ((0, "One. Two. Three. Four. Five."), (2, "One. Two.")):
        service = EdgeService(
            settings(reply_sentences=sentences),
            llm=ScriptedLLM(lambda messages: "One. Two. Three. Four. Five."),
            decisions=ScriptedDecisions(default="conversation"),
        )
        async with (
            service as svc,
            EdgeClient(svc.websocket_url, participant_id=f"p{sentences}") as client,
        ):
            assert (await client.ask("count")).text == expected
