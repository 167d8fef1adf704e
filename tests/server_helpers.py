"""Shared helpers for the server tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import anyio
from wyoming.asr import Transcript, TranscriptChunk, TranscriptStart, TranscriptStop
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncClient, AsyncTcpClient
from wyoming.event import Event
from wyoming.handle import Handled, HandledChunk, HandledStart, HandledStop
from wyoming.tts import SynthesizeStopped

from edge.decisions import ScriptedDecisions
from edge.interaction import PARTICIPANT_LEFT_TOPIC, ParticipantLeft
from edge.llm import ChatMessage, ScriptedLLM, ScriptedReply
from edge.runtime import Agent, HandlerContext
from edge.server import EdgeClient, EdgeService, ServiceSettings, SpeechParts
from edge.voice import VoiceConfig
from tests.voice_helpers import EnergyVAD, ToneSTT, ToneTTS

M = TypeVar("M")


async def receive_until(client: EdgeClient, kind: type[M], limit: float) -> M:
    """The next session message of ``kind`` (those before it are read and dropped); fail
    after ``limit`` seconds."""
    with anyio.fail_after(limit):
        while True:
            message, _ = await client.receive()
            if isinstance(message, kind):
                return message


LONG_REPLY = " ".join(f"Sentence number {i} is here." for i in range(12))
"""A reply long enough to be still speaking when a test barges in."""


async def speaking_a_long_reply(client: EdgeClient, limit: float) -> list[Any]:
    """Ask for a long story (the scripted model's :data:`LONG_REPLY`) and read until its
    third audio chunk: the reply is being spoken. Returns the messages read."""
    from edge.server._protocol import AudioMessage

    await client.send({"type": "text", "text": "tell me a long story"})
    read: list[Any] = []
    with anyio.fail_after(limit):
        while sum(isinstance(m, AudioMessage) for m in read) < 3:
            read.append((await client.receive())[0])
    return read


async def wait_for(condition: Callable[[], object], limit: float = 5.0) -> None:
    """Poll ``condition`` until true; fail after ``limit`` seconds."""
    with anyio.fail_after(limit):
        while not condition():  # noqa: ASYNC110 - polling test helper
            await anyio.sleep(0.01)


def slow_departures(monkeypatch: Any, seconds: float = 0.3) -> None:
    """Departures that take a while (a compaction being cancelled, say): the old link's
    departure is still running when the participant comes back."""
    from edge.conversation import ContextManager

    suspend = ContextManager.suspend

    async def slow(self: ContextManager, participant_id: str) -> None:
        await anyio.sleep(seconds)
        await suspend(self, participant_id)

    monkeypatch.setattr(ContextManager, "suspend", slow)


class Departures(Agent):
    """Records every ParticipantLeft: (participant, reason)."""

    def __init__(self) -> None:
        super().__init__()
        self.left: list[tuple[str | None, str]] = []
        self.add_handler(PARTICIPANT_LEFT_TOPIC, self.on_left)

    async def on_left(self, message: ParticipantLeft, ctx: HandlerContext) -> None:
        self.left.append((ctx.metadata.participant_id, message.reason))


def tone_service(
    llm: ScriptedLLM, config: VoiceConfig, *, tls: bool = False, **kw: object
) -> EdgeService:
    """A voice service on scripted models: the tone "recogniser", an energy VAD and tone
    speech, routing every turn to the conversation (over ``wss://`` with ``tls``)."""
    return EdgeService(
        settings(voice=True, tls=tls),
        llm=llm,
        decisions=ScriptedDecisions(default="conversation"),
        speech=SpeechParts(stt=ToneSTT(), tts=ToneTTS(), config=config, vad_factory=EnergyVAD),
        **kw,  # type: ignore[arg-type]
    )


def settings(**kw: object) -> ServiceSettings:
    base: dict[str, object] = {
        "host": "127.0.0.1",
        "port": 0,
        "wyoming_port": None,
        "mdns": False,
        "voice": False,
        "notes": False,
    }
    base.update(kw)
    return ServiceSettings(**base)  # type: ignore[arg-type]


def answer_for(messages: list[ChatMessage]) -> str | ScriptedReply:
    request = messages[-1].content
    if "Write plain text only" in messages[0].content:
        return "Summary."
    return ScriptedReply(f"You said: {request}. That is all.", delay_s=0.005)


async def read_answer(client: AsyncClient) -> tuple[list[str], Event | None]:
    """A Wyoming ``handle`` answer: the streamed ``handled-chunk`` texts (checked to come
    as start, chunks, stop) and the whole-answer event that follows them."""
    chunks: list[str] = []
    state = "before"
    while True:
        event = await client.read_event()
        if event is None:
            return chunks, None
        if HandledStart.is_type(event.type):
            assert state == "before", "handled-start twice"
            state = "streaming"
        elif HandledChunk.is_type(event.type):
            assert state == "streaming", "handled-chunk outside handled-start/-stop"
            chunks.append(HandledChunk.from_event(event).text)
        elif HandledStop.is_type(event.type):
            assert state == "streaming", "handled-stop without handled-start"
            state = "stopped"
        else:
            assert state in ("before", "stopped"), f"{event.type} inside the stream"
            return chunks, event


async def read_transcript(client: AsyncClient) -> tuple[list[str], str]:
    """A streamed transcript (``transcript-start``, chunks, ``-stop``, then ``transcript``):
    the chunk texts and the final text."""
    types: list[str] = []
    chunks: list[str] = []
    while True:
        event = await client.read_event()
        assert event is not None, "connection closed before the transcript"
        types.append(event.type)
        if TranscriptChunk.is_type(event.type):
            chunks.append(TranscriptChunk.from_event(event).text)
        elif Transcript.is_type(event.type):
            assert TranscriptStart.is_type(types[0]) and TranscriptStop.is_type(types[-2]), types
            return chunks, Transcript.from_event(event).text
        else:
            assert TranscriptStart.is_type(event.type) or TranscriptStop.is_type(event.type), types


async def read_spoken(client: AsyncClient, *, until_stopped: bool = True) -> list[bytes]:
    """Speech as ``audio-start``, ``audio-chunk``..., ``audio-stop`` per sentence: one PCM
    blob per sentence, until ``synthesize-stopped`` (or after one sentence)."""
    sentences: list[bytes] = []
    current: bytearray | None = None
    while True:
        event = await client.read_event()
        assert event is not None, "connection closed during speech"
        if AudioStart.is_type(event.type):
            assert current is None, "audio-start inside a sentence"
            current = bytearray()
        elif AudioChunk.is_type(event.type):
            assert current is not None, "audio-chunk outside audio-start/-stop"
            current += AudioChunk.from_event(event).audio
        elif AudioStop.is_type(event.type):
            assert current is not None, "audio-stop without audio-start"
            sentences.append(bytes(current))
            current = None
            if not until_stopped:
                return sentences
        elif SynthesizeStopped.is_type(event.type):
            assert current is None, "synthesize-stopped inside a sentence"
            return sentences
        else:
            raise AssertionError(f"unexpected {event.type} in speech")


def make_service(**kw: object) -> EdgeService:
    """The whole service on the scripted model and routing (``settings`` for the rest)."""
    return EdgeService(
        settings(**kw),
        llm=ScriptedLLM(answer_for),
        decisions=ScriptedDecisions(default="conversation"),
    )


def wyoming_client(svc: EdgeService, read_timeout: float) -> AsyncTcpClient:
    """A client of the service's Wyoming server (on 127.0.0.1)."""
    assert svc.wyoming is not None
    return AsyncTcpClient("127.0.0.1", svc.wyoming.bound_port, read_timeout=read_timeout)


async def ask_handled(
    svc: EdgeService, text: str, context: dict[str, Any], read_timeout: float
) -> str:
    """A Home Assistant ``transcript`` (for ``handle``) and the answer's ``handled`` text."""
    async with wyoming_client(svc, read_timeout) as c:
        await c.write_event(Transcript(text=text, context=context).event())
        _, event = await read_answer(c)
    assert event is not None and Handled.is_type(event.type), event
    return Handled.from_event(event).text
