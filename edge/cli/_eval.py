"""``edge eval conversation``: live-model evals, scored, as a table; non-zero under a threshold."""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.table import Table

from edge import __version__
from edge.llm import LLMService

# edge.eval's LATER_SETS, not imported here: the CLI loads the eval package (and the
# conversation) only when an eval runs (a test checks the two agree)
_LATER = ("fresh", "unseen", "sealed", "blind")
HALVES = {
    "all": ("design", "held_out", *_LATER),
    "both": ("design", "held_out"),
    "design": ("design",),
    "held-out": ("held_out",),
    **{name: (name,) for name in _LATER},
}
"""``--half``'s choices and the recall sets each runs."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("eval", help="run live-model evaluations")
    evals = p.add_subparsers(dest="eval", metavar="EVAL")
    conv = evals.add_parser(
        "conversation",
        help="stale-summary conflicts across sections, long sessions with corrections and "
        "oversized exchanges/updates, and long-session recall (control vs after 10 and 30 "
        "turns, design and held-out halves)",
    )
    conv.add_argument(
        "--model",
        help="a GGUF file or a catalogue id, e.g. smollm2-135m-instruct-q8_0 "
        "(default: the catalogue's default LLM)",
    )
    conv.add_argument(
        "--base-url", help="an OpenAI-compatible server instead, e.g. http://127.0.0.1:8080/v1"
    )
    conv.add_argument("--api-model", help="model name to send to the server")
    conv.add_argument("--n-ctx", type=int, default=4096, help="context window, local model")
    conv.add_argument("--threads", type=int, help="CPU threads for the local model")
    conv.add_argument("--case", action="append", help="run only this case (repeatable)")
    conv.add_argument(
        "--part",
        choices=("all", "sessions", "recall", "long"),
        default="all",
        help="the six session cases, the recall cases, the long multi-participant recall "
        "set, or all three (default)",
    )
    conv.add_argument(
        "--long-turns",
        type=int,
        default=160,
        help="ordinary turns in the long set, round robin over its four participants (default 160)",
    )
    conv.add_argument(
        "--half",
        choices=tuple(HALVES),
        default="all",
        help="which recall cases to run, each set reported separately: the design and "
        f"held-out halves (both), one of the later held-out sets ({', '.join(_LATER)}), or "
        "all (default)",
    )
    conv.add_argument(
        "--profile",
        default="ci-2core-24gb",
        help="device profile whose budgets the recall cases use (default: the CI profile)",
    )
    conv.add_argument(
        "--threshold",
        type=float,
        default=0.0,
        help="exit 1 when the mean score is below this (0..1)",
    )
    conv.add_argument("--json", type=Path, help="also write the results to this JSON file")
    conv.add_argument("--list", action="store_true", help="list the cases and exit")
    conv.set_defaults(func=run_conversation)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _llm(args: argparse.Namespace) -> LLMService:
    if args.base_url:
        from edge.llm import OpenAICompatLLM

        return OpenAICompatLLM(args.base_url, model=args.api_model)
    from edge.llm import LlamaCppLLM

    return LlamaCppLLM(
        args.model,
        n_ctx=args.n_ctx,
        n_threads=args.threads,
        temperature=0.0,
        background_chunk_tokens=64,
    )


def run_conversation(args: argparse.Namespace) -> int:
    from edge.eval import CASES, RECALL_CASES

    console = Console(width=max(Console().width, 140))
    part = args.part

    def named(name: str) -> bool:
        return not args.case or name in args.case

    cases = [c for c in CASES if part in ("all", "sessions") and named(c.name)]
    halves = HALVES[args.half]
    recall = [
        c for c in RECALL_CASES if part in ("all", "recall") and c.half in halves and named(c.name)
    ]
    args.run_long = part in ("all", "long") and not args.case
    if args.list or not (cases or recall or args.run_long):
        for c in CASES:
            console.print(f"{c.name}  [dim]({c.theme}, {len(c.events)} events)[/]")
        for r in RECALL_CASES:
            console.print(f"{r.name}  [dim](recall, {r.kind}, {r.half})[/]")
        return 0 if args.list else 2
    if not getattr(args, "verbose", 0):  # compaction failures of a tiny model are expected
        logging.getLogger("edge.conversation").setLevel(logging.ERROR)
    results, recalled, long = anyio.run(_run, args, cases, recall)
    out: dict = {}
    scores = [r.score for r in results]
    if results:
        out.update(_print_sessions(console, results))
    if recalled:
        out["recall"] = _print_recall(console, recalled)
        scores += [r.score(t) for r in recalled for t in (10, 30)]
    if long is not None:
        out["long"] = _print_long(console, long)
        scores += [p.recall for p in long.probes if p.phrasing == "design"]
    mean = sum(scores) / len(scores) if scores else 0.0
    out["mean"] = mean
    console.print(
        f"mean score {mean:.2f} over {len(scores)} answers (session cases, recall after "
        f"10 and 30 turns, the long set's design questions; threshold {args.threshold})"
    )
    if args.json:
        out["run"] = run_info(args)
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return 1 if mean < args.threshold else 0


def run_info(args: argparse.Namespace) -> dict[str, Any]:
    """What a results file needs to be read later: the code measured (from git, with
    ``-dirty`` when tracked files differ from the commit), when, the load, the options."""
    source = Path(__file__).resolve().parent

    def git(*argv: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *argv], cwd=source, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    head = git("rev-parse", "--short", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    options = {k: v for k, v in vars(args).items() if k not in ("func", "json")}
    return {
        "code": f"{head}-dirty" if head and dirty else head or f"edge {__version__}",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_average_1m": os.getloadavg()[0],
        "options": options,
    }


async def _run(args: argparse.Namespace, cases: list, recall: list) -> tuple[list, list, Any]:
    from edge.eval import recall_budgets, run_eval, run_long_eval, run_recall_eval

    console = Console()
    llm = _llm(args)
    try:
        results = await run_eval(
            llm,
            cases,
            lambda r: console.print(f"[dim]{r.name}: {r.score:.1f} in {r.seconds:.1f} s[/]"),
        )
        recalled = await run_recall_eval(
            llm,
            recall,
            recall_budgets(args.profile) if recall else {},
            lambda r: console.print(
                f"[dim]{r.name}: control {r.score(0):.1f}, 10 turns {r.score(10):.1f}, "
                f"30 turns {r.score(30):.1f} in {r.seconds:.1f} s[/]"
            ),
        )
        long = None
        if args.run_long:
            long = await run_long_eval(
                llm,
                recall_budgets(args.profile),
                turns=args.long_turns,
                progress=lambda text: console.print(f"[dim]long set: {text}[/]"),
            )
        return results, recalled, long
    finally:
        await llm.close()


def _print_sessions(console: Console, results: list) -> dict:
    table = Table(title="edge eval conversation: session cases")
    for col in ("case", "theme", "score", "compactions (failed)", "TTFT", "s", "answer"):
        table.add_column(col)
    for r in results:
        ttft = f"{r.ttft_s * 1000:.0f} ms" if r.ttft_s is not None else "-"
        table.add_row(
            r.name,
            r.theme,
            f"{r.score:.1f}",
            f"{r.compactions} ({r.failed_compactions})",
            ttft,
            f"{r.seconds:.1f}",
            (r.error or r.answer)[:80],
        )
    console.print(table)
    mean = sum(r.score for r in results) / len(results)
    console.print(f"session cases: mean {mean:.2f} over {len(results)}")
    return {"sessions_mean": mean, "results": [asdict(r) for r in results]}


def _print_recall(console: Console, results: list) -> dict:
    from edge.eval import HALVES as SETS
    from edge.eval import recall_summary as summarize

    table = Table(title="edge eval conversation: long-session recall (control vs recall)")
    for col in (
        "case",
        "kind",
        "half",
        "control",
        "10 turns",
        "30 turns",
        "compactions",
        "answer @30",
    ):
        table.add_column(col)
    for r in sorted(results, key=lambda r: (SETS.index(r.half), r.name)):
        methods: dict[str, int] = {}
        for c in r.compactions:
            methods[c["method"]] = methods.get(c["method"], 0) + 1
        last = r.probes[-1].answer if r.probes else r.error
        table.add_row(
            r.name,
            r.kind,
            r.half,
            f"{r.score(0):.1f}",
            f"{r.score(10):.1f}",
            f"{r.score(30):.1f}",
            " ".join(f"{k} {v}" for k, v in sorted(methods.items())),
            (r.error or last)[:60],
        )
    console.print(table)
    summary = summarize(results)
    console.print(_recall_summary_table([h for h in (*SETS, "all") if h in summary], summary))
    c = summary["compactions"]
    if c["total"]:
        console.print(
            f"compactions: {c['usable']}/{c['total']} usable ({c['usable_share']:.0%}); "
            f"methods {c['methods']}; over budget: {summary['over_budget'] or 'none'}"
        )
    return {"summary": summary, "results": [asdict(r) for r in results]}


def _recall_summary_table(halves: list[str], summary: dict) -> Table:
    """Each set's control and recall side by side: the ratio with its 95 % interval, what
    was retained of the control's answers, and how often the context held the answer."""
    table = Table(title="recall per set: ratio = recall / control (95 % interval)")
    for col in ("set", "cases", "control"):
        table.add_column(col)
    for t in (10, 30):
        for col in (f"recall @{t}", "ratio", "retained", "in context"):
            table.add_column(col)

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.0%}"

    for half in halves:
        h = summary[half]
        row = [half, str(h["cases"]), f"{h['control']:.2f}"]
        for t in (10, 30):
            lo_hi = h[f"ratio_{t}_interval"]
            spread = f" ({lo_hi[0]:.0%}–{lo_hi[1]:.0%})" if lo_hi else ""
            row += [
                f"{h[f'recall_{t}']:.2f}",
                pct(h[f"ratio_{t}"]) + spread,
                pct(h[f"retained_{t}"]),
                pct(h[f"kept_{t}"]),
            ]
        table.add_row(*row)
    return table


def _print_long(console: Console, result: Any) -> dict:
    """The long set: each question's control and recall answers, then the figures."""
    from edge.eval import long_summary

    if result.error:
        console.print(f"[red]long set failed: {result.error}[/]")
    table = Table(title=f"edge eval conversation: long set, recall after {result.turns} turns")
    for col in ("case", "kind", "phrasing", "control", "recall", "answer after the turns"):
        table.add_column(col)
    for p in result.probes:
        table.add_row(
            p.case, p.kind, p.phrasing, f"{p.control:.1f}", f"{p.recall:.1f}", p.recall_answer[:60]
        )
    console.print(table)
    summary = long_summary(result)
    for phrasing in ("design", "held_out", "unseen"):
        h = summary.get(phrasing)
        if h:
            ratio = "-" if h["ratio"] is None else f"{h['ratio']:.0%}"
            console.print(
                f"{phrasing}: recall {h['recall_right']}/{h['cases']} against control "
                f"{h['control_right']}/{h['cases']} (ratio {ratio}); corrections "
                f"{h['corrections']:.0%}"
            )
    console.print(
        f"leaks {summary['leaks']}; replies with scaffolding {summary['scaffolded']} of "
        f"{summary['replies']}; compactions {summary['compactions']}; {result.seconds:.0f} s"
    )
    return {"summary": summary, "probes": [asdict(p) for p in result.probes], "error": result.error}
