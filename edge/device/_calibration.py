"""Calibration: measured speed and sizes of the profile's LLM on this machine.

``edge device --calibrate`` measures prompt-evaluation speed, generation speed and UTF-8
bytes per token through :class:`edge.llm.LlamaCppLLM` (the serving path: its scheduler and
chat template), and the KV bytes per token and fixed size of a saved state with llama.cpp
directly. The result is stored as JSON next to the user's configuration
(``$EDGE_CONFIG_DIR/calibration.json``, else ``~/.config/edge/calibration.json``), keyed by
the model (its catalogued SHA-256, else its size and modification time) and the hardware
and settings (arch, board or CPU model, cores, CUDA, threads, GPU layers, llama.cpp
version); later starts reuse it until one of those changes.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, ValidationError

from edge.catalogue import ModelEntry

from ._detect import HardwareInfo
from ._profile import Speed

STORE_VERSION = 1


class CalibrationError(RuntimeError):
    """Calibration could not run or its store is unreadable."""


class Measurement(Speed):
    """What one calibration run measured: the model's :class:`Speed` and how it went."""

    model_config = ConfigDict(frozen=True)

    load_s: float = Field(ge=0)
    prompt_tokens: int = Field(gt=0)
    generated_tokens: int = Field(gt=0)
    backend: str
    load_average: float | None = Field(
        default=None, description="1-minute load average while measuring (busy = pessimistic)"
    )
    repeats: int = Field(default=1, ge=1, description="runs; the fastest counts")
    cpu_share: float | None = Field(
        default=None,
        description="CPU time the measurement got / (wall time x threads); well under 1 "
        "means other work competed for the cores",
    )
    slowest_prompt_tokens_per_s: float | None = None
    slowest_generation_tokens_per_s: float | None = None


class Calibration(Measurement):
    model_id: str
    model_key: str
    hardware_key: str
    measured_at: str

    @property
    def store_key(self) -> str:
        return f"{self.model_key}#{self.hardware_key}"


def config_dir(env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    if env.get("EDGE_CONFIG_DIR"):
        return Path(env["EDGE_CONFIG_DIR"]).expanduser()
    return Path("~/.config/edge").expanduser()


def model_key(entry: ModelEntry, path: Path) -> str:
    """The catalogued digest identifies the file; without one, its size and mtime do."""
    digest = entry.sha256.get(".")
    if digest:
        return f"{entry.id}@sha256:{digest[:16]}"
    stat = path.stat()
    return f"{entry.id}@size:{stat.st_size}:mtime:{int(stat.st_mtime)}"


def llama_cpp_version() -> str:
    try:
        return metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        return "none"


def hardware_key(hardware: HardwareInfo, *, threads: int, gpu_layers: int) -> str:
    return f"{hardware.key()}|threads={threads}|ngl={gpu_layers}|llama-cpp={llama_cpp_version()}"


class CalibrationStore:
    """The JSON file of calibrations; one entry per (model, hardware) key."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def default(cls, env: dict[str, str] | None = None) -> CalibrationStore:
        return cls(config_dir(env) / "calibration.json")

    def load_all(self) -> dict[str, Calibration]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, json.JSONDecodeError) as exc:
            raise CalibrationError(
                f"calibration file {self.path} is unreadable ({exc}); delete it and run "
                "edge device --calibrate again"
            ) from None
        if not isinstance(raw, dict) or raw.get("version") != STORE_VERSION:
            return {}  # an older format: measure again
        out: dict[str, Calibration] = {}
        for key, value in (raw.get("entries") or {}).items():
            try:
                out[key] = Calibration.model_validate(value)
            except ValidationError:
                continue  # a damaged entry is measured again, the others are kept
        return out

    def get(self, model_key: str, hardware_key: str) -> Calibration | None:
        return self.load_all().get(f"{model_key}#{hardware_key}")

    def put(self, calibration: Calibration) -> None:
        entries = self.load_all()
        entries[calibration.store_key] = calibration
        payload = {
            "version": STORE_VERSION,
            "entries": {k: v.model_dump() for k, v in entries.items()},
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)


Measure = Callable[[Path, int, int], Awaitable[Measurement]]


async def calibrate(
    entry: ModelEntry,
    path: Path,
    hardware: HardwareInfo,
    *,
    threads: int,
    gpu_layers: int,
    store: CalibrationStore,
    measure: Measure | None = None,
    force: bool = False,
) -> tuple[Calibration, bool]:
    """The stored calibration for this model and hardware, or a fresh one (then stored).

    Returns ``(calibration, reused)``. ``measure`` defaults to :func:`measure_llm`.
    """
    mkey = model_key(entry, path)
    hkey = hardware_key(hardware, threads=threads, gpu_layers=gpu_layers)
    if not force:
        found = store.get(mkey, hkey)
        if found is not None:
            return found, True
    measured = await (measure or measure_llm)(path, threads, gpu_layers)
    calibration = Calibration(
        **measured.model_dump(),
        model_id=entry.id,
        model_key=mkey,
        hardware_key=hkey,
        measured_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )
    store.put(calibration)
    return calibration, False


def calibration_text() -> str:
    return resources.files(__package__).joinpath("calibration_text.txt").read_text("utf-8")


GENERATION_PROMPT = (
    "Write a long, detailed story about a lighthouse keeper who repairs an old radio. "
    "Do not stop early."
)


async def measure_llm(
    path: Path,
    threads: int,
    gpu_layers: int,
    *,
    generate_tokens: int = 32,
    repeats: int = 3,
) -> Measurement:
    """Measure the model at ``path`` through the service, plus its KV state sizes.

    Prompt evaluation (the ~600-token calibration text, under a fresh cache key each time)
    and generation (``generate_tokens`` tokens) run ``repeats`` times and the fastest run
    counts: other work on the machine only ever slows a run down, so the best of a few
    short runs estimates what the hardware does when the service has it; the slowest run
    is kept alongside.
    """
    try:
        from edge.llm import LlamaCppLLM
    except ImportError as exc:  # pragma: no cover - llama-cpp-python missing
        raise CalibrationError(f"calibration needs llama-cpp-python: {exc}") from None
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    text = calibration_text()
    load_before = _load_average()
    started = time.perf_counter()
    llm = LlamaCppLLM(path, n_ctx=2048, n_threads=threads, n_gpu_layers=gpu_layers, temperature=0.0)
    async with llm:
        load_s = time.perf_counter() - started
        tokens = llm.count_tokens(text)
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        runs = [await measure_run(llm, text, run, generate_tokens) for run in range(repeats)]
        cpu_share = (time.process_time() - cpu_start) / (
            max(1e-9, time.perf_counter() - wall_start) * threads
        )
        kv_per_token, overhead = await measure_state_sizes(llm)
    prompt_speeds = [run.prompt_tokens_per_s for run in runs]
    gen_speeds = [run.generation_tokens_per_s for run in runs]
    return Measurement(
        prompt_tokens_per_s=max(prompt_speeds),
        generation_tokens_per_s=max(gen_speeds),
        slowest_prompt_tokens_per_s=min(prompt_speeds),
        slowest_generation_tokens_per_s=min(gen_speeds),
        repeats=repeats,
        text_bytes_per_token=len(text.encode("utf-8")) / tokens,
        kv_bytes_per_token=kv_per_token,
        state_overhead_bytes=overhead,
        load_s=load_s,
        prompt_tokens=runs[-1].prompt_tokens,
        generated_tokens=runs[-1].generated_tokens,
        backend=f"edge.llm.LlamaCppLLM (llama-cpp-python {llama_cpp_version()})",
        load_average=load_before,
        cpu_share=round(cpu_share, 3),
    )


@dataclass(frozen=True)
class SpeedRun:
    prompt_tokens_per_s: float
    generation_tokens_per_s: float
    prompt_tokens: int
    generated_tokens: int


async def measure_run(llm: Any, text: str, run: int, generate_tokens: int) -> SpeedRun:
    """One prompt evaluation of the calibration text (a fresh cache key) and one generation:
    the figures ``edge device --calibrate`` stores and ``edge bench`` reports."""
    from edge.llm import Priority

    messages = [{"role": "user", "content": f"Transcript {run + 1}:\n{text}"}]
    prompt = await llm.warm(
        messages, cache_key=f"calibrate-prompt-{run}", priority=Priority.INTERACTIVE
    )
    if not prompt.prompt_eval_s or prompt.evaluated_tokens < 32:
        raise CalibrationError("prompt evaluation was not measured (prompt reused?)")
    reply = await llm.chat(
        [{"role": "user", "content": GENERATION_PROMPT}],
        max_tokens=generate_tokens,
        temperature=0.0,
        cache_key=f"calibrate-generate-{run}",
    )
    if reply.metrics.tokens_per_s is None:
        raise CalibrationError(
            f"generation produced only {reply.metrics.generated_tokens} tokens; "
            "cannot measure its speed"
        )
    return SpeedRun(
        prompt.evaluated_tokens / prompt.prompt_eval_s,
        reply.metrics.tokens_per_s,
        prompt.evaluated_tokens,
        reply.metrics.generated_tokens,
    )


def _load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:  # pragma: no cover - not available on this platform
        return 0.0


async def measure_state_sizes(llm: Any) -> tuple[int, int]:
    """Bytes per token of a saved KV state and its fixed part (logits, header): states
    holding 64 and 128 tokens are saved and their sizes compared."""
    first = await llm.state_bytes(64)
    second = await llm.state_bytes(128)
    per_token = (second - first) // 64
    if per_token <= 0:
        raise CalibrationError(f"saved state did not grow with tokens ({first} -> {second} bytes)")
    return per_token, max(0, first - 64 * per_token)
