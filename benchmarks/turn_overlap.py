"""The overlapped spoken turn against the sequential one, in one run.

    python benchmarks/turn_overlap.py [--profile ci-2core-24gb] [--repeat 2] [--questions 4]

Two ``edge serve`` instances run in this process on 127.0.0.1 with the same profile and
default models: *overlapped* (speculative answers, adaptive endpointing, first audio from
the first clause) and *sequential* (none of those: the fixed end silence, routing and the
answer after the endpoint, the first whole sentence). Piper speaks the benchmark's
question set (``versus_chain.QUESTIONS``, with mid-sentence pauses); each question is
streamed in real time over WebSocket to each instance in turn (interleaved, so machine
noise hits both alike), hands-free (from the last voiced sample to the first reply audio,
own endpointing) and, on the overlapped instance, push-to-talk (from ``end_of_utterance``).
Prints p50 / max per path with the ratio to the sequential p50, premature endpoints, and
the overlapped instance's speculation counts; writes
``benchmarks/results/<machine class>/turn_overlap.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Any

import anyio
from chain_paths import RATE, ws_turn
from figures import private_data_dir, write_results
from rich.console import Console
from rich.table import Table
from server_latency import base_settings
from versus_chain import QUESTIONS, speak_questions

from edge.server import AudioFormat, EdgeClient, EdgeService
from edge.voice import PiperTTS, VadConfig, VoiceConfig


def service(profile: str | None, overlapped: bool, after_ms: int | None = None) -> EdgeService:
    settings = base_settings(profile=profile, speculative_answers=overlapped)
    made = EdgeService(settings)
    assert made.voice is not None
    if overlapped and after_ms is not None:
        made.voice.config = made.voice.config.model_copy(update={"speculative_after_ms": after_ms})
    if not overlapped:  # the sequential turn: fixed end silence, first whole sentence
        vad = made.voice.config.vad
        fixed = VadConfig(
            **{**vad.model_dump(), "min_end_silence_ms": None, "max_end_silence_ms": None}
        )
        made.voice.config = VoiceConfig(
            **{**made.voice.config.model_dump(), "vad": fixed, "first_clause_chars": None}
        )
    return made


async def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    questions = speak_questions(PiperTTS())[: args.questions]
    paths = {
        "overlapped": service(args.profile, True, args.speculative_after_ms),
        "sequential": service(args.profile, False),
    }
    samples: dict[str, list[dict[str, Any]]] = {"hands-free": [], "sequential": [], "ptt": []}
    async with paths["overlapped"] as fast, paths["sequential"] as slow:
        clients = {}
        for name, svc in (("hands-free", fast), ("ptt", fast), ("sequential", slow)):
            client = EdgeClient(
                svc.websocket_url,
                participant_id=f"bench-{name}",
                audio=AudioFormat(sample_rate=RATE),
                want_audio=True,
            )
            clients[name] = await client.__aenter__()
        try:
            for r in range(args.repeat):
                for utt in questions:
                    for name in ("sequential", "hands-free", "ptt"):
                        row = await ws_turn(clients[name], utt, push_to_talk=name == "ptt")
                        row.update(path=name, qid=utt.qid, run=r)
                        samples[name].append(row)
                        console.print(f"[dim]{name:10} {utt.qid:14} {row.get('total_s')}[/]")
                        await anyio.sleep(0.5)
        finally:
            for client in clients.values():
                await client.__aexit__(None, None, None)
        speculation = fast.answers.stats.as_dict()
        info = fast.describe()
    return {"samples": samples, "speculation": speculation, "service": info}


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(result: dict[str, Any], console: Console) -> None:
    samples = result["samples"]
    ok = {k: [r["total_s"] for r in v if r.get("total_s") is not None] for k, v in samples.items()}
    base = p50(ok["sequential"])
    table = Table(title="spoken turn → first reply audio (s), one interleaved run")
    for col in ("path", "p50", "max", "× sequential p50", "premature", "n"):
        table.add_column(col, justify="left" if col == "path" else "right")
    labels = {
        "sequential": "sequential (fixed endpoint, no speculation)",
        "hands-free": "overlapped, hands-free",
        "ptt": "overlapped, push-to-talk",
    }
    for name in ("sequential", "hands-free", "ptt"):
        values = ok[name]
        premature = sum(1 for r in samples[name] if r.get("premature"))
        table.add_row(
            labels[name],
            f"{p50(values):.2f}",
            f"{max(values):.2f}" if values else "-",
            f"{p50(values) / base:.2f}",
            str(premature),
            str(len(values)),
        )
    console.print(table)
    console.print(f"speculation on the overlapped instance: {result['speculation']}")


def main() -> None:
    private_data_dir("turn-overlap")  # not the user's sessions
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", help="device profile (default: detected)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--questions", type=int, default=len(QUESTIONS))
    parser.add_argument(
        "--speculative-after-ms",
        type=int,
        help="pause before the speculative pass on the overlapped instance (default: config's)",
    )
    args = parser.parse_args()
    console = Console()
    result = anyio.run(run, args, console)
    result["load_average_1m"] = os.getloadavg()[0]
    report(result, console)
    path = write_results("turn_overlap", result)
    console.print(f"wrote {path} (load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
