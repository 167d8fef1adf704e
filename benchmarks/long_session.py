"""A long session through ``edge serve``: does turn 160 answer as fast as turn 20?

    python benchmarks/long_session.py                          # 4 participants x 160 turns
    python benchmarks/long_session.py --turns 80 --no-write    # a shorter run, not recorded

N participants (default 4) connected over WebSocket take M typed turns (default 160) one
after another, round robin, from a fixed script of a lab's statements, corrections and
questions ("My locker code is 4711.", "What did I say about the centrifuge?", ...), with a
pause (3 s) every 20 turns. Nothing runs concurrently: each turn is sent when the previous
reply has ended.

Per 20-turn window: first reply text p50 / p95, prompt tokens evaluated per turn (every
request that ran during the turn: routing, answer, background), time the answer waited for
the model slot (behind background work), compactions run and their time, and the resident
memory of the process after the window. Every turn keeps its stage trace: queue wait, KV
restore of the participant's state, prompt tokens evaluated and their time, context and
recall lookup, routing decision, first token; and what background requests held the model
during the turn.

Prints a table, writes ``benchmarks/results/<machine class>/long_session.json`` and ``.png``
(refused from a tree with uncommitted changes: the results name the commit measured).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from figures import code_version, private_data_dir, write_results
from rich.console import Console
from rich.table import Table
from server_latency import ask_timed, base_settings, rss_mb

from edge.server import EdgeClient, EdgeService

WINDOW = 20
SUBJECTS = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fay", "Gus", "Hana"]


def script_turn(participant: int, k: int) -> tuple[str, str]:
    """The ``k``-th turn of ``participant``: (kind, text). A cycle of eight: statements
    with numbers and places, a correction of one of them, and questions about them."""
    n = 100 + 37 * k + 11 * participant
    room = 1 + (k + participant) % 9
    cycle = [
        ("statement", f"My locker code is {n}."),
        ("statement", f"The centrifuge in room {room} is broken."),
        ("question", "What did I say about the centrifuge?"),
        ("statement", f"I put the reagent kit on shelf {n % 7 + 1}."),
        ("correction", f"Correction: my locker code is {n + 5}, not {n}."),
        ("question", "What is my locker code?"),
        ("statement", f"{SUBJECTS[(k + participant) % 8]} runs the PCR batch {n} today."),
        ("question", "Who runs the PCR batch, and where is the reagent kit?"),
    ]
    return cycle[k % len(cycle)]


class Trace:
    """Wraps public entry points of the running service to time a turn's stages: the
    context and recall lookup (``ContextManager.messages``) and the routing decision
    (``decisions.decide``); the model's own figures come from its ``metrics_log``."""

    def __init__(self, service: EdgeService) -> None:
        self.stages: dict[str, float] = {}
        self.service = service
        self.compactions: list[dict[str, Any]] = []
        self._previous: dict[str, str] = {}
        context = service.context
        timed = self._timed(context.messages, "context_recall_s")

        def messages(participant_id: str, **kwargs: Any) -> Any:
            out = timed(participant_id, **kwargs)
            self._shape(participant_id, kwargs["request"], out[1].content)
            return out

        context.messages = messages  # type: ignore[method-assign]
        decisions = service.decisions
        decisions.decide = self._timed_async(decisions.decide, "routing_s")  # type: ignore[method-assign]
        context.add_hook("post_compact", self._compacted)

    def _timed(self, fn: Callable[..., Any], stage: str) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.stages[stage] = self.stages.get(stage, 0.0) + time.perf_counter() - t0

        return wrapper

    def _timed_async(self, fn: Callable[..., Any], stage: str) -> Callable[..., Any]:
        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.stages[stage] = self.stages.get(stage, 0.0) + time.perf_counter() - t0

        return wrapper

    def _shape(self, participant_id: str, request: str, context: str) -> None:
        """How the context message changed since the participant's previous request: bytes
        kept at its start (the cached prefix can serve those) and bytes after them."""
        recalled = self.service.context.recalled(participant_id, request)
        previous = self._previous.get(participant_id, "")
        same = len(shared_start(previous, context).encode())
        self._previous[participant_id] = context
        self.stages.update(
            context_bytes=len(context.encode()),
            context_changed_bytes=len(context.encode()) - same,
            recalled_bytes=len(recalled.text.encode()) if recalled is not None else 0,
            pending_compactions=self.service.context.pending(),
        )

    def _compacted(self, report: Any) -> None:
        self.compactions.append(
            {
                "at": time.perf_counter(),
                "participant": report.participant_id,
                "ok": report.ok,
                "method": report.method,
                "entries": report.entries_compacted,
                "duration_s": report.duration_s,
            }
        )

    def log(self) -> list[Any]:
        return list(getattr(self.service.llm, "metrics_log", []))


def shared_start(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def requests_since(before: list[Any], after: list[Any]) -> list[Any]:
    """The model requests that finished between two snapshots of ``metrics_log``."""
    seen = {id(m) for m in before}
    return [m for m in after if id(m) not in seen]


def summarize_requests(requests: list[Any], answer: Any) -> dict[str, Any]:
    background = [m for m in requests if str(m.priority) == "background"]
    others = [m for m in requests if m is not answer and str(m.priority) != "background"]
    return {
        "evaluated_tokens": sum(m.evaluated_tokens for m in requests),
        "background_requests": len(background),
        "background_evaluated_tokens": sum(m.evaluated_tokens for m in background),
        "background_s": sum(m.total_s or 0.0 for m in background),
        "other_interactive_requests": len(others),
        "other_interactive_s": sum(m.total_s or 0.0 for m in others),
        "other_interactive_evaluated_tokens": sum(m.evaluated_tokens for m in others),
    }


async def one_turn(
    client: EdgeClient, service: EdgeService, trace: Trace, text: str
) -> dict[str, Any]:
    trace.stages = {}
    before = trace.log()
    turn, times = await ask_timed(client, text)
    row: dict[str, Any] = {
        **times,
        "answered": bool(turn.text.strip()),
        "reply": turn.text,
        **{k: round(v, 4) for k, v in trace.stages.items()},
    }
    metrics = service.conversation.last_metrics(client.participant_id)
    during = requests_since(before, trace.log())
    answer = metrics if any(m is metrics for m in during) else None
    if answer is not None:
        row.update(
            queue_wait_s=answer.queue_wait_s,
            restore_s=getattr(answer, "restore_s", None),
            prompt_tokens=answer.prompt_tokens,
            answer_evaluated_tokens=answer.evaluated_tokens,
            prompt_eval_s=answer.prompt_eval_s,
            answer_ttft_s=answer.ttft_s,
            preemptions=answer.preemptions,
        )
    row.update(summarize_requests(during, answer))
    return row


async def run_session(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    settings = base_settings(profile=args.profile) if args.profile else base_settings()
    service = EdgeService(settings)
    async with service:
        info = service.describe()
        trace = Trace(service)
        rows: list[dict[str, Any]] = []
        memory: list[float] = [rss_mb()]
        gaps: list[dict[str, Any]] = []
        clients = [
            EdgeClient(service.websocket_url, participant_id=f"lab-{p}")
            for p in range(args.participants)
        ]
        for c in clients:
            await c.__aenter__()
        try:
            for i in range(args.turns):
                if i and i % WINDOW == 0:
                    memory.append(rss_mb())
                    before = trace.log()
                    await anyio.sleep(args.pause_s)
                    gaps.append(
                        {
                            "after_turn": i,
                            **summarize_requests(requests_since(before, trace.log()), None),
                        }
                    )
                p = i % args.participants
                kind, text = script_turn(p, i // args.participants)
                row = await one_turn(clients[p], service, trace, text)
                row.update(turn=i + 1, participant=p, kind=kind, query=text, at=time.perf_counter())
                rows.append(row)
                console.print(
                    f"[dim]{i + 1:>3} p{p} {row['first_reply_s']:.2f} s "
                    f"ev {row['evaluated_tokens']} bg {row['background_s']:.2f} s "
                    f"q {row.get('queue_wait_s') or 0:.2f} {kind}[/]"
                )
            memory.append(rss_mb())
        finally:
            for c in clients:
                await c.__aexit__(None, None, None)
    return {
        "service": info,
        "rows": rows,
        "memory_mb": memory,
        "compactions": trace.compactions,
        "pauses": gaps,
    }


def pct(values: list[float], q: float) -> float:
    values = sorted(v for v in values if v == v)
    if not values:
        return float("nan")
    return (
        statistics.quantiles(values, n=100, method="inclusive")[q - 1]
        if len(values) > 1
        else values[0]
    )


def windows(result: dict[str, Any]) -> list[dict[str, Any]]:
    rows, memory, out = result["rows"], result["memory_mb"], []
    starts = [r["at"] - r["done_s"] for r in rows]
    for w in range(0, len(rows), WINDOW):
        chunk = rows[w : w + WINDOW]
        lo, hi = starts[w], chunk[-1]["at"]
        comps = [c for c in result["compactions"] if lo <= c["at"] <= hi]
        firsts = [r["first_reply_s"] for r in chunk]

        def mean(key: str, rows: list[dict[str, Any]] = chunk) -> float:
            vals = [r[key] for r in rows if r.get(key) is not None]
            return statistics.fmean(vals) if vals else float("nan")

        out.append(
            {
                "turns": f"{w + 1}–{w + len(chunk)}",
                "first_reply_p50_s": pct(firsts, 50),
                "first_reply_p95_s": pct(firsts, 95),
                "evaluated_tokens_per_turn": mean("evaluated_tokens"),
                "answer_evaluated_tokens": mean("answer_evaluated_tokens"),
                "prompt_tokens": mean("prompt_tokens"),
                "queue_wait_s": mean("queue_wait_s"),
                "restore_s": mean("restore_s"),
                "prompt_eval_s": mean("prompt_eval_s"),
                "answer_ttft_s": mean("answer_ttft_s"),
                "routing_s": mean("routing_s"),
                "context_recall_s": mean("context_recall_s"),
                "context_bytes": mean("context_bytes"),
                "context_changed_bytes": mean("context_changed_bytes"),
                "recalled_bytes": mean("recalled_bytes"),
                "pending_compactions": mean("pending_compactions"),
                "background_s": mean("background_s"),
                "background_requests": sum(r["background_requests"] for r in chunk),
                "compactions": len(comps),
                "compaction_s": sum(c["duration_s"] for c in comps),
                "unanswered": sum(not r["answered"] for r in chunk),
                "memory_mb": memory[min(w // WINDOW + 1, len(memory) - 1)],
            }
        )
    return out


def show(console: Console, ws: list[dict[str, Any]]) -> None:
    table = Table(title="long session through edge serve, per 20 turns")
    cols = [
        ("turns", "turns", str),
        ("p50", "first_reply_p50_s", "{:.2f}".format),
        ("p95", "first_reply_p95_s", "{:.2f}".format),
        ("eval tok", "evaluated_tokens_per_turn", "{:.0f}".format),
        ("ans eval", "answer_evaluated_tokens", "{:.0f}".format),
        ("prompt", "prompt_tokens", "{:.0f}".format),
        ("queue", "queue_wait_s", "{:.3f}".format),
        ("restore", "restore_s", "{:.3f}".format),
        ("eval s", "prompt_eval_s", "{:.3f}".format),
        ("ttft", "answer_ttft_s", "{:.3f}".format),
        ("routing", "routing_s", "{:.3f}".format),
        ("recall", "context_recall_s", "{:.3f}".format),
        ("ctx B", "context_bytes", "{:.0f}".format),
        ("changed B", "context_changed_bytes", "{:.0f}".format),
        ("recall B", "recalled_bytes", "{:.0f}".format),
        ("pending", "pending_compactions", "{:.1f}".format),
        ("bg s", "background_s", "{:.3f}".format),
        ("comp", "compactions", str),
        ("comp s", "compaction_s", "{:.1f}".format),
        ("MB", "memory_mb", "{:.0f}".format),
    ]
    for name, _, _ in cols:
        table.add_column(name, justify="right")
    for w in ws:
        table.add_row(*(fmt(w[key]) for _, key, fmt in cols))
    console.print(table)


def plot(ws: list[dict[str, Any]]):  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [w["turns"] for w in ws]
    fig, (ax, mem) = plt.subplots(1, 2, figsize=(10, 3.6))
    ax.plot(labels, [w["first_reply_p50_s"] for w in ws], "o-", label="p50")
    ax.plot(labels, [w["first_reply_p95_s"] for w in ws], "s--", label="p95")
    ax.set_ylabel("first reply text (s)")
    ax.set_xlabel("turns")
    ax.set_ylim(bottom=0)
    ax.tick_params(axis="x", rotation=45)
    ax.legend()
    mem.plot(labels, [w["memory_mb"] for w in ws], "o-", color="#b05a4a")
    mem.set_ylabel("resident memory (MB)")
    mem.set_xlabel("turns")
    mem.set_ylim(bottom=0)
    mem.tick_params(axis="x", rotation=45)
    fig.suptitle("long session: 4 participants taking turns round robin")
    fig.tight_layout()
    return fig


async def main(args: argparse.Namespace) -> None:
    console = Console(width=160)
    if args.write:
        code_version()  # refuses uncommitted code before the hour it takes, not after
    result = await run_session(args, console)
    ws = windows(result)
    show(console, ws)
    unanswered = sum(not r["answered"] for r in result["rows"])
    console.print(f"unanswered {unanswered}, load average {os.getloadavg()[0]:.1f}")
    result.update(
        participants=args.participants, turns=args.turns, pause_s=args.pause_s, windows=ws
    )
    if args.write:
        path = write_results("long_session", result, plot(ws))
        console.print(f"wrote {path} and .png")
    elif args.out:
        args.out.write_text(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    private_data_dir("long-session")  # not the user's sessions
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", help="device profile (default: detected)")
    parser.add_argument("--participants", type=int, default=4)
    parser.add_argument("--turns", type=int, default=160)
    parser.add_argument("--pause-s", type=float, default=3.0)
    parser.add_argument("--no-write", dest="write", action="store_false")
    parser.add_argument("--out", type=Path, help="with --no-write: write the JSON here")
    anyio.run(main, parser.parse_args())
