"""Home Assistant's Ollama agent in a long conversation with ``edge serve``.

    python benchmarks/ha_ollama_history.py --turns 30 [--write-results]

Home Assistant's Ollama integration sends, each turn, its system prompt with the time to
the second, its newest ``max_history`` rounds (default 20) and the question
(``chain_paths.OllamaAgent``, through the ``ollama`` client it uses). From the 22nd turn
on, the oldest round is gone from each request. Two runs of ``edge serve`` on this
machine's profile, one after the other, the same questions:

* **shifted** (the default): the state of the kept rounds is reused, shifted back over the
  dropped one (``--shift-trimmed-history``);
* **exact** (``--no-shift-trimmed-history``): everything after the system prompt is
  evaluated again, as a prefix cache does (Ollama's own runner reuses the longest common
  prefix only; Ollama itself is not installed here).

Reported per turn: the time to the first reply text (what Home Assistant's pipeline
waits for before its TTS starts) and the final line's ``prompt_eval_duration``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import chain_services as svc
import ollama
from chain_paths import HA_OLLAMA_KEEP_ALIVE, HA_OLLAMA_MAX_HISTORY, HA_OLLAMA_OPTIONS, OllamaAgent
from figures import machine_info, write_results
from rich.console import Console
from rich.table import Table
from versus_chain import edge_token, edge_trust

QUESTIONS = [
    "What is the capital of France?",
    "How many legs does a spider have?",
    "What do bees make?",
    "Who wrote Hamlet?",
    "Why is the sky blue?",
    "What is the boiling point of water?",
    "How far away is the moon?",
    "What is the largest ocean?",
    "Why do cats purr?",
    "What is the tallest mountain in the world?",
]
MODES = {"shifted": [], "exact": ["--no-shift-trimmed-history"]}
TURN_LIMIT_S = 120.0


async def turn(agent: OllamaAgent, question: str) -> dict[str, Any]:
    """One request as the integration sends it; the agent's history grows by the round."""
    started = time.perf_counter()
    first: float | None = None
    parts: list[str] = []
    last: Any = None
    async for chunk in await agent.chunks(question):
        if chunk.message.content:
            first = first if first is not None else time.perf_counter() - started
            parts.append(chunk.message.content)
        last = chunk
    answer = "".join(parts)
    agent.remember(question, answer)
    eval_ns = getattr(last, "prompt_eval_duration", None)
    return {
        "first_text_s": round(first if first is not None else float("nan"), 4),
        "prompt_tokens": getattr(last, "prompt_eval_count", None),
        "prompt_eval_s": round(eval_ns / 1e9, 4) if eval_ns else None,
        "answer_chars": len(answer),
    }


async def run_mode(mode: str, args: argparse.Namespace, console: Console) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix=f"ha-history-{mode}-") as tmp:
        work = Path(tmp)
        os.environ["EDGE_DATA_DIR"] = str(work / "edge")
        edge, _ = svc.edge_service(work, sys.executable, args.profile)
        edge.argv += MODES[mode]
        edge.start(svc.service_env())
        try:
            svc.wait_for_port(edge, edge.port, 300)
            client = ollama.AsyncClient(
                host=f"https://{svc.HOST}:{edge.port}",
                headers={"Authorization": f"Bearer {edge_token()}"},
                verify=edge_trust(),
                timeout=TURN_LIMIT_S,
            )
            model = (await client.list()).models[0].model or ""
            agent = OllamaAgent(client, model)
            rows = []
            for i in range(args.turns):
                row = await turn(agent, QUESTIONS[i % len(QUESTIONS)])
                row.update(turn=i + 1, trimmed=i >= HA_OLLAMA_MAX_HISTORY + 1)
                rows.append(row)
                console.print(f"{mode} {row}")
                await anyio.sleep(args.gap_s)
            return rows
        finally:
            edge.stop()


def summary(rows: list[dict]) -> dict[str, Any]:
    def p50(trimmed: bool) -> float | None:
        times = [r["first_text_s"] for r in rows if r["trimmed"] is trimmed and r["turn"] > 1]
        return round(statistics.median(times), 4) if times else None

    trimmed = [r["first_text_s"] for r in rows if r["trimmed"]]
    return {
        "first_text_p50_s_before_trimming": p50(False),
        "first_text_p50_s_trimmed": p50(True),
        "first_text_max_s_trimmed": max(trimmed) if trimmed else None,
    }


def plot(result: dict[str, Any]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for mode, rows in result["turns"].items():
        ax.plot([r["turn"] for r in rows], [r["first_text_s"] for r in rows], "o-", label=mode)
    ax.axvline(HA_OLLAMA_MAX_HISTORY + 1.5, color="grey", linestyle=":")
    ax.text(HA_OLLAMA_MAX_HISTORY + 1.7, ax.get_ylim()[1] * 0.9, "oldest round dropped")
    ax.set_xlabel("turn of one conversation")
    ax.set_ylabel("first reply text (s)")
    ax.set_title(
        f"Home Assistant's Ollama agent, max_history {HA_OLLAMA_MAX_HISTORY} — "
        f"{result['machine']['class']}",
        fontsize=9,
    )
    ax.legend()
    fig.tight_layout()
    return fig


def report(result: dict[str, Any], console: Console) -> None:
    table = Table(title="first reply text, p50 (s)")
    for col in ("mode", "turns 2-21", f"turns {HA_OLLAMA_MAX_HISTORY + 2}+", "worst trimmed"):
        table.add_column(col)
    for mode, s in result["summary"].items():
        table.add_row(
            mode,
            str(s["first_text_p50_s_before_trimming"]),
            str(s["first_text_p50_s_trimmed"]),
            str(s["first_text_max_s_trimmed"]),
        )
    console.print(table)


async def main(args: argparse.Namespace) -> None:
    console = Console(width=140)
    info = machine_info()  # refuses uncommitted code before the run, not after it
    turns = {mode: await run_mode(mode, args, console) for mode in MODES}
    result: dict[str, Any] = {
        "machine": info,
        "load_average_1m": os.getloadavg()[0],
        "settings": {
            "max_history": HA_OLLAMA_MAX_HISTORY,
            "options": HA_OLLAMA_OPTIONS,
            "keep_alive": HA_OLLAMA_KEEP_ALIVE,
            "gap_between_turns_s": args.gap_s,
            "profile": args.profile or "detected",
            "modes": {mode: ["edge serve", *flags] for mode, flags in MODES.items()},
        },
        "turns": turns,
        "summary": {mode: summary(rows) for mode, rows in turns.items()},
    }
    shifted, exact = (result["summary"][m]["first_text_p50_s_trimmed"] for m in MODES)
    if shifted and exact:
        result["exact_over_shifted_trimmed_p50"] = round(exact / shifted, 1)
    report(result, console)
    result.pop("machine")
    path = write_results("ha_ollama_history", result, plot({**result, "machine": info}))
    console.print(f"wrote {path} and .png")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=30, help="turns of one conversation")
    parser.add_argument("--gap-s", type=float, default=1.5, help="pause between turns")
    parser.add_argument("--profile", default=None)
    parser.add_argument("--write-results", action="store_true")
    anyio.run(main, parser.parse_args())
