"""Shared helpers for the device tests: fake cgroup trees, a catalogue of local files."""

from __future__ import annotations

from pathlib import Path

from edge.catalogue import Catalogue, ModelEntry
from edge.device import HardwareInfo


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def fake_machine(
    root: Path, *, mem_kib: int = 32 * 2**20, cpuinfo: str = "model name\t: Test CPU"
) -> Path:
    write(root, "proc/meminfo", f"MemTotal:       {mem_kib} kB\nMemFree: 1 kB\n")
    write(root, "proc/cpuinfo", cpuinfo + "\n")
    return root


def ci_hardware(**changes: object) -> HardwareInfo:
    base = dict(
        arch="x86_64",
        memory_bytes=24 * 2**30,
        memory_source="test",
        machine_memory_bytes=24 * 2**30,
        cpus=2,
        cpus_source="test",
        cuda=False,
        cuda_source="test",
        board=None,
        cpu_model="Test CPU",
    )
    base.update(changes)
    return HardwareInfo(**base)


def local_catalogue(tmp: Path, *, llm_bytes: bytes = b"GGUF-fake-model") -> Catalogue:
    """The shipped catalogue, with every model replaced by a small local file."""
    entries = []
    for entry in Catalogue.load():
        data = entry.model_dump()
        target = tmp / "models" / entry.id
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(llm_bytes if entry.role == "llm" else b"x")
        data.update(
            package=None,
            file=None,
            version=None,
            path=str(target),
            sha256={},
            derive_from=None,
            quantize=None,
        )
        entries.append(ModelEntry.model_validate(data))
    return Catalogue(entries)
