"""The conversation eval's scoring and runner, with a scripted model (the live run is
``edge eval conversation``)."""

from __future__ import annotations

import pytest
from conversation_helpers import responder

from edge.cli._main import main
from edge.conversation._eval import CASES, run_case, score
from edge.llm import ScriptedLLM

pytestmark = pytest.mark.anyio


def test_score_rewards_the_new_fact_and_penalizes_the_stale_one() -> None:
    assert score("It moved to 16:00.", ("16:00",), ("14:00",)) == 1.0
    assert score("It was 14:00, now 16:00.", ("16:00",), ("14:00",)) == 0.5
    assert score("At 14:00.", ("16:00",), ("14:00",)) == 0.0


def test_cases_cover_both_themes() -> None:
    assert {c.theme for c in CASES} == {"stale summary", "long session"}
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_each_case_runs_and_compacts(case) -> None:
    llm = ScriptedLLM(responder("Summary so far.", answer=case.expect[0]))
    result = await run_case(llm, case)
    assert result.score == 1.0 and not result.error
    assert result.compactions >= 1


def test_cli_lists_cases(capsys) -> None:
    assert main(["eval", "conversation", "--list"]) == 0
    assert "oversized-update" in capsys.readouterr().out
