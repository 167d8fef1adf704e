"""One definition of each figure, shared by every benchmark (see ``benchmarks/README.md``).

* **end of speech**: the last voiced sample of the input audio, found from the audio itself
  (:func:`last_voiced_sample`, :func:`voiced_span`); as a time, the moment a live
  microphone would have captured that sample: when the client started feeding the
  recording in real time, plus the sample's offset (:func:`speech_end_at`).
* **first audio**: the arrival at the client of the first reply audio byte.
* **results**: ``benchmarks/results/<machine class>/<bench>.json`` and ``.png``, where the
  machine class is the device profile detected on this machine (:func:`machine_class`).
"""

from __future__ import annotations

import atexit
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from edge.bench import (  # one definition of the end of speech, shared with edge bench
    FRAME_S,
    VOICED_DB,
    last_voiced_sample,
    speech_end_at,
    speech_end_offset_s,
    voiced_span,
)

__all__ = [
    "FRAME_S",
    "VOICED_DB",
    "last_voiced_sample",
    "speech_end_at",
    "speech_end_offset_s",
    "voiced_span",
]

RESULTS = Path(__file__).parent / "results"
REPO = Path(__file__).resolve().parent.parent
# Files a benchmark run and `readme_table.py --write` write (results, and the figures quoted
# from them): they may differ from HEAD when a result is recorded.
GENERATED = (
    ":(exclude)benchmarks/results",
    ":(exclude)README.md",
    ":(exclude)benchmarks/README.md",
    ":(exclude)docs/*.md",
)
# Running a benchmark writes to a scratch folder; the committed results only with
# --write-results (taken off the command line here, so every script accepts it) or
# EDGE_BENCH_WRITE_RESULTS=1 (`make bench`).
WRITE_RESULTS = "--write-results" in sys.argv or os.environ.get("EDGE_BENCH_WRITE_RESULTS") == "1"
while "--write-results" in sys.argv:
    sys.argv.remove("--write-results")


def pcm16_samples(pcm: bytes) -> np.ndarray:
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0


def machine_class(profile: str | None = None) -> str:
    """The device profile chosen for this machine as ``edge serve`` chooses it (``profile``,
    else ``$EDGE_PROFILE``, else detection), e.g. ``ci-2core-24gb``."""
    from edge.device import choose_profile, detect_hardware, load_profiles

    return choose_profile(load_profiles(), detect_hardware(), profile, os.environ).profile.name


def scratch() -> bool:
    """Results go to a temporary folder: without --write-results, or with
    ``EDGE_BENCH_SCRATCH=1`` (measuring uncommitted code)."""
    return bool(os.environ.get("EDGE_BENCH_SCRATCH")) or not WRITE_RESULTS


def results_dir(machine: str | None = None) -> Path:
    """Where results go: the committed folder of this machine class with --write-results,
    else a temporary one (:func:`scratch`)."""
    root = RESULTS
    if scratch():
        root = Path(tempfile.gettempdir()) / "xr-edge-bench-scratch"
    path = root / (machine or machine_class())
    path.mkdir(parents=True, exist_ok=True)
    return path


class UncommittedCode(RuntimeError):
    """The code to be measured differs from its commit."""


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _code_state() -> tuple[str | None, str | None]:
    """``HEAD`` and the tracked files changed from it (results and their tables aside)."""
    head = _git("rev-parse", "--short", "HEAD")
    changed = _git("status", "--porcelain", "--untracked-files=no", "--", ".", *GENERATED)
    return head, changed


_AT_START = {REPO: _code_state()}
"""The code when the benchmark started (this module is imported as it starts)."""


def code_version() -> str:
    """The commit measured, from git (never typed by hand): ``HEAD``'s short hash. Raises
    :class:`UncommittedCode` when a tracked file other than a result file (or the README
    table generated from them) differs from it, now or when the benchmark started, or
    ``HEAD`` moved meanwhile: a committed figure must name the code that produced it.
    ``$EDGE_BENCH_COMMIT`` names it where there is no git checkout."""
    head, changed = _code_state()
    if head is None:
        return os.environ.get("EDGE_BENCH_COMMIT", "unknown")
    started, changed_then = _AT_START.get(REPO, (head, None))
    if changed or changed_then or started != head:
        what = changed or changed_then or f"HEAD moved from {started} while measuring"
        raise UncommittedCode(
            f"refusing to record figures for uncommitted code (HEAD {head}):\n{what}\n"
            "commit first, or set EDGE_BENCH_SCRATCH=1 to write results to a scratch folder"
        )
    return head


def machine_info() -> dict[str, Any]:
    return {
        "code": f"{_git('rev-parse', '--short', 'HEAD')} (scratch)"
        if scratch()
        else code_version(),
        "class": machine_class(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0],
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write_results(bench: str, data: dict[str, Any], figure: Any = None) -> Path:
    """Write ``<bench>.json`` (with the machine it ran on) and, given a matplotlib figure,
    ``<bench>.png`` under this machine class's results directory; returns the JSON path."""
    out = results_dir()
    path = out / f"{bench}.json"
    path.write_text(json.dumps({"machine": machine_info(), **data}, indent=2, default=str))
    if figure is not None:
        figure.savefig(out / f"{bench}.png", dpi=110)
    return path


def load_results(bench: str, machine: str) -> dict[str, Any]:
    return json.loads((RESULTS / machine / f"{bench}.json").read_text())


def private_data_dir(name: str) -> Path:
    """Point ``EDGE_DATA_DIR`` (a service's sessions store and token, and where a local
    client finds the token) at a new temporary directory, removed when the process exits:
    a benchmark neither reads nor writes the user's sessions. Call before making settings."""
    path = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    os.environ["EDGE_DATA_DIR"] = str(path)
    return path
