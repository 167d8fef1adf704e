"""What hardware this process runs on: memory and cores it may use, CUDA, board model.

Every read goes through ``root`` so tests point it at a fake file tree. Memory comes
from the cgroup limit when one is set (v2 ``memory.max``, v1 ``memory.limit_in_bytes``,
the tightest along the cgroup's ancestors), else from ``/proc/meminfo``; cores from the
process's CPU affinity, capped by a cgroup CPU quota. CUDA is seen from the driver's
``/proc/driver/nvidia``, a Jetson's ``/etc/nv_tegra_release``, or ``nvidia-smi`` on PATH;
nothing imports a GPU framework.
"""

from __future__ import annotations

import math
import os
import platform
import shutil
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

UNLIMITED = 2**60  # cgroup v1 reports "no limit" as a huge page-aligned number


class HardwareInfo(BaseModel):
    """Detected figures, each with where it came from."""

    model_config = ConfigDict(frozen=True)

    arch: str
    memory_bytes: int
    memory_source: str
    machine_memory_bytes: int | None
    cpus: int
    cpus_source: str
    cuda: bool
    cuda_source: str
    board: str | None = None
    cpu_model: str | None = None

    def key(self) -> str:
        """Identifies the hardware for calibration reuse (not the limits, which vary)."""
        gpu = "cuda" if self.cuda else "cpu"
        return f"{self.arch}|{self.board or self.cpu_model or 'unknown'}|{self.cpus}cpu|{gpu}"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _cgroup_paths(root: Path) -> tuple[str | None, dict[str, str]]:
    """The process's cgroup v2 path and its v1 paths by controller, from /proc/self/cgroup."""
    text = _read(root / "proc/self/cgroup") or ""
    v2: str | None = None
    v1: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            v2 = path
        for controller in controllers.split(","):
            if controller:
                v1[controller] = path
    return v2, v1


def _ancestors(base: Path, cgroup_path: str) -> list[Path]:
    """The cgroup's directory and its parents up to the hierarchy root, those that exist.

    Inside a container the path named in /proc/self/cgroup often does not exist because the
    hierarchy is mounted at the container's own cgroup; then the mount root is the cgroup.
    """
    parts = [p for p in cgroup_path.split("/") if p]
    dirs = [base.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]
    return [d for d in dirs if d.is_dir()]


def _v1_dirs(root: Path, controller: str, v1: dict[str, str]) -> list[Path]:
    if controller not in v1:
        return []
    cg = root / "sys/fs/cgroup"
    mounts = [cg / controller] + [
        d for d in (cg.iterdir() if cg.is_dir() else []) if controller in d.name.split(",")
    ]
    for mount in mounts:
        if mount.is_dir():
            return _ancestors(mount, v1[controller])
    return []


def _v2_dirs(root: Path, v2: str | None) -> list[Path]:
    if v2 is None:
        return []
    cg = root / "sys/fs/cgroup"
    for mount in (cg, cg / "unified"):
        if (mount / "cgroup.controllers").exists():
            return _ancestors(mount, v2)
    return []


def cgroup_memory_limit(root: Path = Path("/")) -> tuple[int | None, str]:
    """The tightest cgroup memory limit on this process, and where it was read."""
    v2, v1 = _cgroup_paths(root)
    best: tuple[int | None, str] = (None, "no cgroup memory limit")
    for d in _v2_dirs(root, v2):
        value = _read(d / "memory.max")
        if value and value != "max" and value.isdigit():
            limit = int(value)
            if best[0] is None or limit < best[0]:
                best = (limit, f"cgroup v2 {_show(root, d / 'memory.max')}")
    for d in _v1_dirs(root, "memory", v1):
        value = _read(d / "memory.limit_in_bytes")
        if value and value.isdigit() and int(value) < UNLIMITED:
            limit = int(value)
            if best[0] is None or limit < best[0]:
                best = (limit, f"cgroup v1 {_show(root, d / 'memory.limit_in_bytes')}")
    return best


def cgroup_cpu_quota(root: Path = Path("/")) -> tuple[float | None, str]:
    """CPUs' worth of time the cgroup allows (quota / period), and where it was read."""
    v2, v1 = _cgroup_paths(root)
    best: tuple[float | None, str] = (None, "no cgroup CPU quota")
    for d in _v2_dirs(root, v2):
        fields = (_read(d / "cpu.max") or "").split()
        if len(fields) == 2 and fields[0] != "max" and fields[0].isdigit() and fields[1].isdigit():
            cpus = int(fields[0]) / max(1, int(fields[1]))
            if best[0] is None or cpus < best[0]:
                best = (cpus, f"cgroup v2 {_show(root, d / 'cpu.max')}")
    for d in _v1_dirs(root, "cpu", v1):
        quota = _read(d / "cpu.cfs_quota_us")
        period = _read(d / "cpu.cfs_period_us")
        if quota and period and quota.lstrip("-").isdigit() and period.isdigit():
            if int(quota) > 0:
                cpus = int(quota) / max(1, int(period))
                if best[0] is None or cpus < best[0]:
                    best = (cpus, f"cgroup v1 {_show(root, d / 'cpu.cfs_quota_us')}")
    return best


def machine_memory(root: Path = Path("/")) -> int | None:
    for line in (_read(root / "proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            fields = line.split()
            if len(fields) >= 2 and fields[1].isdigit():
                return int(fields[1]) * 1024
    return None


def _show(root: Path, path: Path) -> str:
    try:
        return "/" + str(path.relative_to(root))
    except ValueError:
        return str(path)


def normalise_arch(name: str) -> str:
    lowered = name.lower()
    return {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}.get(lowered, lowered)


def detect_cuda(
    root: Path = Path("/"), which: Callable[[str], str | None] = shutil.which
) -> tuple[bool, str]:
    if (root / "proc/driver/nvidia/version").exists():
        return True, "NVIDIA driver present (/proc/driver/nvidia/version)"
    if (root / "etc/nv_tegra_release").exists():
        return True, "Jetson L4T present (/etc/nv_tegra_release)"
    smi = which("nvidia-smi")
    if smi:
        return True, f"nvidia-smi on PATH ({smi})"
    return False, "no NVIDIA driver, L4T release file or nvidia-smi found"


def detect_hardware(
    root: Path = Path("/"),
    *,
    affinity: set[int] | None = None,
    arch: str | None = None,
    which: Callable[[str], str | None] = shutil.which,
) -> HardwareInfo:
    """Detect this machine's usable memory, cores and accelerator (``root`` for tests)."""
    total = machine_memory(root)
    limit, limit_source = cgroup_memory_limit(root)
    if limit is not None and (total is None or limit < total):
        memory, memory_source = limit, limit_source
    elif total is not None:
        memory, memory_source = (
            total,
            "/proc/meminfo MemTotal"
            + (f" (cgroup limit {limit} is higher)" if limit is not None else ""),
        )
    else:
        memory, memory_source = 0, "unknown: no cgroup limit and no /proc/meminfo"

    if affinity is None:
        try:
            affinity = os.sched_getaffinity(0)
        except AttributeError:  # pragma: no cover - not Linux
            affinity = set(range(os.cpu_count() or 1))
    cpus, cpus_source = len(affinity), f"CPU affinity ({len(affinity)} cores allowed)"
    quota, quota_source = cgroup_cpu_quota(root)
    if quota is not None and math.ceil(quota) < cpus:
        cpus, cpus_source = max(1, math.ceil(quota)), f"{quota_source} = {quota:g} CPUs"

    cuda, cuda_source = detect_cuda(root, which)
    board = _read(root / "proc/device-tree/model")
    board = board.rstrip("\x00") if board else None
    cpu_model = None
    for line in (_read(root / "proc/cpuinfo") or "").splitlines():
        if line.lower().startswith(("model name", "hardware")):
            cpu_model = line.split(":", 1)[1].strip()
            break
    return HardwareInfo(
        arch=normalise_arch(arch or platform.machine()),
        memory_bytes=memory,
        memory_source=memory_source,
        machine_memory_bytes=total,
        cpus=cpus,
        cpus_source=cpus_source,
        cuda=cuda,
        cuda_source=cuda_source,
        board=board or None,
        cpu_model=cpu_model,
    )
