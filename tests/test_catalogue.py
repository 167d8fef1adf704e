from __future__ import annotations

import os
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
    with pytest.raises(CatalogueError, match="one of package"):
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


def derived(source: str = "src", **kw: object) -> ModelEntry:
    data = {"id": "fast", "role": "llm", "format": "gguf", "derive_from": source}
    return ModelEntry.model_validate({"quantize": "q8_0", **data, **kw})


def test_derived_entries_are_validated_and_say_how_to_build_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDGE_MODELS_DIR", str(tmp_path))
    entry = derived()
    assert entry.derived_path == tmp_path / "fast.gguf"
    with pytest.raises(ModelMissingError, match="edge models --prepare"):
        entry.locate()
    (tmp_path / "fast.gguf").write_bytes(b"GGUF")
    assert entry.locate() == tmp_path / "fast.gguf"
    for bad in ({"quantize": None}, {"format": "onnx"}, {"path": "/x.gguf"}):
        with pytest.raises(ValueError, match="derive_from|one of package"):
            derived(**bad)


def test_prepare_refuses_a_source_that_fails_its_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edge.catalogue import prepare

    monkeypatch.setenv("EDGE_MODELS_DIR", str(tmp_path / "derived"))
    source_file = tmp_path / "src.gguf"
    source_file.write_bytes(b"GGUF not the real weights")
    source = ModelEntry(
        id="src", role="llm", format="gguf", path=str(source_file), sha256={".": "0" * 64}
    )
    catalogue = Catalogue([source, derived()])
    with pytest.raises(CatalogueError, match="fails its SHA-256 check"):
        prepare(catalogue, catalogue.get("fast"))
    assert not (tmp_path / "derived").exists() or not any((tmp_path / "derived").iterdir())


def test_prepare_builds_with_the_converter_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalogue knows no model runtime (``llm`` imports it, not the reverse): the
    caller passes the conversion; without one a model to build is refused."""
    import hashlib

    from edge.catalogue import prepare

    monkeypatch.setenv("EDGE_MODELS_DIR", str(tmp_path / "derived"))
    source_file = tmp_path / "src.gguf"
    source_file.write_bytes(b"GGUF weights")
    digest = hashlib.sha256(b"GGUF weights").hexdigest()
    source = ModelEntry(
        id="src", role="llm", format="gguf", path=str(source_file), sha256={".": digest}
    )
    catalogue = Catalogue([source, derived()])
    with pytest.raises(CatalogueError, match="no converter"):
        prepare(catalogue, catalogue.get("fast"))
    calls = []

    def convert(src: Path, target: Path, kind: str) -> None:
        calls.append((src, kind))
        target.write_bytes(src.read_bytes() + kind.encode())

    where, built = prepare(catalogue, catalogue.get("fast"), convert=convert)
    assert built and calls == [(source_file, "q8_0")]
    assert where.read_bytes() == b"GGUF weightsq8_0"
    assert prepare(catalogue, catalogue.get("fast"), convert=convert) == (where, False)


def test_edge_models_prepare_reports_a_bad_source_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "src.gguf"
    source.write_bytes(b"GGUF truncated")
    extra = tmp_path / "models.toml"
    extra.write_text(
        f"[[model]]\nid = 'src'\nrole = 'llm'\nformat = 'gguf'\npath = '{source}'\n"
        f"default = true\n[model.sha256]\n'.' = '{'0' * 64}'\n"
        "[[model]]\nid = 'smollm2-135m-instruct-q8_0'\nrole = 'llm'\nformat = 'gguf'\n"
        "derive_from = 'src'\nquantize = 'q8_0'\n"  # replaces the shipped entry
    )
    monkeypatch.setenv("EDGE_MODELS_FILE", str(extra))
    monkeypatch.setenv("EDGE_MODELS_DIR", str(tmp_path / "derived"))
    assert main(["models", "--prepare"]) == 2
    assert "fails its SHA-256 check" in capsys.readouterr().out
    assert not (tmp_path / "derived").exists()


@pytest.mark.model
@pytest.mark.anyio
async def test_prepare_builds_the_q8_0_llm_from_its_source_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real conversion: the file matches the catalogue's digest (the same bytes on
    every machine for this llama.cpp), is built once, and answers like its source."""
    from edge.catalogue import prepare
    from edge.llm import LlamaCppLLM, quantize_gguf

    monkeypatch.setenv("EDGE_MODELS_DIR", str(tmp_path))
    catalogue = Catalogue.load()
    entry = catalogue.get("smollm2-135m-instruct-q8_0")
    assert entry.derive_from == catalogue.default("llm").id
    where, built = prepare(catalogue, entry, convert=quantize_gguf)
    assert built and where.parent == tmp_path and entry.verify() == {".": True}
    assert prepare(catalogue, entry, convert=quantize_gguf) == (where, False)
    assert [p.name for p in os.scandir(tmp_path)] == [where.name]  # no partial file left

    # Answers like its source: the source's greedy answer is about as likely under the
    # q8_0 weights as under its own. (Not the same greedy words: q8_0 agrees on ~95 % of
    # next tokens, so a 12-token answer can part ways, and where depends on the CPU's
    # kernels; on one host both said "L'Étoile, la …" and then differed.)
    question = [{"role": "user", "content": "What is the capital of France?"}]
    answer, likelihoods = "", []
    for path in (catalogue.get(entry.derive_from).locate(), where):
        llm = LlamaCppLLM(model_path=path, n_ctx=512, temperature=0.0, n_threads=2)
        await llm.load()
        try:
            answer = answer or (await llm.chat(question, max_tokens=12)).content
            scored = await llm.score(llm.format_chat(question), [answer])
            likelihoods.append(scored.logprobs[0] / scored.token_counts[0])
        finally:
            await llm.close()
    assert answer.strip()
    assert abs(likelihoods[0] - likelihoods[1]) < 0.25, (answer, likelihoods)  # nats/token


def test_the_llm_takes_a_catalogue_id_or_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``LlamaCppLLM(model_path=...)`` (and ``edge eval conversation --model``) accept a
    catalogue id as well as a file; a bare name that is neither stays a path."""
    from edge.llm import ModelLoadError
    from edge.llm._llamacpp import resolve_model_path

    catalogue = Catalogue.load()
    default = catalogue.default("llm")
    assert resolve_model_path(None) == default.locate()
    assert resolve_model_path(default.id) == default.locate()
    monkeypatch.chdir(tmp_path)
    assert resolve_model_path("no-such-model") == Path("no-such-model")
    assert resolve_model_path("sub/model.gguf") == Path("sub/model.gguf")
    (tmp_path / default.id).write_text("a file of that name wins")
    assert resolve_model_path(default.id) == Path(default.id)
    with pytest.raises(ModelLoadError, match="not a GGUF language model"):
        resolve_model_path(catalogue.default("stt").id)
    monkeypatch.setenv("EDGE_MODELS_DIR", str(tmp_path / "empty"))
    with pytest.raises(ModelLoadError, match="edge models --prepare"):
        resolve_model_path("smollm2-135m-instruct-q8_0")  # derived, not built there
