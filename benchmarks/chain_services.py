"""The services ``versus_chain.py`` runs side by side, each as its own process on 127.0.0.1.

* the chain a Home Assistant user builds: ``wyoming-faster-whisper`` (our default Whisper
  tiny.en directory), llama-cpp-python's OpenAI-compatible server (our default SmolLM2
  GGUF) and ``wyoming-piper`` (our default joe voice), run the way Home Assistant's add-ons
  ship them (:data:`ADDON_WHISPER`: beam size 1, int8, English) with every thread setting
  equal to the machine's cores, as our own path uses them (:func:`chain_settings`);
* ``edge serve`` with the default models and the detected profile.

Nothing is downloaded: every service is pointed at the files our catalogue installed.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from edge.catalogue import default_model_path

REPO = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@dataclass
class Service:
    name: str
    argv: list[str]
    port: int
    log: Path
    proc: subprocess.Popen | None = field(default=None, repr=False)

    def start(self, env: dict[str, str]) -> None:
        handle = self.log.open("wb")
        self.proc = subprocess.Popen(
            self.argv, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=REPO
        )

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{self.name} exited ({self.proc.returncode}):\n{tail}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# Home Assistant's Whisper add-on (home-assistant/addons, whisper/config.yaml): its shipped
# options. The model there is "tiny-int8": the same tiny.en weights, computed in int8.
ADDON_WHISPER = {"beam_size": 1, "compute_type": "int8", "language": "en"}


def cores() -> int:
    """The cores this process may use: every thread setting of the chain is this."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def chain_settings() -> dict[str, dict[str, Any]]:
    """The chain's effective settings, recorded in the results. Piper keeps its defaults
    (streaming synthesis on sentence boundaries is its default)."""
    n = cores()
    return {
        "whisper": {**ADDON_WHISPER, "cpu_threads": n, "model": str(default_model_path("stt"))},
        "llama": {"n_threads": n, "n_threads_batch": n, "model": str(default_model_path("llm"))},
        "piper": {"streaming": True, "voice": str(default_model_path("tts"))},
    }


def chain_argv(python: str, ports: dict[str, int], work: Path) -> dict[str, list[str]]:
    """The command line of each chain service, from :func:`chain_settings`."""
    cfg = chain_settings()
    whisper, llama = cfg["whisper"], cfg["llama"]
    voice = Path(cfg["piper"]["voice"])
    return {
        "whisper": [
            python,
            "-m",
            "wyoming_faster_whisper",
            "--uri",
            f"tcp://{HOST}:{ports['whisper']}",
        ]
        + ["--model", whisper["model"], "--language", whisper["language"]]
        + ["--beam-size", str(whisper["beam_size"]), "--compute-type", whisper["compute_type"]]
        + ["--cpu-threads", str(whisper["cpu_threads"]), "--local-files-only"]
        + ["--data-dir", str(work / "whisper")],
        "llama": [python, "-m", "llama_cpp.server", "--model", llama["model"]]
        + [
            "--n_threads",
            str(llama["n_threads"]),
            "--n_threads_batch",
            str(llama["n_threads_batch"]),
        ]
        + ["--host", HOST, "--port", str(ports["llama"])],
        "piper": [python, "-m", "wyoming_piper", "--uri", f"tcp://{HOST}:{ports['piper']}"]
        + ["--voice", voice.name.removesuffix(".onnx"), "--data-dir", str(voice.parent)]
        + ["--local-files-only"],
    }


def chain_services(work: Path, python: str) -> dict[str, Service]:
    """The three chain services, started with the models our catalogue installed."""
    ports = {name: free_port() for name in ("whisper", "llama", "piper")}
    argv = chain_argv(python, ports, work)
    names = {
        "whisper": "wyoming-faster-whisper",
        "llama": "llama_cpp.server",
        "piper": "wyoming-piper",
    }
    return {key: Service(names[key], argv[key], ports[key], work / f"{key}.log") for key in argv}


def edge_service(work: Path, python: str, profile: str | None) -> tuple[Service, int]:
    """``edge serve`` on loopback: (the service with its WebSocket port, the Wyoming port).
    Its access token goes into ``work/edge``; the benchmark's clients read it from there
    (``EDGE_DATA_DIR``)."""
    ws, wy = free_port(), free_port()
    argv = [python, "-m", "edge", "serve", "--host", HOST, "--port", str(ws)]
    argv += ["--wyoming-port", str(wy), "--no-mdns", "--data-dir", str(work / "edge")]
    if profile:
        argv += ["--profile", profile]
    return Service("edge serve", argv, ws, work / "edge.log"), wy


def wait_for_port(service: Service, port: int, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        service.check_alive()
        try:
            with socket.create_connection((HOST, port), timeout=1):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{service.name} did not open port {port} in {limit_s:.0f} s")


def wait_for_llama(service: Service, limit_s: float) -> None:
    wait_for_port(service, service.port, limit_s)
    url = f"http://{HOST}:{service.port}/v1/models"
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        service.check_alive()
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{service.name} did not answer {url}")


def service_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


def chain_python() -> str:
    """The interpreter for the chain: ``CHAIN_PYTHON`` (a separate venv) or this one."""
    return os.environ.get("CHAIN_PYTHON") or sys.executable
