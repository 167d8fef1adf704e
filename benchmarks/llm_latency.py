"""Local LLM latency: time to first token for a new and a returning participant, generation
speed, and an interactive request's wait for the model behind background work. The
first-token figures come from ``edge bench``'s own code (``edge.bench.ttft_pair``, its
"TTFT cold / warm" rows); this script adds the longer contexts and the queue wait.

    .venv/bin/python benchmarks/llm_latency.py [--model PATH] [--context-bytes 2000 4000 8000]

Prints a table, writes ``benchmarks/results/<machine class>/llm_latency.json`` and ``.png``.
"new participant" is a new cache key whose prompt shares only the system prompt with
earlier work; "follow-up" is the same participant's next turn (everything but the new turn
is cached); "queue wait behind background" is only how long an interactive request waited
for the model slot behind a running background summarisation request of the same size. It
is not a compaction and not a time to first token: it leaves out the KV state restore and
the prompt evaluation (``benchmarks/conversation_ttft.py`` times answers during a real
compaction).
"""

from __future__ import annotations

import argparse
import statistics

import anyio
from figures import write_results
from rich.console import Console
from rich.table import Table

from edge.bench import context_of, ttft_pair
from edge.llm import LlamaCppLLM, Priority


async def measure(llm: LlamaCppLLM, context_bytes: int, repeats: int) -> dict[str, float]:
    cold, warm, tps, wait = [], [], [], []
    for r in range(repeats):
        first, second = await ttft_pair(
            llm, context_bytes, f"bench-{context_bytes}-{r}", r, (32, 64)
        )
        cold.append(first.ttft_s or 0.0)
        warm.append(second.ttft_s or 0.0)
        if second.tokens_per_s:
            tps.append(second.tokens_per_s)

    async def background() -> None:
        bg_msgs = [
            {"role": "system", "content": "Summarise."},
            {"role": "user", "content": context_of(context_bytes, 99)},
        ]
        await llm.chat(bg_msgs, max_tokens=64, priority=Priority.BACKGROUND)

    async with anyio.create_task_group() as tg:
        tg.start_soon(background)
        await anyio.sleep(0.5)
        inter = await llm.chat([{"role": "user", "content": "Hi"}], max_tokens=4, cache_key="x")
        wait.append(inter.metrics.queue_wait_s or 0.0)
    return {
        "context_bytes": context_bytes,
        "cold_ttft_s": statistics.median(cold),
        "warm_ttft_s": statistics.median(warm),
        "tokens_per_s": statistics.median(tps) if tps else 0.0,
        "queue_wait_behind_background_s": max(wait),
    }


async def main(args: argparse.Namespace) -> None:
    llm = LlamaCppLLM(args.model, n_ctx=args.n_ctx)
    await llm.load()
    await llm.chat([{"role": "user", "content": "warm up"}], max_tokens=2)
    rows = [await measure(llm, n, args.repeats) for n in args.context_bytes]
    await llm.close()

    table = Table(title=f"LLM latency · {llm.model_path.name}")
    cols = ("context bytes", "new-participant TTFT", "follow-up TTFT", "tokens/s", "queue wait")
    for col in cols:
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(
            str(row["context_bytes"]),
            f"{row['cold_ttft_s'] * 1000:.0f} ms",
            f"{row['warm_ttft_s'] * 1000:.0f} ms",
            f"{row['tokens_per_s']:.0f}",
            f"{row['queue_wait_behind_background_s'] * 1000:.0f} ms",
        )
    Console().print(table)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r["context_bytes"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(xs, [r["cold_ttft_s"] for r in rows], "o-", label="new participant")
    ax.plot(xs, [r["warm_ttft_s"] for r in rows], "o-", label="follow-up (cached prefix)")
    ax.set_xlabel("context in prompt (UTF-8 bytes)")
    ax.set_ylabel("time to first token (s)")
    ax.set_title(llm.model_path.name)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = write_results("llm_latency", {"model": llm.model_path.name, "rows": rows}, fig)
    Console().print(f"wrote {path} and .png")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="GGUF file (default: catalogue default)")
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--context-bytes", type=int, nargs="+", default=[1000, 2000, 4000, 8000])
    anyio.run(main, parser.parse_args())
