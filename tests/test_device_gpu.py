"""GPU builds and placement, on this CPU machine: which llama.cpp build `make setup` makes
(fake GPUs and compilers), where each model runs, the warning when a profile asks for GPU
layers the build cannot offload, and `make gpu-check` refusing without CUDA."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from device_helpers import ci_hardware, write

from edge.cli import main
from edge.device import build_plan, load_device_config, offload_warning, placement, stt_device
from edge.device._accel import find_nvcc, jetson_sm, nvidia_gpus

REPO = Path(__file__).resolve().parent.parent
SMI = "NVIDIA H200, 9.0\n"


def smi(output: str | None):
    return lambda argv: output if argv[0] == "nvidia-smi" else None


def no_which(_name: str) -> None:
    return None


def test_nvidia_smi_compute_capability() -> None:
    assert nvidia_gpus(smi(SMI)) == [("NVIDIA H200", "90")]
    assert nvidia_gpus(smi("NVIDIA GeForce RTX 4090, 8.9\nNVIDIA T4, 7.5")) == [
        ("NVIDIA GeForce RTX 4090", "89"),
        ("NVIDIA T4", "75"),
    ]
    assert nvidia_gpus(smi(None)) == []
    assert nvidia_gpus(smi("garbage")) == []


def test_jetson_architecture_from_its_soc(tmp_path: Path) -> None:
    assert jetson_sm(tmp_path) is None
    write(tmp_path, "etc/nv_tegra_release", "# R36 (release), REVISION: 3.0")
    write(tmp_path, "proc/device-tree/compatible", "nvidia,p3768\x00nvidia,tegra234\x00")
    assert jetson_sm(tmp_path) == "87"
    write(tmp_path, "proc/device-tree/compatible", "nvidia,tegra194\x00")
    assert jetson_sm(tmp_path) == "72"


def test_nvcc_on_path_cuda_home_or_usr_local(tmp_path: Path) -> None:
    assert find_nvcc(tmp_path, {}, lambda n: "/opt/bin/nvcc") == "/opt/bin/nvcc"
    assert find_nvcc(tmp_path, {}, no_which) is None
    write(tmp_path, "usr/local/cuda/bin/nvcc", "")
    assert find_nvcc(tmp_path, {}, no_which) == "/usr/local/cuda/bin/nvcc"
    write(tmp_path, "opt/cuda-12/bin/nvcc", "")
    assert find_nvcc(tmp_path, {"CUDA_HOME": "/opt/cuda-12"}, no_which) == "/opt/cuda-12/bin/nvcc"


def test_build_plan_cuda_needs_a_gpu_and_a_compiler(tmp_path: Path) -> None:
    cpu = build_plan(tmp_path, {}, smi(None), no_which)
    assert not cpu.cuda and cpu.cmake_args() == "" and "no NVIDIA GPU" in cpu.banner()
    gpu_no_nvcc = build_plan(tmp_path, {}, smi(SMI), no_which)
    assert not gpu_no_nvcc.cuda and "no CUDA compiler" in gpu_no_nvcc.reason
    write(tmp_path, "usr/local/cuda/bin/nvcc", "")
    plan = build_plan(tmp_path, {}, smi(SMI), no_which)
    assert plan.cuda and plan.arch == "90"
    assert plan.cmake_args() == "-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90"
    assert "CUDA build for NVIDIA H200 (sm_90)" in plan.banner()
    write(tmp_path, "etc/nv_tegra_release", "# R36")
    write(tmp_path, "proc/device-tree/compatible", "nvidia,tegra234")
    jetson = build_plan(tmp_path, {}, smi(None), no_which)
    assert jetson.cuda and jetson.arch == "87"
    assert not build_plan(tmp_path, {"EDGE_CUDA_ARCH": "none"}, smi(SMI), no_which).cuda
    assert build_plan(tmp_path, {"EDGE_CUDA_ARCH": "86"}, smi(None), no_which).arch == "86"


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_makefile_cpu_wheel_cache_unchanged_and_cuda_cache_separate() -> None:
    cpu = subprocess.run(
        ["make", "-n", "setup", "CUDA_PLAN=", "VENV=/nonexistent-venv"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    assert "wheels/llama-cpp-python-0.3.36-noamx " in cpu  # the CI cache's path
    assert "GGML_CUDA" not in cpu and "--force-reinstall" not in cpu
    cuda = subprocess.run(
        ["make", "-n", "setup", "CUDA_PLAN=90 /usr/local/cuda/bin/nvcc", "VENV=/nonexistent-venv"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    assert "-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90" in cuda
    assert "CUDACXX=/usr/local/cuda/bin/nvcc" in cuda
    assert "llama-cpp-python-0.3.36-noamx-cuda-sm90" in cuda
    assert "--force-reinstall llama-cpp-python" in cuda


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_gpu_check_says_there_is_no_cuda_and_fails() -> None:
    if build_plan().cuda:
        pytest.skip("this machine has CUDA")
    done = subprocess.run(
        ["make", "gpu-check", f"PYTHON={sys.executable}", "VENV=/nonexistent-venv"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "no CUDA here" in done.stdout + done.stderr


def gpu_profile(tmp_path: Path) -> Path:
    text = (REPO / "firmware-config/ci-2core-24gb.toml").read_text()
    text = text.replace('name = "ci-2core-24gb"', 'name = "ci-gpu"')
    text = text.replace('accelerator = "none"', 'accelerator = "cuda"')
    text = text.replace("gpu_layers = 0", "gpu_layers = -1")
    return write(tmp_path, "ci-gpu.toml", text)


def test_placement_warns_when_the_build_cannot_offload(tmp_path: Path) -> None:
    config = load_device_config(str(gpu_profile(tmp_path)), detect=False)
    cpu_build = placement(config, gpu_offload=False, stt_cuda=False)
    assert cpu_build.llm.startswith("CPU") and not cpu_build.llm_on_gpu
    (warning,) = cpu_build.warnings
    assert "asks for every layer on the GPU" in warning
    assert "llama_supports_gpu_offload() is false" in warning
    cuda_build = placement(config, gpu_offload=True, stt_cuda=True)
    assert cuda_build.warnings == [] and cuda_build.llm_on_gpu
    assert cuda_build.llm == "CUDA (every layer requested on the GPU)"
    assert cuda_build.stt == "CUDA (float16)"
    loaded = placement(config, gpu_offload=True, stt_cuda=False, loaded_layers=(31, 31))
    assert loaded.llm == "CUDA (31/31 layers on the GPU)" and loaded.stt.startswith("CPU (int8")
    assert offload_warning("x", 0, False) is None
    assert "is not installed" in (offload_warning("x", 8, None) or "")


def test_a_cpu_profile_has_no_warning_and_no_cuda_drops_gpu_layers(tmp_path: Path) -> None:
    ci = load_device_config("ci-2core-24gb", detect=False)
    assert placement(ci, gpu_offload=False, stt_cuda=False).warnings == []
    where = placement(ci, gpu_offload=False, stt_cuda=False)
    # Whisper's own threads (the profile's audio.stt_threads: 1), not the LLM's (2)
    assert (where.stt, where.llm) == ("CPU (int8, 1 thread)", "CPU (2 threads)")
    assert stt_device(False, "float16") == ("cpu", "int8")
    assert stt_device(True, "int8") == ("cuda", "float16")
    from edge.device._config import _place

    place = _place(
        load_device_config(str(gpu_profile(tmp_path)), detect=False).profile, ci_hardware()
    )
    assert place.gpu_layers == 0 and "no CUDA" in place.notes[0]


def test_edge_device_prints_where_models_run_and_the_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDGE_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["device", "--profile", str(gpu_profile(tmp_path)), "--no-detect"]) == 0
    out = capsys.readouterr().out
    assert "Where each model runs" in out and "llm runs on" in out
    assert "warning:" in out and "llama_supports_gpu_offload() is false" in " ".join(out.split())


def test_whisper_settings_pick_cuda_float16_when_ctranslate2_can() -> None:
    from edge.voice import SttSettings

    audio = load_device_config("ci-2core-24gb", detect=False).profile.audio
    on_gpu = SttSettings.for_device(audio, threads=2, cpu_only=False, cuda=True)
    assert (on_gpu.device, on_gpu.compute_type) == ("cuda", "float16")
    on_cpu = SttSettings.for_device(audio, threads=2, cpu_only=True, cuda=False)
    assert (on_cpu.device, on_cpu.compute_type) == ("cpu", "int8")


@pytest.mark.gpu
def test_llm_offloads_every_layer_on_cuda() -> None:
    """On a CUDA machine with the CUDA build: every layer of the default model on the GPU."""
    import anyio

    from edge.llm import LlamaCppLLM

    async def go() -> tuple[int, int] | None:
        async with LlamaCppLLM(n_ctx=512, n_gpu_layers=-1) as llm:
            return llm.gpu_layers

    loaded, total = anyio.run(go) or (0, 0)
    assert loaded == total > 0


@pytest.mark.model
def test_a_cpu_build_loads_no_layer_on_the_gpu() -> None:
    import anyio

    from edge.llm import LlamaCppLLM

    async def go() -> tuple[int, int] | None:
        async with LlamaCppLLM(n_ctx=512, n_gpu_layers=-1) as llm:
            return llm.gpu_layers

    assert anyio.run(go) == (0, 31)  # SmolLM2-135M: 30 layers and the output layer


@pytest.mark.anyio
async def test_the_service_warns_at_start_about_gpu_layers_it_cannot_offload(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A CUDA profile on this machine's CPU build: `edge serve` notes where the LLM runs
    and warns (its log and the start-up banner's notes)."""
    from server_helpers import settings

    from edge.decisions import ScriptedDecisions
    from edge.llm import ScriptedLLM
    from edge.server import EdgeService

    service = EdgeService(
        settings(profile=str(gpu_profile(tmp_path))),
        llm=ScriptedLLM(),
        decisions=ScriptedDecisions(default="conversation"),
    )
    if service.placement() is None or not service.device.profile.llm.gpu_layers:
        pytest.fail("the service did not take the GPU profile")
    with caplog.at_level("WARNING", logger="edge.server"):
        async with service:
            info = service.describe()
    assert info["backends"]["llm runs on"].startswith("CPU")
    if not service.placement().warnings:
        pytest.skip("this llama.cpp build can offload")
    assert any("GPU" in n and "llama_supports_gpu_offload" in n for n in info["notes"])
    assert any("llama_supports_gpu_offload" in r.getMessage() for r in caplog.records)


@pytest.mark.gpu
def test_whisper_runs_on_cuda_in_float16() -> None:
    from edge.bench import spoken_question
    from edge.device import whisper_cuda
    from edge.voice import WhisperSTT

    assert whisper_cuda(), "CTranslate2 sees no CUDA device (its CUDA libraries missing?)"
    stt = WhisperSTT(device="cuda", compute_type="float16")
    assert "France" in stt.transcribe(spoken_question().audio_16k).text
