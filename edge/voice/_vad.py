"""Streaming Silero voice-activity detection on onnxruntime (no torch).

faster-whisper ships Silero VAD v6 as ONNX. The model reads 512-sample windows at
16 kHz, each preceded by the previous window's last 64 samples, and carries an LSTM
state (``h``, ``c``) from window to window. One :class:`SileroVAD` keeps that state for
one audio stream; the ONNX session itself is shared (onnxruntime sessions are safe to
run from several threads).
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

WINDOW = 512
CONTEXT = 64
VAD_RATE = 16_000
_STATE_SHAPE = (1, 1, 128)


class VadModelMissingError(FileNotFoundError):
    """The Silero ONNX file could not be found."""


def default_vad_path() -> Path:
    """The Silero VAD ONNX file that faster-whisper installs."""
    spec = importlib.util.find_spec("faster_whisper")
    if spec is None or spec.origin is None:
        raise VadModelMissingError(
            "the VAD model ships with faster-whisper, which is not installed: "
            "pip install faster-whisper"
        )
    assets = Path(spec.origin).parent / "assets"
    found = sorted(assets.glob("silero_vad*.onnx"))
    if not found:
        raise VadModelMissingError(f"no silero_vad*.onnx in {assets}")
    return found[-1]


@functools.lru_cache(maxsize=4)
def _session(path: str) -> Any:  # an onnxruntime.InferenceSession (no type hints)
    import onnxruntime

    opts = onnxruntime.SessionOptions()
    opts.inter_op_num_threads = 1
    opts.intra_op_num_threads = 1
    opts.enable_cpu_mem_arena = False
    opts.log_severity_level = 4
    return onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"], sess_options=opts)


class SileroVAD:
    """Speech probability per 32 ms window of a 16 kHz stream, keeping state across calls.

    :meth:`process` takes any number of samples and returns one probability per complete
    window; samples short of a window wait for the next call.
    """

    window = WINDOW
    sample_rate = VAD_RATE

    def __init__(self, model_path: Path | str | None = None) -> None:
        path = Path(model_path) if model_path is not None else default_vad_path()
        if not path.exists():
            raise VadModelMissingError(f"VAD model not found at {path}")
        self._session = _session(str(path))
        self.reset()

    def reset(self) -> None:
        self._h = np.zeros(_STATE_SHAPE, dtype=np.float32)
        self._c = np.zeros(_STATE_SHAPE, dtype=np.float32)
        self._context = np.zeros(CONTEXT, dtype=np.float32)
        self._pending = np.zeros(0, dtype=np.float32)

    def process(self, audio: np.ndarray) -> np.ndarray:
        """Probabilities (float32, one per complete window) for ``audio`` appended to the stream."""
        audio = np.concatenate([self._pending, np.asarray(audio, dtype=np.float32)])
        count = len(audio) // WINDOW
        self._pending = audio[count * WINDOW :]
        if count == 0:
            return np.zeros(0, dtype=np.float32)
        windows = audio[: count * WINDOW].reshape(count, WINDOW)
        contexts = np.empty((count, CONTEXT), dtype=np.float32)
        contexts[0] = self._context
        contexts[1:] = windows[:-1, -CONTEXT:]
        self._context = windows[-1, -CONTEXT:].copy()
        batch = np.concatenate([contexts, windows], axis=1)
        out, self._h, self._c = self._session.run(
            None, {"input": batch, "h": self._h, "c": self._c}
        )
        return np.asarray(out, dtype=np.float32).reshape(count, -1)[:, 0]
