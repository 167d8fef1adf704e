"""The four ways ``versus_chain.py`` asks a spoken question and times the first reply audio.

* ``ws_turn`` — ``edge serve`` over WebSocket: (a) hands-free, our own endpointing, timed
  from the end of speech; (b) push-to-talk, timed from the client's ``end_of_utterance``.
* ``wyoming_turn`` — Home Assistant's way: ``asr`` (audio streamed in real time, then the
  silence Home Assistant's own VAD waits out, then ``audio-stop``), the transcript to a
  conversation agent, its reply text to ``tts`` (streaming ``synthesize`` when the service
  advertises it). (c) is our Wyoming service for all three, its ``handle`` read as Home
  Assistant's Wyoming conversation entity reads it (:func:`ha_handle_reply`: the whole
  answer, in ``handled``); (c2) the same with a ``handle`` client that does not exist yet,
  reading the ``handled-chunk`` stream (:func:`streaming_handle_reply`); (d) the chain
  (wyoming-faster-whisper, llama-cpp-python's server streamed into wyoming-piper, as Home
  Assistant streams an LLM agent's reply).

Every turn returns its marks (``perf_counter`` seconds) relative to its own start mark.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import math
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from httpx_sse import aconnect_sse
from wyoming.asr import Transcribe, Transcript, TranscriptChunk, TranscriptStart
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.handle import Handled, HandledChunk, HandledStop, NotHandled
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from edge.runtime import TRACES
from edge.server import EdgeClient

HOST = "127.0.0.1"
RATE = 16_000
CHUNK_S = 0.05  # Wyoming audio-chunk events (Home Assistant's pipeline, the chain)
# The WebSocket clients' microphone frames: the console's (FRAME_MS in
# edge/server/console/audio.js, EdgeClient.speak's default), one 512-sample VAD window
WS_FRAME_S = 0.032
HA_SILENCE_S = 0.7  # Home Assistant's default end-of-speech silence before audio-stop
# Home Assistant's assist pipeline streams an agent's reply into the TTS only once it is
# longer than this (STREAM_RESPONSE_CHARS); a shorter reply goes to the TTS whole
HA_STREAM_RESPONSE_CHARS = 60
HANDS_FREE_TAIL_S = 2.0  # silence streamed after speech on the hands-free path
TURN_LIMIT_S = 60.0


@dataclass(frozen=True)
class Utterance:
    """A spoken question: 16 kHz PCM16 mono; ``speech_end_s`` is its last voiced sample."""

    qid: str
    kind: str
    text: str
    pcm: bytes
    speech_end_s: float

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / 2 / RATE


def silence(seconds: float) -> bytes:
    return bytes(int(RATE * seconds) * 2)


async def sleep_until(t: float) -> None:
    await anyio.sleep(max(0.0, t - time.perf_counter()))


async def stream_realtime(
    send: Callable[[bytes], Awaitable[None]], pcm: bytes, t0: float, frame_s: float = CHUNK_S
) -> None:
    """Send ``pcm`` as a microphone does: each ``frame_s`` frame once its audio has been
    recorded."""
    step = int(RATE * frame_s) * 2
    for offset in range(0, len(pcm), step):
        piece = pcm[offset : offset + step]
        await sleep_until(t0 + (offset + len(piece)) / 2 / RATE)
        await send(piece)


async def stream_microphone(
    send: Callable[[bytes], Awaitable[None]], pcm: bytes, t0: float
) -> None:
    """Send ``pcm`` as the console's microphone does: whole ``WS_FRAME_S`` frames only (its
    worklet posts a frame once full, so the service's VAD windows stay aligned with the
    frames), each once recorded; a last partial frame is never sent."""
    step = int(RATE * WS_FRAME_S) * 2
    await stream_realtime(send, pcm[: len(pcm) - len(pcm) % step], t0, WS_FRAME_S)


@dataclass
class Marks:
    """First times of named events, relative to ``t0`` once ``relative`` is called."""

    times: dict[str, float] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)

    def first(self, name: str) -> None:
        self.times.setdefault(name, time.perf_counter())

    def relative(self, origin: str) -> dict[str, float]:
        t0 = self.times[origin]
        return {k: round(v - t0, 4) for k, v in self.times.items()}

    def unix(self, name: str) -> float:
        """A mark as Unix seconds (to compare with times the server reports)."""
        return self.times[name] + time.time() - time.perf_counter()


# -- (a), (b): WebSocket ---------------------------------------------------------------


async def supports_end_of_utterance(url: str) -> bool:
    """Whether the server knows the push-to-talk ``end_of_utterance`` message."""
    async with EdgeClient(url, participant_id="bench-probe") as client:
        await client.send({"type": "end_of_utterance"})
        with anyio.move_on_after(2.0):
            while True:
                message, _ = await client.receive()
                if message.type == "error":
                    return "unknown message type" not in message.message
    return True


async def ws_turn(client: EdgeClient, utt: Utterance, push_to_talk: bool) -> dict[str, Any]:
    marks = Marks()
    done = anyio.Event()

    async def talk() -> None:
        t0 = time.perf_counter()
        marks.times["speech_end"] = t0 + utt.speech_end_s
        if push_to_talk:
            await stream_microphone(client.send_audio, utt.pcm, t0)
            await client.send({"type": "end_of_utterance"})
            marks.first("release")
        else:
            await stream_microphone(client.send_audio, utt.pcm + silence(HANDS_FREE_TAIL_S), t0)

    async with anyio.create_task_group() as tg:
        tg.start_soon(talk)
        with anyio.move_on_after(TURN_LIMIT_S):
            await ws_listen(client, marks, done)
        tg.cancel_scope.cancel()
    return ws_result(marks, "release" if push_to_talk else "speech_end")


async def ws_listen(client: EdgeClient, marks: Marks, done: anyio.Event) -> None:
    """Record the turn's events; interrupt the spoken reply once its first audio arrived
    (only the first audio is timed), then wait for the turn to go idle."""
    queries: list[str] = []
    while not ("audio" in marks.times and "idle" in marks.times):
        message, payload = await client.receive()
        kind = message.type
        if kind == "transcript" and message.final:
            marks.first("transcript")
        elif kind == "query":
            queries.append(message.text)
            marks.first("query")
        elif kind == "reply" and message.text.strip():
            marks.first("reply_text")
        elif kind == "audio" and payload and "audio" not in marks.times:
            marks.first("audio")
            await client.send({"type": "interrupt"})
        elif kind == "status" and message.state == "idle" and queries:
            marks.first("idle")
        elif kind == "error":
            marks.notes.setdefault("errors", []).append(message.message)
    marks.notes["heard"] = queries
    with anyio.move_on_after(0.5):  # drain what the interruption left in flight
        while True:
            await client.receive()


def ws_result(marks: Marks, origin: str) -> dict[str, Any]:
    t = marks.times
    premature = [
        k for k in ("query", "reply_text", "audio") if t.get(k, math.inf) < t["speech_end"]
    ]
    heard = marks.notes.get("heard", [])
    rel = marks.relative(origin)
    return {
        "total_s": rel.get("audio"),
        "stages": stages(rel, "transcript", "reply_text", "audio"),
        "marks": rel,
        "origin_unix": marks.unix(origin),
        "premature": bool(premature) or len(heard) > 1,
        "premature_marks": premature,
        "heard": heard,
        "errors": marks.notes.get("errors", []),
    }


def stages(rel: dict[str, float], *names: str) -> dict[str, float | None]:
    """Consecutive stage durations from the origin through each named mark."""
    out: dict[str, float | None] = {}
    previous = 0.0
    for name in names:
        if name not in rel:
            out[name] = None
            continue
        out[name] = round(rel[name] - previous, 4)
        previous = rel[name]
    return out


# -- (c), (d): driven as Home Assistant drives Wyoming services --------------------------


async def describe(port: int) -> Info:
    async with AsyncTcpClient(HOST, port) as client:
        await client.write_event(Describe().event())
        while True:
            event = await client.read_event()
            if event is None:
                raise ConnectionError(f"port {port} closed before info")
            if Info.is_type(event.type):
                return Info.from_event(event)


class FromAddress(AsyncTcpClient):
    """A Wyoming client connecting from ``source``, another loopback address: a second
    Home Assistant, as the service sees it."""

    def __init__(self, host: str, port: int, source: str) -> None:
        super().__init__(host, port)
        self.source = source

    async def connect(self) -> None:
        self._reader, self._writer = await asyncio.open_connection(
            self.host, self.port, local_addr=(self.source, 0)
        )


async def asr_turn(port: int, utt: Utterance, marks: Marks, source: str | None = None) -> str:
    """Stream the question and Home Assistant's trailing silence, then ``audio-stop``
    (from the loopback address ``source`` when given)."""
    client = AsyncTcpClient(HOST, port) if source is None else FromAddress(HOST, port, source)
    async with client as asr:
        await asr.write_event(Transcribe(language="en").event())
        await asr.write_event(AudioStart(rate=RATE, width=2, channels=1).event())
        text: list[str] = []

        async def read() -> None:
            while True:
                event = await asr.read_event()
                if event is None:
                    raise ConnectionError("the asr service closed the connection")
                if TranscriptStart.is_type(event.type) or TranscriptChunk.is_type(event.type):
                    marks.first("transcript_stream")
                elif Transcript.is_type(event.type):
                    marks.first("transcript")
                    text.append(Transcript.from_event(event).text)
                    return
                elif Error.is_type(event.type):
                    raise RuntimeError(f"asr: {Error.from_event(event).text}")

        async def send(pcm: bytes) -> None:
            await asr.write_event(AudioChunk(rate=RATE, width=2, channels=1, audio=pcm).event())

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            await stream_realtime(send, utt.pcm + silence(HA_SILENCE_S), time.perf_counter())
            await asr.write_event(AudioStop().event())
            marks.first("audio_stop")
        return text[0]


async def tts_first_audio(
    port: int, streaming: bool, deltas: ObjectReceiveStream[str], marks: Marks
) -> None:
    """Speak the reply text as Home Assistant's pipeline hands it to its TTS; stop at the
    first audio. A streamed reply (an agent's deltas) is held until it is longer than
    :data:`HA_STREAM_RESPONSE_CHARS`, then what came so far goes as one piece and the rest
    follows delta by delta; a shorter reply goes whole once it is complete (Home
    Assistant's ``assist_pipeline``: a short answer is not streamed). Against a TTS that
    advertises streaming synthesize, the text goes as ``synthesize-start``,
    ``synthesize-chunk``..., ``synthesize-stop``, else as one ``synthesize``."""
    async with AsyncTcpClient(HOST, port) as tts, anyio.create_task_group() as tg:

        async def first_audio() -> None:
            while True:
                event = await tts.read_event()
                if event is None:
                    raise ConnectionError("the tts service closed the connection")
                if AudioChunk.is_type(event.type) and AudioChunk.from_event(event).audio:
                    marks.first("audio")
                    tg.cancel_scope.cancel()  # only the first audio is timed
                    return
                if Error.is_type(event.type):
                    raise RuntimeError(f"tts: {Error.from_event(event).text}")

        tg.start_soon(first_audio)
        held: list[str] = []
        started = False
        async for delta in deltas:
            if started:
                await tts.write_event(SynthesizeChunk(text=delta).event())
                continue
            held.append(delta)
            if streaming and len("".join(held)) > HA_STREAM_RESPONSE_CHARS:
                started = marks.notes["tts_streamed"] = True
                marks.first("tts_text")
                await tts.write_event(SynthesizeStart().event())
                await tts.write_event(SynthesizeChunk(text="".join(held)).event())
        if started:
            await tts.write_event(SynthesizeStop().event())
            return
        marks.first("tts_text")
        whole = "".join(held)
        if streaming:
            await tts.write_event(SynthesizeStart().event())
            await tts.write_event(SynthesizeChunk(text=whole).event())
            await tts.write_event(SynthesizeStop().event())
        else:
            await tts.write_event(Synthesize(text=whole).event())


# What Home Assistant's Wyoming conversation entity reads after its ``transcript``
# (homeassistant/components/wyoming/conversation.py, ``_async_process``): it stops at the
# first of ``handled``, ``not-handled``, ``intent`` (or an ``intents-start`` ... ``intents-stop``
# list), ``not-recognized`` or ``error``, and skips every other event unread
# (``handled-start``, ``handled-chunk`` and ``handled-stop`` included). Its pipeline then
# sends the whole answer text to the TTS.
HA_CONVERSATION_READS = frozenset(
    {"handled", "not-handled", "intent", "intents-start", "intents-stop", "not-recognized", "error"}
)
HA_CONTEXT = {"device_id": "bench-device", "satellite_id": "assist_satellite.bench"}


def ha_context(conversation_id: str) -> dict[str, str]:
    """The context Home Assistant puts on the ``transcript``: its conversation id, and the
    device and satellite the question came from."""
    return {"conversation_id": conversation_id, **HA_CONTEXT}


async def ha_handle_reply(
    port: int, text: str, conversation_id: str, out: ObjectSendStream[str], marks: Marks
) -> None:
    """A Wyoming ``handle`` service's answer as Home Assistant gets it: one ``transcript``
    with its context, then events until one it reads (:data:`HA_CONVERSATION_READS`); the
    answer goes whole into ``out``. ``marks.notes["read"]`` lists the events it read,
    ``["skipped"]`` those it left unread."""
    read: list[str] = marks.notes.setdefault("read", [])
    skipped: list[str] = marks.notes.setdefault("skipped", [])
    async with out, AsyncTcpClient(HOST, port) as handle:
        context = ha_context(conversation_id)
        await handle.write_event(Transcript(text=text, context=context, language="en").event())
        while True:
            event = await handle.read_event()
            if event is None:
                raise ConnectionError("the handle service closed the connection")
            if event.type not in HA_CONVERSATION_READS:
                skipped.append(event.type)
                continue
            read.append(event.type)
            if Handled.is_type(event.type) or NotHandled.is_type(event.type):
                answer = Handled.from_event(event) if Handled.is_type(event.type) else None
                reply = answer.text if answer else NotHandled.from_event(event).text
                marks.first("reply_text")
                marks.notes["handled"] = answer is not None
                marks.notes["answer"] = reply or ""
                await deliver(out, reply or "")
                return
            if Error.is_type(event.type):
                raise RuntimeError(f"handle: {Error.from_event(event).text}")
            raise RuntimeError(f"handle answered {event.type!r}: an intent, not an answer")


async def streaming_handle_reply(
    port: int, text: str, conversation_id: str, out: ObjectSendStream[str], marks: Marks
) -> None:
    """A client that does not exist yet: a Wyoming ``handle`` answer read as it streams
    (``handled-chunk`` pieces into ``out`` as they arrive), up to ``handled-stop``."""
    async with out, AsyncTcpClient(HOST, port) as handle:
        context = ha_context(conversation_id)
        await handle.write_event(Transcript(text=text, context=context, language="en").event())
        while True:
            event = await handle.read_event()
            if event is None:
                raise ConnectionError("the handle service closed the connection")
            if HandledChunk.is_type(event.type):
                piece = HandledChunk.from_event(event).text
                if piece:
                    marks.first("reply_text")
                    await deliver(out, piece)
            elif Handled.is_type(event.type) or NotHandled.is_type(event.type):
                reply = (event.data or {}).get("text") or ""
                marks.first("reply_text")
                marks.notes["handled"] = Handled.is_type(event.type)
                await deliver(out, reply)
                return
            elif HandledStop.is_type(event.type):
                marks.notes["handled"] = True
                return
            elif Error.is_type(event.type):
                raise RuntimeError(f"handle: {Error.from_event(event).text}")


# Home Assistant's Ollama integration (homeassistant/components/ollama/entity.py and
# const.py): its default prompt, num_ctx, keep_alive and history, sent through the
# ``ollama`` client it uses: POST /api/chat, streamed as NDJSON, the whole chat log each turn.
HA_OLLAMA_PROMPT = (
    "You are a voice assistant for Home Assistant.\n"
    "Answer questions about the world truthfully.\n"
    "Answer in plain text. Keep it simple and to the point.\n"
)


def ha_ollama_system(now: datetime.datetime) -> str:
    """The system prompt as Home Assistant's chat log renders it for each request of an
    agent with no date-time tool (conversation/chat_log.py: the instructions, then
    helpers/llm.py's DATE_TIME_PROMPT, the time to the second, joined by a newline)."""
    return HA_OLLAMA_PROMPT + f"\nCurrent time is {now:%H:%M:%S}. Today's date is {now:%Y-%m-%d}.\n"


HA_OLLAMA_OPTIONS = {"num_ctx": 8192}
HA_OLLAMA_KEEP_ALIVE = -1  # keep the model loaded
HA_OLLAMA_MAX_HISTORY = 20  # earlier rounds sent with each request


@dataclass
class OllamaAgent:
    """Home Assistant's Ollama conversation agent for one conversation: each turn sends the
    system prompt (with the time of the request: :func:`ha_ollama_system`), up to
    :data:`HA_OLLAMA_MAX_HISTORY` earlier rounds and the question, and
    streams the reply's content deltas on (the pipeline decides what reaches the TTS)."""

    client: Any  # ollama.AsyncClient
    model: str
    history: list[dict[str, str]] = field(default_factory=list)

    def messages(self, text: str) -> list[dict[str, str]]:
        rounds = self.history[-2 * HA_OLLAMA_MAX_HISTORY :]
        system = {"role": "system", "content": ha_ollama_system(datetime.datetime.now())}
        return [system, *rounds, {"role": "user", "content": text}]

    async def chunks(self, text: str) -> Any:
        """The integration's streamed ``/api/chat`` call asking ``text``, as it sends it."""
        return await self.client.chat(
            model=self.model,
            messages=self.messages(text),
            tools=None,
            stream=True,
            keep_alive=HA_OLLAMA_KEEP_ALIVE,
            options=HA_OLLAMA_OPTIONS,
            think=None,
            format=None,
        )

    def remember(self, text: str, answer: str) -> None:
        """The round joins the chat log (the next requests send it)."""
        self.history += [
            {"role": "user", "content": text},
            {"role": "assistant", "content": answer},
        ]

    async def reply(self, text: str, out: ObjectSendStream[str], marks: Marks) -> None:
        parts: list[str] = []
        async with out:
            async for chunk in await self.chunks(text):
                piece = chunk.message.content or ""
                if piece:
                    marks.first("reply_text")
                    parts.append(piece)
                    await deliver(out, piece)
                if chunk.done and chunk.prompt_eval_duration:  # the integration ignores it
                    marks.notes["prompt_eval_s"] = round(chunk.prompt_eval_duration / 1e9, 4)
        marks.notes["answer"] = "".join(parts)
        self.remember(text, marks.notes["answer"])


async def chat_reply(
    port: int, text: str, instructions: str, out: ObjectSendStream[str], marks: Marks
) -> None:
    """llama-cpp-python's OpenAI-compatible server, streamed, as a conversation agent."""
    body = {
        "messages": [
            {"role": "system", "content": instructions},
            {"role": "user", "content": text},
        ],
        "stream": True,
        "max_tokens": 128,
    }
    url = f"http://{HOST}:{port}/v1/chat/completions"
    async with out, httpx.AsyncClient(timeout=TURN_LIMIT_S) as http:
        async for piece in sse_deltas(http, url, body):
            marks.first("reply_text")
            await deliver(out, piece)


async def sse_deltas(http: httpx.AsyncClient, url: str, body: dict) -> AsyncIterator[str]:
    async with aconnect_sse(http, "POST", url, json=body) as source:
        source.response.raise_for_status()
        async for sse in source.aiter_sse():
            if sse.data.strip() == "[DONE]":
                return
            delta = json.loads(sse.data)["choices"][0].get("delta", {}).get("content")
            if delta:
                yield delta


async def deliver(out: ObjectSendStream[str], text: str) -> None:
    """Pass reply text on to the TTS feeder; it stops listening after the first audio."""
    try:
        await out.send(text)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass


@dataclass
class WyomingPath:
    """Where Home Assistant's three steps go, and what the services advertise."""

    asr_port: int
    tts_port: int
    tts_streaming: bool
    reply: Callable[[str, ObjectSendStream[str], Marks], Awaitable[None]]
    asr_source: str | None = None  # the loopback address the asr connection comes from


async def wyoming_turn(path: WyomingPath, utt: Utterance) -> dict[str, Any]:
    marks = Marks()
    text = await asr_turn(path.asr_port, utt, marks, path.asr_source)
    send, receive = anyio.create_memory_object_stream[str](max_buffer_size=math.inf)
    with anyio.fail_after(TURN_LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(path.reply, text, send, marks)
            async with receive:
                await tts_first_audio(path.tts_port, path.tts_streaming, receive, marks)
    rel = marks.relative("audio_stop")
    return {
        "total_s": rel.get("audio"),
        "stages": stages(rel, "transcript", "reply_text", "audio"),
        "marks": rel,
        "origin_unix": marks.unix("audio_stop"),
        "premature": False,  # Home Assistant endpoints the audio itself
        "heard": [text],
        "handled": marks.notes.get("handled"),
        "answer": marks.notes.get("answer"),
        "prompt_eval_s": marks.notes.get("prompt_eval_s"),  # (e): the Ollama API's figure
        "tts_streamed": bool(marks.notes.get("tts_streamed")),
        "events_read": sorted(set(marks.notes.get("read", []))),
        "events_skipped": sorted(set(marks.notes.get("skipped", []))),
        "errors": [],
    }


def trace_of(pid: str, speech_end: float) -> dict[str, Any]:
    """The service's trace of ``pid``'s turn (``edge.runtime.TRACES``: stage times from the
    end of speech) and the compute gate's holds by other work until its first audio
    (``owner: kind``, urgent work marked so; a model step's owner is ``llm``)."""
    turns = TRACES.turns(pid)
    if not turns:
        return {}
    trace = turns[-1]
    stages = [
        {"stage": s, "at_s": round(t - speech_end, 3), **{k: str(v) for k, v in i.items()}}
        for s, t, i in trace.marks
    ]
    end = trace.at("first_audio_out") or time.perf_counter()
    held: dict[str, float] = defaultdict(float)
    own: dict[str, float] = defaultdict(float)
    for h in TRACES.gate_during(speech_end, end):
        span = min(h.released, end) - max(h.got, speech_end)
        if span > 0:
            key = f"{h.owner or 'llm/other'}: {h.kind}{' (urgent)' if h.urgent else ''}"
            (own if h.owner == f"voice:{pid}" else held)[key] += span
        if h.owner == f"voice:{pid}" and h.waited_s > 0.001:
            own[f"waited for the gate: {h.kind}"] += h.waited_s
    top = sorted(held.items(), key=lambda kv: -kv[1])[:8]
    return {
        "stages": stages,
        "gate_held_by_others_s": {k: round(v, 3) for k, v in top},
        "own_gate_s": {k: round(v, 3) for k, v in own.items()},
    }
