"""Which questions of the conversation evals are answered from the participant's record,
and whether rightly, with no model: every case of the six recall sets (``edge eval
conversation --part recall``) and the long set (``--part long``, 160 ordinary turns) run
with a scripted model that answers "I do not know." to everything, so only an answer
told back from the record can score. A few seconds.

For each recall set: its probes, those told from the record and those right, and what the
model scored on the same probes in the committed model run
(``benchmarks/conversation_eval_results.json``). For the long set: per phrasing, the
questions told from the record and right, after the turns and for the control.

Usage: ``python benchmarks/record_answers.py [--write-results]``; writes
``benchmarks/results/<machine class>/record_answers.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
from figures import write_results
from rich.console import Console

from edge.eval import (
    RECALL_CASES,
    long_summary,
    recall_budgets,
    run_long_eval,
    run_recall_case,
)
from edge.llm import ChatMessage, ScriptedLLM

UNKNOWN = "I do not know."
COMMITTED = Path(__file__).parent / "conversation_eval_results.json"


def _reply(messages: list[ChatMessage]) -> str:
    """A summary to a compaction request, :data:`UNKNOWN` to anything else."""
    return "The user chatted." if "Write plain text only" in messages[0].content else UNKNOWN


async def recall_sets() -> dict[str, dict[str, Any]]:
    committed = {r["name"]: r for r in json.loads(COMMITTED.read_text())["recall"]["results"]}
    budgets = recall_budgets()
    sets: dict[str, dict[str, Any]] = {}
    for case in RECALL_CASES:
        result = await run_recall_case(ScriptedLLM(_reply), case, budgets)
        model = {p["turns"]: p["score"] for p in committed[case.name]["probes"]}
        row = sets.setdefault(
            case.half, {"probes": 0, "from_record": 0, "right": 0.0, "model_run_score": 0.0}
        )
        for probe in result.probes:
            row["probes"] += 1
            if probe.stated:
                row["from_record"] += 1
                row["right"] += probe.score
                row["model_run_score"] += model.get(probe.turns, 0.0)
    total = {k: sum(r[k] for r in sets.values()) for k in next(iter(sets.values()))}
    return {**sets, "all": total}


async def long_set() -> dict[str, Any]:
    result = await run_long_eval(ScriptedLLM(_reply), recall_budgets())
    summary = long_summary(result)
    out: dict[str, Any] = {"error": result.error, "leaks": summary["leaks"]}
    for phrasing in ("design", "held_out", "unseen"):
        rows = [p for p in result.probes if p.phrasing == phrasing]
        out[phrasing] = {
            "cases": len(rows),
            "recall_right": sum(p.recall == 1.0 for p in rows),
            "control_right": sum(p.control == 1.0 for p in rows),
            "not_from_record": [p.case for p in rows if p.recall_answer == UNKNOWN],
        }
    return out


async def main() -> dict[str, Any]:
    return {"recall_sets": await recall_sets(), "long": await long_set()}


if __name__ == "__main__":
    results = anyio.run(main)
    console = Console()
    for name, row in results["recall_sets"].items():
        console.print(
            f"{name}: {row['from_record']} of {row['probes']} probes from the record, "
            f"{row['right']:.0f} right (the model run scored {row['model_run_score']:.1f})"
        )
    for phrasing in ("design", "held_out", "unseen"):
        row = results["long"][phrasing]
        console.print(
            f"long {phrasing}: {row['recall_right']}/{row['cases']} after the turns, "
            f"control {row['control_right']}/{row['cases']}; "
            f"to the model: {row['not_from_record']}"
        )
    console.print(f"wrote {write_results('record_answers', results)}")
