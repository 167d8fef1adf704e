"""The measured figures the docs quote are the committed result files' figures.

Each row of the README's "Measured on this machine" table is computed from
``benchmarks/results/<machine class>/<bench>.json`` by ``benchmarks/readme_table.py``, and
every figure quoted in ``README.md``, ``benchmarks/README.md`` and ``docs/*.md`` stands in a
marker naming its file (``benchmarks/doc_figures.py``); a figure without its file, one that
differs from it, or one quoted beside a result file without a marker fails here. Regenerate
with ``python benchmarks/readme_table.py --write`` after ``make bench``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import doc_figures  # noqa: E402
import figures  # noqa: E402
import readme_table  # noqa: E402


def test_readme_table_matches_the_committed_result_files() -> None:
    readme = (ROOT / "README.md").read_text()
    assert readme_table.readme_table(readme) == readme_table.table(), (
        "README figures differ from benchmarks/results/; "
        "run `python benchmarks/readme_table.py --write`"
    )


def test_every_figure_quoted_in_the_docs_is_its_result_files_figure() -> None:
    problems = {
        str(path.relative_to(ROOT)): doc_figures.wrong_figures(path.read_text())
        for path in doc_figures.doc_files()
    }
    assert {k: v for k, v in problems.items() if v} == {}, (
        "run `python benchmarks/readme_table.py --write`"
    )


def test_no_figure_beside_a_result_file_goes_unchecked() -> None:
    """In a paragraph or table that names a committed result file or quotes one, every
    number with a unit is a marked figure."""
    problems = {
        str(path.relative_to(ROOT)): doc_figures.unmarked_figures(path.read_text())
        for path in doc_figures.doc_files()
    }
    assert {k: v for k, v in problems.items() if v} == {}


def test_the_figure_markers(tmp_path, monkeypatch) -> None:
    """The marker grammar: keys, indexes, filters, every item, the format's names; a wrong
    figure and an unmarked one are found, and ``rewrite`` puts the file's figure back."""
    import json

    import pytest

    machine = tmp_path / "results" / "m"
    machine.mkdir(parents=True)
    rows = [{"turn": 0, "t": 0.25}, {"turn": 1, "t": 0.5, "x": 2}, {"turn": 2, "t": 1.0}]
    data = {"summary": {"a": {"p50": 0.934}}, "rows": rows, "acc": 0.95}
    (machine / "bench.json").write_text(json.dumps(data))
    monkeypatch.setattr(doc_figures, "RESULTS", tmp_path / "results")
    doc_figures._load.cache_clear()

    def fig(spec: str) -> str:
        return doc_figures.figure_text(spec, "m")

    assert fig("bench summary.a.p50 {:.2f} s") == "0.93 s"
    assert fig("bench summary.a.p50 {ms:.0f} ms") == "934 ms"
    assert fig("bench acc {:.0%}") == "95%"
    assert fig("bench rows.1.t {:.1f} s") == "0.5 s"
    assert fig("bench rows[turn=0].t {:.2f} s") == "0.25 s"
    assert fig("bench rows[turn>0].t {median:.2f} s (n {n})") == "0.75 s (n 2)"
    assert fig("bench rows.*.t {min_ms:.0f}–{max:.1f} s") == "250–1.0 s"
    assert fig("bench rows[x].turn {}") == "1"
    assert fig("bench rows[turn>=1][turn<2].t {ms:.0f} ms") == "500 ms"
    assert fig("bench rows.*.turn {items}") == "0, 1, 2"
    assert fig("bench acc {pct:.0f} %") == "95 %"
    for bad in ("bench rows[turn=9].t {}", "bench summary.b {}", "nofile acc {}", "bench acc"):
        with pytest.raises(doc_figures.FigureError):
            fig(bad)

    good = "p50 <!-- fig bench summary.a.p50 {:.2f} s -->0.93 s<!-- /fig --> (`bench.json`)"
    assert doc_figures.wrong_figures(good, "m") == []
    assert doc_figures.unmarked_figures(good, "m") == []
    stale = good.replace("0.93 s<", "0.90 s<")
    assert doc_figures.wrong_figures(stale, "m") == ["1: '0.90 s', the file says '0.93 s'"]
    assert doc_figures.rewrite(stale, "m") == good
    beside = f"{good}, against 1.02 s before\n\nA setting of 2 s, nothing quoted."
    assert doc_figures.unmarked_figures(beside, "m") == ["1: '1.02 s'"]
    table = "From `bench.json`:\n\n| a | b |\n|---|---|\n| x | 12 ms |\n| `y` | `3 s` |"
    assert doc_figures.unmarked_figures(table, "m") == ["5: '12 ms'"]
    items = "- a setting of 2 s\n- `bench.py` gave 0.9 s\n\n```\nbench.json 3 s\n```"
    assert doc_figures.unmarked_figures(items, "m") == ["2: '0.9 s'"]


def test_every_benchmark_of_make_bench_has_committed_results() -> None:
    out = ROOT / "benchmarks" / "results" / readme_table.MACHINE
    for bench in (
        "llm_latency",
        "conversation_ttft",
        "voice_latency",
        "server_latency",
        "long_session",
    ):
        assert (out / f"{bench}.json").is_file() and (out / f"{bench}.png").is_file(), bench
    assert (out / "routing_decisions.json").is_file()
    assert (out / "routing_decisions_routing_eval_holdout.json").is_file()
    assert (out / "device_budgets.json").is_file()


def test_end_of_speech_is_the_last_voiced_sample() -> None:
    rate = 16_000
    t = np.arange(rate) / rate
    voiced = 0.3 * np.sin(2 * np.pi * 220 * t[: rate // 2])
    audio = np.concatenate([np.zeros(rate // 4), voiced, np.zeros(rate // 4)])
    end = figures.last_voiced_sample(audio, rate)
    assert rate // 4 + rate // 2 - 1 <= end < rate // 4 + rate // 2 + rate // 100
    assert figures.speech_end_at(10.0, audio, rate) == 10.0 + (end + 1) / rate
    quiet_tail = np.concatenate([voiced, 1e-5 * np.ones(rate)])  # noise floor is not speech
    assert figures.last_voiced_sample(quiet_tail, rate) < len(voiced) + rate // 100


def test_a_result_names_its_commit_and_refuses_uncommitted_code(tmp_path, monkeypatch) -> None:
    """``code_version`` is HEAD from git; a changed tracked file other than the results (and
    the README table generated from them), now or when the benchmark started, or a HEAD
    that moved while it ran, refuses the run."""
    import subprocess

    import pytest

    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)
        return out.stdout.decode().strip()

    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "edge.py").write_text("x = 1\n")
    (tmp_path / "benchmarks" / "results" / "b.json").write_text("{}\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    monkeypatch.setattr(figures, "REPO", tmp_path)
    head = git("rev-parse", "--short", "HEAD")
    assert figures.code_version() == head
    (tmp_path / "benchmarks" / "results" / "b.json").write_text('{"new": 1}\n')
    assert figures.code_version() == head  # a run writes its own results
    (tmp_path / "edge.py").write_text("x = 2\n")
    with pytest.raises(figures.UncommittedCode, match="edge.py"):
        figures.code_version()
    # changed when the benchmark started, committed (or put back) before it ended
    monkeypatch.setitem(figures._AT_START, tmp_path, figures._code_state())
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "d")
    with pytest.raises(figures.UncommittedCode, match="edge.py"):
        figures.code_version()
    monkeypatch.setitem(figures._AT_START, tmp_path, (head, ""))  # started clean, then a commit
    with pytest.raises(figures.UncommittedCode, match=f"HEAD moved from {head}"):
        figures.code_version()
