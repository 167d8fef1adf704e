"""What a run records about its machine: CPU, cores, memory, GPU, llama.cpp's build
features, package versions, the load, and a short host-speed reference figure, so two
runs' seconds can be set side by side."""

from __future__ import annotations

import os
import platform
import time
from importlib import metadata
from typing import Any

PACKAGES = (
    "xr-edge",
    "llama-cpp-python",
    "faster-whisper",
    "ctranslate2",
    "piper-tts",
    "onnxruntime",
    "numpy",
)


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def host_speed(seconds: float = 0.5) -> dict[str, float]:
    """How fast one core of this host is right now, beside the figures measured with it:
    SHA-256 over 4 MB blocks (MB/s) and Python loop steps (millions per second), each the
    best of short trials over ``seconds`` (other work only ever slows a trial)."""
    import hashlib

    block = bytes(4 * 2**20)
    sha, deadline = 0.0, time.perf_counter() + seconds / 2
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        hashlib.sha256(block).digest()
        sha = max(sha, len(block) / 2**20 / (time.perf_counter() - started))
    python, deadline = 0.0, time.perf_counter() + seconds / 2
    while time.perf_counter() < deadline:
        started, steps = time.perf_counter(), 0
        for _ in range(100_000):
            steps += 1
        python = max(python, steps / (time.perf_counter() - started) / 1e6)
    return {"sha256_mb_per_s": round(sha, 1), "python_msteps_per_s": round(python, 2)}


def code_version() -> str:
    """The package version, and the commit when it runs from a git checkout."""
    import subprocess
    from pathlib import Path

    from edge import __version__

    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except OSError:
        return __version__
    head = out.stdout.strip() if out.returncode == 0 else ""
    return f"{__version__} ({head})" if head else __version__


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.lower().startswith(("model name", "hardware")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(profile: str | None = None) -> dict[str, Any]:
    """This machine as a run records it (``profile``: the device profile in use)."""
    from edge.device import detect_hardware, llama_system_info, nvidia_gpus

    hw = detect_hardware()
    gpus = nvidia_gpus()
    return {
        "class": profile,
        "code": code_version(),
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "arch": hw.arch,
        "cores": hw.cpus,
        "memory_gib": round(hw.memory_bytes / 2**30, 1),
        "gpu": ", ".join(f"{name} (sm_{cap})" for name, cap in gpus) or "none",
        "cuda": hw.cuda,
        "llama_cpp_features": llama_system_info(),
        "packages": package_versions(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host_speed": host_speed(),
    }
