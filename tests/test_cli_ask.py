from __future__ import annotations

import pytest

from edge.cli import main


@pytest.mark.model
def test_edge_ask_streams_an_answer_and_reports_speed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ask", "Say hello.", "--max-tokens", "12", "--n-ctx", "512"]) == 0
    out, err = capsys.readouterr()
    assert out.strip()
    assert "time to first token" in err and "tokens" in err


def test_edge_ask_missing_model_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ask", "hi", "--model", "/nonexistent/model.gguf"]) == 1
    assert "does not exist" in capsys.readouterr().err
