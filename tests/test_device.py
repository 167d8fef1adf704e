"""Device profiles, detection, calibration storage and budget derivation (no model)."""

from __future__ import annotations

import json
import math
import os
import platform
import tomllib
from pathlib import Path

import pytest
from device_helpers import ci_hardware, fake_machine, local_catalogue, write

from edge.catalogue import Catalogue
from edge.device import (
    PROFILE_DIR,
    BudgetError,
    BudgetInputs,
    CalibrationError,
    CalibrationStore,
    Measurement,
    ProfileError,
    budget_inputs,
    calibrate,
    choose_profile,
    derive_budgets,
    derive_for_profile,
    detect_hardware,
    load_device_config,
    load_profiles,
    parse_profile,
)
from edge.device._budgets import TOKEN_MARGIN
from edge.device._detect import normalise_arch
from edge.routing import RouterConfig

pytestmark = pytest.mark.anyio

SHIPPED = sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))


def raw(name: str = "ci-2core-24gb") -> dict:
    return tomllib.loads((PROFILE_DIR / f"{name}.toml").read_text())


def check_rules(inputs: BudgetInputs, b) -> None:
    """The spec's rules and the window fit, recomputed independently of the derivation."""
    bpt = inputs.text_bytes_per_token * TOKEN_MARGIN

    def tok(n: float) -> int:
        return math.ceil(n / bpt)

    largest = max(b.dialogue_budget_bytes, b.topic_budget_bytes if inputs.context_topics else 0)
    assert b.compaction_input_budget_bytes >= largest // 2 + 256
    answer = (
        inputs.prompt_overhead_tokens
        + inputs.request_tokens
        + tok(b.dialogue_budget_bytes)
        + inputs.context_topics * tok(b.topic_budget_bytes)
    )
    assert answer + inputs.reserved_output_tokens <= inputs.context_window
    compaction = (
        inputs.compaction_overhead_tokens + tok(b.compaction_input_budget_bytes) + tok(largest / 4)
    )
    assert compaction <= inputs.context_window
    routing = inputs.routing_overhead_tokens + inputs.request_tokens
    assert routing + tok(b.router_context_budget_bytes) <= inputs.context_window
    assert b.warm_participants >= 1
    assert b.kv_cache_budget_bytes <= b.memory_left_bytes
    assert b.kv_cache_budget_bytes >= b.per_participant_kv_bytes


# -- every shipped profile ----------------------------------------------------------------
def test_the_required_hardware_classes_ship() -> None:
    assert len(SHIPPED) >= 6
    for needed in ("jetson-orin-nano", "jetson-agx-orin", "raspberry-pi-5", "xr2", "laptop", "ci"):
        assert any(needed in name for name in SHIPPED), needed


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profile_validates_and_fits_its_window(name: str) -> None:
    catalogue = Catalogue.load()
    profile = load_profiles(catalogue=catalogue)[name]
    inputs, _ = budget_inputs(profile, catalogue)
    budgets = derive_budgets(inputs)
    check_rules(inputs, budgets)
    assert budgets.expected_cold_ttft_s <= profile.latency.cold_ttft_s + 1e-6
    assert budgets.expected_warm_ttft_s <= profile.latency.warm_ttft_s
    assert budgets.dialogue_budget_bytes >= 1024


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("speed", [0.5, 1.0, 3.0, 20.0])
@pytest.mark.parametrize("bpt", [2.5, 4.5])
def test_derivation_satisfies_the_rules_or_rejects(name: str, speed: float, bpt: float) -> None:
    """Over a grid of calibrated speeds the result obeys every rule or is rejected clearly."""
    catalogue = Catalogue.load()
    profile = load_profiles(catalogue=catalogue)[name]
    inputs, _ = budget_inputs(profile, catalogue)
    inputs = inputs.model_copy(
        update={
            "prompt_tokens_per_s": inputs.prompt_tokens_per_s * speed,
            "generation_tokens_per_s": inputs.generation_tokens_per_s * speed,
            "text_bytes_per_token": bpt,
        }
    )
    # Every shipped profile must derive at its own stated speed with typical English text
    # (4.5 bytes/token) and at any faster speed; only slower or denser cases may be rejected.
    must_derive = speed >= 3.0 or (speed == 1.0 and bpt == 4.5)
    try:
        budgets = derive_budgets(inputs)
    except BudgetError as exc:
        assert not must_derive, f"{name} at x{speed}, {bpt} B/token was rejected: {exc}"
        assert "raise" in str(exc) or "lower" in str(exc)
        return
    check_rules(inputs, budgets)


def test_faster_prompts_give_larger_budgets_until_the_window_binds() -> None:
    catalogue = Catalogue.load()
    profile = load_profiles(catalogue=catalogue)["ci-2core-24gb"]
    inputs, _ = budget_inputs(profile, catalogue)
    slow = derive_budgets(inputs)
    fast = derive_budgets(inputs.model_copy(update={"prompt_tokens_per_s": 2400}))
    huge = derive_budgets(inputs.model_copy(update={"prompt_tokens_per_s": 1e6}))
    assert slow.bound_by == "latency"
    assert fast.dialogue_budget_bytes > slow.dialogue_budget_bytes
    assert huge.bound_by == "context window"
    check_rules(inputs, huge)


def test_measured_speeds_too_slow_for_the_targets_warn_instead_of_rejecting() -> None:
    """A slow (or busy) machine still starts, with the minimum budgets and a warning."""
    catalogue = Catalogue.load()
    profile = load_profiles(catalogue=catalogue)["ci-2core-24gb"]
    inputs, _ = budget_inputs(profile, catalogue)
    slow = inputs.model_copy(update={"prompt_tokens_per_s": 20.0, "generation_tokens_per_s": 3.0})
    with pytest.raises(BudgetError, match=r"at least \d+\.\d s"):
        derive_budgets(slow)
    budgets = derive_budgets(slow.model_copy(update={"strict_latency": False}))
    assert budgets.bound_by == "minimum sizes"
    assert (budgets.dialogue_budget_bytes, budgets.topic_budget_bytes) == (1024, 512)
    assert any("cold_ttft_s" in w for w in budgets.warnings)
    assert any("warm TTFT" in w for w in budgets.warnings)
    check_rules(slow, budgets)


# -- schema errors ------------------------------------------------------------------------
def test_unknown_key_is_named() -> None:
    data = raw()
    data["llm"]["context_windw"] = 4096
    with pytest.raises(ProfileError, match=r"llm\.context_windw: unknown key"):
        parse_profile(data, origin="test.toml")


@pytest.mark.parametrize(
    ("section", "key", "value", "message"),
    [
        ("device", "service_memory_gib", 64, "more than the device's memory_gib"),
        ("llm", "threads", 0, r"llm\.threads"),
        ("llm", "threads", 64, "more than twice device.cpu_cores"),
        ("latency", "warm_ttft_s", 20.0, "cannot exceed cold_ttft_s"),
        ("expected", "prompt_tokens_per_s", -3, r"expected\.prompt_tokens_per_s"),
        ("llm", "gpu_layers", -1, "needs 'cuda'"),
    ],
)
def test_impossible_values_are_named(section: str, key: str, value: object, message: str) -> None:
    data = raw()
    data[section][key] = value
    with pytest.raises(ProfileError, match=message):
        parse_profile(data, origin="test.toml")


def test_model_not_in_catalogue() -> None:
    data = raw()
    data["models"]["llm"] = "gpt-17"
    with pytest.raises(ProfileError, match=r"models\.llm: unknown model 'gpt-17'.*smollm2"):
        parse_profile(data, origin="test.toml")


def test_model_in_the_wrong_role() -> None:
    data = raw()
    data["models"]["llm"] = "whisper-tiny.en-ct2"
    with pytest.raises(ProfileError, match="is a stt model"):
        parse_profile(data, origin="test.toml")


def test_window_larger_than_the_model_trained_context() -> None:
    data = raw()
    data["llm"]["context_window"] = 16384
    with pytest.raises(ProfileError, match=r"context length \(8192\)"):
        parse_profile(data, origin="test.toml")


# -- impossible combinations --------------------------------------------------------------
def derive(data: dict):
    return derive_for_profile(parse_profile(data, origin="test.toml"))


def test_cold_target_too_tight_names_the_target_and_what_it_needs() -> None:
    data = raw()
    data["latency"]["cold_ttft_s"] = 2.0
    data["latency"]["warm_ttft_s"] = 1.5
    with pytest.raises(BudgetError, match=r"latency\.cold_ttft_s \(2 s\).*at least \d+\.\d s"):
        derive(data)


def test_window_too_small_for_the_reserved_output() -> None:
    data = raw()
    data["llm"]["context_window"] = 600
    data["llm"]["reserved_output_tokens"] = 400
    with pytest.raises(BudgetError, match=r"llm\.context_window \(600\)"):
        derive(data)


def test_memory_too_small_names_service_memory() -> None:
    data = raw()
    data["device"]["service_memory_gib"] = 0.5
    with pytest.raises(BudgetError, match=r"device\.service_memory_gib"):
        derive(data)


def test_warm_target_too_tight() -> None:
    data = raw()
    data["latency"]["warm_ttft_s"] = 0.2
    with pytest.raises(BudgetError, match=r"latency\.warm_ttft_s \(0\.2 s\)"):
        derive(data)


def test_compaction_override_below_the_spec_minimum() -> None:
    data = raw()
    data["budgets"] = {"dialogue_budget_bytes": 2048, "compaction_input_budget_bytes": 512}
    with pytest.raises(BudgetError, match=r"compaction_input_budget_bytes.*1280 bytes"):
        derive(data)


def test_section_overrides_that_overflow_the_window() -> None:
    data = raw()
    data["budgets"] = {"dialogue_budget_bytes": 40_000}
    with pytest.raises(BudgetError, match=r"more than llm\.context_window \(8192\)"):
        derive(data)


def test_overrides_are_used_and_slow_cold_start_is_a_warning() -> None:
    data = raw()
    data["budgets"] = {"dialogue_budget_bytes": 8000, "topic_budget_bytes": 4000}
    budgets = derive(data)
    assert budgets.dialogue_budget_bytes == 8000
    assert budgets.topic_budget_bytes == 4000
    assert budgets.compaction_input_budget_bytes >= 4000 + 256
    assert budgets.bound_by == "overrides"
    assert any("exceeds" in w for w in budgets.warnings)


# -- detection ----------------------------------------------------------------------------
def test_cgroup_v2_memory_limit_and_cpu_quota(tmp_path: Path) -> None:
    root = fake_machine(tmp_path)
    write(root, "proc/self/cgroup", "0::/edge.slice/service\n")
    write(root, "sys/fs/cgroup/cgroup.controllers", "cpu memory\n")
    write(root, "sys/fs/cgroup/edge.slice/memory.max", str(6 * 2**30))
    write(root, "sys/fs/cgroup/edge.slice/service/memory.max", "max\n")
    write(root, "sys/fs/cgroup/edge.slice/service/cpu.max", "150000 100000\n")
    hw = detect_hardware(root, affinity=set(range(8)), arch="x86_64", which=lambda _: None)
    assert hw.memory_bytes == 6 * 2**30
    assert "cgroup v2 /sys/fs/cgroup/edge.slice/memory.max" in hw.memory_source
    assert hw.machine_memory_bytes == 32 * 2**30
    assert hw.cpus == 2 and "cpu.max" in hw.cpus_source
    assert not hw.cuda


def test_cgroup_v1_limit_inside_a_container(tmp_path: Path) -> None:
    """The path in /proc/self/cgroup is absent in the container; the mount root is used."""
    root = fake_machine(tmp_path)
    write(root, "proc/self/cgroup", "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n")
    write(root, "sys/fs/cgroup/memory/memory.limit_in_bytes", str(3 * 2**30))
    write(root, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1")
    write(root, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000")
    hw = detect_hardware(root, affinity={0, 1, 2, 3}, arch="aarch64", which=lambda _: None)
    assert hw.memory_bytes == 3 * 2**30
    assert "cgroup v1" in hw.memory_source
    assert hw.cpus == 4 and "affinity" in hw.cpus_source


def test_unlimited_cgroup_falls_back_to_meminfo(tmp_path: Path) -> None:
    root = fake_machine(tmp_path, mem_kib=8 * 2**20)
    write(root, "proc/self/cgroup", "4:memory:/\n")
    write(root, "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712")
    hw = detect_hardware(root, affinity={0}, arch="aarch64", which=lambda _: None)
    assert hw.memory_bytes == 8 * 2**30
    assert "meminfo" in hw.memory_source


def test_cuda_and_board_detection(tmp_path: Path) -> None:
    root = fake_machine(tmp_path, mem_kib=8 * 2**20)
    write(root, "etc/nv_tegra_release", "# R36 (release)\n")
    write(root, "proc/device-tree/model", "NVIDIA Jetson Orin Nano Developer Kit\x00")
    hw = detect_hardware(root, affinity=set(range(6)), arch="arm64", which=lambda _: None)
    assert hw.cuda and "nv_tegra_release" in hw.cuda_source
    assert hw.arch == "aarch64"
    choice = choose_profile(load_profiles(), hw)
    assert choice.profile.name == "jetson-orin-nano-8gb" and choice.how == "board"
    smi = detect_hardware(
        fake_machine(tmp_path / "x"), affinity={0}, arch="x86_64", which=lambda _: "/bin/nvidia-smi"
    )
    assert smi.cuda and "nvidia-smi" in smi.cuda_source


def test_detection_on_this_machine_is_sane() -> None:
    hw = detect_hardware()
    assert hw.memory_bytes > 0 and hw.cpus >= 1
    assert hw.cpus <= (os.cpu_count() or hw.cpus)
    assert hw.arch == normalise_arch(platform.machine()) and hw.arch == hw.arch.lower()


# -- choosing the profile -----------------------------------------------------------------
def test_this_class_of_machine_gets_the_ci_profile() -> None:
    choice = choose_profile(load_profiles(), ci_hardware())
    assert choice.profile.name == "ci-2core-24gb"
    assert choice.how == "hardware" and "2 cores" in choice.reason


def test_named_profile_beats_environment_beats_detection() -> None:
    profiles = load_profiles()
    env = {"EDGE_PROFILE": "raspberry-pi-5-8gb"}
    assert choose_profile(profiles, ci_hardware(), env=env).how == "environment"
    picked = choose_profile(profiles, ci_hardware(), requested="x86-laptop-16gb", env=env)
    assert picked.profile.name == "x86-laptop-16gb" and picked.how == "argument"
    with pytest.raises(ProfileError, match=r"no device profile named 'nope'.*ci-2core-24gb"):
        choose_profile(profiles, ci_hardware(), requested="nope")


def test_nothing_fits_uses_the_smallest_and_says_why() -> None:
    tiny = ci_hardware(arch="aarch64", memory_bytes=2**30, cpus=1)
    choice = choose_profile(load_profiles(), tiny)
    assert choice.how == "fallback"
    assert choice.profile.name == "snapdragon-xr2-gen2-headset"
    assert "needs" in choice.reason


def test_cuda_machine_prefers_a_cuda_profile() -> None:
    agx = ci_hardware(arch="aarch64", memory_bytes=60 * 2**30, cpus=12, cuda=True)
    assert choose_profile(load_profiles(), agx).profile.name == "jetson-agx-orin-64gb"


# -- calibration storage ------------------------------------------------------------------
def fake_measurement(prompt_tps: float = 480.0) -> Measurement:
    return Measurement(
        prompt_tokens_per_s=prompt_tps,
        generation_tokens_per_s=90.0,
        text_bytes_per_token=3.1,
        kv_bytes_per_token=23040,
        state_overhead_bytes=200_000,
        load_s=0.1,
        prompt_tokens=500,
        generated_tokens=48,
        backend="fake",
    )


class Counter:
    def __init__(self, prompt_tps: float = 480.0) -> None:
        self.calls = 0
        self.prompt_tps = prompt_tps

    async def __call__(self, path: Path, threads: int, gpu_layers: int) -> Measurement:
        self.calls += 1
        return fake_measurement(self.prompt_tps)


async def test_calibration_is_stored_and_reused_until_model_or_hardware_change(
    tmp_path: Path,
) -> None:
    catalogue = local_catalogue(tmp_path)
    entry = catalogue.get("smollm2-135m-instruct-q4_1")
    path = entry.locate()
    store = CalibrationStore(tmp_path / "cfg" / "calibration.json")
    measure = Counter()
    hw = ci_hardware()
    first, reused = await calibrate(
        entry, path, hw, threads=2, gpu_layers=0, store=store, measure=measure
    )
    assert not reused and measure.calls == 1
    assert json.loads(store.path.read_text())["version"] == 1
    again, reused = await calibrate(
        entry, path, hw, threads=2, gpu_layers=0, store=store, measure=measure
    )
    assert reused and again == first and measure.calls == 1
    # other hardware or settings: measured again, the first entry is kept
    await calibrate(
        entry, path, ci_hardware(cpus=4), threads=4, gpu_layers=0, store=store, measure=measure
    )
    assert measure.calls == 2 and len(store.load_all()) == 2
    # the model file changes (no digest in this catalogue: size and mtime identify it)
    path.write_bytes(b"GGUF-a-different-model-file")
    os.utime(path, (1, 1))
    await calibrate(entry, path, hw, threads=2, gpu_layers=0, store=store, measure=measure)
    assert measure.calls == 3
    await calibrate(
        entry, path, hw, threads=2, gpu_layers=0, store=store, measure=measure, force=True
    )
    assert measure.calls == 4


def test_unreadable_calibration_file_is_a_clear_error(tmp_path: Path) -> None:
    store = CalibrationStore(tmp_path / "calibration.json")
    store.path.write_text("{not json")
    with pytest.raises(CalibrationError, match=r"unreadable.*--calibrate"):
        store.load_all()


async def test_device_config_uses_stored_calibration(tmp_path: Path) -> None:
    catalogue = local_catalogue(tmp_path)
    env = {"EDGE_CONFIG_DIR": str(tmp_path / "cfg")}
    root = fake_machine(tmp_path / "root", mem_kib=24 * 2**20)
    write(root, "proc/self/cgroup", "0::/\n")
    write(root, "sys/fs/cgroup/cgroup.controllers", "memory\n")
    write(root, "sys/fs/cgroup/memory.max", str(12 * 2**30))

    def config():
        # detection reads the fake root except for cores (this process's affinity)
        return load_device_config("ci-2core-24gb", root=root, env=env, catalogue=catalogue)

    before = config()
    assert before.calibration is None and "none stored" in before.calibration_note
    assert before.inputs.memory_bytes == 12 * 2**30
    assert before.inputs.sources["memory_bytes"] == "detected"
    store = CalibrationStore.default(env)
    measure = Counter(prompt_tps=960.0)
    from edge.device import calibrate_device

    await calibrate_device(before, store=store, measure=measure)
    after = config()
    assert after.calibration is not None and "reused" in after.calibration_note
    assert after.inputs.prompt_tokens_per_s == 960.0
    assert after.inputs.sources["prompt_tokens_per_s"] == "calibrated"
    assert after.budgets.dialogue_budget_bytes > before.budgets.dialogue_budget_bytes
    assert after.context_config().dialogue_budget_bytes == after.budgets.dialogue_budget_bytes
    assert after.router_config() == RouterConfig(
        context_budget_bytes=after.budgets.router_context_budget_bytes
    )
    llm = after.llm_config()
    assert llm.n_ctx == 8192 and llm.kv_cache_budget_bytes > 0
    assert after.llm_model_path == str(catalogue.get("smollm2-135m-instruct-q4_1").locate())


def test_user_profile_directory_and_path(tmp_path: Path) -> None:
    data = (PROFILE_DIR / "ci-2core-24gb.toml").read_text()
    mine = data.replace('name = "ci-2core-24gb"', 'name = "my-box"')
    write(tmp_path / "cfg", "profiles/my-box.toml", mine)
    env = {"EDGE_CONFIG_DIR": str(tmp_path / "cfg")}
    assert load_device_config("my-box", detect=False, env=env).profile.name == "my-box"
    path = write(tmp_path, "other/my-box.toml", mine)
    assert load_device_config(str(path), detect=False, env={}).profile.name == "my-box"
    write(tmp_path, "bad/wrong.toml", mine)
    with pytest.raises(ProfileError, match="differs from the file name"):
        load_device_config(str(tmp_path / "bad/wrong.toml"), detect=False, env={})


def test_whisper_threads_are_the_profiles_within_the_llms(tmp_path: Path) -> None:
    data = (PROFILE_DIR / "ci-2core-24gb.toml").read_text()
    assert load_device_config("ci-2core-24gb", detect=False, env={}).stt_threads == 1

    def with_stt_threads(line: str) -> int:
        mine = data.replace("stt_threads = 1", line).replace("ci-2core-24gb", "my-box")
        path = write(tmp_path, f"t{len(line)}/my-box.toml", mine)
        return load_device_config(str(path), detect=False, env={}).stt_threads

    assert with_stt_threads("") == 2  # none: the LLM's threads
    assert with_stt_threads("stt_threads = 8") == 2  # never more than the LLM gets
    with pytest.raises(ProfileError, match="stt_threads"):
        with_stt_threads("stt_threads = 0")


# -- the command --------------------------------------------------------------------------
def test_edge_device_json(capsys: pytest.CaptureFixture[str]) -> None:
    from edge.cli import main

    assert main(["device", "--profile", "jetson-orin-nano-8gb", "--no-detect", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["profile"]["name"] == "jetson-orin-nano-8gb"
    assert out["budgets"]["dialogue_budget_bytes"] > 0
    assert (
        out["router_config"]["context_budget_bytes"]
        == out["budgets"]["router_context_budget_bytes"]
    )


def test_edge_device_tables_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    from edge.cli import main

    assert main(["device", "--all"]) == 0
    assert "raspberry-pi-5-8gb" in capsys.readouterr().out
    assert main(["device", "--profile", "ci-2core-24gb", "--no-detect"]) == 0
    out = capsys.readouterr().out
    assert "dialogue_budget_bytes" in out and "bound by latency" in out
    assert main(["device", "--profile", "no-such-profile"]) == 2
    assert "no device profile named" in capsys.readouterr().out


@pytest.mark.parametrize("name", SHIPPED)
async def test_derived_budgets_are_accepted_by_the_context_manager(name: str) -> None:
    from edge.conversation import ContextManager
    from edge.llm import ScriptedLLM

    config = load_device_config(name, detect=False, env={})
    manager = ContextManager(
        ScriptedLLM(),
        config.context_config(),
        incremental_context_topics=("sample.notes",),
        summary_context_topics=("sample.monitor-window",),
    )
    assert config.budgets.dialogue_budget_bytes in manager.budgets.values()
    assert manager.compaction_input_budget_bytes == config.budgets.compaction_input_budget_bytes


def test_edge_device_calibrate_stores_and_reuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import edge.device._calibration as calibration_module
    from edge.cli import main

    catalogue = local_catalogue(tmp_path)
    monkeypatch.setattr(Catalogue, "load", classmethod(lambda cls, *extra: catalogue))
    monkeypatch.setenv("EDGE_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.delenv("EDGE_PROFILE", raising=False)
    measure = Counter(prompt_tps=720.0)
    monkeypatch.setattr(calibration_module, "measure_llm", measure)
    args = ["device", "--profile", "ci-2core-24gb", "--calibrate", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["calibration"]["prompt_tokens_per_s"] == 720.0
    assert out["inputs"]["sources"]["prompt_tokens_per_s"] == "calibrated"
    assert (tmp_path / "cfg" / "calibration.json").exists()
    assert main(["device", "--profile", "ci-2core-24gb", "--calibrate"]) == 0
    assert "reused the stored calibration" in capsys.readouterr().out
    assert measure.calls == 1
    assert main(["device", "--profile", "ci-2core-24gb", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "reused from" in out["calibration_note"]


def test_the_five_speed_figures_are_declared_once() -> None:
    from edge.device import BudgetInputs, Speed
    from edge.device._profile import ExpectedSpeed

    for model in (ExpectedSpeed, Measurement, BudgetInputs):
        assert issubclass(model, Speed)
    assert list(Speed.formats()) == list(Speed.model_fields)
    assert fake_measurement().speed() == Speed(**fake_measurement().speed().model_dump())
