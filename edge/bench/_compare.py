"""``edge bench compare A B``: each figure both runs measured, side by side, with B / A and
which is better (a time lower, a speed higher), and the two hosts' reference speeds."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from ._output import figure_key, read_runs
from ._records import Figure, Run, fmt_mean_sd


def pick(path: Path, run_id: str | None = None) -> Run:
    """The run ``run_id`` in ``path``, else its last run."""
    runs = read_runs(path)
    if not runs:
        raise ValueError(f"{path} holds no edge bench run")
    if run_id is None:
        return runs[-1]
    for run in runs:
        if run.run_id.startswith(run_id):
            return run
    raise ValueError(f"{path} has no run {run_id!r} (it has {', '.join(r.run_id for r in runs)})")


def verdict(a: Figure, b: Figure) -> tuple[float, str]:
    """B / A, and how B compares in words."""
    if not a.mean or math.isnan(a.mean) or math.isnan(b.mean):
        return math.nan, "-"
    ratio = b.mean / a.mean
    gain = ratio if a.better == "higher" else 1 / ratio if ratio else math.inf
    if 0.95 <= gain <= 1.05:
        return ratio, "same"
    return ratio, f"{gain:.2f}x better" if gain > 1 else f"{1 / gain:.2f}x worse"


def _pair(a: int | None, b: int | None) -> str:
    show = ("" if x is None else str(x) for x in (a, b))
    x, y = show
    return x if x == y else f"{x} → {y}"


def _loose(fig: Figure) -> tuple[object, ...]:
    return (fig.stage, fig.test, fig.model, fig.participants, fig.load)


def matcher(a: list[Figure], b: list[Figure]) -> Callable[[Figure], Figure | None]:
    """B's figure for one of A's: the same test and settings, else the same test where
    each run measured it once (two machines run with their own threads and GPU layers)."""
    exact = {figure_key(f): f for f in b}
    counts_a = Counter(_loose(f) for f in a)
    loose = {k: f for f in b if (k := _loose(f)) and counts_a[k] == 1}
    counts_b = Counter(_loose(f) for f in b)

    def find(fig: Figure) -> Figure | None:
        found = exact.get(figure_key(fig))
        if found is None and counts_b[_loose(fig)] == 1:
            found = loose.get(_loose(fig))
        return found

    return find


def _label(run: Run, name: str) -> str:
    m = run.machine
    return f"{name}: {run.run_id} · {m.get('cpu') or '?'} · GPU {m.get('gpu') or '?'}"


def compare(a: Run, b: Run) -> str:
    """A markdown table of every figure in both runs."""
    match = matcher(a.figures, b.figures)
    lines = [f"- {_label(a, 'A')}", f"- {_label(b, 'B')}"]
    sa, sb = a.machine.get("host_speed", {}), b.machine.get("host_speed", {})
    if sa.get("sha256_mb_per_s") and sb.get("sha256_mb_per_s"):
        lines.append(
            f"- host speed B / A: {sb['sha256_mb_per_s'] / sa['sha256_mb_per_s']:.2f} "
            f"(one-thread SHA-256 {sa['sha256_mb_per_s']} → {sb['sha256_mb_per_s']} MB/s)"
        )
    rows = [("stage", "model", "threads", "ngl", "load", "test", "A", "B", "B / A", "B is")]
    for fa in a.figures:
        fb = match(fa)
        if fb is None:
            continue
        ratio, word = verdict(fa, fb)
        rows.append(
            (
                fa.stage,
                fa.model,
                _pair(fa.threads, fb.threads),
                _pair(fa.ngl, fb.ngl),
                str(fa.load),
                fa.test,
                fmt_mean_sd(fa),
                fmt_mean_sd(fb),
                "-" if math.isnan(ratio) else f"{ratio:.2f}",
                word,
            )
        )
    if len(rows) == 1:
        lines.append("\nno figure in common (different stages, models or settings)")
        return "\n".join(lines) + "\n"
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    table = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows
    ]
    table.insert(1, "| " + " | ".join("-" * w for w in widths) + " |")
    return "\n".join([*lines, "", *table]) + "\n"
