"""Derived byte budgets of every device profile, and how they move with prompt speed.

    python benchmarks/device_budgets.py                 # profiles' own figures
    python benchmarks/device_budgets.py --calibrate 3   # also measure this machine 3 times

Prints tables, writes ``benchmarks/results/<machine class>/device_budgets.json`` and two PNG
plots (budgets per profile; dialogue budget against prompt-evaluation speed).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import anyio
from figures import machine_info, results_dir
from rich.console import Console
from rich.table import Table

from edge.catalogue import Catalogue
from edge.device import (
    BudgetError,
    budget_inputs,
    derive_budgets,
    detect_hardware,
    load_profiles,
    measure_llm,
)

FIELDS = (
    "dialogue_budget_bytes",
    "topic_budget_bytes",
    "compaction_input_budget_bytes",
    "router_context_budget_bytes",
)


def profile_rows(catalogue: Catalogue) -> dict[str, dict]:
    rows = {}
    for name, profile in load_profiles(catalogue=catalogue).items():
        inputs, _ = budget_inputs(profile, catalogue)
        rows[name] = {
            "inputs": inputs.model_dump(mode="json", exclude={"sources", "overrides"}),
            "budgets": derive_budgets(inputs).model_dump(mode="json", exclude={"explain"}),
        }
    return rows


def speed_sweep(catalogue: Catalogue, name: str = "ci-2core-24gb") -> list[dict]:
    profile = load_profiles(catalogue=catalogue)[name]
    inputs, _ = budget_inputs(profile, catalogue)
    out = []
    for tps in (80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840, 5120):
        try:
            b = derive_budgets(inputs.model_copy(update={"prompt_tokens_per_s": tps}))
            out.append(
                {
                    "prompt_tokens_per_s": tps,
                    **{f: getattr(b, f) for f in FIELDS},
                    "bound_by": b.bound_by,
                }
            )
        except BudgetError as exc:
            out.append({"prompt_tokens_per_s": tps, "rejected": str(exc)})
    return out


async def measure(times: int) -> dict:
    catalogue = Catalogue.load()
    path = catalogue.default("llm").locate()
    threads = detect_hardware().cpus
    runs = [await measure_llm(path, threads, 0) for _ in range(times)]
    keys = (
        "prompt_tokens_per_s",
        "generation_tokens_per_s",
        "text_bytes_per_token",
        "kv_bytes_per_token",
        "state_overhead_bytes",
        "load_s",
    )
    return {
        "model": catalogue.default("llm").id,
        "threads": threads,
        "runs": [r.model_dump() for r in runs],
        "median": {k: statistics.median(getattr(r, k) for r in runs) for k in keys},
        "min": {k: min(getattr(r, k) for r in runs) for k in keys},
        "max": {k: max(getattr(r, k) for r in runs) for k in keys},
    }


def plot(rows: dict, sweep: list[dict], out: Path) -> list[str]:
    try:
        import matplotlib
        import matplotlib.ticker

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    names = list(rows)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.2
    for i, field in enumerate(FIELDS):
        ax.bar(
            [x + i * width for x in range(len(names))],
            [rows[n]["budgets"][field] for n in names],
            width,
            label=field.replace("_budget_bytes", ""),
        )
    ax.set_xticks([x + 1.5 * width for x in range(len(names))], names, rotation=20, ha="right")
    ax.set_ylabel("bytes")
    ax.set_title("Derived budgets per device profile (profile figures)")
    ax.legend()
    fig.tight_layout()
    first = out / "device_budgets.png"
    fig.savefig(first, dpi=120)
    plt.close(fig)
    ok = [s for s in sweep if "rejected" not in s]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(
        [s["prompt_tokens_per_s"] for s in ok],
        [s["dialogue_budget_bytes"] for s in ok],
        marker="o",
        label="dialogue",
    )
    ax.plot(
        [s["prompt_tokens_per_s"] for s in ok],
        [s["topic_budget_bytes"] for s in ok],
        marker="o",
        label="topic",
    )
    ax.axhline(8000, linestyle="--", color="grey", label="spec default dialogue (8,000)")
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("prompt evaluation, tokens/s")
    ax.set_ylabel("bytes")
    ax.set_title("ci-2core-24gb: budgets vs prompt speed (cold target 8 s)")
    ax.legend()
    fig.tight_layout()
    second = out / "device_budget_vs_speed.png"
    fig.savefig(second, dpi=120)
    plt.close(fig)
    return [str(first), str(second)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--calibrate",
        type=int,
        default=0,
        metavar="N",
        help="measure the default LLM on this machine N times",
    )
    parser.add_argument("--out", type=Path, default=None, help="default: results/<machine>/")
    args = parser.parse_args()
    console = Console(width=160)
    catalogue = Catalogue.load()
    rows = profile_rows(catalogue)
    table = Table(title="Derived budgets (bytes; profile figures)")
    for col in (
        "profile",
        "tok/s",
        "B/tok",
        "ctx",
        "dialogue",
        "topic",
        "compaction",
        "router",
        "KV/part MiB",
        "warm",
        "cold s",
        "warm s",
        "bound by",
    ):
        table.add_column(col, justify="right")
    for name, row in rows.items():
        i, b = row["inputs"], row["budgets"]
        table.add_row(
            name,
            f"{i['prompt_tokens_per_s']:.0f}",
            f"{i['text_bytes_per_token']:.1f}",
            str(i["context_window"]),
            *(f"{b[f]:,}" for f in FIELDS),
            f"{b['per_participant_kv_bytes'] / 2**20:.0f}",
            str(b["warm_participants"]),
            f"{b['expected_cold_ttft_s']:.2f}",
            f"{b['expected_warm_ttft_s']:.2f}",
            b["bound_by"],
        )
    console.print(table)
    sweep = speed_sweep(catalogue)
    result: dict = {"profiles": rows, "ci_speed_sweep": sweep}
    if args.calibrate:
        cal = anyio.run(measure, args.calibrate)
        result["calibration"] = cal
        t = Table(title=f"Calibration of {cal['model']} here, {args.calibrate} runs")
        for col in ("figure", "median", "min", "max"):
            t.add_column(col, justify="right")
        for k, v in cal["median"].items():
            t.add_row(k, f"{v:,.2f}", f"{cal['min'][k]:,.2f}", f"{cal['max'][k]:,.2f}")
        console.print(t)
    args.out = args.out or results_dir()
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"machine": machine_info(), **result}
    (args.out / "device_budgets.json").write_text(json.dumps(result, indent=2))
    pngs = plot(rows, sweep, args.out)
    console.print(f"wrote {args.out / 'device_budgets.json'} {' '.join(pngs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
