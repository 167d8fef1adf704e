"""edge bench from a wheel, with no checkout: the package's wheel is built offline, installed
with --no-deps into a fresh venv that borrows the project venv's installed dependencies
and default models (a path in a .pth file, added after the install so pip never touches
that venv), and run from an empty directory: `--quick -o json` with `--report` (every
stage), `-o sqlite` twice into one file (the VAD stage alone), then `compare` between them."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHIPPED = ("pyproject.toml", "README.md", "LICENSE", "edge", "models", "firmware-config")


def _run(argv: list[str], cwd: Path, env: dict[str, str], limit: float = 600) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=limit)
    assert done.returncode == 0, f"{argv}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    for name in SHIPPED:  # a copy: building writes build/ and egg-info beside the sources
        path = REPO / name
        if path.is_dir():
            shutil.copytree(
                path, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
            )
        elif path.exists():
            src.mkdir(exist_ok=True)
            shutil.copy2(path, src / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    pip = [sys.executable, "-m", "pip"]
    _run(
        [
            *pip,
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(tmp / "dist"),
            str(src),
        ],
        tmp,
        env,
    )
    (wheel,) = (tmp / "dist").glob("xr_edge-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp, env)
    _run(
        [
            *pip,
            "--python",
            str(venv / "bin/python"),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        tmp,
        env,
    )
    site = Path(sysconfig.get_paths()["purelib"])
    (own,) = (venv / "lib").glob("python3*/site-packages")
    (own / "borrowed-dependencies.pth").write_text(f"{site}\n")
    return venv


@pytest.mark.model
def test_edge_bench_quick_from_a_wheel_without_a_checkout(wheel_venv: Path, tmp_path: Path) -> None:
    work = tmp_path / "empty"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(EDGE_CONFIG_DIR=str(tmp_path / "cfg"), EDGE_DATA_DIR=str(tmp_path / "data"))
    py, edge = str(wheel_venv / "bin/python"), str(wheel_venv / "bin/edge")
    where = _run([py, "-c", "import edge; print(edge.__file__)"], work, env)
    assert where.startswith(str(wheel_venv)), where  # the wheel's code, not a checkout
    quick = [edge, "bench", "--quick", "-r", "1", "--context-bytes", "400"]
    _run([*quick, "-o", "json", "--file", "a.json", "--report", "a.html"], work, env)
    doc = json.loads((work / "a.json").read_text())
    stages = {f["stage"] for f in doc["figures"]}
    assert stages == {"vad", "stt", "llm", "tts", "turn"}, stages
    assert doc["machine"]["cores"] >= 1 and doc["machine"]["host_speed"]["sha256_mb_per_s"] > 0
    assert "llama-cpp-python" in doc["machine"]["packages"]
    assert all(f["n"] >= 1 and f["mean"] == f["mean"] for f in doc["figures"])  # no NaN
    assert (work / "a.html").read_text().count("data:image/png;base64,") >= 4
    # the sqlite runs need no more than one stage: every stage's model already ran above
    fast = [edge, "bench", "--quick", "-r", "1", "--stages", "vad"]
    for _ in range(2):
        _run([*fast, "-o", "sqlite", "--file", "runs.sqlite"], work, env)
    with sqlite3.connect(work / "runs.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 2
    out = _run([edge, "bench", "compare", "a.json", "runs.sqlite"], work, env)
    assert "| vad" in out and "B / A" in out
