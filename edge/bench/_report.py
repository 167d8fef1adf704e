"""``--report out.html``: one page with the machine, a plot per question a device team asks
(how fast is a turn, how does the first token grow with context, how fast is the LLM, are
the speech models real-time, what does a busy core cost) as embedded PNGs, and the table."""

from __future__ import annotations

import base64
import html
import io
import math
import re
from pathlib import Path
from typing import Any

from ._output import COLUMNS, _cell, machine_lines
from ._records import Figure, Run

BLUE, ORANGE, GREEN, GREY = "#3b6ea8", "#e08a2c", "#4c9a5b", "#777777"


def _series(fig: Figure) -> str:
    parts = [fig.model, f"{fig.threads} threads" if fig.threads else "", fig.backend]
    if fig.ngl:
        parts.append(f"ngl {fig.ngl}")
    if fig.load:
        parts.append(f"{fig.load} core(s) busy")
    return ", ".join(p for p in parts if p)


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _labels(figs: list[Figure]) -> tuple[list[str], str]:
    """Each bar's label, and what every bar shares (for the title) when they all do."""
    series = {_series(f) for f in figs}
    if len(series) == 1:
        return [f"{f.stage.upper()}: {f.test}" if f.stage != "turn" else f.test for f in figs], (
            series.pop()
        )
    return [f"{f.test}\n{_series(f)}" for f in figs], ""


def _bars(
    ax: Any, figs: list[Figure], colors: list[str], title: str, labels: list[str] | None = None
) -> None:
    """Horizontal bars (mean, sd whiskers), the profile's prediction as a black tick."""
    from matplotlib.lines import Line2D

    labels, shared = (labels, "") if labels else _labels(figs)
    ys = list(range(len(figs)))  # positions, not categories: equal labels stay apart
    ax.barh(ys, [f.mean for f in figs], xerr=[f.sd for f in figs], color=colors, capsize=3)
    ax.set_yticks(ys, labels)
    predicted = False
    for y, f in enumerate(figs):
        if f.expected is not None:
            ax.plot([f.expected] * 2, [y - 0.4, y + 0.4], color="black", lw=2.5)
            predicted = True
        ax.text(f.mean + f.sd, y, f"  {f.mean:.3g}", va="center", fontsize=8)
    if predicted:
        ax.legend(
            handles=[Line2D([], [], color="black", lw=2.5, label="device profile predicts")],
            fontsize=8,
            loc="lower right",
        )
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(title + (f"\n{shared}" if shared else ""), fontsize=10)


def _height(n: int) -> float:
    return 0.5 * n + 1.8


def plot_turns(figs: list[Figure]) -> Any:
    turns = [f for f in figs if f.stage == "turn"]
    if not turns:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, _height(len(turns))))
    colors = [GREEN if "audio" in f.test else BLUE for f in turns]
    _bars(ax, turns, colors, "Whole turns through the service (green: first audio)")
    ax.set_xlabel("seconds: typed from sending the text, spoken from the end of speech")
    fig.tight_layout()
    return fig


def plot_ttft(figs: list[Figure]) -> Any:
    ttft = [f for f in figs if f.stage == "llm" and f.test.startswith("TTFT")]
    if not ttft:
        return None
    lines: dict[str, dict[str, list[tuple[int, Figure]]]] = {"cold": {}, "warm": {}}
    for f in ttft:
        kind = f.test.split(",")[0].removeprefix("TTFT ")
        size = int(re.sub(r"[^0-9]", "", f.test.split(", ", 1)[1]))
        lines.setdefault(kind, {}).setdefault(_series(f), []).append((size, f))
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.8))
    for ax, (kind, series) in zip(axes, lines.items(), strict=False):
        predicted = False
        for name, points in sorted(series.items()):
            points.sort()
            xs = [p[0] for p in points]
            ys, sd = [p[1].mean for p in points], [p[1].sd for p in points]
            ax.errorbar(xs, ys, yerr=sd, fmt="o-", capsize=3, label=name)
            expected = [p[1].expected for p in points]
            if not predicted and all(e is not None for e in expected):
                ax.plot(xs, expected, "k:", label="device profile predicts")
                predicted = True
        ax.set_title(f"{kind}: {'a new participant' if kind == 'cold' else 'the follow-up'}")
        ax.set_xlabel("context in the prompt (UTF-8 bytes)")
        ax.set_ylabel("time to first token (s)")
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=7)
    fig.suptitle("LLM: time to first token against context size", fontsize=11)
    fig.tight_layout(rect=(0, 0.06 + 0.025 * (len(labels) // 2), 1, 1))
    return fig


def plot_llm_speed(figs: list[Figure]) -> Any:
    speed = [f for f in figs if f.stage == "llm" and f.unit == "tokens/s"]
    if not speed:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, _height(len(speed))))
    colors = [BLUE if f.test == "prompt" else ORANGE for f in speed]
    _bars(ax, speed, colors, "LLM speed: prompt evaluation (blue) and generation (orange)")
    ax.set_xlabel("tokens per second")
    fig.tight_layout()
    return fig


def plot_speech(figs: list[Figure]) -> Any:
    rtf = [f for f in figs if f.stage in ("stt", "tts", "vad") and f.unit == "x"]
    if not rtf:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, _height(len(rtf))))
    colors = [{"stt": BLUE, "tts": GREEN}.get(f.stage, GREY) for f in rtf]
    labels = [
        f"{f.stage.upper()} {f.model}\n{f.backend}"
        + (f", {f.threads} threads" if f.threads else "")
        + (f", {f.load} core(s) busy" if f.load else "")
        for f in rtf
    ]
    _bars(ax, rtf, colors, "Speech models: real-time factor (time taken / audio length)", labels)
    ax.axvline(1.0, color="red", lw=1, ls="--")
    ax.set_xlim(0, max(1.1, max(f.mean + f.sd for f in rtf) * 1.2))
    ax.set_xlabel("real-time factor (red: real time; under it, faster than speech)")
    fig.tight_layout()
    return fig


def _point(f: Figure) -> tuple[Any, ...]:
    return (f.stage, f.test, f.model, f.backend, f.threads, f.ngl, f.participants)


def plot_load(figs: list[Figure]) -> Any:
    """Each figure measured both idle and with cores busy: loaded / idle."""
    idle = {_point(f): f for f in figs if not f.load}
    matched = [(idle.get(_point(f)), f) for f in figs if f.load and f.test != "load"]
    pairs = [(a, b) for a, b in matched if a is not None and a.mean and not math.isnan(b.mean)]
    if not pairs:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(pairs) + 1.6))
    slow = [(b.mean / a.mean) if a.better == "lower" else (a.mean / b.mean) for a, b in pairs]
    labels = [f"{b.stage}: {b.test}\n{b.backend}, {b.load} core(s) busy" for _, b in pairs]
    ys = list(range(len(pairs)))
    ax.barh(ys, slow, color=[GREEN if x <= 2 else "#c0392b" for x in slow])
    ax.set_yticks(ys, labels, fontsize=8)
    for y, x in enumerate(slow):
        ax.text(x, y, f"  {x:.2f}x", va="center", fontsize=8)
    ax.axvline(2.0, color="black", ls="--", lw=1)
    ax.invert_yaxis()
    ax.set_xlabel("how many times slower than idle (target: under 2, dashed)")
    ax.set_title("Sharing the cores: other processes keeping cores busy")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


PLOTS = (plot_turns, plot_ttft, plot_llm_speed, plot_speech, plot_load)


def figures_png(run: Run) -> list[bytes]:
    out = []
    for plot in PLOTS:
        fig = plot(run.figures)
        if fig is None:
            continue
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)
        _plt().close(fig)
        out.append(buf.getvalue())
    return out


def write_report(run: Run, path: Path) -> list[bytes]:
    """Write the HTML page; returns its PNGs (for tests and ``--report`` callers)."""
    pngs = figures_png(run)
    imgs = "".join(
        f'<p><img alt="plot" src="data:image/png;base64,{base64.b64encode(p).decode()}"></p>'
        for p in pngs
    )
    head = "".join(f"<li>{html.escape(x)}</li>" for x in machine_lines(run))
    cols = "".join(f"<th>{c}</th>" for c in COLUMNS)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(f, c))}</td>" for c in COLUMNS) + "</tr>"
        for f in run.figures
    )
    path.write_text(
        "<!doctype html><meta charset=utf-8><title>edge bench "
        f"{html.escape(run.run_id)}</title><style>body{{font-family:sans-serif;max-width:60em;"
        "margin:auto}}td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:left}"
        f"</style><h1>edge bench {html.escape(run.run_id)}</h1><ul>{head}</ul>{imgs}"
        f"<table><tr>{cols}</tr>{rows}</table>\n",
        encoding="utf-8",
    )
    return pngs
