"""What one batched ``llama_decode`` costs: N sequences of the batched context
(``edge.llm``'s multi-sequence context), each holding a prompt, decoding one token each.

    python benchmarks/batch_steps.py                       # 1, 4, 8 sequences; n_ctx 8192, 1024
    python benchmarks/batch_steps.py --prompt 1500 --n-ctx 8192 2048 --steps 60

Per sequence count and ``n_ctx`` per sequence: the step's time (min and median over
``--steps`` steps after a few to settle), and what a new turn's prompt costs in that
context (53 new tokens after a 107-token shared prefix copied with ``llama_memory_seq_cp``,
like a participant's follow-up). Prints only: a check of where a batched step's time goes,
not a result file.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from edge.device import load_device_config

SETTLE_STEPS = 3


def fill(ctx: Any, seq: int, start: int, n: int) -> float:
    """Evaluate ``n`` tokens into ``seq`` from position ``start``; seconds."""
    from llama_cpp import llama_cpp as capi

    batch = ctx._batch
    for j in range(n):
        batch.token[j] = 100 + (seq * 7 + start + j) % 3000
        batch.pos[j] = start + j
        batch.n_seq_id[j] = 1
        batch.seq_id[j][0] = seq
        batch.logits[j] = j == n - 1
    batch.n_tokens = n
    t0 = time.perf_counter()
    if capi.llama_decode(ctx.ctx.ctx, batch) != 0:
        raise RuntimeError("llama_decode failed")
    return time.perf_counter() - t0


def decode_steps(ctx: Any, n_seq: int, prompt: int, steps: int) -> list[float]:
    from llama_cpp import llama_cpp as capi

    for seq in range(n_seq):
        for start in range(0, prompt, ctx.n_batch):
            fill(ctx, seq, start, min(ctx.n_batch, prompt - start))
    batch, times = ctx._batch, []
    for t in range(steps + SETTLE_STEPS):
        for seq in range(n_seq):
            batch.token[seq], batch.pos[seq] = 200 + t, prompt + t
            batch.n_seq_id[seq], batch.seq_id[seq][0], batch.logits[seq] = 1, seq, True
        batch.n_tokens = n_seq
        t0 = time.perf_counter()
        if capi.llama_decode(ctx.ctx.ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        times.append(time.perf_counter() - t0)
    return times[SETTLE_STEPS:]


def new_turn(ctx: Any, n_seq: int, repeat: int = 5) -> list[float]:
    """A follow-up's 53 new tokens after a 107-token prefix copied from sequence 0."""
    from llama_cpp import llama_cpp as capi

    capi.llama_memory_clear(ctx.mem, True)
    fill(ctx, 0, 0, 107)
    seq, times = (1 if n_seq > 1 else 0), []
    for _ in range(repeat):
        if seq:
            capi.llama_memory_seq_rm(ctx.mem, seq, -1, -1)
            capi.llama_memory_seq_cp(ctx.mem, 0, seq, -1, -1)
        else:
            capi.llama_memory_seq_rm(ctx.mem, 0, 107, -1)
        times.append(fill(ctx, seq, 107, 53))
    return times


def measure(llama: Any, n_seq: int, n_ctx: int, args: argparse.Namespace) -> dict[str, float]:
    from edge.llm import KVStore, SeqContext

    ctx = SeqContext(
        llama._model,
        n_ctx=n_ctx,
        n_seq=n_seq,
        n_batch=512,
        n_threads=args.threads,
        store=KVStore(0),
        base_params=llama.context_params,
    )
    try:
        steps = decode_steps(ctx, n_seq, args.prompt, args.steps)
        turn = new_turn(ctx, n_seq)
    finally:
        ctx.close()
    ms = 1000.0
    return {
        "step_min_ms": min(steps) * ms,
        "step_p50_ms": statistics.median(steps) * ms,
        "turn_min_ms": min(turn) * ms,
        "turn_p50_ms": statistics.median(turn) * ms,
    }


def main(args: argparse.Namespace) -> None:
    from llama_cpp import Llama

    device = load_device_config()
    args.threads = args.threads or device.llm_config().n_threads or 2
    llama = Llama(str(device.llm_model_path), n_ctx=512, n_threads=args.threads, verbose=False)
    table = Table(title=f"one decode step, {args.prompt}-token prompts (ms: min / p50)")
    for col in ("n_ctx per seq", "sequences", "step", "new turn (53 tokens)"):
        table.add_column(col, justify="right")
    for n_ctx in args.n_ctx:
        for n_seq in args.sequences:
            r = measure(llama, n_seq, n_ctx, args)
            table.add_row(
                str(n_ctx),
                str(n_seq),
                f"{r['step_min_ms']:.1f} / {r['step_p50_ms']:.1f}",
                f"{r['turn_min_ms']:.1f} / {r['turn_p50_ms']:.1f}",
            )
    Console().print(table)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sequences", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--n-ctx", type=int, nargs="+", default=[8192, 1024])
    parser.add_argument("--prompt", type=int, default=300)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=0)
    main(parser.parse_args())
