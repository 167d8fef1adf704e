"""The OpenAI-compatible API against what a user would run instead, in one run.

    python benchmarks/api_latency.py                 # default models, detected profile
    python benchmarks/api_latency.py --repeat 8

Two processes on 127.0.0.1, measured in turns (one asks while the other idles):
``edge serve`` (its defaults: TLS, the detected profile) and llama-cpp-python's own
OpenAI server (``python -m llama_cpp.server``, its defaults) on the same GGUF file with the
same thread counts (``chain_services.chain_settings``). Both are driven by the official
``openai`` SDK, streaming, ``max_tokens`` 32.

* ``stateless``: a client's own messages (a system prompt and a question, a new question
  each time): time to first token (the first non-empty content delta), p50 of each, and
  our p50 over theirs (target ≤ 1.0).
* ``follow_up``: two clients take turns (A asks, B asks, A follows up, ...), as on a box
  several people use. llama-cpp-python's server is sent each client's whole history (what
  a client of a stateless server sends); ours names the participant (``user``) and sends
  only the new message: the service keeps each participant's context and model state.
  Time to first token of the follow-ups; our p50 over theirs (target ≤ 0.5).
  ``follow_up_alone`` is the same with one client only (no one else's turn between).
  ``follow_up_stateless``: two clients take turns, and ours too is sent each client's
  whole history with the same system prompt, no participant named (what an app written
  for any OpenAI server sends): each conversation keeps its own model state.
* ``spoken``: Piper's question streamed in real time (100 ms frames, then silence) over
  the Realtime API (``/v1/realtime``, 24 kHz) and over our WebSocket protocol (hands-free,
  its native rate): end of speech → first reply audio (as ``benchmarks/README.md`` defines
  them); Realtime p50 over WebSocket p50 (target ≤ 1.2).

Writes ``benchmarks/results/<machine class>/api_latency.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import base64
import os
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import chain_services as svc
import openai
from figures import machine_info, pcm16_samples, speech_end_at, write_results
from rich.console import Console

from edge.server import AudioFormat, AudioMessage, EdgeClient
from edge.voice import PiperTTS, float_to_pcm16, resample

SYSTEM = "You are a helpful assistant. Answer in one short sentence."
QUESTIONS = [
    "What is the capital of France?",
    "Name a primary color.",
    "What do bees make?",
    "How many legs does a spider have?",
    "What is the largest ocean?",
    "What is frozen water called?",
    "Which planet is closest to the sun?",
    "What gas do plants take in?",
]
FOLLOW_UPS = ["Why is that?", "Say it again in other words.", "Is that always true?"]
SPOKEN = "What is the capital of France?"
MAX_TOKENS = 32
RT_RATE = 24_000
PAUSE_S = 1.0
"""Quiet before each timed request, to either server: a person's requests come seconds
apart, not straight after another server's answer on the same cores (ours picks its
threads by what else ran just now, so asked straight after llama-cpp-python's server
answered, its prompt step would run on one thread of two)."""


def med(values: list[float]) -> float:
    values = [v for v in values if v == v]  # a turn without audio (nan) is left out
    return statistics.median(values) if values else float("nan")


async def ttft(
    client: openai.AsyncOpenAI, messages: list[dict[str, str]], **kw: Any
) -> tuple[float, str]:
    """Seconds from the request to the first non-empty content delta, and the reply
    (after :data:`PAUSE_S` of quiet)."""
    await anyio.sleep(PAUSE_S)
    started = time.perf_counter()
    first, text = None, ""
    stream = await client.chat.completions.create(
        model="default",
        messages=messages,
        stream=True,
        max_tokens=MAX_TOKENS,
        **kw,  # type: ignore[arg-type]
    )
    async for chunk in stream:
        piece = chunk.choices[0].delta.content if chunk.choices else None
        if piece:
            first = first or time.perf_counter() - started
            text += piece
    return (first if first is not None else float("nan")), text


async def bench_stateless(
    ours: openai.AsyncOpenAI, theirs: openai.AsyncOpenAI, n: int
) -> dict[str, Any]:
    rows = []
    for client in (ours, theirs):  # a warm-up each: the first request loads what it loads
        await ttft(
            client, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi."}]
        )
    for i in range(n):
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]},
        ]
        ours_s, _ = await ttft(ours, messages)
        theirs_s, _ = await ttft(theirs, messages)
        rows.append({"question": messages[1]["content"], "ours_s": ours_s, "theirs_s": theirs_s})
    return _summary(rows)


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ours, theirs = med([r["ours_s"] for r in rows]), med([r["theirs_s"] for r in rows])
    return {"rows": rows, "ours_p50_s": ours, "theirs_p50_s": theirs, "ratio": ours / theirs}


async def bench_follow_up(
    ours: openai.AsyncOpenAI,
    theirs: openai.AsyncOpenAI,
    rounds: int,
    clients: int,
    tag: str,
    stateless: bool = False,
) -> dict[str, Any]:
    """``clients`` people take turns; each round every one of them asks a follow-up (to
    ours as a named participant, or ``stateless``: its whole history, as to theirs; each
    server's history holds its own answers, as a client's would)."""
    names = [f"{tag}-{c}" for c in range(clients)]
    start = [{"role": "system", "content": SYSTEM}]
    theirs_history = {name: list(start) for name in names}
    ours_history = {name: list(start) for name in names}
    rows = []
    for r in range(rounds + 1):
        for c, name in enumerate(names):
            text = QUESTIONS[c] if r == 0 else FOLLOW_UPS[(r - 1) % len(FOLLOW_UPS)]
            asked = {"role": "user", "content": text}
            ours_history[name].append(asked)
            theirs_history[name].append(asked)
            if stateless:
                ours_s, mine = await ttft(ours, ours_history[name])
                ours_history[name].append({"role": "assistant", "content": mine})
            else:
                ours_s, _ = await ttft(ours, [asked], user=name)
            theirs_s, reply = await ttft(theirs, theirs_history[name])
            theirs_history[name].append({"role": "assistant", "content": reply})
            if r > 0:
                rows.append(
                    {"participant": name, "round": r, "ours_s": ours_s, "theirs_s": theirs_s}
                )
    return _summary(rows)


def spoken_audio() -> tuple[bytes, bytes, int]:
    """Piper's question: (PCM16 at its own rate, PCM16 at 24 kHz, its rate)."""
    synthesis = PiperTTS().synthesize(SPOKEN)
    rate = synthesis.sample_rate
    return (
        float_to_pcm16(synthesis.audio),
        float_to_pcm16(resample(synthesis.audio, rate, RT_RATE)),
        rate,
    )


async def websocket_turn(url: str, pcm: bytes, rate: int, r: int) -> float:
    marks: dict[str, float] = {}

    def seen(message: Any) -> None:
        if isinstance(message, AudioMessage) and message.bytes:
            marks.setdefault("audio", time.perf_counter())

    async with EdgeClient(
        url, participant_id=f"ws-{r}", audio=AudioFormat(sample_rate=rate), want_audio=True
    ) as client:

        async def speak() -> None:
            started = time.perf_counter()
            await client.speak(pcm)  # real-time paced, then silence
            marks["end"] = speech_end_at(started, pcm16_samples(pcm), rate)

        async with anyio.create_task_group() as tg:
            tg.start_soon(speak)
            await client.collect_turn(limit_s=300, on_message=seen)
    return marks.get("audio", float("nan")) - marks["end"]


async def realtime_turn(client: openai.AsyncOpenAI, trust: ssl.SSLContext, pcm: bytes) -> float:
    audio = pcm + bytes(2 * RT_RATE * 2)  # two seconds of silence after the question
    marks: dict[str, float] = {}
    async with client.realtime.connect(
        model="default", websocket_connection_options={"ssl": trust}
    ) as conn:

        async def speak() -> None:
            started = time.perf_counter()
            step = RT_RATE // 10 * 2
            for i in range(0, len(audio), step):
                await conn.input_audio_buffer.append(
                    audio=base64.b64encode(audio[i : i + step]).decode()
                )
                await anyio.sleep(
                    max(0.0, started + (i + step) / (2 * RT_RATE) - time.perf_counter())
                )
            marks["end"] = speech_end_at(started, pcm16_samples(pcm), RT_RATE)

        async with anyio.create_task_group() as tg:
            tg.start_soon(speak)
            async for event in conn:
                if event.type == "response.output_audio.delta":
                    marks.setdefault("audio", time.perf_counter())
                if event.type == "response.done":
                    break
    return marks.get("audio", float("nan")) - marks["end"]


async def bench_spoken(
    url: str, client: openai.AsyncOpenAI, trust: ssl.SSLContext, n: int
) -> dict[str, Any]:
    pcm, pcm24, rate = spoken_audio()
    rows = []
    for r in range(n):
        ws_s = await websocket_turn(url, pcm, rate, r)
        rt_s = await realtime_turn(client, trust, pcm24)
        rows.append({"websocket_s": ws_s, "realtime_s": rt_s})
    ws, rt = med([r["websocket_s"] for r in rows]), med([r["realtime_s"] for r in rows])
    return {"rows": rows, "websocket_p50_s": ws, "realtime_p50_s": rt, "ratio": rt / ws}


def start(work: Path, profile: str | None) -> dict[str, svc.Service]:
    chain = svc.chain_services(work, svc.chain_python())
    edge, _ = svc.edge_service(work, sys.executable, profile)
    services = {"llama": chain["llama"], "edge": edge}
    env = svc.service_env()
    for service in services.values():
        service.start(env)
    svc.wait_for_llama(services["llama"], 300)
    svc.wait_for_port(edge, edge.port, 300)
    return services


async def run(
    work: Path, services: dict[str, svc.Service], args: argparse.Namespace, console: Console
) -> dict[str, Any]:
    token = (work / "edge" / "token").read_text().strip()
    trust = ssl.create_default_context(cafile=str(work / "edge" / "tls" / "cert.pem"))
    base = f"https://{svc.HOST}:{services['edge'].port}"
    http = openai.DefaultAsyncHttpxClient(verify=trust)
    ours = openai.AsyncOpenAI(base_url=base + "/v1", api_key=token, http_client=http, timeout=300)
    theirs = openai.AsyncOpenAI(
        base_url=f"http://{svc.HOST}:{services['llama'].port}/v1", api_key="none", timeout=300
    )
    async with ours, theirs:
        await _ready(ours)
        result = {"stateless": await bench_stateless(ours, theirs, args.repeat)}
        console.print(f"stateless: {_line(result['stateless'])}")
        result["follow_up"] = await bench_follow_up(ours, theirs, 3, 2, "pair")
        console.print(f"follow-up, two clients taking turns: {_line(result['follow_up'])}")
        result["follow_up_alone"] = await bench_follow_up(ours, theirs, 3, 1, "alone")
        console.print(f"follow-up, one client alone: {_line(result['follow_up_alone'])}")
        both = await bench_follow_up(ours, theirs, 3, 2, "stateless", stateless=True)
        result["follow_up_stateless"] = both
        console.print(f"follow-up, two stateless clients taking turns: {_line(both)}")
        url = f"wss://{svc.HOST}:{services['edge'].port}"
        result["spoken"] = await bench_spoken(url, ours, trust, args.spoken)
        s = result["spoken"]
        console.print(
            f"spoken, end of speech → first audio: WebSocket {s['websocket_p50_s']:.2f} s, "
            f"Realtime {s['realtime_p50_s']:.2f} s, ratio {s['ratio']:.2f}"
        )
    return result


async def _ready(client: openai.AsyncOpenAI) -> None:
    for _ in range(600):
        try:
            await client.models.list()
            return
        except openai.APIConnectionError:
            await anyio.sleep(0.5)


def _line(summary: dict[str, Any]) -> str:
    return (
        f"ours p50 {summary['ours_p50_s']:.3f} s, llama-cpp-python's server "
        f"{summary['theirs_p50_s']:.3f} s, ratio {summary['ratio']:.2f} (n={len(summary['rows'])})"
    )


def plot(result: dict[str, Any]):  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.6))
    labels, ours, theirs = [], [], []
    for key, label in (
        ("stateless", "stateless"),
        ("follow_up", "follow-up (2 clients)"),
        ("follow_up_alone", "follow-up (alone)"),
        ("follow_up_stateless", "follow-up (2 stateless clients)"),
    ):
        labels.append(label)
        ours.append(result[key]["ours_p50_s"])
        theirs.append(result[key]["theirs_p50_s"])
    y = range(len(labels))
    ax.barh([i + 0.2 for i in y], ours, height=0.4, label="edge serve /v1/chat/completions")
    ax.barh([i - 0.2 for i in y], theirs, height=0.4, label="llama-cpp-python server")
    ax.set_yticks(list(y), labels)
    ax.set_xlabel("time to first token, p50 (s)")
    ax.legend(loc="lower right", fontsize=8)
    s = result["spoken"]
    ax.set_title(
        f"first audio after speech: WebSocket {s['websocket_p50_s']:.2f} s, "
        f"Realtime {s['realtime_p50_s']:.2f} s"
        f" — {result['machine_class']}, load {result['load_average_1m']:.1f}",
        fontsize=9,
    )
    fig.tight_layout()
    return fig


async def main(args: argparse.Namespace) -> None:
    console = Console(width=140)
    info = machine_info()  # refuses uncommitted code before the run, not after it
    with tempfile.TemporaryDirectory(prefix="api-latency-") as tmp:
        work = Path(tmp)
        os.environ["EDGE_DATA_DIR"] = str(work / "edge")  # where the clients find the token
        services = start(work, args.profile)
        try:
            result = await run(work, services, args, console)
        finally:
            for service in services.values():
                service.stop()
    result["settings"] = {
        "llama_cpp_server": svc.chain_settings()["llama"],
        "differs": [
            "edge serve speaks TLS (its default); llama-cpp-python's server plain HTTP",
            "ours answers a participant's follow-up from its own context (its instructions)",
        ],
        "pause_before_each_request_s": PAUSE_S,
        "max_tokens": MAX_TOKENS,
    }
    result["machine_class"] = info["class"]
    result["load_average_1m"] = os.getloadavg()[0]
    path = write_results("api_latency", result, plot(result))
    console.print(f"wrote {path} and .png")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=8, help="stateless questions")
    parser.add_argument("--spoken", type=int, default=3, help="spoken turns per protocol")
    parser.add_argument("--profile", default=None)
    anyio.run(main, parser.parse_args())
