"""The conversation eval's scoring and runner, with a scripted model (the live run is
``edge eval conversation``)."""

from __future__ import annotations

import pytest
from conversation_helpers import responder

from edge.cli._main import main
from edge.eval._harness import CASES, run_case, score
from edge.llm import ScriptedLLM

pytestmark = pytest.mark.anyio


def test_score_rewards_the_new_fact_and_penalizes_the_stale_one() -> None:
    assert score("It moved to 16:00.", ("16:00",), ("14:00",)) == 1.0
    assert score("It was 14:00, now 16:00.", ("16:00",), ("14:00",)) == 0.5
    assert score("At 14:00.", ("16:00",), ("14:00",)) == 0.0
    assert score("At 14:00.", ("4:00",), ("14:00",)) == 0.0  # whole words only
    assert score("Minus 20.", ("20",), ("80",)) == 1.0
    assert score("Take 500 milligrams.", ("500 milligram",), ()) == 1.0  # a plural too
    assert score("Room 2040.", ("room 204",), ()) == 0.0


def test_cases_cover_both_themes() -> None:
    assert {c.theme for c in CASES} == {"stale summary", "long session"}
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_each_case_runs_compacts_and_scores_the_models_answer(case) -> None:
    """The run scores what the model answered to the case's question: a right answer 1.0, a
    stale or empty one 0.0 (so a runner that ignores the answer cannot pass)."""
    wrong = case.stale[0] if case.stale else "I do not know."
    for answer, expected in ((case.expect[0], 1.0), (wrong, 0.0)):
        llm = ScriptedLLM(responder("Summary so far.", answer=f"Well, {answer}"))
        result = await run_case(llm, case)
        assert not result.error
        assert result.compactions >= 1
        if result.extra.get("stated"):  # told back from the participant's record
            assert result.score == 1.0 and result.answer != f"Well, {answer}"
            assert all(r.messages[-1].content != case.question for r in llm.requests)
            continue
        assert result.answer == f"Well, {answer}"
        assert result.score == expected, answer
        assert llm.requests[-1].messages[-1].content == case.question


def test_cli_lists_cases(capsys) -> None:
    assert main(["eval", "conversation", "--list"]) == 0
    assert "oversized-update" in capsys.readouterr().out


def test_the_results_file_names_the_code_it_measured(tmp_path) -> None:
    """``--json`` records the commit (from git, ``-dirty`` for changed tracked files), the
    time, the load and the options, so a committed results file says what it measured."""
    import argparse
    import subprocess

    from edge.cli._eval import run_info

    args = argparse.Namespace(model="m", threads=2, json=tmp_path / "r.json", func=print)
    info = run_info(args)
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    assert info["code"].split("-dirty")[0] == head
    assert info["options"] == {"model": "m", "threads": 2}
    assert info["measured_at"].endswith("Z") and info["load_average_1m"] >= 0


async def test_the_long_set_runs_round_robin_and_counts_controls_leaks_and_scaffolding() -> None:
    from edge.eval import PARTICIPANTS, long_summary, recall_budgets, run_long_eval
    from edge.eval._long import LongResult, leaks

    llm = ScriptedLLM(responder("Summary so far.", answer="User: Sure, 4711."))
    result = await run_long_eval(llm, recall_budgets(), turns=8)
    assert not result.error
    assert len(result.probes) == 3 * sum(len(p.cases) for p in PARTICIPANTS)
    summary = long_summary(result)
    # the questions are told back from each participant's own record, controls too
    assert summary["design"]["recall_right"] == summary["design"]["cases"] == 12
    assert summary["design"]["corrections"] == 1.0 and summary["design"]["ratio"] == 1.0
    # the scripted model's "User:" never reaches a reply; "4711" is ana's, so a reply
    # naming it to anyone else is a leak
    assert summary["scaffolded"] == 0
    assert summary["leaks"] > 0 and all(r["names"] == "ana" for r in leaks(result))
    fake = LongResult(0, replies=[{"participant": "ben", "request": "?", "reply": "User: hi"}])
    assert long_summary(fake)["scaffolded"] == 1
