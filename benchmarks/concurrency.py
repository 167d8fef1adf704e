"""Several participants asking at once through ``edge serve``: batching on against off.

    python benchmarks/concurrency.py                      # 1, 2, 4, 8 at once, 3 rounds
    python benchmarks/concurrency.py --at-once 1 4 --repeat 2

Two services run side by side, with the detected profile's budgets and the default
models, rounds alternating between them: ``off``, the model serves one request at a time
(``sequences=1``, the path every profile without ``max_sequences`` takes); ``on``,
continuous batching with a sequence per participant (``sequences=8``). N participants
join (the service warms each one's prompt prefix), then each sends a different typed
question at the same instant; ``--repeat`` rounds per N, each with fresh participants.
Per turn: first reply text and whole reply (seconds from sending it, as a client sees
them over WebSocket) and the answer's generated tokens; per round, aggregate tokens/s
(all answers' tokens over the round's wall time). Each reply is checked for the word
its question expects (no turn lost, no other participant's words).

Prints a table, writes ``benchmarks/results/<machine class>/concurrency.json`` and
``.png``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import anyio
from figures import write_results
from rich.console import Console
from rich.table import Table
from server_latency import base_settings

from edge.device import load_device_config
from edge.llm import LlamaCppLLM
from edge.server import EdgeClient, EdgeService, Reply

QUESTIONS = [
    ("What is the capital of France?", "paris"),
    ("What do bees make?", "honey"),
    ("How many legs does a spider have?", "eight|8"),
    ("What color is the sky on a clear day?", "blue"),
    ("What is frozen water called?", "ice"),
    ("Which planet do we live on?", "earth"),
    ("What animal says moo?", "cow"),
    ("What is the opposite of hot?", "cold"),
]
MODES = {"off": 1, "on": 8}
JOIN_SETTLE_S = 2.0  # the join warm-up of every participant finishes before they ask


def stats(values: list[float]) -> dict[str, float]:
    values = sorted(v for v in values if v == v)
    if not values:
        return {"p50": float("nan"), "p95": float("nan"), "max": float("nan")}
    p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
    return {"p50": statistics.median(values), "p95": p95, "max": values[-1]}


async def turn(service: EdgeService, client: EdgeClient, k: int) -> dict[str, Any]:
    question, expected = QUESTIONS[k % len(QUESTIONS)]
    t0 = time.perf_counter()
    first: list[float] = []

    def seen(message: Any) -> None:
        if isinstance(message, Reply) and message.text and not first:
            first.append(time.perf_counter() - t0)

    reply = await client.ask(question, limit_s=300, on_message=seen)
    metrics = service.conversation.last_metrics(client.participant_id)
    return {
        "first_reply_s": first[0] if first else float("nan"),
        "done_s": time.perf_counter() - t0,
        "tokens": metrics.generated_tokens if metrics is not None else 0,
        "question": question,
        "answered": bool(reply.text.strip()),
        "on_topic": any(word in reply.text.lower() for word in expected.split("|")),
        "text": reply.text,
    }


async def round_once(service: EdgeService, mode: str, n: int, r: int) -> dict[str, Any]:
    clients = [
        EdgeClient(service.websocket_url, participant_id=f"{mode}-{n}-{r}-{k}") for k in range(n)
    ]
    rows: list[dict[str, Any]] = [{} for _ in range(n)]
    for c in clients:
        await c.__aenter__()
    try:
        await anyio.sleep(JOIN_SETTLE_S)
        t0 = time.perf_counter()

        async def one(k: int) -> None:
            rows[k] = await turn(service, clients[k], k)

        async with anyio.create_task_group() as tg:
            for k in range(n):
                tg.start_soon(one, k)
        wall = time.perf_counter() - t0
    finally:
        for c in clients:
            await c.__aexit__(None, None, None)
    return {"rows": rows, "wall_s": wall, "tokens_per_s": sum(x["tokens"] for x in rows) / wall}


def make_service(mode: str) -> EdgeService:
    device = load_device_config()
    llm = LlamaCppLLM(device.llm_model_path, device.llm_config(), sequences=MODES[mode])
    settings = base_settings(voice=False, durable_sessions=False)  # fresh participants
    return EdgeService(settings, device=device, llm=llm)


def summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    rows = [x for rnd in rounds for x in rnd["rows"]]
    return {
        "first_reply_s": stats([x["first_reply_s"] for x in rows]),
        "done_s": stats([x["done_s"] for x in rows]),
        "tokens_per_s": statistics.median(rnd["tokens_per_s"] for rnd in rounds),
        "answered": sum(x["answered"] for x in rows),
        "on_topic": sum(x["on_topic"] for x in rows),
        "turns": len(rows),
        "rounds": rounds,
    }


async def bench(at_once: list[int], repeat: int, console: Console) -> dict[str, Any]:
    """Both services at once; each round runs on one then the other, alternating which
    goes first, so a change in the machine's load weighs on both alike."""
    services = {mode: make_service(mode) for mode in MODES}
    rounds: dict[str, dict[int, list[dict[str, Any]]]] = {m: {} for m in MODES}
    async with services["off"], services["on"]:
        for mode, service in services.items():
            await round_once(service, mode, 1, -1)  # warm-up, not recorded
        for n in at_once:
            for r in range(repeat):
                order = list(MODES) if r % 2 == 0 else list(reversed(MODES))
                for mode in order:
                    rnd = await round_once(services[mode], mode, n, r)
                    rounds[mode].setdefault(n, []).append(rnd)
            for mode in MODES:
                f = summary(rounds[mode][n])["first_reply_s"]
                console.print(
                    f"[dim]{mode}, {n} at once: first reply p50 {f['p50']:.2f} s, "
                    f"max {f['max']:.2f} s[/]"
                )
    return {mode: {str(n): summary(rs) for n, rs in rounds[mode].items()} for mode in MODES}


def ratios(result: dict[str, Any]) -> dict[str, Any]:
    """Each N against one alone with batching on, and on against off."""
    on, off = result["on"], result["off"]
    alone = on["1"]["first_reply_s"]["p50"]
    out: dict[str, Any] = {"one_alone_on_vs_off": alone / off["1"]["first_reply_s"]["p50"]}
    for n in on:
        out[n] = {
            "first_p50_vs_alone": on[n]["first_reply_s"]["p50"] / alone,
            "first_max_vs_alone": on[n]["first_reply_s"]["max"] / alone,
            "first_p50_on_vs_off": on[n]["first_reply_s"]["p50"] / off[n]["first_reply_s"]["p50"],
            "tokens_per_s_on_vs_off": on[n]["tokens_per_s"] / off[n]["tokens_per_s"],
        }
    return out


def plot(result: dict[str, Any]):  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4))
    for mode, style in (("off", "--"), ("on", "-")):
        ns = sorted(int(n) for n in result[mode])
        for stat, marker in (("p50", "o"), ("max", "^")):
            ys = [result[mode][str(n)]["first_reply_s"][stat] for n in ns]
            ax.plot(ns, ys, style, marker=marker, label=f"batching {mode}, {stat}")
        bx.plot(ns, [result[mode][str(n)]["tokens_per_s"] for n in ns], style, marker="o")
    ax.set(xlabel="participants asking at once", ylabel="first reply text (s)", xticks=ns)
    ax.legend(fontsize=8)
    bx.set(xlabel="participants asking at once", ylabel="tokens/s, all answers", xticks=ns)
    bx.legend(["batching off", "batching on"], fontsize=8)
    fig.suptitle("Typed turns at the same instant through edge serve")
    fig.tight_layout()
    return fig


def print_table(result: dict[str, Any], console: Console) -> None:
    table = Table(title="N typed at once: first reply text / whole reply (s), tokens/s")
    for col in ("N", "mode", "first p50", "p95", "max", "whole p50", "p95", "max", "tok/s"):
        table.add_column(col, justify="right")
    for n in result["on"]:
        for mode in ("off", "on"):
            row = result[mode][n]
            f, d = row["first_reply_s"], row["done_s"]
            cells = [f"{v:.2f}" for v in (f["p50"], f["p95"], f["max"], d["p50"], d["p95"])]
            table.add_row(n, mode, *cells, f"{d['max']:.2f}", f"{row['tokens_per_s']:.0f}")
    console.print(table)


async def main(args: argparse.Namespace) -> None:
    console = Console()
    result: dict[str, Any] = await bench(args.at_once, args.repeat, console)
    result["ratios"] = ratios(result)
    print_table(result, console)
    console.print(result["ratios"])
    path = write_results(
        "concurrency",
        {"modes": {m: {"sequences": s} for m, s in MODES.items()}, **result},
        plot(result),
    )
    console.print(f"wrote {path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--at-once", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--repeat", type=int, default=3)
    anyio.run(main, parser.parse_args())
