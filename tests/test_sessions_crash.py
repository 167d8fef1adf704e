"""Crash test: the service as a process, several participants over WebSocket, SIGKILL at
random moments (also right as a compaction starts) ``EDGE_CRASH_KILLS`` times (4 in
`make test`, 40 in `make soak`), restart, resume each with its token, and check through the
protocol that every exchange answered before the kill is there exactly once, that summaries
and entries agree, and that budgets hold. The same with ``edge serve`` and the real model
``EDGE_CRASH_MODEL_KILLS`` times (once in `make test`, 3 times in `make soak`)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from edge.server import EdgeClient

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).with_name("sessions_crash_server.py")
PARTICIPANTS = ("alice", "bob", "carol")
KILLS = int(os.environ.get("EDGE_CRASH_KILLS", "4"))  # `make soak`: 40
MODEL_KILLS = int(os.environ.get("EDGE_CRASH_MODEL_KILLS", "1"))  # `make soak`: 3


class Server:
    """One run of the service process; ``compactions`` counts ``COMPACT`` lines."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self.port: int | None = None
        self.compactions = 0
        self.ready = anyio.Event()
        self.compacting = anyio.Event()

    async def read(self) -> None:
        assert self.process.stdout is not None
        buffer = ""
        async for chunk in self.process.stdout:
            buffer += chunk.decode()
            *lines, buffer = buffer.split("\n")
            for line in lines:
                if line.startswith("PORT ") or line.startswith("serving on ws://"):
                    self.port = int(line.rsplit(":", 1)[-1].split()[-1])
                    self.ready.set()
                elif line.startswith("COMPACT "):
                    self.compactions += 1
                    self.compacting.set()


async def history(client: EdgeClient) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    while True:
        page = await client.history(offset=len(entries), limit=500)
        entries += page.entries
        if len(entries) >= page.total:
            return entries


async def check(client: EdgeClient, answered: list[str]) -> int:
    """Every answered exchange exactly once; summary and view consistent; budgets held."""
    entries = await history(client)
    exchanges = [e for e in entries if e["kind"] == "exchange"]
    users = [e["user"] for e in exchanges]
    assert len(users) == len(set(users)), "an exchange was recorded twice"
    assert not set(answered) - set(users), "an answered exchange was lost"
    view = await client.context_view()
    for name, section in view.sections.items():
        assert section["used_bytes"] <= section["budget_bytes"], name
    dialogue = view.sections["dialogue"]
    compacted = [e for e in exchanges if not e["in_view"]]
    summaries = [b for b in view.blocks if b["kind"] == "summary" and b["section"] == "dialogue"]
    if compacted:  # what left the view is covered by the summary, never half-applied
        assert dialogue["summary"] and summaries
        assert summaries[0]["timestamp_us"] >= max(e["timestamp_us"] for e in compacted)
    shown = [b["text"] for b in view.blocks if b["kind"] == "exchange"]
    in_view = {e["user"] for e in exchanges if e["in_view"]}
    assert all(any(f"User: {u}\n" in text for u in in_view) for text in shown)
    return len(compacted)


async def drive(
    client: EdgeClient, pid: str, answered: list[str], counter: list[int], limit_s: float
) -> None:
    try:
        while True:
            counter[0] += 1
            n = counter[0]
            if n % 7 == 0:
                await client.send({"type": "context", "topic": "scene", "text": f"scene {n}"})
            text = f"{pid} question {n}: " + "words " * (n % 5)
            await client.ask(text.strip(), limit_s=limit_s)
            answered.append(text.strip())
    except Exception:  # the server was killed mid-turn
        return


@dataclass
class Plan:
    """How runs go: the service's command line, who talks, when the kill comes."""

    command: list[str]
    participants: tuple[str, ...] = PARTICIPANTS
    kill_after_s: tuple[float, float] = (0.05, 0.6)
    turn_limit_s: float = 10.0
    start_limit_s: float = 60.0
    announces_compactions: bool = True
    """The service prints ``COMPACT`` lines (``sessions_crash_server.py``), so every other
    kill waits (up to 5 s) for one; ``edge serve`` prints none, and would only wait."""


async def one_run(
    plan: Plan, tokens: dict[str, str], answered: dict[str, list[str]], rng: random.Random,
    kill_in_compaction: bool, counter: list[int],
) -> tuple[int, int]:  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    process = await anyio.open_process(plan.command, env=env, stderr=subprocess.DEVNULL)
    server = Server(process)
    clients: list[EdgeClient] = []
    compacted = 0
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.read)
            with anyio.fail_after(plan.start_limit_s):
                await server.ready.wait()
            url = f"ws://127.0.0.1:{server.port}"
            for pid in plan.participants:
                client = EdgeClient(url, participant_id=pid, resume=tokens.get(pid), token="")
                await client.__aenter__()
                clients.append(client)
                assert client.welcome is not None
                assert client.welcome.resumed is (pid in tokens)
                tokens[pid] = client.session_token or ""
                compacted += await check(client, answered[pid])
            for client, pid in zip(clients, plan.participants, strict=True):
                tg.start_soon(drive, client, pid, answered[pid], counter, plan.turn_limit_s)
            await anyio.sleep(rng.uniform(*plan.kill_after_s))
            if kill_in_compaction and plan.announces_compactions:
                server.compacting = anyio.Event()
                with anyio.move_on_after(5):
                    await server.compacting.wait()
            process.kill()  # SIGKILL: no shutdown, no flush
            await process.wait()
    finally:
        for client in clients:
            if client.ws is not None:
                client.ws.transport.abort()
        if process.returncode is None:
            process.kill()
            await process.wait()
    return compacted, server.compactions


async def kill_and_resume(
    plan: Plan, kills: int, rng: random.Random
) -> tuple[dict[str, list[str]], int, int]:
    """``kills`` runs ended by SIGKILL (every other one as a compaction starts), then one
    more run that checks the last; returns what was answered, the exchanges compacted at
    the last check and the compactions started."""
    tokens: dict[str, str] = {}
    answered: dict[str, list[str]] = {pid: [] for pid in plan.participants}
    counter = [0]
    compactions = compacted = 0
    for run in range(kills + 1):
        seen, started = await one_run(plan, tokens, answered, rng, run % 2 == 1, counter)
        compacted, compactions = seen, compactions + started
    return answered, compacted, compactions


async def test_sigkill_at_random_moments_loses_and_duplicates_nothing(tmp_path) -> None:
    plan = Plan([sys.executable, str(SERVER), str(tmp_path)])
    with anyio.fail_after(240):
        answered, compacted, compactions = await kill_and_resume(plan, KILLS, random.Random(9))
    assert all(len(a) > KILLS for a in answered.values())  # long sessions, every run checked
    assert compactions >= KILLS // 2 and compacted > 0  # kills landed while compacting


@pytest.mark.model
async def test_sigkill_edge_serve_with_the_real_model(tmp_path) -> None:
    """The same with ``edge serve`` itself and the real default model (fewer runs: each
    start loads the model; ``EDGE_CRASH_MODEL_KILLS``, 1 here, 3 in `make soak`)."""
    command = [sys.executable, "-m", "edge", "serve", "--host", "127.0.0.1", "--port", "0",
               "--no-wyoming", "--no-mdns", "--no-voice", "--insecure",
               "--data-dir", str(tmp_path)]  # fmt: skip
    plan = Plan(
        command,
        participants=("alice", "bob"),
        kill_after_s=(2.0, 6.0),
        turn_limit_s=60.0,
        start_limit_s=180.0,
        announces_compactions=False,
    )
    with anyio.fail_after(140 + 140 * MODEL_KILLS):
        answered, _, _ = await kill_and_resume(plan, MODEL_KILLS, random.Random(5))
    assert all(answered.values())
