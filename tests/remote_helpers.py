"""Real model servers on 127.0.0.1 for the remote-backend tests: ``wyoming-faster-whisper``
and ``wyoming-piper`` (the test extra), llama-cpp-python's OpenAI-compatible server, each
started, killed, stalled (SIGSTOP) and restarted on its port, with our default models."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from benchmarks.chain_services import (
    Service,
    chain_argv,
    free_port,
    service_env,
    wait_for_llama,
    wait_for_port,
)
from edge.server import AudioFormat, EdgeClient, EdgeService
from edge.voice import RemoteBackend, WyomingTTS, resample

RATE = 16_000
LLAMA_SHARED = ["--interrupt_requests", "False", "--cache", "True"]
NAMES = {"whisper": "wyoming-faster-whisper", "piper": "wyoming-piper", "llama": "llama server"}


QUESTION = "What is the capital of France?"
"""What the ``question`` fixture (tests/conftest.py) speaks."""


class Servers:
    """The named model servers, each on a fixed port for the whole module."""

    def __init__(self, work: Path, names: tuple[str, ...]) -> None:
        self.ports = {name: free_port() for name in ("whisper", "piper", "llama")}
        argv = chain_argv(sys.executable, self.ports, work)
        # llama-cpp-python's server cuts a running answer short when another request
        # arrives (its default); the service asks ahead (warm-up, speculation) and in turn.
        # Its prompt cache keeps an evaluated prefix, as our in-process llama.cpp does.
        argv["llama"] += LLAMA_SHARED
        self.services = {
            name: Service(NAMES[name], argv[name], self.ports[name], work / f"{name}.log")
            for name in names
        }

    def __enter__(self) -> Servers:
        """All the named servers started (stopped again if one fails to start)."""
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def url(self, name: str) -> str:
        if name == "llama":
            return f"http://127.0.0.1:{self.ports[name]}/v1"
        return f"tcp://127.0.0.1:{self.ports[name]}"

    def start(self, *names: str) -> None:
        for name in names or tuple(self.services):
            self.services[name].start(service_env())
        for name in names or tuple(self.services):
            self.wait(name)

    def wait(self, name: str) -> None:
        service = self.services[name]
        if name == "llama":
            wait_for_llama(service, 120)
        else:
            wait_for_port(service, service.port, 60)

    def kill(self, name: str) -> None:
        proc = self.services[name].proc
        assert proc is not None
        proc.kill()
        proc.wait(timeout=10)

    def pause(self, name: str, paused: bool) -> None:
        proc = self.services[name].proc
        assert proc is not None
        proc.send_signal(signal.SIGSTOP if paused else signal.SIGCONT)

    def stop(self) -> None:
        for service in self.services.values():
            if service.proc is not None and service.proc.poll() is None:
                service.proc.send_signal(signal.SIGCONT)
            service.stop()


def spoken(tts_url: str, text: str) -> bytes:
    """``text`` as Piper says it (through the Wyoming voice server), 16 kHz PCM16,
    trimmed to its voiced part (plus 50 ms)."""
    voice = WyomingTTS(RemoteBackend("tts", tts_url))
    result = voice.synthesize(text)
    audio = resample(result.audio, result.sample_rate, RATE)
    loud = np.flatnonzero(np.abs(audio) > 0.02)
    audio = audio[max(loud[0] - 800, 0) : loud[-1] + 800]
    return (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()


def speaker(service: EdgeService, pid: str = "p1") -> EdgeClient:
    return EdgeClient(
        service.websocket_url,
        participant_id=pid,
        audio=AudioFormat(sample_rate=RATE),
        want_audio=True,
    )


def backends(service: EdgeService) -> dict[str, Any]:
    return service.backends.health()


async def wait_for_retry(service: EdgeService, role: str, limit_s: float = 15.0) -> None:
    """Until the back-off after a failure has passed (the next request tries again)."""
    for _ in range(int(limit_s / 0.1)):
        if not backends(service)[role].get("retry_in_s"):
            return
        await anyio.sleep(0.1)
