"""Whole turns through a service over its WebSocket protocol: an in-process ``edge serve``
on 127.0.0.1, or one already running (``--url``). A typed turn: from sending the text to
the first reply text and the first reply audio. A spoken turn: the question fed at real
time, from the end of speech (its last voiced sample) to the final transcript, the first
reply text and the first reply audio. N participants: each sends a typed turn at once."""

from __future__ import annotations

import math
import secrets
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from ._records import Figure
from ._speech import speech_end_at, spoken_question

Tick = Callable[[str], None]
QUESTIONS = (
    "What is the capital of France?",
    "Name one planet in the solar system.",
    "How many days are in a week?",
    "What colour is the sky on a clear day?",
)


@dataclass(frozen=True)
class Target:
    """Where the turns go: a URL, its device token, and the profile's expectations."""

    url: str
    token: str | None
    model: str = "-"
    expected_first_text_s: float | None = None
    voice: bool = True
    threads: int | None = None
    ngl: int | None = None
    backend: str = "-"


@asynccontextmanager
async def local_service(profile: str | None) -> AsyncIterator[Target]:
    """``edge serve`` in this process on 127.0.0.1 (a free port, plain ws://, no mDNS,
    sessions in a temporary directory removed afterwards)."""
    from pydantic import SecretStr

    from edge.server import EdgeService, ServiceSettings

    token = secrets.token_urlsafe(16)
    with tempfile.TemporaryDirectory(prefix="edge-bench-") as data:
        settings = ServiceSettings(
            host="127.0.0.1",
            port=0,
            wyoming_port=None,
            mdns=False,
            tls=False,
            profile=profile,
            data_dir=Path(data),
            token=SecretStr(token),
        )
        async with EdgeService(settings) as service:
            d, where = service.device, service.placement()
            yield Target(
                service.websocket_url,
                token,
                model=d.models["llm"].id if d is not None else "-",
                expected_first_text_s=d.budgets.expected_warm_ttft_s if d is not None else None,
                threads=d.threads if d is not None else None,
                ngl=d.gpu_layers if d is not None else None,
                backend="CUDA" if where is not None and where.llm_on_gpu else "CPU",
            )


def _marks(marks: dict[str, float]) -> Callable[[Any], None]:
    from edge.server import AudioMessage, Reply, TranscriptMessage

    def seen(message: Any) -> None:
        now = time.perf_counter()
        if isinstance(message, TranscriptMessage) and message.final:
            marks.setdefault("transcript", now)
        elif isinstance(message, Reply) and message.text.strip():
            marks.setdefault("text", now)
        elif isinstance(message, AudioMessage) and message.bytes:
            marks.setdefault("audio", now)

    return seen


async def typed_turn(client: Any, text: str) -> dict[str, float]:
    """Seconds from sending ``text`` to the first reply text, first audio and the end."""
    marks: dict[str, float] = {}
    started = time.perf_counter()
    await client.ask(text, limit_s=300, on_message=_marks(marks))
    done = time.perf_counter()
    return {k: marks.get(k, math.nan) - started for k in ("text", "audio")} | {
        "done": done - started
    }


def _client(target: Target, pid: str, **kw: Any) -> Any:
    from edge.server import EdgeClient

    return EdgeClient(target.url, participant_id=pid, token=target.token, **kw)


def _figure(target: Target, test: str, load: int, n: int | None = None) -> Figure:
    t = target
    return Figure(
        "turn",
        test,
        "s",
        "lower",
        participants=n,
        load=load,
        model=t.model,
        backend=t.backend,
        threads=t.threads,
        ngl=t.ngl,
    )


async def typed_turns(target: Target, reps: int, tick: Tick, load: int = 0) -> list[Figure]:
    """One participant's typed turns (after one not counted: its first)."""
    text, audio = _figure(target, "typed: first text", load), None
    text.expected = target.expected_first_text_s
    pid = f"bench-typed-{secrets.token_hex(3)}"
    async with _client(target, pid, want_audio=target.voice) as client:
        await typed_turn(client, "Hello!")
        for rep in range(reps):
            times = await typed_turn(client, QUESTIONS[rep % len(QUESTIONS)])
            text.values.append(times["text"])
            if not math.isnan(times["audio"]):
                audio = audio or _figure(target, "typed: first audio", load)
                audio.values.append(times["audio"])
            tick("typed turn")
    return [text, *([audio] if audio else [])]


async def spoken_turns(target: Target, reps: int, tick: Tick, load: int = 0) -> list[Figure]:
    """The spoken question at real time; figures from the end of speech."""
    from edge.server import AudioFormat
    from edge.voice import float_to_pcm16

    clip = spoken_question()
    pcm = float_to_pcm16(clip.audio)
    figs = {k: _figure(target, f"spoken: {k}", load) for k in ("transcript", "text", "audio")}
    for rep in range(reps):
        marks: dict[str, float] = {}
        pid = f"bench-spoken-{rep}-{secrets.token_hex(3)}"
        fmt = AudioFormat(sample_rate=clip.sample_rate)
        async with _client(target, pid, audio=fmt, want_audio=True) as client:

            async def speak(client: Any = client, marks: dict[str, float] = marks) -> None:
                started = time.perf_counter()
                await client.speak(pcm)
                marks["end"] = speech_end_at(started, clip.audio, clip.sample_rate)

            async with anyio.create_task_group() as tg:
                tg.start_soon(speak)
                await client.collect_turn(limit_s=300, on_message=_marks(marks))
        for key, fig in figs.items():
            fig.values.append(marks.get(key, math.nan) - marks["end"])
        tick("spoken turn")
    return [f for f in figs.values() if not all(math.isnan(v) for v in f.values)]


async def participant_turns(
    target: Target, n: int, reps: int, tick: Tick, load: int = 0
) -> list[Figure]:
    """``n`` participants each send a typed turn at the same moment; every one's first
    reply text counts."""
    fig = _figure(target, f"{n} at once: first text", load, n)
    tag = secrets.token_hex(3)
    clients = [_client(target, f"bench-n{n}-{k}-{tag}") for k in range(n)]
    async with _all(clients) as connected:
        for c in connected:
            await typed_turn(c, "Hello!")
        for rep in range(reps):
            results: list[dict[str, float]] = []

            async def one(c: Any, text: str, results: list[dict[str, float]] = results) -> None:
                results.append(await typed_turn(c, text))

            async with anyio.create_task_group() as tg:
                for k, c in enumerate(connected):
                    tg.start_soon(one, c, QUESTIONS[(rep + k) % len(QUESTIONS)])
            fig.values += [r["text"] for r in results]
            tick(f"{n} participants")
    return [fig]


@asynccontextmanager
async def _all(clients: list[Any]) -> AsyncIterator[list[Any]]:
    from contextlib import AsyncExitStack

    async with AsyncExitStack() as stack:
        yield [await stack.enter_async_context(c) for c in clients]
