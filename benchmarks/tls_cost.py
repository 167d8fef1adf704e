"""What TLS costs a spoken turn: the same question, over ``wss://`` and over plain ``ws://``.

    python benchmarks/tls_cost.py                 # default models, detected profile
    python benchmarks/tls_cost.py --repeat 8

Two services run in this one process on the default models (the same loaded Whisper and
Piper; each its own SmolLM2), one with TLS (as ``edge serve`` runs by default) and one
with ``--no-tls``. Turns alternate between them, the order flipping each round, so both
see the same machine load. Each turn is a new participant speaking a Piper question in
real time (100 ms PCM frames plus silence), timed from the end of speech to the first
reply audio at the client (``benchmarks/README.md``); the connection (TCP, the TLS
handshake and pin check, the upgrade, ``hello`` → ``welcome``) is timed on its own.
Besides the medians, the median of each round's difference (TLS turn minus plain turn,
run back to back) is reported, and the process's CPU time per turn (both ends, every
thread): on a shared machine they are the steadier figures. Last, TLS's own work for one
turn (encrypting and decrypting as many bytes as the turn's audio, in 100 ms records, in
memory) is timed apart from any scheduling.

Prints a table, writes ``benchmarks/results/<machine class>/tls_cost.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import ssl
import statistics
import time
from pathlib import Path
from typing import Any

import anyio
from figures import pcm16_samples, private_data_dir, speech_end_at, write_results
from rich.console import Console
from rich.table import Table
from server_latency import base_settings

from edge.server import (
    AudioFormat,
    AudioMessage,
    EdgeClient,
    EdgeService,
    ServerTrust,
    SpeechParts,
)
from edge.voice import PiperTTS, WhisperSTT, float_to_pcm16

QUESTION = "What is the capital of France?"
VARIANTS = ("tls", "plain")


def make_service(
    tls: bool, data_dir: Path, stt: WhisperSTT, tts: PiperTTS, profile: str | None
) -> EdgeService:
    settings = base_settings(tls=tls, data_dir=data_dir, profile=profile)
    return EdgeService(settings, speech=SpeechParts(stt=stt, tts=tts))


async def spoken_turn(
    service: EdgeService, pcm: bytes, rate: int, participant: str
) -> dict[str, Any]:
    marks: dict[str, float] = {}

    def seen(message: Any) -> None:
        if isinstance(message, AudioMessage) and message.bytes:
            marks.setdefault("audio", time.perf_counter())

    trust = ServerTrust(fingerprint=service.tls_fingerprint) if service.tls else None
    cpu = time.process_time()
    started = time.perf_counter()
    async with EdgeClient(
        service.websocket_url,
        participant_id=participant,
        audio=AudioFormat(sample_rate=rate),
        want_audio=True,
        trust=trust,
    ) as client:
        connect_s = time.perf_counter() - started

        async def speak() -> None:
            began = time.perf_counter()
            await client.speak(pcm)
            marks["speech_end"] = speech_end_at(began, pcm16_samples(pcm), rate)

        async with anyio.create_task_group() as tg:
            tg.start_soon(speak)
            turn = await client.collect_turn(limit_s=300, on_message=seen)
        await client.send({"type": "bye"})
    return {
        "cpu_s": time.process_time() - cpu,  # the whole process: both ends, every thread
        "connect_s": connect_s,
        "first_audio_s": marks["audio"] - marks["speech_end"],
        "heard": turn.query,
    }


def record_cost_s(context: ssl.SSLContext, nbytes: int, frame: int = 3200) -> float:
    """Seconds to encrypt and decrypt ``nbytes`` in ``frame``-sized records (a turn's
    audio both ways), in memory after a handshake: TLS's own work, free of scheduling."""
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    client_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_context.check_hostname, client_context.verify_mode = False, ssl.CERT_NONE
    client = client_context.wrap_bio(client_in, client_out)
    server = context.wrap_bio(server_in, server_out, server_side=True)
    for _ in range(10):  # handshake: pass the records back and forth
        for side in (client, server):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        server_in.write(client_out.read())
        client_in.write(server_out.read())
    payload = bytes(frame)
    started = time.perf_counter()
    for _ in range(nbytes // frame):
        client.write(payload)
        server_in.write(client_out.read())
        server.read(frame)
    return time.perf_counter() - started


def summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    audio = [r["first_audio_s"] for r in rows]
    connect = [r["connect_s"] for r in rows]
    return {
        "first_audio_median_s": statistics.median(audio),
        "first_audio_mean_s": statistics.fmean(audio),
        "connect_median_s": statistics.median(connect),
        "cpu_median_s": statistics.median(r["cpu_s"] for r in rows),
        "n": len(rows),
    }


async def main(args: argparse.Namespace) -> None:
    console = Console()
    base = private_data_dir("tls-cost")
    os.environ["EDGE_TOKEN"] = secrets.token_urlsafe(24)  # both services, and the clients
    stt, tts = WhisperSTT(), PiperTTS(noise_scale=0.0, noise_w_scale=0.0)
    stt.load()
    tts.load()
    speech = tts.synthesize(QUESTION)
    pcm, rate = float_to_pcm16(speech.audio), speech.sample_rate
    for name in VARIANTS:
        (base / name).mkdir()
    services = {
        name: make_service(name == "tls", base / name, stt, tts, args.profile) for name in VARIANTS
    }
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    keeper = services["tls"].tls
    assert keeper is not None
    # a turn's audio: the question plus 1.5 s of silence up (16-bit), about as much down
    turn_bytes = 2 * (len(pcm) + 2 * int(rate * 1.5))
    records_s = statistics.median(record_cost_s(keeper.context, turn_bytes) for _ in range(5))
    async with services["tls"], services["plain"]:
        for name in VARIANTS:  # one turn each first, not counted (first-use costs)
            await spoken_turn(services[name], pcm, rate, f"warm-{name}")
        for r in range(args.repeat):
            order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
            for name in order:
                row = await spoken_turn(services[name], pcm, rate, f"{name}-{r}")
                rows[name].append(row)
                console.print(f"[dim]{name} {r}: {row}[/]")
    result = {name: summary(rows[name]) for name in VARIANTS}
    tls, plain = result["tls"]["first_audio_median_s"], result["plain"]["first_audio_median_s"]
    result["first_audio_tls_over_plain"] = tls / plain
    # the same round's two turns ran back to back: their difference cancels slow drifts
    paired = [t["first_audio_s"] - p["first_audio_s"] for t, p in zip(*rows.values(), strict=True)]
    result["paired_difference_median_s"] = statistics.median(paired)
    result["paired_difference_over_plain"] = statistics.median(paired) / plain
    result["cpu_tls_over_plain"] = result["tls"]["cpu_median_s"] / result["plain"]["cpu_median_s"]
    result["tls_records_per_turn"] = {"bytes": turn_bytes, "seconds": records_s}
    result["tls_records_over_plain_first_audio"] = records_s / plain
    table = Table(title="spoken turn over wss:// and ws:// (seconds)")
    columns = ("variant", "end of speech → first audio (median)", "mean", "connect", "CPU", "n")
    for column in columns:
        table.add_column(column, justify="right" if column != "variant" else "left")
    for name in VARIANTS:
        s = result[name]
        table.add_row(
            name,
            f"{s['first_audio_median_s']:.3f}",
            f"{s['first_audio_mean_s']:.3f}",
            f"{s['connect_median_s'] * 1000:.1f} ms",
            f"{s['cpu_median_s']:.2f} s",
            str(s["n"]),
        )
    console.print(table)
    console.print(
        f"TLS / plain, first audio (median): {result['first_audio_tls_over_plain']:.3f}; "
        f"median paired difference {result['paired_difference_median_s'] * 1000:+.0f} ms "
        f"({result['paired_difference_over_plain']:+.1%} of plain); CPU per turn "
        f"{result['cpu_tls_over_plain']:.3f}"
    )
    console.print(
        f"TLS records for one turn's {turn_bytes:,} bytes of audio: {records_s * 1000:.2f} ms "
        f"({result['tls_records_over_plain_first_audio']:.3%} of plain first audio)"
    )
    path = write_results("tls_cost", {"question": QUESTION, **result, "turns": rows})
    console.print(f"[dim]wrote {path}[/]")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", help="device profile (default: detected)")
    parser.add_argument("--repeat", type=int, default=8, help="turns per variant")
    anyio.run(main, parser.parse_args())
