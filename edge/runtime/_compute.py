"""One gate for the CPU-heavy model steps of a small device.

A llama.cpp evaluation step and a Whisper pass each spread over every core, each with its
own OpenMP team. Run at once on two cores their threads wait at each other's barriers
and both slow down many times over: beside a streaming answer, a 65 ms Whisper pass took
2-10 s (benchmarks/README.md, "versus_chain"). Holding the gate for one step at a time
keeps each at full speed: a Whisper pass waits for at most one llama.cpp step (a token,
or one prompt batch), and the model for at most one pass.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class ComputeGate:
    """A lock held around each heavy model step, when ``enabled`` (by default on devices
    with at most ``SMALL_DEVICE_CORES`` cores; ``EDGE_COMPUTE_GATE=0`` or ``1`` decides)."""

    SMALL_DEVICE_CORES = 4

    def __init__(self, enabled: bool | None = None) -> None:
        if enabled is None:
            setting = os.environ.get("EDGE_COMPUTE_GATE")
            enabled = setting != "0" if setting else _cores() <= self.SMALL_DEVICE_CORES
        self.enabled = enabled
        self._lock = threading.Lock()

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Run the enclosed step alone among gated steps (blocking: call it in a worker
        thread, never on the event loop)."""
        if not self.enabled:
            yield
            return
        with self._lock:
            yield


COMPUTE_GATE = ComputeGate()
"""The process's gate, shared by the LLM and the speech recognizer."""
