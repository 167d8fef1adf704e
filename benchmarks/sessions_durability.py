"""What durability costs: time added per recorded exchange and per compaction, and the
store's size per 1,000 exchanges, for the in-memory store against SQLite (WAL) with
``synchronous=NORMAL`` and ``FULL`` (the service's default) in the same run.

Each store gets a fresh :class:`~edge.conversation.ContextManager` (scripted model, no
background compaction: budgets large) and records ``--exchanges`` exchanges of typical
size (a 60-byte question, a 200-byte answer) for one participant, timing each
``record_exchange``; then ``--compactions`` compactions with a supplied summary (the
store's transaction plus the in-memory update, no model time), each after ten more
exchanges. Sizes are the database files on disk (WAL checkpointed) with the whole
conversation kept.

Usage: ``python benchmarks/sessions_durability.py [--exchanges 1000] [--json out.json]``
Timings on a shared machine are noisy (fsync time depends on the disk and its load).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from edge.conversation import ContextConfig, ContextManager
from edge.llm import ScriptedLLM
from edge.store import SessionStore

QUESTION = "Where did we leave the calibration notes for the second centrifuge, number {n}?"
ANSWER = (
    "They are in the blue binder on the shelf next to the centrifuge; the last entry, "
    "number {n}, says the rotor was balanced and the run log was exported to the lab "
    "share before the maintenance window closed."
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary_ms(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {
        "mean_ms": round(statistics.fmean(ms), 4),
        "p50_ms": round(percentile(ms, 0.5), 4),
        "p95_ms": round(percentile(ms, 0.95), 4),
    }


async def measure(store: SessionStore, exchanges: int, compactions: int) -> dict[str, Any]:
    ctx = ContextManager(
        ScriptedLLM(),
        ContextConfig(dialogue_budget_bytes=10_000_000, compaction_input_budget_bytes=6_000_000),
        store=store,
    )
    records: list[float] = []
    n = 0
    async with ctx:
        for _ in range(exchanges):
            n += 1
            started = time.perf_counter()
            await ctx.record_exchange("p", QUESTION.format(n=n), ANSWER.format(n=n))
            records.append(time.perf_counter() - started)
        compacts: list[float] = []
        for _ in range(compactions):
            for _ in range(10):
                n += 1
                await ctx.record_exchange("p", QUESTION.format(n=n), ANSWER.format(n=n))
            started = time.perf_counter()
            await ctx.compact("p", summary=f"Summary up to exchange {n}.")
            compacts.append(time.perf_counter() - started)
    return {"record_exchange": summary_ms(records), "compaction": summary_ms(compacts)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"exchanges": args.exchanges, "compactions": args.compactions}
    with tempfile.TemporaryDirectory() as tmp:
        variants = {
            "memory": lambda: SessionStore(),
            "sqlite_normal": lambda: SessionStore(
                Path(tmp) / "normal.sqlite3", synchronous="NORMAL"
            ),
            "sqlite_full": lambda: SessionStore(Path(tmp) / "full.sqlite3"),
        }
        for name, make in variants.items():
            store = make()
            results[name] = await measure(store, args.exchanges, args.compactions)
            if store.path is not None:
                store.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                total = args.exchanges + 10 * args.compactions
                size = store.size_bytes()
                results[name]["store_bytes"] = size
                results[name]["bytes_per_1000_exchanges"] = round(size * 1000 / total)
            store.close()
    base = results["memory"]
    for name in ("sqlite_normal", "sqlite_full"):
        for what in ("record_exchange", "compaction"):
            added = results[name][what]["mean_ms"] - base[what]["mean_ms"]
            results[name][what]["added_mean_ms"] = round(added, 4)
            results[name][what]["ratio_to_memory"] = round(
                results[name][what]["mean_ms"] / max(base[what]["mean_ms"], 1e-9), 1
            )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exchanges", type=int, default=1000)
    parser.add_argument("--compactions", type=int, default=50)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    results = anyio.run(run, args)
    print(f"{'store':<15}{'record p50/mean ms':>22}{'compact p50/mean ms':>22}{'B/1000 ex':>12}")
    for name in ("memory", "sqlite_normal", "sqlite_full"):
        r = results[name]
        rec, comp = r["record_exchange"], r["compaction"]
        print(
            f"{name:<15}{rec['p50_ms']:>10.3f} / {rec['mean_ms']:<9.3f}"
            f"{comp['p50_ms']:>10.3f} / {comp['mean_ms']:<9.3f}"
            f"{r.get('bytes_per_1000_exchanges', '-'):>12}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n", "utf-8")


if __name__ == "__main__":
    main()
