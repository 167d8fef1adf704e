"""The services ``versus_chain.py`` runs side by side, each as its own process on 127.0.0.1.

* the chain a Home Assistant user builds: ``wyoming-faster-whisper`` (our default Whisper
  tiny.en directory), llama-cpp-python's OpenAI-compatible server (our default SmolLM2
  GGUF) and ``wyoming-piper`` (our default joe voice), each with its own defaults;
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


def chain_services(work: Path, python: str) -> dict[str, Service]:
    """The three chain services, started with the models our catalogue installed."""
    stt = default_model_path("stt")
    voice = default_model_path("tts")
    gguf = default_model_path("llm")
    ports = {name: free_port() for name in ("whisper", "llama", "piper")}
    return {
        "whisper": Service(
            "wyoming-faster-whisper",
            [python, "-m", "wyoming_faster_whisper", "--uri", f"tcp://{HOST}:{ports['whisper']}"]
            + ["--model", str(stt), "--language", "en", "--local-files-only"]
            + ["--data-dir", str(work / "whisper")],
            ports["whisper"],
            work / "whisper.log",
        ),
        "llama": Service(
            "llama_cpp.server",
            [python, "-m", "llama_cpp.server", "--model", str(gguf)]
            + ["--host", HOST, "--port", str(ports["llama"])],
            ports["llama"],
            work / "llama.log",
        ),
        "piper": Service(
            "wyoming-piper",
            [python, "-m", "wyoming_piper", "--uri", f"tcp://{HOST}:{ports['piper']}"]
            + ["--voice", voice.name.removesuffix(".onnx"), "--data-dir", str(voice.parent)]
            + ["--local-files-only"],
            ports["piper"],
            work / "piper.log",
        ),
    }


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
