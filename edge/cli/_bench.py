"""``edge bench``: each stage and a whole turn on this machine, llama-bench style, and
``edge bench compare A B``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape


def _ints(text: str) -> list[int]:
    """``2,4`` or ``1-4`` (llama-bench's list syntax)."""
    out: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.partition("-") if not part.startswith("-") else (part, "", "")
        out += list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
    return out


def _names(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def register(subparsers: argparse._SubParsersAction) -> None:
    from edge.bench import FORMATS, STAGES

    p = subparsers.add_parser(
        "bench",
        help="measure each stage and a whole turn on this machine (llama-bench style)",
        description="Measure VAD, STT, the LLM, TTS and whole turns through an in-process "
        "service (or a running one, --url). Lists take a,b,c or a-b. "
        "`edge bench compare A B` sets two result files side by side.",
    )
    p.add_argument("target", nargs="*", help="`compare A.json B.json` (json, jsonl or sqlite)")
    p.add_argument("--profile", help="device profile (default: detected)")
    p.add_argument("--stages", type=_names, default=list(STAGES), help=",".join(STAGES))
    p.add_argument("-t", "--threads", type=_ints, help="LLM / STT threads to sweep")
    p.add_argument("-ngl", "--n-gpu-layers", type=_ints, dest="ngl", help="GPU layers (-1 all)")
    p.add_argument("-m", "--model", type=_names, dest="models", help="GGUF paths or ids")
    p.add_argument("--stt-model", type=_names, dest="stt_models", help="Whisper ids")
    p.add_argument("--thread-policy", type=_names, help="adaptive,fixed (LLM threads)")
    p.add_argument("--participants", type=_ints, help="participants at once (default 2,4)")
    p.add_argument("--context-bytes", type=_ints, dest="contexts", help="LLM context sizes")
    p.add_argument("-r", "--repetitions", type=int, help="repetitions of each test (3)")
    p.add_argument(
        "--background-load",
        type=int,
        default=0,
        metavar="N",
        help="also run every stage while N processes keep a core busy each",
    )
    p.add_argument("--quick", action="store_true", help="a first look, under 3 minutes")
    p.add_argument("--url", help="measure a running service (ws:// or wss://) instead")
    p.add_argument("--token", help="its device token (with --url)")
    p.add_argument("-o", "--output", choices=FORMATS, default="md", help="output format")
    p.add_argument("--file", type=Path, help="write there (sqlite appends; default stdout)")
    p.add_argument("--report", type=Path, metavar="HTML", help="also write plots to this page")
    p.add_argument(
        "--results-dir",
        type=Path,
        help="also write <dir>/<machine class>/edge_bench[_quick].json and .html",
    )
    p.add_argument("--run", action="append", default=[], help="compare: run id in A / B")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    if args.target:
        return _compare(args, console)
    from edge.bench import Bench, Options

    picked = {k: getattr(args, k) for k in ("threads", "ngl", "models", "stt_models")}
    picked["thread_policy"] = args.thread_policy
    picked |= {k: getattr(args, k) for k in ("participants", "contexts", "repetitions")}
    picked = {k: v for k, v in picked.items() if v is not None}
    common = dict(
        profile=args.profile,
        stages=tuple(args.stages),
        url=args.url,
        token=args.token,
        background_load=args.background_load,
    )
    opts = Options.quick_defaults(**common, **picked) if args.quick else Options(**common, **picked)
    try:
        bench = Bench(opts, console)
        _placement(bench, console)
        result = _run_async(bench)
    except (ValueError, OSError, RuntimeError) as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        return 2
    return _emit(result, args, console)


def _run_async(bench: Any) -> Any:
    import anyio

    return anyio.run(bench.run)


def _placement(bench: Any, console: Console) -> None:
    if bench.device is None:
        return
    from edge.device import placement

    where = placement(bench.device)
    console.print("[dim]" + " · ".join(f"{k} {v}" for k, v in where.rows().items()) + "[/]")
    for warning in where.warnings:
        console.print(f"[bold red]warning:[/] {escape(warning)}")


def _emit(result: Any, args: argparse.Namespace, console: Console) -> int:
    from edge.bench import render, write_report, write_sqlite

    if args.output == "sqlite":
        path = args.file or Path("edge-bench.sqlite")
        write_sqlite(result, path)
        console.print(f"appended run {result.run_id} to {path}")
    elif args.file:
        args.file.write_text(render(result, args.output), encoding="utf-8")
        console.print(f"wrote {args.file}")
    else:
        sys.stdout.write(render(result, args.output))
    if args.output != "md":  # the table, for the person watching
        console.print(render(result, "md"), markup=False, highlight=False, soft_wrap=True)
    if args.report:
        write_report(result, args.report)
        console.print(f"wrote {args.report}")
    if args.results_dir:
        folder = args.results_dir / (result.machine.get("class") or "unknown")
        folder.mkdir(parents=True, exist_ok=True)
        stem = "edge_bench_quick" if args.quick else "edge_bench"
        (folder / f"{stem}.json").write_text(render(result, "json"), encoding="utf-8")
        write_report(result, folder / f"{stem}.html")
        console.print(f"wrote {folder / stem}.json and .html")
    return 0


def _compare(args: argparse.Namespace, console: Console) -> int:
    from edge.bench import compare, pick

    if len(args.target) != 3 or args.target[0] != "compare":
        console.print("[red]error:[/] usage: edge bench compare A B")
        return 2
    runs = [*args.run, None, None]
    try:
        a, b = (pick(Path(p), r) for p, r in zip(args.target[1:], runs[:2], strict=True))
    except (ValueError, OSError) as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        return 2
    sys.stdout.write(compare(a, b))
    return 0
