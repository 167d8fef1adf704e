"""``edge eval conversation``: live-model evals, scored, as a table; non-zero under a threshold."""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import asdict
from pathlib import Path

import anyio
from rich.console import Console
from rich.table import Table

from edge.llm import LLMService


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("eval", help="run live-model evaluations")
    evals = p.add_subparsers(dest="eval", metavar="EVAL")
    conv = evals.add_parser(
        "conversation",
        help="stale-summary conflicts across sections, long sessions with corrections and "
        "oversized exchanges/updates",
    )
    conv.add_argument("--model", help="a GGUF file (default: the catalogue's default LLM)")
    conv.add_argument(
        "--base-url", help="an OpenAI-compatible server instead, e.g. http://127.0.0.1:8080/v1"
    )
    conv.add_argument("--api-model", help="model name to send to the server")
    conv.add_argument("--n-ctx", type=int, default=4096, help="context window, local model")
    conv.add_argument("--threads", type=int, help="CPU threads for the local model")
    conv.add_argument("--case", action="append", help="run only this case (repeatable)")
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

        return OpenAICompatLLM(args.base_url, model=args.api_model)  # type: ignore[no-any-return]
    from edge.llm import LlamaCppLLM

    return LlamaCppLLM(
        args.model,
        n_ctx=args.n_ctx,
        n_threads=args.threads,
        temperature=0.0,
        background_chunk_tokens=64,
    )


def run_conversation(args: argparse.Namespace) -> int:
    from edge.conversation import EVAL_CASES as CASES
    from edge.conversation import EvalCaseResult as CaseResult
    from edge.conversation import run_eval

    console = Console()
    if not getattr(args, "verbose", 0):  # compaction failures of a tiny model are expected
        logging.getLogger("edge.conversation").setLevel(logging.ERROR)
    cases = [c for c in CASES if not args.case or c.name in args.case]
    if args.list or not cases:
        for c in CASES:
            console.print(f"{c.name}  [dim]({c.theme}, {len(c.events)} events)[/]")
        return 0 if args.list else 2

    def progress(r: CaseResult) -> None:
        console.print(f"[dim]{r.name}: {r.score:.1f} in {r.seconds:.1f} s[/]")

    async def main() -> list[CaseResult]:
        llm = _llm(args)
        try:
            return await run_eval(llm, cases, progress)
        finally:
            await llm.close()

    results = anyio.run(main)
    table = Table(title="edge eval conversation")
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
    mean = sum(r.score for r in results) / len(results)
    console.print(table)
    console.print(f"mean score {mean:.2f} over {len(results)} cases (threshold {args.threshold})")
    if args.json:
        args.json.write_text(
            json.dumps({"mean": mean, "results": [asdict(r) for r in results]}, indent=1)
        )
    return 1 if mean < args.threshold else 0
