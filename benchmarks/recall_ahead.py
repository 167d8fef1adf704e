"""What the recalled block chosen ahead costs in answers: sessions with several facts.

The memory eval's cases state one fact (or a fact and its correction), so the block chosen
ahead of a request (recent facts, warmed with the prompt prefix) holds what a request
recalls and nothing more. Here each session states the facts of several cases (the
``fact`` and ``correction`` cases of ``edge eval conversation``, ``--group`` at a time),
then ``--turns`` ordinary turns with idle pauses so compaction runs (the default model,
the CI profile's budgets), then asks each case's question twice from the same state,
without recording: with the block chosen ahead (a request it holds sees its start, one or
two facts more than needed) and without (``ahead_limit=0``: each request its own block).

Usage: ``python benchmarks/recall_ahead.py [--group 3 4 5] [--turns 10] [--threads N]``;
prints the scores side by side; writes ``benchmarks/results/<machine class>/recall_ahead.json``.
About a minute per session on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from figures import write_results

from edge.conversation import ContextManager, Conversation
from edge.eval import (
    ACK,
    FILLERS,
    MINUTE,
    RECALL_CASES,
    T0,
    RecallCase,
    recall_budgets,
    recall_session,
    score,
    settle,
)
from edge.llm import LlamaCppLLM


async def ask(conv: Conversation, ctx: ContextManager, pid: str, case: RecallCase) -> dict:
    block = ctx.recalled(pid, case.question)
    messages = conv.request_messages(pid, case.question)
    response = await conv.llm.chat(messages, conv.answer_options(pid))
    answer = response.content.strip()
    return {
        "score": score(answer, case.expect, case.stale),
        "answer": answer,
        "block": block.text if block else "",
    }


async def session(llm: LlamaCppLLM, cases: list[RecallCase], turns: int) -> list[dict]:
    now = [T0]
    ctx, conv = recall_session(llm, recall_budgets(), now)
    pid = "facts-" + "-".join(c.name for c in cases)[:40]
    rows = []
    async with ctx:
        for case in cases:
            for text in case.said:
                await ctx.record_exchange(pid, text, ACK, timestamp_us=now[0])
                now[0] += MINUTE
        for i in range(turns):
            user, assistant = FILLERS[i % len(FILLERS)]
            await ctx.record_exchange(pid, user, assistant, timestamp_us=now[0])
            now[0] += MINUTE
            await settle(ctx, 120)
        limit = ctx._parts.recall.ahead_limit
        for case in cases:
            with_ahead = await ask(conv, ctx, pid, case)
            ctx._parts.recall.ahead_limit = 0
            alone = await ask(conv, ctx, pid, case)
            ctx._parts.recall.ahead_limit = limit
            rows.append({"case": case.name, "facts": len(cases), "ahead": with_ahead, "own": alone})
    return rows


async def main(args: argparse.Namespace) -> dict[str, Any]:
    llm = LlamaCppLLM(
        args.model, n_ctx=4096, n_threads=args.threads, temperature=0.0, background_chunk_tokens=64
    )
    await llm.load()
    cases = [c for c in RECALL_CASES if c.kind in ("fact", "correction")]
    rows: list[dict] = []
    started = time.perf_counter()
    try:
        for group in args.group:
            for start in range(0, len(cases), group):
                done = await session(llm, cases[start : start + group], args.turns)
                rows += [{"group": group, **row} for row in done]
    finally:
        await llm.close()
    return {
        "turns": args.turns,
        "groups": args.group,
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }


def report(results: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    rows = results["rows"]
    table = Table(
        title=f"Answers with and without the block chosen ahead ({results['turns']} turns)"
    )
    for col in ("facts a session", "questions", "block differs", "with ahead", "own only"):
        table.add_column(col)
    for group in results["groups"]:
        mine = [r for r in rows if r["group"] == group]
        differs = sum(r["ahead"]["block"] != r["own"]["block"] for r in mine)
        table.add_row(
            str(group),
            str(len(mine)),
            str(differs),
            f"{sum(r['ahead']['score'] for r in mine) / len(mine):.2f}",
            f"{sum(r['own']['score'] for r in mine) / len(mine):.2f}",
        )
    Console().print(table)
    path = write_results("recall_ahead", results)
    Console().print(f"wrote {path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group", type=int, nargs="+", default=[3, 4, 5])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--model", default=None, help="a GGUF file (default: the catalogue's)")
    report(asyncio.run(main(parser.parse_args())))
