"""The README's measured figures are the committed result files' figures.

Each row of the README's "Measured on this machine" table is computed from
``benchmarks/results/<machine class>/<bench>.json`` by ``benchmarks/readme_table.py``; a
figure without its file, or a README edited by hand, fails here. Regenerate with
``python benchmarks/readme_table.py --write`` after ``make bench``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import figures  # noqa: E402
import readme_table  # noqa: E402


def test_readme_table_matches_the_committed_result_files() -> None:
    readme = (ROOT / "README.md").read_text()
    assert readme_table.readme_table(readme) == readme_table.table(), (
        "README figures differ from benchmarks/results/; "
        "run `python benchmarks/readme_table.py --write`"
    )


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
