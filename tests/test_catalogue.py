from __future__ import annotations

from pathlib import Path

import pytest

from edge.catalogue import Catalogue, CatalogueError, ModelEntry, ModelMissingError
from edge.catalogue._catalogue import read_catalogue
from edge.cli import main


def test_default_models_are_installed_and_intact() -> None:
    catalogue = Catalogue.load()
    for role in ("llm", "stt", "tts"):
        entry = catalogue.default(role)  # type: ignore[arg-type]
        assert entry.locate().exists()
        results = entry.verify()
        assert results and all(results.values()), (entry.id, results)


def test_missing_package_error_names_the_package() -> None:
    entry = ModelEntry(
        id="x",
        role="llm",
        format="gguf",
        package="no-such-model-pkg",
        version="1.0",
        file="x/model.gguf",
    )
    with pytest.raises(ModelMissingError, match="pip install --no-deps no-such-model-pkg==1.0"):
        entry.locate()
    missing_path = ModelEntry(id="y", role="llm", format="gguf", path="/nonexistent/m.gguf")
    with pytest.raises(ModelMissingError, match="/nonexistent/m.gguf"):
        missing_path.locate()


def test_malformed_catalogues_are_rejected_clearly(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[[model]]\nid = 'z'\nrole = 'llm'\nformat = 'gguf'\n")
    with pytest.raises(CatalogueError, match="either package"):
        read_catalogue(bad)
    bad.write_text("[[model]]\nid = 'z'\nrole = 'robot'\nformat = 'gguf'\npath = 'a'\n")
    with pytest.raises(CatalogueError, match="role"):
        read_catalogue(bad)
    bad.write_text("models = 3\n")
    with pytest.raises(CatalogueError, match="unknown top-level"):
        read_catalogue(bad)
    with pytest.raises(CatalogueError, match="unknown model 'nope'"):
        Catalogue.load().get("nope")


def test_user_catalogue_adds_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extra = tmp_path / "mine.toml"
    extra.write_text(
        "[[model]]\nid = 'my-llm'\nrole = 'llm'\nformat = 'gguf'\n"
        f"path = '{tmp_path / 'my.gguf'}'\ncontext_length = 4096\n"
    )
    monkeypatch.setenv("EDGE_MODELS_FILE", str(extra))
    catalogue = Catalogue.load()
    assert "my-llm" in catalogue and not catalogue.get("my-llm").installed()


def test_edge_models_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--role", "tts"]) == 0
    assert "piper-en_US-joe-medium" in capsys.readouterr().out
