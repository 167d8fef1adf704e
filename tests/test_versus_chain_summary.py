"""``benchmarks/versus_chain.py`` reports the tail of every path: p95 and max beside p50,
and each turn slower than twice its path's p50 with its stages, so its cause can be read."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import versus_chain  # noqa: E402


def sample(path: str, total: float | None, qid: str = "q", **extra: object) -> dict:
    stages = {"transcript": 0.1, "reply_text": 0.2, "audio": total} if total else None
    return {
        "path": path,
        "qid": qid,
        "round": 0,
        "total_s": total,
        "premature": False,
        "stages": stages,
        "speculation": {"started": 1, "adopted": 1, "discarded": 0, "start_s": -0.1},
        **extra,
    }


def test_every_path_reports_p50_p95_and_max_as_ratios_of_the_chain() -> None:
    samples = [sample("a", t) for t in (0.4, 0.5, 0.6)] + [sample("d", t) for t in (1.0, 1.0)]
    summary = versus_chain.summarize(samples, ["a", "d"])
    for path in ("a", "d"):
        assert {"p50", "p95", "max"} <= summary[path].keys()
        assert set(summary[path]["ratio"]) == {"p50", "p95", "max"}
    assert summary["a"]["p50"] == 0.5
    assert summary["a"]["max"] == 0.6
    assert math.isclose(summary["a"]["ratio"]["max"], 0.6)


def test_a_turn_slower_than_twice_the_p50_is_logged_with_its_stages() -> None:
    samples = [sample("a", t, qid=f"q{i}") for i, t in enumerate((0.5, 0.5, 0.5, 1.2))]
    samples.append(sample("a", 0.9, qid="under-twice"))
    samples.append(sample("a", None, qid="failed"))
    samples += [sample("d", 1.0)]
    summary = versus_chain.summarize(samples, ["a", "d"])
    slow = summary["a"]["slow_turns"]
    assert [s["qid"] for s in slow] == ["q3"]
    assert slow[0]["stages"] == {"transcript": 0.1, "reply_text": 0.2, "audio": 1.2}
    assert slow[0]["times_p50"] == 2.4
    assert slow[0]["speculation"]["adopted"] == 1
    assert summary["d"]["slow_turns"] == []


def test_paths_option_takes_known_paths_only() -> None:
    assert versus_chain.path_list("a, b") == ["a", "b"]
    for bad in ("a,x", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            versus_chain.path_list(bad)


def test_each_p50_ratio_has_a_paired_bootstrap_interval_around_it() -> None:
    times = {"q1": (0.4, 1.0), "q2": (0.5, 1.2), "q3": (0.45, 0.6), "q4": (0.6, 1.5)}
    samples = [
        sample(path, pair[i], qid=qid, round=r)
        for r in range(3)
        for qid, pair in times.items()
        for i, path in enumerate(("a", "d"))
    ]
    summary = versus_chain.summarize(samples, ["a", "d"])
    low, high = summary["a"]["ratio_p50_interval"]
    assert low < summary["a"]["ratio"]["p50"] < high
    assert summary["d"]["ratio_p50_interval"] == [1.0, 1.0]
    assert versus_chain.summarize(samples, ["a", "d"]) == summary  # seeded


def test_the_interval_pairs_turns_by_question_and_round_and_skips_premature_ones() -> None:
    samples = [sample("a", 0.5, qid="q1"), sample("d", 1.0, qid="q1")]
    samples += [sample("a", 0.1, qid="q2", premature=True), sample("d", 1.0, qid="q2")]
    samples += [sample("d", 2.0, qid="alone")]
    assert versus_chain.p50_ratio_interval(samples, "a") is None  # one pair only
    samples += [sample("a", 0.5, qid="q3"), sample("d", 1.0, qid="q3")]
    assert versus_chain.p50_ratio_interval(samples, "a") == [0.5, 0.5]
