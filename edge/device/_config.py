"""``load_device_config``: profile + detected hardware + calibration -> budgets, the
keyword arguments the service passes to the LLM, the context manager's
:class:`~edge.conversation.ContextConfig` and the router's :class:`~edge.routing.RouterConfig`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from pydantic import BaseModel, ConfigDict

from edge.catalogue import Catalogue, ModelEntry, ModelMissingError
from edge.conversation import ContextConfig
from edge.llm import LlamaConfig
from edge.routing import RouterConfig

from ._budgets import BudgetInputs, Budgets, derive_budgets
from ._calibration import (
    Calibration,
    CalibrationStore,
    Measure,
    calibrate,
    config_dir,
    hardware_key,
    model_key,
)
from ._detect import HardwareInfo, detect_hardware
from ._profile import GIB, DeviceProfile, ProfileError, Speed, find_profile, load_profiles
from ._select import ProfileChoice, choose_profile

# A calibration whose model got less CPU time than this share of its threads competed
# with other work (llama.cpp's threads spin, so an uncontended run gets close to 100 %).
BUSY_CPU_SHARE = 0.8


class ContextBudgets(TypedDict, total=False):
    """The context manager's budgets (bytes, by its option's name): a device sets all four."""

    dialogue_budget_bytes: int
    topic_budget_bytes: int
    compaction_input_budget_bytes: int
    recall_budget_bytes: int


class DeviceConfig(BaseModel):
    """Everything ``edge device`` shows and the service uses."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    choice: ProfileChoice
    hardware: HardwareInfo | None
    calibration: Calibration | None
    calibration_note: str
    models: dict[str, ModelEntry]
    model_paths: dict[str, str | None]
    threads: int
    gpu_layers: int
    inputs: BudgetInputs
    budgets: Budgets
    notes: list[str]

    @property
    def profile(self) -> DeviceProfile:
        return self.choice.profile

    @property
    def stt_threads(self) -> int:
        """Whisper's CPU threads: the profile's ``audio.stt_threads`` (at most the LLM's
        threads, which are at most the cores this process may use), else the LLM's."""
        wanted = self.profile.audio.stt_threads
        return self.threads if wanted is None else min(wanted, self.threads)

    @property
    def llm_model_path(self) -> str | None:
        """The profile's LLM file (None: not installed)."""
        return self.model_paths.get("llm")

    def llm_config(self) -> LlamaConfig:
        """For ``LlamaCppLLM(config.llm_model_path, config.llm_config())``: the window,
        threads, GPU layers, KV budget, answer length, temperature and sequences sized to
        this device. Batched, each sequence gets the window the budgets need
        (``sequence_window_tokens``), not the whole context window."""
        b = self.budgets
        return LlamaConfig(
            n_ctx=b.sequence_window_tokens if b.llm_sequences > 1 else b.context_window,
            n_threads=self.threads,
            n_gpu_layers=self.gpu_layers,
            kv_cache_budget_bytes=b.kv_cache_budget_bytes,
            default_max_tokens=b.reserved_output_tokens,
            temperature=self.profile.llm.temperature,
            sequences=b.llm_sequences,
            adaptive_threads=self.profile.llm.adaptive_threads,
        )

    def context_budgets(self) -> ContextBudgets:
        """The context manager's budgets this device gets (bytes, by option name)."""
        return ContextBudgets(
            dialogue_budget_bytes=self.budgets.dialogue_budget_bytes,
            topic_budget_bytes=self.budgets.topic_budget_bytes,
            compaction_input_budget_bytes=self.budgets.compaction_input_budget_bytes,
            recall_budget_bytes=self.budgets.recall_budget_bytes,
        )

    def context_config(self) -> ContextConfig:
        """For ``ContextManager(llm, config.context_config())``: the budgets sized to this
        device (the topics and the rest keep their defaults; ``with_options`` sets them)."""
        return ContextConfig(**self.context_budgets())

    def router_config(self) -> RouterConfig:
        """For ``AgentRouter(destinations, decisions, config.router_config())``."""
        return RouterConfig(context_budget_bytes=self.budgets.router_context_budget_bytes)

    def summary(self) -> dict[str, Any]:
        """A JSON-ready view of the whole configuration (``edge device --json``)."""
        return {
            "profile": self.profile.model_dump(mode="json"),
            "chosen_by": self.choice.how,
            "reason": self.choice.reason,
            "hardware": self.hardware.model_dump(mode="json") if self.hardware else None,
            "calibration": self.calibration.model_dump(mode="json") if self.calibration else None,
            "calibration_note": self.calibration_note,
            "models": {
                role: {"id": e.id, "size_bytes": e.size_bytes, "path": self.model_paths[role]}
                for role, e in self.models.items()
            },
            "inputs": self.inputs.model_dump(mode="json"),
            "budgets": self.budgets.model_dump(mode="json"),
            "llm_model_path": self.llm_model_path,
            "llm_config": self.llm_config().model_dump(mode="json"),
            "context_budgets": self.context_budgets(),
            "router_config": {"context_budget_bytes": self.router_config().context_budget_bytes},
            "notes": self.notes,
        }


def _model_bytes(entry: ModelEntry, path: Path | None) -> int:
    if entry.size_bytes:
        return entry.size_bytes
    if path is None:
        return 0
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return path.stat().st_size


def budget_inputs(
    profile: DeviceProfile,
    catalogue: Catalogue,
    hardware: HardwareInfo | None = None,
    calibration: Calibration | None = None,
) -> tuple[BudgetInputs, list[str]]:
    """Gather the derivation's figures, each with its source; notes say what was clamped."""
    notes: list[str] = []
    sources: dict[str, str] = {
        "context_window": "profile",
        "cold_ttft_s": "profile",
        "warm_ttft_s": "profile",
    }
    memory = profile.service_memory_bytes
    sources["memory_bytes"] = "profile"
    if hardware is not None and 0 < hardware.memory_bytes < memory:
        memory = hardware.memory_bytes
        sources["memory_bytes"] = "detected"
        notes.append(
            f"this process may use {hardware.memory_bytes / GIB:.2f} GiB, less than the "
            f"profile's {profile.device.service_memory_gib:g} GiB; budgets use the detected limit"
        )
    speed = (calibration or profile.expected).speed()
    origin = "calibrated" if calibration is not None else "profile estimate"
    sources.update(dict.fromkeys(Speed.model_fields, origin))
    model_bytes = 0
    for role in ("llm", "stt", "tts"):
        entry = catalogue.get(getattr(profile.models, role))
        try:
            path: Path | None = entry.locate()
        except ModelMissingError:
            path = None
        size = _model_bytes(entry, path)
        if not size:
            notes.append(f"{role} model {entry.id} has no size in the catalogue and is missing")
        model_bytes += size
    sources["model_bytes"] = "catalogue"
    inputs = BudgetInputs(
        # the profile's LLM figures and latency targets the derivation uses, by name
        **profile.llm.model_dump(include=set(BudgetInputs.model_fields)),
        **profile.latency.model_dump(),
        **speed.model_dump(),
        memory_bytes=memory,
        model_bytes=model_bytes,
        overrides=profile.budgets,
        sources=sources,
        strict_latency=calibration is None,
    )
    return inputs, notes


def derive_for_profile(
    profile: DeviceProfile,
    catalogue: Catalogue | None = None,
    hardware: HardwareInfo | None = None,
    calibration: Calibration | None = None,
) -> Budgets:
    """The budgets ``profile`` yields (on its own figures when ``hardware`` is None)."""
    inputs, _ = budget_inputs(profile, catalogue or Catalogue.load(), hardware, calibration)
    try:
        return derive_budgets(inputs)
    except ProfileError as exc:
        raise type(exc)(f"profile {profile.name!r}: {exc}") from None


@dataclass(frozen=True)
class _Models:
    """The profile's models and where they are installed; a note per missing one."""

    entries: dict[str, ModelEntry]
    paths: dict[str, str | None]
    notes: tuple[str, ...]


@dataclass(frozen=True)
class _Placement:
    """Threads and GPU layers the LLM gets here; a note per figure the hardware lowered."""

    threads: int
    gpu_layers: int
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class _CalibrationFound:
    """The calibration the budgets use (None: the profile's figures) and why."""

    calibration: Calibration | None
    note: str


def _choose(
    profile: str | None,
    hardware: HardwareInfo | None,
    env: dict[str, str],
    cfg_dir: Path,
    catalogue: Catalogue,
) -> ProfileChoice:
    """``profile`` beats ``EDGE_PROFILE``, which beats detection."""
    profiles = load_profiles(cfg_dir, catalogue)
    if hardware is None:
        name = profile or env.get("EDGE_PROFILE")
        if not name:
            raise ProfileError("name a profile when hardware detection is off")
        chosen = profiles.get(name) or find_profile(name, cfg_dir, catalogue)
        return ProfileChoice(profile=chosen, how="argument", reason=f"profile {name} named")
    return choose_profile(
        profiles,
        hardware,
        requested=profile,
        env=env,
        load=lambda n: find_profile(n, cfg_dir, catalogue),
    )


def _locate_models(prof: DeviceProfile, catalogue: Catalogue) -> _Models:
    entries = {role: catalogue.get(getattr(prof.models, role)) for role in ("llm", "stt", "tts")}
    paths: dict[str, str | None] = {}
    notes: list[str] = []
    for role, entry in entries.items():
        try:
            paths[role] = str(entry.locate())
        except ModelMissingError as exc:
            paths[role] = None
            notes.append(str(exc))
    return _Models(entries, paths, tuple(notes))


def _place(prof: DeviceProfile, hardware: HardwareInfo | None) -> _Placement:
    threads, gpu_layers = prof.llm.threads, prof.llm.gpu_layers
    if hardware is None:
        return _Placement(threads, gpu_layers)
    notes: list[str] = []
    if threads > hardware.cpus:
        notes.append(
            f"llm.threads {threads} lowered to the {hardware.cpus} cores this process may use"
        )
        threads = hardware.cpus
    if gpu_layers and not hardware.cuda:
        notes.append(f"llm.gpu_layers {gpu_layers} ignored: no CUDA ({hardware.cuda_source})")
        gpu_layers = 0
    return _Placement(threads, gpu_layers, tuple(notes))


def _find_calibration(
    models: _Models,
    place: _Placement,
    hardware: HardwareInfo | None,
    store: CalibrationStore | None,
    env: dict[str, str],
) -> _CalibrationFound:
    """The stored calibration of this model on this hardware, if any."""
    if hardware is None:
        return _CalibrationFound(
            None, "not looked up (hardware detection off): using the profile's expected figures"
        )
    llm_path = models.paths["llm"]
    if llm_path is None:
        return _CalibrationFound(None, "LLM not installed: using the profile's expected figures")
    store = store or CalibrationStore.default(env)
    mkey = model_key(models.entries["llm"], Path(llm_path))
    hkey = hardware_key(hardware, threads=place.threads, gpu_layers=place.gpu_layers)
    calibration = store.get(mkey, hkey)
    if calibration is not None:
        return _CalibrationFound(
            calibration, f"reused from {store.path} (measured {calibration.measured_at})"
        )
    if store.load_all():
        return _CalibrationFound(
            None,
            f"{store.path} has no entry for this model and hardware: using the "
            "profile's expected figures; run edge device --calibrate",
        )
    return _CalibrationFound(
        None, "none stored: using the profile's expected figures; run edge device --calibrate"
    )


def _busy_note(calibration: Calibration | None, place: _Placement) -> tuple[str, ...]:
    """A note when the calibration competed with other work for the CPU."""
    if calibration is None or calibration.cpu_share is None or place.gpu_layers:
        return ()
    if calibration.cpu_share >= BUSY_CPU_SHARE:
        return ()
    return (
        f"the machine was busy while calibrating (the model got "
        f"{calibration.cpu_share:.0%} of its {place.threads} threads' CPU time; load average "
        f"{calibration.load_average or 0:.1f} before), so the measured speeds are "
        "pessimistic: run edge device --calibrate --force when it is idle",
    )


def load_device_config(
    profile: str | None = None,
    *,
    detect: bool = True,
    root: Path = Path("/"),
    env: Mapping[str, str] | None = None,
    catalogue: Catalogue | None = None,
    store: CalibrationStore | None = None,
    calibration: Calibration | None = None,
) -> DeviceConfig:
    """The device configuration the service runs with.

    ``profile`` (a name or a TOML path) beats ``EDGE_PROFILE``, which beats detection.
    With ``detect=False`` the profile's own figures are used (no hardware limits, no stored
    calibration) and a profile must be named.
    """
    env = dict(os.environ) if env is None else dict(env)
    catalogue = catalogue or Catalogue.load()
    hardware = detect_hardware(root) if detect else None
    choice = _choose(profile, hardware, env, config_dir(env), catalogue)
    prof = choice.profile
    models = _locate_models(prof, catalogue)
    place = _place(prof, hardware)
    found = (
        _CalibrationFound(calibration, "given by the caller")
        if calibration is not None
        else _find_calibration(models, place, hardware, store, env)
    )
    calibration = found.calibration
    notes = [*models.notes, *place.notes, *_busy_note(calibration, place)]
    inputs, input_notes = budget_inputs(prof, catalogue, hardware, calibration)
    try:
        budgets = derive_budgets(inputs)
    except ProfileError as exc:
        where = f" (using the calibration of {calibration.measured_at})" if calibration else ""
        extra = "".join(f"; note: {n}" for n in notes if "busy" in n)
        raise type(exc)(f"profile {prof.name!r}{where}: {exc}{extra}") from None
    return DeviceConfig(
        choice=choice,
        hardware=hardware,
        calibration=calibration,
        calibration_note=found.note,
        models=models.entries,
        model_paths=models.paths,
        threads=place.threads,
        gpu_layers=place.gpu_layers,
        inputs=inputs,
        budgets=budgets,
        notes=notes + input_notes,
    )


async def calibrate_device(
    config: DeviceConfig,
    *,
    store: CalibrationStore | None = None,
    measure: Measure | None = None,
    force: bool = False,
) -> tuple[Calibration, bool]:
    """Measure (or reuse) the calibration of ``config``'s LLM on the detected hardware."""
    if config.hardware is None:
        raise ProfileError("calibration needs hardware detection")
    llm_path = config.model_paths.get("llm")
    if llm_path is None:
        raise ModelMissingError(
            f"cannot calibrate: {config.models['llm'].id} is not installed: "
            f"{config.models['llm'].install_hint()}"
        )
    return await calibrate(
        config.models["llm"],
        Path(llm_path),
        config.hardware,
        threads=config.threads,
        gpu_layers=config.gpu_layers,
        store=store or CalibrationStore.default(),
        measure=measure,
        force=force,
    )
