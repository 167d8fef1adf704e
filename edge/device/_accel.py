"""Which build of llama.cpp to make, and where each model can run: CUDA or the CPU.

Standard library only: ``make setup`` runs this file with the system Python before any
package is installed (``python3 edge/device/_accel.py cmake-args``), and ``edge device``,
``edge serve`` and ``edge bench`` import it. Every probe takes an injectable root and
command runner, so tests run on fake trees.

* **Build**: CUDA needs a GPU (driver, ``nvidia-smi`` or a Jetson) *and* a CUDA compiler
  (``nvcc`` on PATH, in ``$CUDA_HOME/bin`` or ``/usr/local/cuda/bin``); the GPU's compute
  capability comes from ``nvidia-smi --query-gpu=compute_cap`` or, on a Jetson, its SoC
  (``/proc/device-tree/compatible``). Then llama-cpp-python is built with
  ``-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=<sm>``; otherwise for the CPU.
* **Run**: the installed llama.cpp can offload layers when
  ``llama_supports_gpu_offload()`` says so; Whisper runs on CUDA (float16) when the
  installed CTranslate2 sees a CUDA device (``get_cuda_device_count()``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

Run = Callable[[list[str]], str | None]

# Jetson SoCs (``/proc/device-tree/compatible``) and their GPUs' compute capability.
TEGRA_SM = {
    "tegra264": "110",  # Thor
    "tegra234": "87",  # Orin
    "tegra194": "72",  # Xavier
    "tegra186": "62",  # TX2
    "tegra210": "53",  # Nano, TX1
}


def run_command(argv: list[str]) -> str | None:
    """``argv``'s standard output, or None when it cannot run or fails."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _read(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", "replace").replace("\x00", " ")
    except OSError:
        return ""


def find_nvcc(
    root: Path = Path("/"),
    env: dict[str, str] | None = None,
    which: Callable[[str], str | None] = shutil.which,
) -> str | None:
    """The CUDA compiler: on PATH, else ``$CUDA_HOME/bin/nvcc``, else ``/usr/local/cuda``."""
    env = dict(os.environ) if env is None else env
    found = which("nvcc")
    if found:
        return found
    homes = [env.get("CUDA_HOME"), env.get("CUDA_PATH"), "/usr/local/cuda"]
    for home in filter(None, homes):
        if (root / home.lstrip("/") / "bin/nvcc").exists():
            return f"{home.rstrip('/')}/bin/nvcc"
    return None


def jetson_sm(root: Path = Path("/")) -> str | None:
    """A Jetson's GPU architecture from its SoC, None elsewhere."""
    if not (root / "etc/nv_tegra_release").exists():
        return None
    compatible = _read(root / "proc/device-tree/compatible")
    for soc, sm in TEGRA_SM.items():
        if soc in compatible:
            return sm
    return "87"  # an unlisted Jetson: the Orin family, the current one


def nvidia_gpus(run: Run = run_command) -> list[tuple[str, str]]:
    """(name, compute capability as "89") of each GPU ``nvidia-smi`` lists."""
    out = run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"])
    gpus = []
    for line in (out or "").splitlines():
        name, _, cap = line.rpartition(",")
        cap = cap.strip().replace(".", "")
        if name.strip() and cap.isdigit():
            gpus.append((name.strip(), cap))
    return gpus


@dataclass(frozen=True)
class BuildPlan:
    """How ``make setup`` builds llama-cpp-python here, and why."""

    cuda: bool
    arch: str | None
    gpu: str | None
    nvcc: str | None
    reason: str

    def cmake_args(self) -> str:
        if not self.cuda:
            return ""
        return f"-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES={self.arch}"

    def banner(self) -> str:
        if self.cuda:
            return (
                f"llama-cpp-python: CUDA build for {self.gpu} (sm_{self.arch}) with "
                f"{self.nvcc}: {self.reason}"
            )
        return f"llama-cpp-python: CPU build: {self.reason}"


def build_plan(
    root: Path = Path("/"),
    env: dict[str, str] | None = None,
    run: Run = run_command,
    which: Callable[[str], str | None] = shutil.which,
) -> BuildPlan:
    """CUDA when a GPU and nvcc are both here (``EDGE_CUDA_ARCH`` forces an architecture,
    ``EDGE_CUDA_ARCH=none`` the CPU build)."""
    env = dict(os.environ) if env is None else env
    forced = env.get("EDGE_CUDA_ARCH", "").strip()
    if forced.lower() in ("none", "cpu", "0"):
        return BuildPlan(False, None, None, None, "EDGE_CUDA_ARCH=none asks for the CPU build")
    gpus = nvidia_gpus(run)
    jetson = jetson_sm(root)
    gpu, arch = gpus[0] if gpus else ((f"Jetson (sm_{jetson})", jetson) if jetson else ("", ""))
    if forced:
        gpu, arch = gpu or "EDGE_CUDA_ARCH", forced
    if not arch:
        return BuildPlan(False, None, None, None, "no NVIDIA GPU (nvidia-smi, Jetson) found")
    nvcc = find_nvcc(root, env, which)
    if nvcc is None:
        return BuildPlan(
            False,
            arch,
            gpu,
            None,
            f"{gpu} found but no CUDA compiler (nvcc on PATH, $CUDA_HOME/bin or "
            "/usr/local/cuda/bin): install the CUDA toolkit and run make setup again",
        )
    return BuildPlan(True, arch, gpu, nvcc, f"{gpu} and {nvcc} found")


# -- what the installed builds can do --------------------------------------------------


def llama_gpu_offload() -> bool | None:
    """Whether the installed llama.cpp can offload layers to a GPU (None: not installed)."""
    try:
        import llama_cpp
    except ImportError:
        return None
    return bool(llama_cpp.llama_supports_gpu_offload())


def llama_system_info() -> str:
    """llama.cpp's build features (``llama_print_system_info``), "" when not installed."""
    try:
        import llama_cpp
    except ImportError:
        return ""
    raw = llama_cpp.llama_print_system_info()
    return (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)).strip()


def whisper_cuda() -> bool:
    """Whether the installed CTranslate2 can run Whisper on CUDA in float16."""
    try:
        import ctranslate2
    except ImportError:
        return False
    try:
        if ctranslate2.get_cuda_device_count() < 1:
            return False
        return "float16" in ctranslate2.get_supported_compute_types("cuda")
    except (RuntimeError, ValueError):
        return False


def main(argv: list[str]) -> int:
    """``make-vars`` ("ARCH NVCC", empty for the CPU build) | ``cmake-args`` | ``banner``
    | ``require-cuda`` (for the Makefile)."""
    what = argv[0] if argv else "banner"
    plan = build_plan()
    if what == "make-vars":
        print(f"{plan.arch} {plan.nvcc}" if plan.cuda else "")
    elif what == "cmake-args":
        print(plan.cmake_args())
    elif what == "require-cuda":
        if not plan.cuda:
            print(f"no CUDA here: {plan.reason}; make gpu-check needs an NVIDIA GPU and nvcc")
            return 1
        print(plan.banner())
    else:
        print(plan.banner())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
