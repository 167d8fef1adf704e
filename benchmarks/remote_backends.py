"""The spoken turn with each model in process against behind its server on loopback.

    python benchmarks/remote_backends.py [--profile ci-2core-24gb] [--repeat 2] [--questions 4]

The real servers run on 127.0.0.1 from the ``bench`` extra with our default models, as
``benchmarks/chain_services.py`` starts them: ``wyoming-faster-whisper`` (speech
recognition), ``wyoming-piper`` (synthesis) and llama-cpp-python's OpenAI-compatible
server (the LLM, with ``--interrupt_requests False`` so that the service's early requests
do not cut each other short, and ``--cache True`` so that a prompt's evaluated prefix is
kept, as our in-process llama.cpp keeps it). Then ``edge serve`` instances run in this
process, one per path: everything in process (*local*); one model behind its server (*stt*, *tts*,
*llm*: ``--stt-url``, ``--tts-url``, ``--llm-url``); both speech models behind theirs
(*speech*); all three (*all*). Piper speaks the benchmark's questions
(``versus_chain.QUESTIONS``); each question is streamed in real time over WebSocket to
every instance in turn (interleaved, so machine noise hits all alike), hands-free: from
the last voiced sample to the first reply audio. Prints the p50 / max of each path with
its ratio to the local p50 (the cost of the hops, and of the server's engine where it
differs from ours: ``wyoming-faster-whisper`` decodes Whisper's whole 30 s window), and
each backend's latency p50 as ``/health`` reports it, the running average of one
transcription pass on each path (in process, or a remote request), and the hop alone (a request that
asks no model's work: Wyoming ``describe``, ``GET /v1/models``); writes
``benchmarks/results/<machine class>/remote_backends.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
from chain_paths import RATE, ws_turn
from chain_services import (
    Service,
    chain_argv,
    free_port,
    service_env,
    wait_for_llama,
    wait_for_port,
)
from figures import private_data_dir, write_results
from rich.console import Console
from rich.table import Table
from server_latency import base_settings
from versus_chain import speak_questions

from edge.server import AudioFormat, EdgeClient, EdgeService
from edge.voice import PiperTTS, RemoteBackend

PATHS = {
    "local": (),
    "stt": ("stt",),
    "tts": ("tts",),
    "llm": ("llm",),
    "speech": ("stt", "tts"),
    "all": ("stt", "tts", "llm"),
}
LLAMA_SHARED = ["--interrupt_requests", "False", "--cache", "True"]


def start_servers(work: Path) -> dict[str, Service]:
    ports = {name: free_port() for name in ("whisper", "llama", "piper")}
    argv = chain_argv(sys.executable, ports, work)
    argv["llama"] += LLAMA_SHARED
    servers = {key: Service(key, argv[key], ports[key], work / f"{key}.log") for key in argv}
    for server in servers.values():
        server.start(service_env())
    wait_for_port(servers["whisper"], ports["whisper"], 120)
    wait_for_port(servers["piper"], ports["piper"], 120)
    wait_for_llama(servers["llama"], 180)
    return servers


def service(profile: str | None, remote: tuple[str, ...], ports: dict[str, int]) -> EdgeService:
    urls = {
        "stt": f"tcp://127.0.0.1:{ports['whisper']}",
        "tts": f"tcp://127.0.0.1:{ports['piper']}",
        "llm": f"http://127.0.0.1:{ports['llama']}/v1",
    }
    kwargs = {f"{role}_url": urls[role] for role in remote}
    return EdgeService(base_settings(profile=profile, **kwargs))


async def run(args: argparse.Namespace, console: Console, ports: dict[str, int]) -> dict:
    questions = speak_questions(PiperTTS())[: args.questions]
    services = {name: service(args.profile, remote, ports) for name, remote in PATHS.items()}
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in PATHS}
    async with contextlib.AsyncExitStack() as stack:  # stopped in the reverse order
        clients: dict[str, EdgeClient] = {}
        for name, svc in services.items():  # one after the other (each loads its models)
            await stack.enter_async_context(svc)
            client = EdgeClient(
                svc.websocket_url,
                participant_id=f"bench-{name}",
                audio=AudioFormat(sample_rate=RATE),
                want_audio=True,
            )
            clients[name] = await stack.enter_async_context(client)
        for r in range(args.repeat):
            for utt in questions:
                for name in PATHS:
                    row = await ws_turn(clients[name], utt, push_to_talk=False)
                    row.update(path=name, qid=utt.qid, run=r)
                    samples[name].append(row)
                    console.print(f"[dim]{name:7} {utt.qid:14} {row.get('total_s')}[/]")
                    await anyio.sleep(0.5)
        backends = {name: svc.backends.health() for name, svc in services.items()}
        passes = {name: pass_ms(svc) for name, svc in services.items()}
        info = services["all"].describe()
    trips = await round_trips(ports)
    return {
        "samples": samples,
        "backends": backends,
        "stt_pass_ms": passes,
        "service": info,
        "round_trip_ms": trips,
    }


def pass_ms(svc: EdgeService) -> float:
    """The listener's running average of one transcription pass (ms): the in-process
    recognizer's, or a remote request's, hop included."""
    assert svc.voice is not None
    return round(svc.voice.stt_cost.seconds * 1000, 1)


async def round_trips(ports: dict[str, int], n: int = 20) -> dict[str, float]:
    """The hop alone, without a model's work: the p50 (ms) of ``n`` Wyoming ``describe``
    → ``info`` round trips per speech server (a new connection each, as every request
    makes) and of ``n`` ``GET /v1/models`` to the LLM server."""
    out: dict[str, float] = {}
    for role, name in (("stt", "whisper"), ("tts", "piper")):
        backend = RemoteBackend(role, f"tcp://127.0.0.1:{ports[name]}")
        times = []
        for _ in range(n):
            started = time.perf_counter()
            await anyio.to_thread.run_sync(backend.describe)
            times.append(time.perf_counter() - started)
        out[role] = round(p50(times) * 1000, 2)
    async with httpx.AsyncClient() as http:
        times = []
        for _ in range(n):
            started = time.perf_counter()
            (await http.get(f"http://127.0.0.1:{ports['llama']}/v1/models")).raise_for_status()
            times.append(time.perf_counter() - started)
    out["llm"] = round(p50(times) * 1000, 2)
    return out


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summary(result: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per path: p50, max, n and the ratio of its p50 to the local p50."""
    ok = {k: [r["total_s"] for r in v if r.get("total_s") is not None] for k, v in result.items()}
    base = p50(ok["local"])
    return {
        name: {
            "p50_s": round(p50(values), 3),
            "max_s": round(max(values), 3) if values else float("nan"),
            "ratio_to_local": round(p50(values) / base, 3),
            "n": len(values),
        }
        for name, values in ok.items()
    }


def hop_p50_ms(backends: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """Each remote backend's request latency p50 (ms) on the path that has it alone."""
    return {role: backends[role][role].get("latency_p50_ms") for role in ("stt", "tts", "llm")}


def report(result: dict[str, Any], console: Console) -> None:
    table = Table(title="hands-free spoken turn → first reply audio (s), one interleaved run")
    for col in ("path", "remote", "p50", "max", "× local p50", "n"):
        table.add_column(col, justify="left" if col in ("path", "remote") else "right")
    for name, row in result["summary"].items():
        table.add_row(
            name,
            ", ".join(PATHS[name]) or "none",
            f"{row['p50_s']:.2f}",
            f"{row['max_s']:.2f}",
            f"{row['ratio_to_local']:.2f}",
            str(row["n"]),
        )
    console.print(table)
    console.print(f"request latency p50 per remote backend (ms): {result['hop_p50_ms']}")
    console.print(f"round trip without a model's work, p50 (ms): {result['round_trip_ms']}")
    console.print(f"one transcription pass, running average (ms): {result['stt_pass_ms']}")


def main() -> None:
    private_data_dir("remote-backends")  # not the user's sessions
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", help="device profile (default: detected)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--questions", type=int, default=4)
    args = parser.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory(prefix="remote-backends-") as work:
        servers = start_servers(Path(work))
        try:
            ports = {name: server.port for name, server in servers.items()}
            result = anyio.run(run, args, console, ports)
        finally:
            for server in servers.values():
                server.stop()
    result["summary"] = summary(result["samples"])
    result["hop_p50_ms"] = hop_p50_ms(result["backends"])
    result["load_average_1m"] = os.getloadavg()[0]
    report(result, console)
    path = write_results("remote_backends", result)
    console.print(f"wrote {path} (load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
