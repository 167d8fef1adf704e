"""``edge device`` as printed on an 80-column terminal: no markup shown as text, no
reference to a file the repository does not have, model ids whole on their lines."""

from __future__ import annotations

import re

import pytest

from edge.cli import main
from edge.device import load_device_config


@pytest.mark.parametrize("name", ["jetson-orin-nano-8gb", "ci-2core-24gb"])
def test_device_tables_at_80_columns(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["device", "--profile", name, "--no-detect"]) == 0
    out = capsys.readouterr().out
    assert "[red]" not in out and "[/]" not in out
    assert "DESIGN.md" not in out
    config = load_device_config(name, detect=False, env={})
    for entry in config.models.values():
        assert any(entry.id in line for line in out.splitlines()), entry.id
    if any(path is None for path in config.model_paths.values()):
        assert "not installed" in out
    threads = config.profile.audio.stt_threads  # the CI profile's: Whisper on one thread
    said = re.search(r"on (\d+) threads?\b", out)
    assert (said.group(0) if said else None) == (f"on {threads} thread" if threads else None)
