"""Latency through the network service, as a client sees it over WebSocket.

    python benchmarks/server_latency.py                 # default models, detected profile
    python benchmarks/server_latency.py --profile ci-2core-24gb --repeat 3

Scenarios (each on a fresh participant unless said otherwise):

* ``protocol``: a scripted instant model: send a text turn → first reply frame and →
  ``status: idle``; what the server layer itself costs (JSON, runtime, router, hub).
* ``text``: the real service (device budgets, local decisions, local LLM): a first turn
  asked the moment the client joins (the participant's state starts from the system
  prompt evaluated at start, so this is not a cold start; the join warm of their context
  has not run yet), then follow-ups of the same participant (prefix reuse): sent the moment the
  reply ends (before the re-warm of the last exchange), and 1 s after it.
* ``concurrent``: N participants send a turn at the same moment (one local model: they
  queue in the scheduler); time to first reply frame per participant.
* ``spoken``: Piper speaks a question, streamed in real time in 100 ms PCM frames plus
  silence; end of speech → final transcript, → first reply text, → first reply audio
  ("end of speech" and "first audio" as defined for every benchmark in
  ``benchmarks/README.md``).

Prints a table, writes ``benchmarks/results/<machine class>/server_latency.json`` and
``.png``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

import anyio
from figures import pcm16_samples, private_data_dir, speech_end_at, write_results
from rich.console import Console
from rich.table import Table

from edge.decisions import ScriptedDecisions
from edge.llm import ScriptedLLM
from edge.server import (
    AudioFormat,
    AudioMessage,
    EdgeClient,
    EdgeService,
    Reply,
    ServiceSettings,
    TranscriptMessage,
)
from edge.voice import PiperTTS, float_to_pcm16

QUESTIONS = [
    "What is the capital of France?",
    "Name a primary color.",
    "What do bees make?",
    "How many legs does a spider have?",
]
PAUSES_S = (0.0, 1.0)
"""Seconds between a reply and the participant's next text turn: none (the worst case: the
prefix is not yet re-warmed with the last exchange), and one (someone typing quickly)."""


def text_rows(text: list[dict[str, Any]], follow_up: bool, pause_s: float = 0.0) -> list:
    """First turns (of every run), or follow-ups sent ``pause_s`` after the reply."""
    if not follow_up:
        return [r for r in text if r["turn"] == 0]
    return [r for r in text if r["turn"] > 0 and r.get("pause_s", 0.0) == pause_s]


def base_settings(**kw: Any) -> ServiceSettings:
    return ServiceSettings(host="127.0.0.1", port=0, wyoming_port=None, mdns=False, **kw)


async def ask_timed(client: EdgeClient, text: str) -> tuple[Any, dict[str, float]]:
    """One typed turn: the client's turn, and its first reply text and whole reply times
    (seconds from sending it)."""
    t0 = time.perf_counter()
    first: list[float] = []

    def seen(message: Any) -> None:
        if isinstance(message, Reply) and message.text and not first:
            first.append(time.perf_counter() - t0)

    turn = await client.ask(text, limit_s=300, on_message=seen)
    done = time.perf_counter() - t0
    return turn, {"first_reply_s": first[0] if first else float("nan"), "done_s": done}


async def timed_turn(
    client: EdgeClient, text: str, service: EdgeService | None = None
) -> dict[str, Any]:
    turn, times = await ask_timed(client, text)
    row: dict[str, Any] = {**times, "chars": len(turn.text)}
    metrics = service.conversation.last_metrics(client.participant_id) if service else None
    if metrics is not None:  # the answer request alone (routing came before it)
        row.update(
            queue_wait_s=metrics.queue_wait_s,
            prompt_tokens=metrics.prompt_tokens,
            reused_tokens=metrics.reused_tokens,
            prompt_eval_s=metrics.prompt_eval_s,
            answer_ttft_s=metrics.ttft_s,
            preemptions=metrics.preemptions,
        )
    return row


async def bench_protocol(repeat: int) -> list[dict[str, float]]:
    service = EdgeService(
        base_settings(voice=False),
        llm=ScriptedLLM(default="Fine, thanks."),
        decisions=ScriptedDecisions(default="conversation"),
    )
    rows = []
    async with service, EdgeClient(service.websocket_url) as client:
        await timed_turn(client, "warm up")
        for i in range(repeat * 10):
            rows.append(await timed_turn(client, f"question {i}"))
    return rows


async def bench_real(
    service: EdgeService, repeat: int, concurrency: list[int], console: Console
) -> dict[str, Any]:
    out: dict[str, Any] = {"text": [], "concurrent": {}}
    for pause_s in PAUSES_S:
        for r in range(repeat):
            pid = f"text-{r}-{pause_s:g}s"
            async with EdgeClient(service.websocket_url, participant_id=pid) as client:
                for i, question in enumerate(QUESTIONS):
                    if i:
                        await anyio.sleep(pause_s)
                    row = await timed_turn(client, question, service)
                    row.update(turn=i, pause_s=pause_s)
                    out["text"].append(row)
                    console.print(f"[dim]text run {r} turn {i} (pause {pause_s} s): {row}[/]")
    for n in concurrency:
        results: list[dict[str, float]] = []
        for r in range(repeat):
            results.extend(await concurrent_once(service, n, r))
        out["concurrent"][n] = results
        firsts = ", ".join(f"{x['first_reply_s']:.2f}" for x in results)
        console.print(f"[dim]{n} at once: first replies {firsts} s[/]")
    return out


async def concurrent_once(service: EdgeService, n: int, r: int) -> list[dict[str, float]]:
    results: list[dict[str, float]] = []
    clients = [EdgeClient(service.websocket_url, participant_id=f"c{n}-{r}-{k}") for k in range(n)]
    for c in clients:
        await c.__aenter__()

    async def one(c: EdgeClient, k: int) -> None:
        results.append(await timed_turn(c, QUESTIONS[k % len(QUESTIONS)], service))

    try:
        async with anyio.create_task_group() as tg:
            for k, c in enumerate(clients):
                tg.start_soon(one, c, k)
    finally:
        for c in clients:
            await c.__aexit__(None, None, None)
    return results


async def bench_spoken(service: EdgeService, repeat: int, console: Console) -> list[dict]:
    tts = PiperTTS()
    speech = tts.synthesize(QUESTIONS[0])
    rate = speech.sample_rate
    pcm = float_to_pcm16(speech.audio)
    rows = []
    for r in range(repeat):
        row = await spoken_once(service, pcm, rate, r)
        rows.append(row)
        console.print(f"[dim]spoken run {r}: {row}[/]")
    return rows


async def spoken_once(service: EdgeService, pcm: bytes, rate: int, r: int) -> dict[str, Any]:
    marks: dict[str, float] = {}

    def seen(message: Any) -> None:
        now = time.perf_counter()
        if isinstance(message, TranscriptMessage) and message.final:
            marks.setdefault("transcript", now)
        elif isinstance(message, Reply) and message.text:
            marks.setdefault("reply", now)
        elif isinstance(message, AudioMessage) and message.bytes:
            marks.setdefault("audio", now)

    async with EdgeClient(
        service.websocket_url,
        participant_id=f"voice-{r}",
        audio=AudioFormat(sample_rate=rate),
        want_audio=True,
    ) as client:

        async def speak() -> None:
            started = time.perf_counter()
            await client.speak(pcm)
            marks["speech_end"] = speech_end_at(started, pcm16_samples(pcm), rate)

        async with anyio.create_task_group() as tg:
            tg.start_soon(speak)
            turn = await client.collect_turn(limit_s=300, on_message=seen)
    end = marks["speech_end"]
    row: dict[str, Any] = {
        k: marks[k] - end for k in ("transcript", "reply", "audio") if k in marks
    }
    row["heard"] = turn.query
    return row


def rss_mb() -> float:
    """Resident memory of this process in MB (Linux ``/proc``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def med(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


async def main(args: argparse.Namespace) -> None:
    console = Console()
    protocol = await bench_protocol(args.repeat)
    settings = base_settings(profile=args.profile) if args.profile else base_settings()
    service = EdgeService(settings)
    t0 = time.perf_counter()
    async with service:
        started_s = time.perf_counter() - t0
        rss = {"idle_mb": rss_mb()}
        info = service.describe()
        real = await bench_real(service, args.repeat, args.concurrency, console)
        spoken = await bench_spoken(service, args.repeat, console)
        rss["after_turns_mb"] = rss_mb()

    table = Table(title="edge serve latency over WebSocket (seconds, median)")
    table.add_column("scenario")
    table.add_column("first reply text", justify="right")
    table.add_column("best", justify="right")
    table.add_column("turn done", justify="right")
    table.add_column("n", justify="right")
    table.add_row(
        "protocol only (scripted model)",
        f"{med([r['first_reply_s'] for r in protocol]) * 1000:.1f} ms",
        f"{min(r['first_reply_s'] for r in protocol) * 1000:.1f} ms",
        f"{med([r['done_s'] for r in protocol]) * 1000:.1f} ms",
        str(len(protocol)),
    )
    for name, rows in (
        ("text, first turn (asked as the client joins)", text_rows(real["text"], False)),
        ("text, follow-up at once", text_rows(real["text"], True)),
        ("text, follow-up 1 s after the reply", text_rows(real["text"], True, 1.0)),
    ):
        table.add_row(
            name,
            f"{med([r['first_reply_s'] for r in rows]):.2f}",
            f"{min(r['first_reply_s'] for r in rows):.2f}",
            f"{med([r['done_s'] for r in rows]):.2f}",
            str(len(rows)),
        )
    for n, rows in real["concurrent"].items():
        firsts = [r["first_reply_s"] for r in rows]
        table.add_row(
            f"{n} participants at once (max)",
            f"{med(firsts):.2f} ({max(firsts):.2f})",
            f"{min(firsts):.2f}",
            f"{med([r['done_s'] for r in rows]):.2f}",
            str(len(rows)),
        )
    for key, label in (
        ("transcript", "spoken: end of speech → final transcript"),
        ("reply", "spoken: end of speech → first reply text"),
        ("audio", "spoken: end of speech → first audio"),
    ):
        values = [r[key] for r in spoken if key in r]
        table.add_row(label, f"{med(values):.2f}", f"{min(values):.2f}", "", str(len(spoken)))
    console.print(table)
    console.print(
        f"profile {info['profile']}, models {info['models']}, "
        f"service start {started_s:.1f} s, load average {os.getloadavg()[0]:.1f}"
    )

    result = {
        "service": info,
        "start_s": started_s,
        # this process: the service with its models, plus the benchmark's clients and the
        # Piper voice that speaks the questions (so a little above `edge serve` alone)
        "resident_memory": rss,
        "protocol": protocol,
        "text": real["text"],
        "concurrent": {str(k): v for k, v in real["concurrent"].items()},
        "spoken": spoken,
    }
    path = write_results("server_latency", result, plot(result))
    console.print(f"wrote {path} and .png")


def plot(result: dict[str, Any]):  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, values = [], []
    for name, rows in (
        ("first turn (asked as it joins)", text_rows(result["text"], False)),
        ("follow-up at once", text_rows(result["text"], True)),
        ("follow-up 1 s later", text_rows(result["text"], True, 1.0)),
    ):
        labels.append(name)
        values.append(med([r["first_reply_s"] for r in rows]))
    for n, rows in result["concurrent"].items():
        labels.append(f"{n} at once")
        values.append(med([r["first_reply_s"] for r in rows]))
    for key in ("transcript", "reply", "audio"):
        labels.append(f"spoken → {key}")
        values.append(med([r[key] for r in result["spoken"] if key in r]))
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.barh(labels, values, color="#4a7ab0")
    ax.invert_yaxis()
    ax.set_xlabel("seconds (median): to first reply text, or from end of speech")
    ax.set_title("edge serve latency over WebSocket")
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    private_data_dir("server-latency")  # not the user's sessions
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", help="device profile (default: detected)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--concurrency", type=int, nargs="*", default=[2, 4])
    anyio.run(main, parser.parse_args())
