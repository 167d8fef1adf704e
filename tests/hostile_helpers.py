"""Hostile clients against a running ``edge serve`` process, and what to watch meanwhile.

Used by ``tests/test_server_hostile.py`` (bounded, marked ``model``) and by ``make soak``
(the same attacks for longer). The attackers connect from 127.0.0.2 (still loopback,
another client address), so per-address caps apply to them and not to the well-behaved
participant on 127.0.0.1. Every loop is bounded by ``until`` (a monotonic deadline).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from websockets.asyncio.client import connect
from wyoming.audio import AudioChunk, AudioStart
from wyoming.event import async_write_event
from wyoming.tts import Synthesize

from edge.server import EdgeClient, read_token

ATTACKER = "127.0.0.2"
IDLER = "127.0.0.3"  # the idle-connection attacks come from their own address


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Figures:
    """What was measured while the attacks ran."""

    health_s: list[float] = field(default_factory=list)
    turn_s: list[float] = field(default_factory=list)
    baseline_turn_s: list[float] = field(default_factory=list)
    turn_failures: int = 0
    rss_mb: list[float] = field(default_factory=list)
    held: dict[str, int] = field(default_factory=dict)  # connections the server kept open
    refused: dict[str, int] = field(default_factory=dict)
    closed_s: dict[str, list[float | None]] = field(default_factory=dict)  # TLS abuse
    exit_s: float | None = None
    exit_code: int | None = None

    def summary(self) -> dict[str, object]:
        def stats(values: list[float]) -> dict[str, float]:
            if not values:
                return {}
            ordered = sorted(values)
            return {
                "n": len(ordered),
                "median": round(ordered[len(ordered) // 2], 3),
                "max": round(ordered[-1], 3),
            }

        return {
            "health_s": stats(self.health_s),
            "turn_s": stats(self.turn_s),
            "baseline_turn_s": stats(self.baseline_turn_s),
            "turn_failures": self.turn_failures,
            "rss_mb_max": round(max(self.rss_mb), 1) if self.rss_mb else None,
            "held": self.held,
            "refused": self.refused,
            "closed_s": {
                name: {"n": len(v), "open": v.count(None), "max": max(x or 0 for x in v)}
                for name, v in self.closed_s.items()
            },
            "exit_s": self.exit_s,
            "exit_code": self.exit_code,
        }


def probe_context() -> ssl.SSLContext:
    """The attackers' TLS: they check no certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class ServeProcess:
    """``edge serve`` on loopback with the default models, on free ports; ``tls`` serves
    ``wss://`` (its default) instead of ``ws://``."""

    def __init__(self, data_dir: Path, *, tls: bool = False, **env: str) -> None:
        self.port, self.wyoming_port = free_port(), free_port()
        self.data_dir = data_dir
        self.env = {**os.environ, "EDGE_DATA_DIR": str(data_dir), **env}
        self.env["EDGE_TLS"] = "true" if tls else "false"
        self.tls = probe_context() if tls else None
        self.proc: subprocess.Popen[str] | None = None
        self.url = f"{'wss' if tls else 'ws'}://127.0.0.1:{self.port}"

    def start(self, limit_s: float = 300) -> None:
        cmd = [sys.executable, "-m", "edge", "serve", "--host", "127.0.0.1"]
        cmd += ["--port", str(self.port), "--wyoming-port", str(self.wyoming_port), "--no-mdns"]
        self.proc = subprocess.Popen(
            cmd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"edge serve ended: {self.proc.stderr.read()}")  # type: ignore[union-attr]
            if line.startswith("serving on "):
                return
        raise TimeoutError("edge serve did not start")

    def rss_mb(self) -> float:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def hwm_mb(self) -> float:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def terminate(self, limit_s: float = 10.0) -> tuple[float, int | None]:
        """SIGTERM; returns (seconds to exit, exit code), killing it past ``limit_s``."""
        assert self.proc is not None
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            return time.monotonic() - started, None
        return time.monotonic() - started, self.proc.returncode

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


# -- watching -----------------------------------------------------------------------------


async def health(port: int, tls: ssl.SSLContext | None = None) -> float:
    """Seconds for ``GET /health`` to answer 200 (raises past 5 s)."""
    started = time.monotonic()
    with anyio.fail_after(5):
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=tls, server_hostname="localhost" if tls else None
        )
        writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        status = await reader.readline()
        await reader.read()
        writer.close()
    assert b" 200 " in status, status
    return time.monotonic() - started


async def watch(serve: ServeProcess, figures: Figures, until: float) -> None:
    while time.monotonic() < until:
        figures.health_s.append(await health(serve.port, serve.tls))
        figures.rss_mb.append(serve.rss_mb())
        await anyio.sleep(0.5)


async def well_behaved(client: EdgeClient, figures: Figures, until: float) -> None:
    """A participant asking a question every few seconds (connected before the attack)."""
    n = 0
    while time.monotonic() < until:
        started = time.monotonic()
        try:
            turn = await client.ask(f"What is two plus {n}?", limit_s=60)
            if turn.text:
                figures.turn_s.append(time.monotonic() - started)
            else:
                figures.turn_failures += 1
        except TimeoutError:
            figures.turn_failures += 1
        n += 1
        await anyio.sleep(1.0)


# -- attacks ------------------------------------------------------------------------------


async def _open(
    port: int, address: str = ATTACKER
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(address, 0))


async def idle_connections(port: int, count: int, figures: Figures, name: str, until: float):
    """``count`` TCP connections that never say anything; counts those still open at the
    end (held) and those the server closed."""
    conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    with contextlib.suppress(OSError):
        for _ in range(count):
            conns.append(await _open(port, IDLER))
    await anyio.sleep(0.5)
    held = 0
    for reader, _ in conns:  # a refused connection got an error event and its end
        with contextlib.suppress(Exception), anyio.move_on_after(0.05):
            while await reader.read(65536):
                pass
        held += not reader.at_eof()
    figures.held[name] = held
    figures.refused[name] = count - held
    with anyio.move_on_after(max(0.0, until - time.monotonic())):
        await anyio.sleep_forever()
    for _, writer in conns:
        writer.close()


async def websocket_without_hello(serve: ServeProcess, count: int, figures: Figures, until: float):
    held = []
    for _ in range(count):
        try:
            held.append(await connect(serve.url, local_addr=(IDLER, 0), ssl=serve.tls))
        except Exception:
            break
    await anyio.sleep(1.0)  # past the per-address cap the server closes them (1013)
    open_now = sum(ws.close_code is None for ws in held)
    figures.held["websocket_no_hello"] = open_now
    figures.refused["websocket_no_hello"] = count - open_now
    with anyio.move_on_after(max(0.0, until - time.monotonic())):
        await anyio.sleep_forever()
    for ws in held:
        await ws.close()


async def websocket_garbage(serve: ServeProcess, until: float) -> None:
    frames: list[str | bytes] = [
        "[" * 200_000 + "]" * 200_000,
        '{"type": "text", "text": ' + "9" * 5000 + "}",
        b"\x00" * 100_000,
        json.dumps({"type": "hello", "participant_id": "x\nforged"}),
        "x" * (1 << 20),
    ]
    while time.monotonic() < until:
        with contextlib.suppress(Exception):
            async with connect(serve.url, local_addr=(ATTACKER, 0), ssl=serve.tls) as ws:
                for frame in frames:
                    await ws.send(frame)
        await anyio.sleep(0.2)


def client_hello_start() -> bytes:
    """The first bytes of a real ClientHello (a client that then stalls sends no more)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = probe_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()[:40]


TLS_ABUSE = {
    "tls_stalled_handshake": client_hello_start(),
    "tls_garbage_hello": bytes(range(256)) * 8,
    "tls_plain_http": b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
}


async def closed_after(port: int, data: bytes, limit_s: float) -> float | None:
    """Send ``data`` on a fresh connection from the attacker's address; seconds until the
    server closes it (None: still open after ``limit_s``)."""
    started = time.monotonic()
    reader, writer = await _open(port)
    try:
        writer.write(data)
        with anyio.move_on_after(limit_s):
            while await reader.read(65536):
                pass
            return time.monotonic() - started
        return None
    finally:
        writer.close()


async def tls_abuse(port: int, figures: Figures, until: float) -> None:
    """On the TLS port: handshakes begun and stalled, garbage instead of a ClientHello,
    plain HTTP; each must be closed (the seconds it took go to ``figures.closed_s``)."""
    while time.monotonic() < until:
        async with anyio.create_task_group() as tg:
            for name, data in TLS_ABUSE.items():

                async def one(name: str = name, data: bytes = data) -> None:
                    with contextlib.suppress(OSError):
                        seconds = await closed_after(port, data, limit_s=10.0)
                        figures.closed_s.setdefault(name, []).append(seconds)

                for _ in range(10):
                    tg.start_soon(one)
        await anyio.sleep(0.5)


async def wyoming_lies(port: int, until: float) -> None:
    """Headers declaring 1 GiB, lengths of the wrong type, lengths never delivered."""
    lines = [
        {"type": "audio-chunk", "payload_length": 1 << 30},
        {"type": "synthesize", "data_length": "lots"},
        {"type": "audio-chunk", "data_length": 10, "payload_length": 1000},
    ]
    while time.monotonic() < until:
        for header in lines:
            with contextlib.suppress(Exception):
                reader, writer = await _open(port)
                writer.write(json.dumps(header).encode() + b"\n" + b"{}")
                await writer.drain()
                with anyio.move_on_after(0.5):
                    await reader.read(65536)
                writer.close()
        await anyio.sleep(0.2)


async def wyoming_big_synthesis(port: int, until: float) -> None:
    """100 KB synthesize requests (refused), and long ones abandoned right away."""
    while time.monotonic() < until:
        with contextlib.suppress(Exception):
            reader, writer = await _open(port)
            await async_write_event(Synthesize(text="Lorem ipsum. " * 8000).event(), writer)
            await async_write_event(Synthesize(text="A sentence to say. " * 100).event(), writer)
            with anyio.move_on_after(0.5):
                await reader.read(65536)
            writer.close()  # leaves while its synthesis runs
        await anyio.sleep(1.0)


async def wyoming_audio_flood(port: int, until: float) -> None:
    """192 kHz stereo as fast as it goes, never an audio-stop."""
    chunk = AudioChunk(rate=192_000, width=2, channels=2, audio=bytes(76_800)).event()
    while time.monotonic() < until:
        with contextlib.suppress(Exception):
            _, writer = await _open(port)
            await async_write_event(AudioStart(rate=192_000, width=2, channels=2).event(), writer)
            while time.monotonic() < until:
                await async_write_event(chunk, writer)
            writer.close()
        await anyio.sleep(0.2)


async def run_attacks(serve: ServeProcess, figures: Figures, duration_s: float) -> None:
    """Every attack at once for ``duration_s`` while a participant talks and we watch."""
    until = time.monotonic() + duration_s
    token = read_token(serve.data_dir)
    async with EdgeClient(serve.url, participant_id="good", token=token) as good:
        for n in range(3):  # the same participant's turns before the attack, for comparison
            started = time.monotonic()
            await good.ask(f"What is one plus {n}?", limit_s=60)
            figures.baseline_turn_s.append(time.monotonic() - started)
        until = time.monotonic() + duration_s
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch, serve, figures, until)
            tg.start_soon(well_behaved, good, figures, until)
            tg.start_soon(idle_connections, serve.wyoming_port, 300, figures, "wyoming_idle", until)
            tg.start_soon(websocket_without_hello, serve, 60, figures, until)
            tg.start_soon(idle_connections, serve.port, 300, figures, "websocket_idle_tcp", until)
            tg.start_soon(websocket_garbage, serve, until)
            if serve.tls is not None:
                tg.start_soon(tls_abuse, serve.port, figures, until)
            tg.start_soon(wyoming_lies, serve.wyoming_port, until)
            tg.start_soon(wyoming_big_synthesis, serve.wyoming_port, until)
            for _ in range(4):
                tg.start_soon(wyoming_audio_flood, serve.wyoming_port, until)
