"""What Python running beside the model costs its steps through llama.cpp's abort
callback, quiet and beside a busy Python thread.

    python benchmarks/gil_contention.py                 # 6 rounds
    python benchmarks/gil_contention.py --rounds 10

One ``LlamaCppLLM`` as the detected profile runs it (batched), answering one interactive
question at a time (a ~35-token prompt after a warmed system prompt, 24 tokens out). Each
call llama.cpp makes back into Python (the abort callback, between graph nodes, hundreds of
times a token) must wait for the GIL while another thread runs Python: in the service, the
event loop serving several participants.
A thread spinning in Python stands in for that event loop (the worst case: in the
concurrency benchmark the loop is busy in bursts). Conditions, rounds alternating:

* ``background_only``: the abort callback set only for background evaluations
  (``AbortHook``), as ``edge serve`` runs;
* ``always_set``: the callback set for every evaluation (the alternative it is measured
  against).

Per condition, quiet and busy: prompt ms per evaluated token and decode ms per token
(medians). Writes ``benchmarks/results/<machine class>/gil_contention.json``.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

import anyio
from figures import private_data_dir, write_results
from rich.console import Console
from rich.table import Table

from edge.device import load_device_config
from edge.llm import LlamaCppLLM

SYSTEM = "You are a helpful assistant on a headset in a robotics lab. " * 6
QUESTION = "I am going hiking in the mountains next weekend, so what warm clothes should I pack?"
CONDITIONS = ("background_only", "always_set")


class BusyThread:
    """A Python thread that spins while ``on`` (the GIL and a core in demand)."""

    def __init__(self) -> None:
        self.on = threading.Event()
        threading.Thread(target=self._spin, daemon=True).start()

    def _spin(self) -> None:
        while True:
            if not self.on.is_set():
                time.sleep(0.01)
                continue
            total = 0
            for i in range(20_000):
                total += i


def set_condition(llm: LlamaCppLLM, condition: str) -> None:
    """Put the model into ``condition`` (see the module docstring)."""
    hook: Any = llm._runner.scheduler.ctx._abort_hook  # type: ignore[attr-defined]
    hook.__dict__.pop("watch", None)
    hook.watch(None)
    if condition == "always_set":
        hook.watch(lambda: False)
        hook.watch = lambda _check: None  # stays set, as for every evaluation


async def measure(rounds: int) -> dict[str, dict[str, dict[str, float]]]:
    device = load_device_config()
    llm = LlamaCppLLM(device.llm_model_path, device.llm_config())
    busy = BusyThread()
    system = {"role": "system", "content": SYSTEM}
    samples: dict[tuple[str, str], dict[str, list[float]]] = {}
    await llm.warm([system], cache_key="system", user_next=True)
    for r in range(rounds):
        for load in ("quiet", "busy"):
            for condition in CONDITIONS if r % 2 == 0 else CONDITIONS[::-1]:
                set_condition(llm, condition)
                if load == "busy":
                    busy.on.set()
                question = {"role": "user", "content": f"Round {r}, {condition}: {QUESTION}"}
                try:
                    reply = await llm.chat(
                        [system, question],
                        max_tokens=24,
                        cache_key=f"r{r}-{load}-{condition}",
                        seed_key="system",
                        temperature=0,
                    )
                finally:
                    busy.on.clear()
                m = reply.metrics
                row = samples.setdefault((load, condition), {"prompt": [], "decode": []})
                row["prompt"].append(1000 * (m.prompt_eval_s or 0) / m.evaluated_tokens)
                row["decode"].append(1000 * (m.generation_s or 0) / max(1, m.generated_tokens - 1))
    set_condition(llm, "background_only")
    await llm.close()
    out: dict[str, dict[str, dict[str, float]]] = {}
    for (load, condition), row in samples.items():
        out.setdefault(load, {})[condition] = {
            "prompt_ms_per_token": statistics.median(row["prompt"]),
            "decode_ms_per_token": statistics.median(row["decode"]),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    private_data_dir("gil-contention")
    results = anyio.run(measure, args.rounds)
    table = Table(title="ms per token, median: prompt / decode")
    table.add_column("condition")
    for load in results:
        table.add_column(load)
    for condition in CONDITIONS:
        figures = [results[load][condition] for load in results]
        cells = [
            f"{f['prompt_ms_per_token']:.2f} / {f['decode_ms_per_token']:.2f}" for f in figures
        ]
        table.add_row(condition, *cells)
    Console().print(table)
    path = write_results("gil_contention", {"rounds": args.rounds, "results": results})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
