"""``benchmarks/versus_chain.py`` path (c) reads our Wyoming ``handle`` exactly as Home
Assistant's Wyoming conversation entity does: one ``transcript`` with its context, then only
``handled``, ``not-handled``, ``intent``/``intents-*``, ``not-recognized`` and ``error``;
every other event (``handled-chunk`` included) is skipped unread, and the whole answer goes
to the TTS. The streaming client is a separate path, labelled as one that does not exist."""

from __future__ import annotations

import functools
import math
import sys
from pathlib import Path

import anyio
import pytest
from wyoming.asr import Transcript
from wyoming.event import Event
from wyoming.handle import Handled, HandledChunk, HandledStart, HandledStop
from wyoming.server import AsyncEventHandler, AsyncTcpServer

from edge.decisions import ScriptedDecisions
from edge.llm import ScriptedLLM, ScriptedReply
from edge.server import EdgeService
from tests.server_helpers import settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import chain_paths  # noqa: E402
import versus_chain  # noqa: E402

pytestmark = pytest.mark.anyio

# Home Assistant's Wyoming conversation entity (homeassistant/components/wyoming/
# conversation.py, ``_async_process``): the events it acts on; it skips all others.
HOME_ASSISTANT_READS = {
    "error",
    "intents-start",
    "intent",
    "intents-stop",
    "not-recognized",
    "handled",
    "not-handled",
}
ANSWER = "The first part comes now. The second part comes a little later."


class ChunksThenHandled(AsyncEventHandler):
    """A handle service whose streamed pieces differ from its ``handled`` answer: a client
    that read the pieces would send other text to the TTS."""

    received: list[Event] = []

    async def handle_event(self, event: Event) -> bool:
        ChunksThenHandled.received.append(event)
        if Transcript.is_type(event.type):
            await self.write_event(HandledStart(context={}).event())
            await self.write_event(HandledChunk(text="streamed, not whole").event())
            await self.write_event(Event(type="some-future-event", data={"x": 1}))
            await self.write_event(HandledStop().event())
            await self.write_event(Handled(text="The whole answer.").event())
        return True


async def ask(reply) -> tuple[list[str], dict]:  # type: ignore[no-untyped-def]
    """``reply(text, out, marks)``: the pieces it sent towards the TTS, and its notes."""
    marks = chain_paths.Marks()
    send, receive = anyio.create_memory_object_stream[str](max_buffer_size=math.inf)
    async with receive:
        await reply("what is it?", send, marks)
        pieces = [piece async for piece in receive]
    return pieces, marks.notes


def test_the_client_reads_the_events_home_assistant_reads() -> None:
    assert set(chain_paths.HA_CONVERSATION_READS) == HOME_ASSISTANT_READS


async def test_the_answer_is_the_handled_text_never_the_chunks() -> None:
    ChunksThenHandled.received = []
    server = AsyncTcpServer("127.0.0.1", 0)
    await server.start(ChunksThenHandled)
    try:
        port = server._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        client = functools.partial(chain_paths.ha_handle_reply, port, conversation_id="ha-1")
        pieces, notes = await ask(lambda text, out, marks: client(text=text, out=out, marks=marks))
    finally:
        await server.stop()
    assert pieces == ["The whole answer."]  # one piece: the whole answer, to the TTS
    assert set(notes["read"]) <= HOME_ASSISTANT_READS
    assert notes["read"] == ["handled"]
    assert {"handled-start", "handled-chunk", "handled-stop"} <= set(notes["skipped"])
    (transcript,) = [e for e in ChunksThenHandled.received if Transcript.is_type(e.type)]
    context = Transcript.from_event(transcript).context
    assert context is not None
    assert context["conversation_id"] == "ha-1"
    assert {"device_id", "satellite_id"} <= context.keys()


async def test_path_c_is_the_home_assistant_client_against_edge_serve() -> None:
    """Path (c) against our Wyoming service (scripted model): it gets the whole answer from
    ``handled`` and leaves the stream our service also sends unread."""
    svc = EdgeService(
        settings(voice=False, wyoming_port=0),
        llm=ScriptedLLM(lambda messages: ScriptedReply(ANSWER, delay_s=0.01)),
        decisions=ScriptedDecisions(default="conversation"),
    )
    async with svc:
        assert svc.wyoming is not None
        edge = versus_chain.svc.Service("edge serve", [], 0, Path("unused.log"))
        bench = versus_chain.Bench({"edge": edge}, svc.wyoming.bound_port)
        bench.advertised = {"edge": {"synthesize": True}}
        path = bench.wyoming("c")
        pieces, notes = await ask(path.reply)
    assert pieces == ["The first part comes now."]  # whole: a Wyoming reply is one sentence
    assert notes["read"] == ["handled"]
    assert "handled-chunk" in notes["skipped"]


def test_the_streaming_client_is_a_separate_labelled_path() -> None:
    assert "does not exist" in versus_chain.PATHS["c2"]
    assert "does not exist" not in versus_chain.PATHS["c"]
    assert "handled-chunk" not in versus_chain.CLIENTS["c"]["handle"]
    assert "handled-chunk" in versus_chain.CLIENTS["c2"]["handle"]
