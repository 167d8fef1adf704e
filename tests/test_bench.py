"""edge bench without models: figures' statistics and formatting, every output format
(sqlite appending runs), reading runs back, compare's ratios and matching, the report's
plots, the background load, the CLI's lists and errors."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from edge.bench import (
    Figure,
    Run,
    busy_cores,
    compare,
    figures_png,
    fmt_mean_sd,
    markdown,
    read_runs,
    render,
    write_report,
    write_sqlite,
)
from edge.cli import main
from edge.cli._bench import _ints

MACHINE = {
    "class": "ci-2core-24gb",
    "cpu": "Test CPU",
    "cores": 2,
    "memory_gib": 23.5,
    "gpu": "none",
    "host_speed": {"sha256_mb_per_s": 500.0, "python_msteps_per_s": 10.0},
    "packages": {"xr-edge": "0.1.0", "llama-cpp-python": "0.3.36"},
    "llama_cpp_features": "CPU : AVX2 = 1",
    "load_average_1m": 0.5,
}


def sample_run(run_id: str = "r1", scale: float = 1.0, load: int = 0, **machine: object) -> Run:
    llm = dict(model="smollm2", threads=2, ngl=0, load=load)
    figs = [
        Figure(
            "llm",
            "prompt",
            "tokens/s",
            "higher",
            values=[240 / scale, 230 / scale],
            expected=240,
            **llm,
        ),
        Figure("llm", "generation", "tokens/s", "higher", values=[100 / scale, 96 / scale], **llm),
        Figure(
            "llm",
            "TTFT cold, 500 B context",
            "s",
            "lower",
            values=[0.9 * scale, 1.1 * scale],
            expected=0.97,
            **llm,
        ),
        Figure(
            "llm",
            "TTFT warm, 500 B context",
            "s",
            "lower",
            values=[0.2 * scale, 0.25 * scale],
            **llm,
        ),
        Figure(
            "llm",
            "TTFT cold, 2,000 B context",
            "s",
            "lower",
            values=[3.0 * scale, 3.4 * scale],
            **llm,
        ),
        Figure(
            "llm",
            "TTFT warm, 2,000 B context",
            "s",
            "lower",
            values=[0.3 * scale, 0.2 * scale],
            **llm,
        ),
        Figure(
            "stt",
            "RTF, 4.0 s question",
            "x",
            "lower",
            model="whisper-tiny.en-ct2",
            values=[0.03 * scale],
            load=load,
        ),
        Figure(
            "tts", "RTF, one sentence", "x", "lower", model="joe", values=[0.2, 0.22], load=load
        ),
        Figure(
            "turn",
            "typed: first text",
            "s",
            "lower",
            model="smollm2",
            values=[0.5 * scale, 0.7 * scale],
            expected=0.97,
            load=load,
        ),
        Figure(
            "turn",
            "spoken: audio",
            "s",
            "lower",
            model="smollm2",
            values=[1.3 * scale, 1.5 * scale],
            load=load,
        ),
    ]
    return Run(run_id, "2026-12-03T18:00:00+00:00", {**MACHINE, **machine}, {"quick": True}, figs)


def test_mean_sd_and_units() -> None:
    f = Figure("llm", "x", "s", "lower", values=[0.9, 1.1])
    assert math.isclose(f.mean, 1.0) and math.isclose(f.sd, 0.1414, rel_tol=1e-3)
    assert fmt_mean_sd(f) == "1.00 ± 0.14 s"
    assert fmt_mean_sd(Figure("llm", "x", "s", "lower", values=[0.25, 0.35])) == "300 ± 71 ms"
    assert fmt_mean_sd(Figure("llm", "x", "tokens/s", "higher", values=[240.0])) == "240 tokens/s"
    assert fmt_mean_sd(Figure("llm", "x", "s", "lower", values=[math.nan])) == "-"


def test_markdown_is_llama_bench_style_with_the_machine_and_the_profile() -> None:
    text = markdown(sample_run())
    lines = text.splitlines()
    assert lines[0].startswith("- machine: Test CPU · 2 cores")
    table = [line for line in lines if line.startswith("|")]
    assert table[0].split("|")[1].strip() == "stage" and "profile" in table[0]
    assert set(table[1].replace("|", "").replace(" ", "")) <= {"-", ":"}
    assert len({len(line) for line in table}) == 1  # aligned columns
    assert any("235 ± 7 tokens/s" in line and "240 tokens/s" in line for line in table)


def test_csv_json_jsonl_round_trip(tmp_path: Path) -> None:
    run = sample_run()
    doc = json.loads(render(run, "json"))
    assert doc["machine"]["cpu"] == "Test CPU" and len(doc["figures"]) == len(run.figures)
    (tmp_path / "a.json").write_text(render(run, "json"))
    (tmp_path / "a.jsonl").write_text(render(run, "jsonl"))
    for name in ("a.json", "a.jsonl"):
        (back,) = read_runs(tmp_path / name)
        assert [f.mean for f in back.figures] == [f.mean for f in run.figures]
    csv_lines = render(run, "csv").splitlines()
    assert csv_lines[0].startswith("run_id,") and len(csv_lines) == 1 + len(run.figures)


def test_sqlite_appends_runs_to_one_file(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    write_sqlite(sample_run("r1"), db)
    write_sqlite(sample_run("r2", scale=2.0), db)
    runs = read_runs(db)
    assert [r.run_id for r in runs] == ["r1", "r2"]
    assert runs[1].machine["cpu"] == "Test CPU"
    assert runs[1].figures[0].values == [120.0, 115.0]


def test_compare_gives_ratios_and_which_is_better(tmp_path: Path) -> None:
    a, b = sample_run("a"), sample_run("b", scale=0.5, gpu="NVIDIA H200 (sm_90)")
    b.machine["host_speed"] = {"sha256_mb_per_s": 1000.0}
    for f in b.figures:
        if f.stage == "llm":
            f.threads, f.ngl, f.backend = 16, -1, "CUDA"  # another machine's own settings
    text = compare(a, b)
    assert "host speed B / A: 2.00" in text
    prompt = next(line for line in text.splitlines() if "| prompt" in line)
    assert "2.00" in prompt and "2.00x better" in prompt and "2 → 16" in prompt
    ttft = next(line for line in text.splitlines() if "typed: first text" in line)
    assert "0.50" in ttft and "2.00x better" in ttft
    (tmp_path / "a.json").write_text(render(a, "json"))
    write_sqlite(b, tmp_path / "b.sqlite")
    assert main(["bench", "compare", str(tmp_path / "a.json"), str(tmp_path / "b.sqlite")]) == 0
    assert main(["bench", "compare", str(tmp_path / "a.json")]) == 2
    assert main(["bench", "compare", str(tmp_path / "a.json"), str(tmp_path / "none")]) == 2


def test_report_has_a_plot_per_question(tmp_path: Path) -> None:
    run = sample_run()
    run.figures += sample_run(load=1, scale=1.5).figures
    pngs = figures_png(run)
    assert len(pngs) == 5 and all(p.startswith(b"\x89PNG") for p in pngs)
    write_report(run, tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert page.count("data:image/png;base64,") == 5 and "Test CPU" in page


class _PromptLog:
    """Stands in for LlamaCppLLM in llm_stage, recording every prompt it is given."""

    prompts: list[tuple[int, str]] = []
    load = 0

    def __init__(self, path: str, **_: object) -> None:
        self.model_path, self.gpu_layers = path, None

    async def __aenter__(self) -> _PromptLog:
        return self

    async def __aexit__(self, *_: object) -> None:
        pass

    def _metrics(self, messages: list[dict[str, str]]) -> object:
        from types import SimpleNamespace

        self.prompts.append((self.load, "|".join(m["content"] for m in messages)))
        return SimpleNamespace(
            prompt_eval_s=0.1, evaluated_tokens=64, tokens_per_s=50.0, generated_tokens=8,
            ttft_s=0.1, prompt_tokens=64, reused_tokens=0,
        )  # fmt: skip

    async def warm(self, messages: list[dict[str, str]], **_: object) -> object:
        return self._metrics(messages)

    async def chat(self, messages: list[dict[str, str]], **_: object) -> object:
        from types import SimpleNamespace

        return SimpleNamespace(content="Rack 7.", metrics=self._metrics(messages))


@pytest.mark.anyio
async def test_the_loaded_pass_evaluates_the_same_prompts_as_the_idle_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seeds differed by load (rep + 1000): the loaded pass's 2,000 B context was 906
    tokens against 838 idle, so its first token came later for more work."""
    from types import SimpleNamespace

    import edge.llm
    from edge.bench import LLMCase, llm_stage

    monkeypatch.setattr(edge.llm, "LlamaCppLLM", _PromptLog)
    monkeypatch.setattr(_PromptLog, "prompts", [])
    device = SimpleNamespace(llm_model_path="m.gguf", profile=SimpleNamespace(expected=None))
    for load in (0, 1):
        _PromptLog.load = load
        await llm_stage(LLMCase(None, 2, 0), device, 2, [500, 2000], lambda _: None, load)
    idle = [p for load, p in _PromptLog.prompts if load == 0]
    assert idle and idle == [p for load, p in _PromptLog.prompts if load == 1]


def test_busy_cores_start_and_stop() -> None:
    with busy_cores(1):
        pass  # the processes are ended on exit (p.wait() inside)
    with busy_cores(0):
        pass


def test_list_arguments() -> None:
    assert _ints("1,2,4") == [1, 2, 4]
    assert _ints("1-3") == [1, 2, 3]
    assert _ints("-1") == [-1] and _ints("0,-1") == [0, -1]


def test_unknown_model_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--stages", "stt", "--stt-model", "no-such-whisper"]) == 2
    assert "not installed or not in the catalogue" in capsys.readouterr().err


def test_host_speed_is_a_positive_figure() -> None:
    from edge.bench import host_speed

    speed = host_speed(0.1)
    assert speed["sha256_mb_per_s"] > 0 and speed["python_msteps_per_s"] > 0
    assert os.cpu_count()


def test_readme_table_for_a_machine_class_without_results_says_so() -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "benchmarks/readme_table.py", "--machine", "no-such-class"],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        check=False,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "no README table for machine class 'no-such-class'" in done.stderr
    assert "ci-2core-24gb" in done.stderr


def test_a_benchmark_writes_committed_results_only_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    root = Path(__file__).resolve().parent.parent
    monkeypatch.syspath_prepend(str(root / "benchmarks"))
    import figures

    monkeypatch.delenv("EDGE_BENCH_SCRATCH", raising=False)
    monkeypatch.setattr(figures, "WRITE_RESULTS", False)
    assert figures.scratch() and figures.RESULTS not in figures.results_dir("x").parents
    monkeypatch.setattr(figures, "WRITE_RESULTS", True)
    assert not figures.scratch()
    assert "--write-results" not in sys.argv


@pytest.mark.anyio
async def test_turns_over_the_websocket_protocol_of_a_running_service() -> None:
    """What `edge bench --url` measures, against a service on scripted models: one
    participant's typed turns and N at once, each reply's first text timed."""
    from server_helpers import answer_for, settings

    from edge.bench._turns import Target, participant_turns, typed_turns
    from edge.decisions import ScriptedDecisions
    from edge.llm import ScriptedLLM
    from edge.server import EdgeService

    ticks: list[str] = []
    service = EdgeService(
        settings(),
        llm=ScriptedLLM(answer_for),
        decisions=ScriptedDecisions(default="conversation"),
    )
    async with service:
        target = Target(service.websocket_url, None, voice=False)
        typed = await typed_turns(target, 2, ticks.append)
        (many,) = await participant_turns(target, 3, 1, ticks.append)
    (text,) = typed  # no audio without voice
    assert text.test == "typed: first text" and len(text.values) == 2
    assert all(0 < v < 60 for v in text.values)
    assert many.participants == 3 and len(many.values) == 3
    assert ticks == ["typed turn", "typed turn", "3 participants"]
