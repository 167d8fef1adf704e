"""A run as markdown (llama-bench's table style), csv, json, jsonl or sqlite (runs append
to one database), and runs read back from any of those files."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from pathlib import Path
from typing import Any

from ._records import KEY_FIELDS, Figure, Run, fmt_mean_sd, fmt_value

FORMATS = ("md", "csv", "json", "jsonl", "sqlite")
COLUMNS = ("stage", "model", "backend", "threads", "ngl", "load", "test", "value", "profile")
RIGHT = {"threads", "ngl", "load", "value", "profile"}


def _cell(fig: Figure, column: str) -> str:
    if column == "value":
        return fmt_mean_sd(fig)
    if column == "profile":
        return fmt_value(fig.expected, fig.unit) if fig.expected is not None else ""
    if column == "threads" and fig.participants is not None:
        return str(fig.threads or "")
    value = getattr(fig, column)
    return "" if value is None else str(value)


def machine_lines(run: Run) -> list[str]:
    m = run.machine
    speed = m.get("host_speed", {})
    pk = m.get("packages", {})
    return [
        f"machine: {m.get('cpu')} · {m.get('cores')} cores · {m.get('memory_gib')} GiB · "
        f"GPU {m.get('gpu')} · profile {m.get('class')}",
        f"host speed (one core): SHA-256 {speed.get('sha256_mb_per_s')} MB/s, "
        f"{speed.get('python_msteps_per_s')} M Python steps/s · load average "
        f"{m.get('load_average_1m')} · {m.get('code', '')}",
        f"xr-edge {pk.get('xr-edge')} · llama-cpp-python {pk.get('llama-cpp-python')} · "
        f"faster-whisper {pk.get('faster-whisper')} · piper-tts {pk.get('piper-tts')}",
        f"llama.cpp: {m.get('llama_cpp_features', '')}",
    ]


def markdown(run: Run) -> str:
    """llama-bench's layout: one row per test, mean ± sd over the repetitions, and the
    device profile's prediction beside it."""
    figs = run.figures
    cols = [c for c in COLUMNS if c not in ("ngl", "load") or _varies_or_set(figs, c)]
    rows = [[_cell(f, c) for c in cols] for f in figs]
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(cols)]

    def line(cells: list[str]) -> str:
        return (
            "| "
            + " | ".join(
                _pad(x, w, c in RIGHT) for x, w, c in zip(cells, widths, cols, strict=True)
            )
            + " |"
        )

    rule = (
        "| "
        + " | ".join(
            ("-" * (w - 1) + ":") if c in RIGHT else "-" * w
            for w, c in zip(widths, cols, strict=True)
        )
        + " |"
    )
    head = [f"- {x}" for x in machine_lines(run)]
    return "\n".join([*head, "", line(list(cols)), rule, *(line(r) for r in rows), ""])


def _pad(text: str, width: int, right: bool) -> str:
    return text.rjust(width) if right else text.ljust(width)


def _varies_or_set(figs: list[Figure], column: str) -> bool:
    values = {getattr(f, column) for f in figs}
    return len(values) > 1 or any(v not in (None, 0) for v in values)


def _flat(run: Run, fig: Figure) -> dict[str, Any]:
    m = run.machine
    return {
        "run_id": run.run_id,
        "started_at": run.started_at,
        "cpu": m.get("cpu"),
        "cores": m.get("cores"),
        "gpu": m.get("gpu"),
        "machine_class": m.get("class"),
        **fig.row(),
        "values": json.dumps(fig.values),
    }


def as_csv(run: Run) -> str:
    out = io.StringIO()
    rows = [_flat(run, f) for f in run.figures]
    writer = csv.DictWriter(out, fieldnames=list(rows[0]) if rows else ["run_id"])
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def as_jsonl(run: Run) -> str:
    lines = [json.dumps({**_flat(run, f), "values": f.values}) for f in run.figures]
    return "\n".join(lines) + "\n"


def render(run: Run, fmt: str) -> str:
    if fmt == "md":
        return markdown(run)
    if fmt == "csv":
        return as_csv(run)
    if fmt == "jsonl":
        return as_jsonl(run)
    if fmt == "json":
        return json.dumps(run.document(), indent=2) + "\n"
    raise ValueError(f"no text rendering for {fmt!r}")


SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, started_at TEXT,
  machine TEXT, settings TEXT);
CREATE TABLE IF NOT EXISTS figures (run_id TEXT REFERENCES runs(run_id), stage TEXT,
  test TEXT, unit TEXT, better TEXT, model TEXT, backend TEXT, threads INTEGER,
  ngl INTEGER, participants INTEGER, load INTEGER, mean REAL, sd REAL, n INTEGER,
  expected REAL, "values" TEXT);
"""


def write_sqlite(run: Run, path: Path) -> None:
    """Append ``run`` to the database at ``path`` (created when missing)."""
    names = "stage test unit better model backend threads ngl participants load mean sd n"
    names += " expected"
    db = sqlite3.connect(path)
    try:
        with db:  # one transaction: the whole run or nothing
            db.executescript(SCHEMA)
            db.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?)",
                (run.run_id, run.started_at, json.dumps(run.machine), json.dumps(run.settings)),
            )
            marks = ", ".join("?" * (len(names.split()) + 2))
            for f in run.figures:
                row = f.row()
                values = (run.run_id, *(row[n] for n in names.split()), json.dumps(f.values))
                db.execute(f"INSERT INTO figures VALUES ({marks})", values)
    finally:
        db.close()


def _sqlite_runs(path: Path) -> list[Run]:
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    try:
        runs = []
        for r in db.execute("SELECT * FROM runs ORDER BY started_at, rowid"):
            figs = [
                Figure.from_row({**dict(f), "values": json.loads(f["values"])})
                for f in db.execute("SELECT * FROM figures WHERE run_id = ?", (r["run_id"],))
            ]
            runs.append(
                Run(
                    r["run_id"],
                    r["started_at"],
                    json.loads(r["machine"]),
                    json.loads(r["settings"]),
                    figs,
                )
            )
        return runs
    finally:
        db.close()


def _jsonl_runs(text: str) -> list[Run]:
    runs: dict[str, Run] = {}
    for line in filter(None, (x.strip() for x in text.splitlines())):
        row = json.loads(line)
        run = runs.setdefault(row["run_id"], Run(row["run_id"], row.get("started_at", ""), {}, {}))
        run.machine.update(cpu=row.get("cpu"), cores=row.get("cores"), gpu=row.get("gpu"))
        run.figures.append(Figure.from_row(row))
    return list(runs.values())


def read_runs(path: Path) -> list[Run]:
    """Every run in a json, jsonl or sqlite file written by ``edge bench``."""
    data = path.read_bytes()
    if data.startswith(b"SQLite format 3"):
        return _sqlite_runs(path)
    text = data.decode("utf-8")
    if text.lstrip().startswith("{") and '"figures"' in text[:200_000]:
        try:
            return [Run.from_document(json.loads(text))]
        except json.JSONDecodeError:
            pass
    return _jsonl_runs(text)


def figure_key(fig: Figure) -> tuple[Any, ...]:
    """What two runs' figures are matched on (the machine aside)."""
    return tuple(getattr(fig, k) for k in KEY_FIELDS if k != "backend")
