"""``benchmarks/versus_chain.py`` path (c) reads our Wyoming ``handle`` exactly as Home
Assistant's Wyoming conversation entity does: one ``transcript`` with its context, then only
``handled``, ``not-handled``, ``intent``/``intents-*``, ``not-recognized`` and ``error``;
every other event (``handled-chunk`` included) is skipped unread, and the whole answer goes
to the TTS. The streaming client is a separate path, labelled as one that does not exist."""

from __future__ import annotations

import asyncio
import functools
import json
import math
import re
import sys
from pathlib import Path

import anyio
import pytest
from wyoming.asr import Transcript
from wyoming.audio import AudioChunk
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


class Recorder(AsyncEventHandler):
    """A TTS that records what it is sent and answers audio at ``synthesize-stop``."""

    received: list[Event] = []

    async def handle_event(self, event: Event) -> bool:
        Recorder.received.append(event)
        if event.type in ("synthesize-stop", "synthesize"):
            await self.write_event(
                AudioChunk(rate=16000, width=2, channels=1, audio=b"\0\0").event()
            )
        return True


async def spoken(deltas: list[str]) -> list[Event]:
    """What Home Assistant's pipeline sends a streaming Wyoming TTS for a reply streamed as
    ``deltas``."""
    Recorder.received = []
    server = AsyncTcpServer("127.0.0.1", 0)
    await server.start(Recorder)
    try:
        port = server._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        send, receive = anyio.create_memory_object_stream[str](max_buffer_size=math.inf)
        async with send:
            for delta in deltas:
                await send.send(delta)
        await chain_paths.tts_first_audio(port, True, receive, chain_paths.Marks())
    finally:
        await server.stop()
    return Recorder.received


async def test_a_short_reply_goes_to_the_tts_whole() -> None:
    events = await spoken(["Paris", " is the", " capital."])
    assert [e.type for e in events] == ["synthesize-start", "synthesize-chunk", "synthesize-stop"]
    assert events[1].data["text"] == "Paris is the capital."


async def test_a_long_reply_is_streamed_once_over_60_characters() -> None:
    words = [f" w{i:03d}" for i in range(20)]  # 5 characters each
    events = await spoken(words)
    chunks = [e.data["text"] for e in events if e.type == "synthesize-chunk"]
    assert chunks[0] == "".join(words[:13])  # 65 characters: the first past 60
    assert chunks[1:] == words[13:]  # then delta by delta
    assert "".join(chunks) == "".join(words)


class OllamaServer:
    """An Ollama /api/chat that records each request body and streams a scripted reply as
    NDJSON (what the ``ollama`` client reads)."""

    def __init__(self, reply: list[str]) -> None:
        self.reply = reply
        self.bodies: list[dict] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
        self.bodies.append(json.loads(await reader.readexactly(length)))
        lines = [
            {"model": "m", "message": {"role": "assistant", "content": p}, "done": False}
            for p in self.reply
        ]
        lines.append(
            {
                "model": "m",
                "message": {"role": "assistant", "content": ""},
                "done": True,
                "done_reason": "stop",
            }
        )
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nConnection: close\r\n\r\n"
        )
        writer.write(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
        await writer.drain()
        writer.close()


async def test_path_e_calls_api_chat_as_home_assistants_ollama_integration() -> None:
    import ollama

    fake = OllamaServer(["Paris", " is the capital."])
    server = await asyncio.start_server(fake.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    agent = chain_paths.OllamaAgent(ollama.AsyncClient(host=f"http://127.0.0.1:{port}"), "edge")
    try:
        first, _ = await ask(agent.reply)
        second, _ = await ask(agent.reply)
    finally:
        server.close()
    assert first == second == ["Paris", " is the capital."]  # streamed on as it comes
    body = fake.bodies[1]
    assert body["model"] == "edge" and body["stream"] is True
    assert body["keep_alive"] == -1 and body["options"] == {"num_ctx": 8192}
    assert not body.get("tools") and "format" not in body and "think" not in body
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "user"]  # the chat log, whole
    system = body["messages"][0]["content"]  # the instructions, then the time to the second
    assert system.startswith(chain_paths.HA_OLLAMA_PROMPT + "\nCurrent time is ")
    assert re.fullmatch(
        r"Current time is \d\d:\d\d:\d\d\. Today's date is \d{4}-\d\d-\d\d\.\n",
        system.split("\n")[-2] + "\n",
    )
    assert body["messages"][2]["content"] == "Paris is the capital."
