"""Spoken WebSocket turns while Home Assistant-style Wyoming clients come and go.

    python benchmarks/mixed_protocols.py                       # 100 turns, 1 and 3 at a time
    python benchmarks/mixed_protocols.py --turns 30 --at-once 1

One service as ``edge serve`` runs it (the detected profile, the default models, Wyoming
on), two kinds of clients at once:

* hands-free WebSocket turns, each by a fresh participant: join, stream silence for 1 s
  after ``welcome``, then a Piper recording of a question and silence in real time
  (our endpointing), and leave once the reply's first audio arrives; ``--at-once`` of
  them at a time;
* between them, one Wyoming client after another doing what Home Assistant does and
  closing early: ``asr`` (a recording, ``audio-stop``, and half the time gone before
  the transcript), ``handle`` (a conversation's turn, gone after the first
  ``handled-chunk``) or ``synthesize`` (three sentences, gone after the first
  ``audio-chunk``, mid-synthesis).

Per WebSocket turn, from the end of speech: the final transcript, first reply text and
first audio as the client sees them, and the service's stage trace (``edge.runtime.
TRACES``: VAD end, each Whisper pass queued/started/done, routing, first token, first
sentence, synthesis, first audio out), with the compute gate's holds by other work
during the turn (whose and what: ``wyoming synthesize``, ``voice:<participant>``,
``llm`` ...) and the Wyoming requests open or just closed when its speech ended. Prints
p50 / p95 / max of each, the slowest turn's trace, and the turns spoken within 2 s after
a Wyoming client closed mid-synthesis against the others; writes
``benchmarks/results/<machine class>/mixed_protocols.json``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
from chain_paths import (
    RATE,
    Marks,
    Utterance,
    silence,
    stream_microphone,
    stream_realtime,
    trace_of,
)
from concurrency import QUESTIONS, speak_questions
from figures import write_results
from rich.console import Console
from rich.table import Table
from server_latency import base_settings
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.handle import HandledChunk
from wyoming.tts import Synthesize

from edge.device import load_device_config
from edge.llm import LlamaCppLLM
from edge.runtime import TRACES
from edge.server import AudioFormat, EdgeClient, EdgeService

HOST = "127.0.0.1"
JOIN_WAIT_S = 1.0  # silence streamed after welcome, before the speech
TAIL_S = 3.0  # silence streamed after the speech at most (the turn ends at first audio)
TURN_LIMIT_S = 30.0  # a turn without first audio by then is unanswered
WYOMING_GAP_S = (0.2, 1.5)
AFTER_SYNTHESIS_S = 2.0  # "right after a synthesize client closed mid-synthesis"
SPEECH = (
    "The kitchen lights are now on. The living room is at twenty one degrees. "
    "The front door is locked and the garage is closed."
)
MARKS = ("transcript", "reply_text", "audio")


def stats(values: list[float]) -> dict[str, float]:
    values = sorted(v for v in values if v == v)
    if not values:
        return {"p50": float("nan"), "p95": float("nan"), "max": float("nan"), "n": 0}
    p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
    return {"p50": statistics.median(values), "p95": p95, "max": values[-1], "n": len(values)}


@dataclass
class WyomingLog:
    """What the Wyoming clients did: (kind, opened, closed) in perf_counter seconds."""

    requests: list[tuple[str, float, float]] = field(default_factory=list)
    open: dict[int, tuple[str, float]] = field(default_factory=dict)

    def around(self, t: float, before_s: float = AFTER_SYNTHESIS_S) -> list[str]:
        """Requests open at ``t`` or closed less than ``before_s`` before it."""
        now = [f"{kind} (open {t - start:.1f} s)" for kind, start in self.open.values()]
        done = [
            f"{kind} (closed {t - end:.2f} s before)"
            for kind, start, end in self.requests
            if start <= t and 0 <= t - end < before_s
        ]
        return now + done


async def ws_turn(url: str, pid: str, utt: Utterance, log: WyomingLog) -> dict[str, Any]:
    marks = Marks()
    async with EdgeClient(
        url, participant_id=pid, audio=AudioFormat(sample_rate=RATE), want_audio=True
    ) as client:

        async def talk() -> None:
            t0 = time.perf_counter()
            pcm = silence(JOIN_WAIT_S) + utt.pcm
            marks.times["speech_end"] = t0 + JOIN_WAIT_S + utt.speech_end_s
            await stream_microphone(client.send_audio, pcm + silence(TAIL_S), t0)

        async def listen() -> None:
            while "audio" not in marks.times:
                message, payload = await client.receive()
                if message.type == "transcript" and message.final:
                    marks.first("transcript")
                elif message.type == "reply" and message.text.strip():
                    marks.first("reply_text")
                elif message.type == "audio" and payload:
                    marks.first("audio")
                elif message.type == "error":
                    marks.notes.setdefault("errors", []).append(message.message)

        async with anyio.create_task_group() as tg:
            tg.start_soon(talk)
            with anyio.move_on_after(TURN_LIMIT_S + JOIN_WAIT_S + utt.duration_s):
                await listen()
            tg.cancel_scope.cancel()
    speech_end = marks.times["speech_end"]
    rel = marks.relative("speech_end")
    return {
        "participant": pid,
        **{f"{m}_s": rel.get(m, float("nan")) for m in MARKS},
        "answered": "audio" in marks.times,
        "errors": marks.notes.get("errors", []),
        "wyoming_then": log.around(speech_end),
        "after_synthesis_close": any(
            kind == "synthesize" and 0 <= speech_end - end < AFTER_SYNTHESIS_S
            for kind, _, end in log.requests
        ),
        "trace": trace_of(pid, speech_end),
    }


async def wyoming_asr(port: int, utt: Utterance, rng: random.Random) -> None:
    async with AsyncTcpClient(HOST, port) as c:
        await c.write_event(Transcribe(language="en").event())
        await c.write_event(AudioStart(rate=RATE, width=2, channels=1).event())

        async def send(pcm: bytes) -> None:
            await c.write_event(AudioChunk(rate=RATE, width=2, channels=1, audio=pcm).event())

        await stream_realtime(send, utt.pcm + silence(0.7), time.perf_counter())
        await c.write_event(AudioStop().event())
        if rng.random() < 0.5:
            return  # gone before the transcript
        while (event := await c.read_event()) is not None:
            if Transcript.is_type(event.type):
                return


async def wyoming_handle(port: int, utt: Utterance, conversation: str) -> None:
    async with AsyncTcpClient(HOST, port) as c:
        context = {"conversation_id": conversation}
        await c.write_event(Transcript(text=utt.text, context=context).event())
        while (event := await c.read_event()) is not None:
            if HandledChunk.is_type(event.type):
                return  # gone after the answer's first words


async def wyoming_synthesize(port: int) -> None:
    async with AsyncTcpClient(HOST, port) as c:
        await c.write_event(Synthesize(text=SPEECH).event())
        while (event := await c.read_event()) is not None:
            if AudioChunk.is_type(event.type):
                return  # gone mid-synthesis


async def wyoming_clients(
    port: int, utts: list[Utterance], log: WyomingLog, rng: random.Random, stop: anyio.Event
) -> None:
    n = 0
    while not stop.is_set():
        kind = rng.choice(("asr", "handle", "synthesize"))
        utt = rng.choice(utts)
        start = time.perf_counter()
        log.open[n] = (kind, start)
        try:
            with anyio.fail_after(TURN_LIMIT_S):
                if kind == "asr":
                    await wyoming_asr(port, utt, rng)
                elif kind == "handle":
                    await wyoming_handle(port, utt, f"bench-{n % 4}")
                else:
                    await wyoming_synthesize(port)
        except (TimeoutError, OSError) as exc:
            kind += f" failed: {exc!r}"
        del log.open[n]
        log.requests.append((kind, start, time.perf_counter()))
        n += 1
        with anyio.move_on_after(rng.uniform(*WYOMING_GAP_S)):
            await stop.wait()


async def level(
    service: EdgeService, utts: list[Utterance], turns: int, at_once: int, seed: int
) -> dict[str, Any]:
    rng = random.Random(seed)
    log = WyomingLog()
    rows: list[dict[str, Any]] = []
    stop = anyio.Event()
    assert service.wyoming is not None
    port = service.wyoming.bound_port
    next_turn = iter(range(turns))

    async def speaker(k: int) -> None:
        for n in next_turn:
            utt = utts[n % len(utts)]
            pid = f"mix{at_once}-{n}"
            rows.append(await ws_turn(service.websocket_url, pid, utt, log))

    async with anyio.create_task_group() as tg:
        tg.start_soon(wyoming_clients, port, utts, log, rng, stop)
        async with anyio.create_task_group() as speakers:
            for k in range(at_once):
                speakers.start_soon(speaker, k)
        stop.set()
    return summarize(rows, log)


def summarize(rows: list[dict[str, Any]], log: WyomingLog) -> dict[str, Any]:
    out: dict[str, Any] = {f"{m}_s": stats([r[f"{m}_s"] for r in rows]) for m in MARKS}
    after = [r["audio_s"] for r in rows if r["after_synthesis_close"]]
    others = [r["audio_s"] for r in rows if not r["after_synthesis_close"]]
    slowest = max(rows, key=lambda r: r["audio_s"] if r["answered"] else float("inf"))
    first = out["audio_s"]
    return {
        **out,
        "turns": len(rows),
        "answered": sum(r["answered"] for r in rows),
        "max_vs_p50": first["max"] / first["p50"],
        "after_synthesis_close": stats(after),
        "other_turns": stats(others),
        "wyoming_requests": len(log.requests),
        "wyoming_kinds": {
            k: sum(1 for kind, _, _ in log.requests if kind == k)
            for k in {kind for kind, _, _ in log.requests}
        },
        "slowest": slowest,
        "rows": rows,
    }


def make_service() -> EdgeService:
    device = load_device_config()
    llm = LlamaCppLLM(device.llm_model_path, device.llm_config())
    settings = base_settings(voice=True, durable_sessions=False).model_copy(
        update={"wyoming_port": 0}
    )
    return EdgeService(settings, device=device, llm=llm)


def print_result(result: dict[str, Any], console: Console) -> None:
    table = Table(title="WebSocket turns among Wyoming clients: from the end of speech (s)")
    for col in ("at once", "answered", *MARKS, "max/p50", "after synth close", "others"):
        table.add_column(col, justify="right")
    for n, row in result["levels"].items():
        cells = ["/".join(f"{row[f'{m}_s'][q]:.2f}" for q in ("p50", "p95", "max")) for m in MARKS]
        a, o = row["after_synthesis_close"], row["other_turns"]
        table.add_row(
            n,
            f"{row['answered']}/{row['turns']}",
            *cells,
            f"{row['max_vs_p50']:.2f}",
            f"{a['p50']:.2f} (n={a['n']})",
            f"{o['p50']:.2f} (n={o['n']})",
        )
    console.print(table)
    for n, row in result["levels"].items():
        slow = row["slowest"]
        console.print(
            f"[bold]{n} at once, slowest turn[/] {slow['participant']}: "
            f"audio {slow['audio_s']:.2f} s, Wyoming then: {slow['wyoming_then']}"
        )
        console.print(slow["trace"])


async def main(args: argparse.Namespace) -> None:
    console = Console(width=160)
    TRACES.enabled = True
    utts = speak_questions(len(QUESTIONS))
    service = make_service()
    result: dict[str, Any] = {"turns": args.turns, "levels": {}}
    async with service:
        await ws_turn(service.websocket_url, "mix-warm", utts[0], WyomingLog())  # warm-up
        for n in args.at_once:
            TRACES.clear()
            result["levels"][str(n)] = await level(service, utts, args.turns, n, args.seed + n)
            row = result["levels"][str(n)]
            console.print(
                f"[dim]{n} at once: first audio p50 {row['audio_s']['p50']:.2f} s, "
                f"max {row['audio_s']['max']:.2f} s, answered {row['answered']}/{row['turns']}[/]"
            )
    print_result(result, console)
    path = write_results("mixed_protocols", result)
    console.print(f"wrote {path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--at-once", type=int, nargs="*", default=[1, 3])
    parser.add_argument("--seed", type=int, default=37)
    anyio.run(main, parser.parse_args())
