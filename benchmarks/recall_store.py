"""How long the sessions store's recall queries take as the store grows.

Fills a temporary store (``SessionStore``, schema as committed) with ``--participants``
participants of ``--statements`` statements each (short lab statements, random words and
numbers), then times, for one participant, what an answer request runs before the model:
the full-text search (three requests), the corrections' lookup, the newest statements
(what the block chosen ahead reads) and the statement said next after each one a search
found (what a correction said right after one is looked up by). p50 of ``--repeat`` calls
each.

Usage: ``python benchmarks/recall_store.py [--participants 10] [--statements 5000]``;
writes ``benchmarks/results/<machine class>/recall_store.json``. About 10 s.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from figures import write_results

from edge.recall import Statement, StoreRecallIndex
from edge.store import SessionStore

WORDS = "sample rack freezer buffer locker code review room bench pipette tips delivery dock"
REQUESTS = (
    "Where does sample 17 go?",
    "What is my locker code?",
    "Which room is the design review in?",
)


def fill(store: SessionStore, participants: int, statements: int) -> None:
    words = WORDS.split()
    rng = random.Random(1)
    rows = []
    for i in range(statements):
        for p in range(participants):
            noun, other = rng.choice(words), rng.choice(words)
            rows.append((f"user-{p}", f"{noun.capitalize()} {i} goes to {other} {i % 13} today."))
    db = store.connection
    with store.lock:
        db.execute("BEGIN")
        db.executemany(
            "INSERT INTO participants (id, created_us, last_seen_us) VALUES (?, 0, 0)",
            [(f"user-{p}",) for p in range(participants)],
        )
        db.executemany(
            "INSERT INTO records (participant, kind, section, timestamp_us, user, assistant) "
            "VALUES (?, 'exchange', 'dialogue', 1, ?, 'Okay.')",
            rows,
        )
        db.execute("COMMIT")


def p50_ms(call: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def following_all(index: StoreRecallIndex, found: list[Statement]) -> None:
    """The next statement after each of a search's results, as a request looks them up."""
    for statement in found:
        index.following(statement)


def main(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="recall-store-") as tmp:
        store = SessionStore(Path(tmp) / "sessions.sqlite3")
        started = time.perf_counter()
        fill(store, args.participants, args.statements)
        filled_s = time.perf_counter() - started
        index = StoreRecallIndex(store)
        pid = "user-3"
        found = index.search(pid, REQUESTS[0], 12)
        result = {
            "participants": args.participants,
            "statements": args.statements,
            "schema": store.schema_version,
            "fill_s": filled_s,
            "search_ms": {
                q: p50_ms(lambda q=q: index.search(pid, q, 12), args.repeat) for q in REQUESTS
            },
            "corrections_ms": p50_ms(lambda: index.corrections(pid, 64), args.repeat),
            "newest_ms": p50_ms(lambda: index.newest(pid, 24), args.repeat),
            "following_ms": p50_ms(lambda: following_all(index, found), args.repeat),
        }
        store.close()
    return result


def report(result: dict[str, Any]) -> None:
    from rich.console import Console

    console = Console()
    console.print(
        f"{result['participants']} participants × {result['statements']} statements "
        f"(schema {result['schema']}), p50:"
    )
    for request, ms in result["search_ms"].items():
        console.print(f"  search {request!r}: {ms:.1f} ms")
    console.print(f"  corrections: {result['corrections_ms']:.1f} ms")
    console.print(f"  newest 24: {result['newest_ms']:.2f} ms")
    console.print(f"  the statement said after each of 12 found: {result['following_ms']:.2f} ms")
    console.print(f"wrote {write_results('recall_store', result)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--participants", type=int, default=10)
    parser.add_argument("--statements", type=int, default=5000, help="per participant")
    parser.add_argument("--repeat", type=int, default=5)
    report(main(parser.parse_args()))
