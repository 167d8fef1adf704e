"""Routing accuracy and decision latency of the local decision service.

    python benchmarks/routing_decisions.py                       # all variants
    python benchmarks/routing_decisions.py --variants combined   # the shipped setting
    python benchmarks/routing_decisions.py --model path/to/model.gguf

Routes every query of ``benchmarks/routing_eval_set.jsonl`` between the real destinations'
routing aids (the conversation's and the notes agent's) with several variants of the
service, and reports accuracy plus cold and warm decision latency:

* ``combined``: calibrated model scores plus lexical evidence (the default service);
* ``model``: calibrated model scores only;
* ``raw``: the model's uncalibrated next-token scores only;
* ``lexical``: lexical evidence only (no model call).

"Cold" is the first decision on a freshly loaded model (the option prefix and the
content-free prior are evaluated); "warm" are the eval-set decisions after the first,
which reuse the cached prefix, or ask no model at all when the lexical evidence decides
(``model asked`` counts those that did ask it).
"Prepared 1st" is the first decision after ``prepare()`` evaluated the prefix and prior.
Cold and prepared 1st always ask the model (``model_cap=None``): they time the model path.
Prints tables and writes ``benchmarks/results/<machine class>/routing_decisions[_<set>].json``
and a PNG.
``--set benchmarks/routing_eval_holdout.jsonl`` runs the held-out set.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import anyio
from figures import machine_info, results_dir
from rich.console import Console
from rich.table import Table

from edge.decisions import ChoiceQuestion, Criterion, LocalDecisionService
from edge.notes import NotesAgent

HERE = Path(__file__).parent
DEFAULT_SET = str(HERE / "routing_eval_set.jsonl")
VARIANTS = {
    "combined": {},
    "model": {"lexical_weight": 0.0},
    "raw": {"lexical_weight": 0.0, "calibrate": False},
    "lexical": {"lexical_only": True},
}


def criteria() -> tuple[Criterion, ...]:
    """The routing aids of the destinations `edge serve` registers."""
    from edge.conversation import DEFAULT_DESCRIPTION, ROUTE_EXAMPLES

    notes = NotesAgent(runtime=None).routing_aid("bench")
    return (
        Criterion("conversation", DEFAULT_DESCRIPTION, ROUTE_EXAMPLES),
        Criterion(notes.name, notes.description, notes.examples),
    )


NO_CAP = {"model_cap": None}
"""Options for a decision that always asks the model (cold and prepared-first timings)."""


def load_set(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for i, row in enumerate(rows):
        if not {"query", "route"} <= row.keys():
            raise ValueError(f"{path}:{i + 1}: each line needs 'query' and 'route'")
    return rows


async def cold_decision(args: argparse.Namespace, options: dict, query: str) -> tuple[float, float]:
    """The first decision on a freshly loaded model: wall and CPU seconds."""
    from edge.llm import LlamaCppLLM

    llm = LlamaCppLLM(args.model, n_threads=args.threads)
    await llm.load()
    try:
        service = LocalDecisionService(llm, cache_key="bench-cold", **options | NO_CAP)
        start, cpu = time.perf_counter(), time.process_time()
        await service.decide(ChoiceQuestion(query, criteria()))
        return time.perf_counter() - start, time.process_time() - cpu
    finally:
        await llm.close()


async def run_variant(name: str, llm: object, rows: list[dict], args: argparse.Namespace) -> dict:
    options = dict(VARIANTS[name])
    lexical_only = options.pop("lexical_only", False)
    service = LocalDecisionService(
        object() if lexical_only else llm, cache_key=f"bench-{name}", **options
    )
    crits = criteria()
    prepared_first_s = None
    cold = (0.0, 0.0)
    if not lexical_only:
        cold = await cold_decision(args, options, rows[0]["query"])
        # A second service on its own key, prepared ahead (as `edge serve` does at start):
        # its first decision finds the option prefix and the prior ready.
        prepared = LocalDecisionService(llm, cache_key=f"bench-{name}-prepared", **options | NO_CAP)
        await prepared.prepare(ChoiceQuestion("", crits))
        start = time.perf_counter()
        await prepared.decide(ChoiceQuestion(rows[0]["query"], crits))
        prepared_first_s = time.perf_counter() - start
    latencies: list[float] = []
    cpu_s: list[float] = []
    reused: list[int] = []
    outcomes = []
    for row in rows:
        question = ChoiceQuestion(row["query"], crits)
        start, cpu = time.perf_counter(), time.process_time()
        answer = await service.decide(question)
        latencies.append(time.perf_counter() - start)
        cpu_s.append(time.process_time() - cpu)
        if answer.metrics is not None:
            reused.append(answer.metrics.reused_tokens)
        chosen = answer.label or max(answer.probabilities, key=answer.probabilities.get)
        outcomes.append(
            {
                "query": row["query"],
                "expected": row["route"],
                "chosen": chosen,
                "uncertain": answer.label is None,
                "probabilities": dict(answer.probabilities),
                "latency_s": latencies[-1],
                "source": answer.source,
            }
        )
    correct = [o["chosen"] == o["expected"] for o in outcomes]
    per_route = {}
    for route in sorted({r["route"] for r in rows}):
        hits = [c for c, o in zip(correct, outcomes, strict=True) if o["expected"] == route]
        per_route[route] = sum(hits) / len(hits)
    warm = latencies[1:]
    return {
        "variant": name,
        "accuracy": sum(correct) / len(correct),
        "per_route_accuracy": per_route,
        "cold_s": cold[0],
        "prepared_first_s": prepared_first_s,
        "warm_median_s": statistics.median(warm) if warm else None,
        "warm_p90_s": sorted(warm)[int(0.9 * (len(warm) - 1))] if warm else None,
        "cold_cpu_s": cold[1],
        "warm_cpu_median_s": statistics.median(cpu_s[1:]) if len(cpu_s) > 1 else None,
        "warm_reused_tokens_median": statistics.median(reused[1:]) if len(reused) > 1 else None,
        "model_asked": sum(1 for o in outcomes if o["source"] == "model"),
        "errors": [o for o, c in zip(outcomes, correct, strict=True) if not c],
        "outcomes": outcomes,
    }


async def main(args: argparse.Namespace) -> None:
    rows = load_set(Path(args.set))[: args.limit or None]
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = set(names) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}; choose from {list(VARIANTS)}")
    llm = None
    load_s = None
    if any(n != "lexical" for n in names):
        from edge.llm import LlamaCppLLM

        llm = LlamaCppLLM(args.model, n_threads=args.threads)
        start = time.perf_counter()
        await llm.load()
        load_s = time.perf_counter() - start
    results = []
    try:
        for name in names:
            results.append(await run_variant(name, llm, rows, args))
    finally:
        if llm is not None:
            await llm.close()
    console = Console()
    title = (
        f"Routing decisions on {len(rows)} queries (model load {load_s or 0:.2f} s, "
        f"threads {args.threads or 'default'})"
    )
    table = Table(title=title)
    for col in (
        "variant",
        "accuracy",
        "notes",
        "conversation",
        "cold s",
        "prepared 1st s",
        "warm median s",
        "warm p90 s",
        "warm cpu s",
        "reused tok",
    ):
        table.add_column(col)
    for r in results:
        table.add_row(
            r["variant"],
            f"{r['accuracy']:.0%}",
            f"{r['per_route_accuracy'].get('notes', 0):.0%}",
            f"{r['per_route_accuracy'].get('conversation', 0):.0%}",
            f"{r['cold_s']:.3f}",
            f"{r['prepared_first_s'] or 0:.3f}",
            f"{r['warm_median_s'] or 0:.3f}",
            f"{r['warm_p90_s'] or 0:.3f}",
            f"{r['warm_cpu_median_s'] or 0:.3f}",
            str(r["warm_reused_tokens_median"]),
        )
    console.print(table)
    for r in results:
        if r["errors"]:
            wrong = ", ".join(repr(e["query"]) for e in r["errors"])
            console.print(f"[bold]{r['variant']}[/] misroutes: {wrong}")
    out = Path(args.out) if args.out else results_dir()
    out.mkdir(parents=True, exist_ok=True)
    stem = "routing_decisions" + ("" if args.set == DEFAULT_SET else f"_{Path(args.set).stem}")
    (out / f"{stem}.json").write_text(
        json.dumps(
            {
                "machine": machine_info(),
                "set": Path(args.set).name,
                "model_load_s": load_s,
                "threads": args.threads,
                "queries": len(rows),
                "results": results,
            },
            indent=2,
        )
    )
    plot(results, out / f"{stem}.png")
    console.print(f"wrote {out / stem}.json and .png")


def plot(results: list[dict], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    names = [r["variant"] for r in results]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    ax1.bar(names, [r["accuracy"] * 100 for r in results])
    ax1.set_ylabel("accuracy %")
    ax1.set_ylim(0, 100)
    ax2.bar(names, [(r["warm_median_s"] or 0) * 1000 for r in results], label="warm median")
    ax2.set_ylabel("decision latency, ms (warm median)")
    fig.suptitle("Routing decisions")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default=DEFAULT_SET)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--model", default=None, help="GGUF path (default: catalogue LLM)")
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads")
    parser.add_argument("--limit", type=int, default=0, help="first N queries only")
    parser.add_argument("--out", default=None, help="default: results/<machine class>/")
    anyio.run(main, parser.parse_args())
