"""Where each model runs (CUDA or the CPU), and the warning when a profile asks for GPU
layers that this llama.cpp build cannot offload. ``edge device``, ``edge serve`` and
``edge bench`` print it at start."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from ._accel import build_plan, llama_gpu_offload, whisper_cuda

ASK: Any = object()
"""Ask the installed library (the default of :func:`placement`'s probes)."""


class Placement(BaseModel):
    """Each model's device in words, and warnings about GPU layers that cannot be used."""

    model_config = ConfigDict(frozen=True)

    llm: str
    stt: str
    tts: str
    llm_on_gpu: bool
    stt_on_gpu: bool
    warnings: list[str]

    def rows(self) -> dict[str, str]:
        return {"llm runs on": self.llm, "stt runs on": self.stt, "tts runs on": self.tts}


def _layers(n: int) -> str:
    return "every layer" if n < 0 else f"{n} layers"


def stt_device(cuda: bool, compute_type: str) -> tuple[str, str]:
    """(device, compute type) for Whisper: CUDA in float16 where CTranslate2 can, else the
    CPU with the profile's type (a float16 type needs CUDA: int8 then)."""
    if cuda:
        return "cuda", "float16"
    return "cpu", "int8" if "float16" in compute_type else compute_type


def offload_warning(profile: str, requested: int, offload: bool | None) -> str | None:
    """The warning when ``requested`` GPU layers cannot be offloaded by this build."""
    if requested == 0 or offload:
        return None
    build = "is not installed" if offload is None else "was built without GPU offload"
    return (
        f"profile {profile!r} asks for {_layers(requested)} on the GPU, but llama-cpp-python "
        f"{build} (llama_supports_gpu_offload() is false): every layer runs on the CPU. "
        f"make setup builds it with CUDA where it finds a GPU and nvcc; here: "
        f"{build_plan().reason}"
    )


def placement(
    config: Any,
    *,
    gpu_offload: bool | None = ASK,
    stt_cuda: bool = ASK,
    loaded_layers: tuple[int, int] | None = None,
) -> Placement:
    """Where ``config``'s (a :class:`~edge.device.DeviceConfig`) models run. ``gpu_offload``
    and ``stt_cuda`` default to asking the installed llama.cpp and CTranslate2;
    ``loaded_layers`` is (on the GPU, of) from a loaded model (:meth:`LlamaCppLLM.placement`)."""
    offload = llama_gpu_offload() if gpu_offload is ASK else gpu_offload
    stt_cuda = whisper_cuda() if stt_cuda is ASK else stt_cuda
    profile = config.profile
    warnings = [w for w in [offload_warning(profile.name, profile.llm.gpu_layers, offload)] if w]
    on_gpu = bool(config.gpu_layers) and bool(offload)
    if loaded_layers is not None:
        on_gpu = loaded_layers[0] > 0
        layers = f"{loaded_layers[0]}/{loaded_layers[1]} layers on the GPU"
    else:
        layers = f"{_layers(config.gpu_layers)} requested on the GPU"
    llm = f"CUDA ({layers})" if on_gpu else f"CPU ({config.threads} threads)"
    device, compute = stt_device(stt_cuda, profile.audio.stt_compute_type)
    threads = config.stt_threads  # the profile's audio.stt_threads, else the LLM's
    cpu = f"CPU ({compute}, {threads} thread{'s' * (threads != 1)})"
    stt = f"CUDA ({compute})" if device == "cuda" else cpu
    return Placement(
        llm=llm,
        stt=stt,
        tts="CPU (Piper, onnxruntime)",
        llm_on_gpu=on_gpu,
        stt_on_gpu=device == "cuda",
        warnings=warnings,
    )
