"""Converting a GGUF model to another weight format with llama.cpp's own quantizer."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from ._engine import route_llama_logs
from ._types import ModelLoadError

FTYPES = {"q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0"}
"""Formats to convert to, by llama.cpp's file-type constant (the catalogue offers q8_0)."""


def quantize_gguf(source: Path, target: Path, kind: str, *, threads: int | None = None) -> None:
    """Write ``source``'s weights to ``target`` in format ``kind`` (e.g. ``"q8_0"``).

    Converting an already quantized file is allowed: q8_0 holds a 4-bit model's weights
    almost exactly, and llama.cpp's batched prompt kernels for it are faster on x86.
    The output is the same bytes for the same input and llama.cpp version."""
    if kind not in FTYPES:
        raise ValueError(f"unknown weight format {kind!r}; known: {', '.join(FTYPES)}")
    import llama_cpp

    route_llama_logs()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, FTYPES[kind])
    params.allow_requantize = True
    params.nthread = threads or os.cpu_count() or 1
    code = llama_cpp.llama_model_quantize(
        str(source).encode(), str(target).encode(), ctypes.byref(params)
    )
    if code != 0:
        raise ModelLoadError(f"llama.cpp could not convert {source} to {kind} (code {code})")
