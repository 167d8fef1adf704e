"""Device profiles: the TOML files in ``firmware-config/`` and their schema.

A profile describes one hardware class with figures a maintainer can check against the
vendor's data sheet (memory, cores, accelerator), the models it runs, the LLM settings,
the latency targets, the audio settings, and the model-on-hardware speeds expected until
``edge device --calibrate`` measures them. Optional ``[budgets]`` overrides replace the
derived byte budgets (they are still checked against the spec's rules).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from edge.catalogue import Catalogue, CatalogueError, read_toml

# firmware-config/, through a link in the package (a wheel ships the files themselves)
PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
GIB = 2**30


class ProfileError(ValueError):
    """A profile is malformed, names an unknown model, or cannot yield workable budgets."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DeviceSpec(_Strict):
    """The hardware class, as its data sheet states it (used to match detected hardware)."""

    vendor: str
    model: str
    arch: Literal["x86_64", "aarch64"]
    memory_gib: float = Field(gt=0, description="total memory on the data sheet")
    service_memory_gib: float = Field(gt=0, description="memory this service may use")
    cpu_cores: int = Field(ge=1)
    accelerator: Literal["none", "cuda", "adreno", "videocore"] = "none"
    memory_shared_with_gpu: bool = False
    board_match: str | None = Field(
        default=None, description="text in /proc/device-tree/model that identifies the board"
    )
    datasheet: str = ""

    @model_validator(mode="after")
    def _fits(self) -> DeviceSpec:
        if self.service_memory_gib > self.memory_gib:
            raise ValueError(
                f"service_memory_gib ({self.service_memory_gib}) is more than the device's "
                f"memory_gib ({self.memory_gib})"
            )
        return self


class ModelChoice(_Strict):
    llm: str
    stt: str
    tts: str


class LLMSettings(_Strict):
    context_window: int = Field(ge=512, description="n_ctx, tokens")
    reserved_output_tokens: int = Field(ge=16, description="max tokens of one answer")
    threads: int = Field(ge=1)
    gpu_layers: int = Field(default=0, ge=-1, description="-1 offloads every layer")
    adaptive_threads: bool = Field(
        default=True,
        description="use fewer threads while other processes keep cores busy (edge.llm "
        "ThreadPolicy); false keeps `threads` always",
    )
    prompt_overhead_tokens: int = Field(
        default=256, ge=0, description="system prompt, instructions, chat template, time line"
    )
    routing_overhead_tokens: int = Field(
        default=160, ge=0, description="routing prompt without history or request"
    )
    compaction_overhead_tokens: int = Field(
        default=192, ge=0, description="compaction instructions and template"
    )
    request_tokens: int = Field(default=64, ge=8, description="largest spoken request")
    typical_exchange_bytes: int = Field(
        default=300,
        ge=32,
        description="a typical voice exchange plus the next request, as rendered",
    )
    context_topics: int = Field(default=2, ge=0, description="topic sections in a prompt")
    max_participants: int = Field(default=4, ge=1)
    max_sequences: int = Field(
        default=1,
        ge=1,
        le=64,
        description="requests the model serves at once (continuous batching), at most; "
        "1 = one at a time",
    )
    temperature: float = Field(default=0.2, ge=0, le=2)


class Speed(BaseModel):
    """The five figures of the LLM on a machine that the budgets follow from: expected by
    a profile (:class:`ExpectedSpeed`), measured by a calibration
    (:class:`~edge.device.Measurement`), used by the derivation
    (:class:`~edge.device.BudgetInputs`). ``format`` is how ``edge device`` shows each."""

    model_config = ConfigDict(frozen=True)

    prompt_tokens_per_s: float = Field(gt=0, json_schema_extra={"format": "{:.0f}"})
    generation_tokens_per_s: float = Field(gt=0, json_schema_extra={"format": "{:.1f}"})
    text_bytes_per_token: float = Field(gt=0.5, le=16, json_schema_extra={"format": "{:.2f}"})
    kv_bytes_per_token: int = Field(
        gt=0,
        description="f16 K+V bytes per token, all layers",
        json_schema_extra={"format": "{:,}"},
    )
    state_overhead_bytes: int = Field(
        default=2**20,
        ge=0,
        description="fixed part of a saved llama.cpp state (logits etc.)",
        json_schema_extra={"format": "{:,}"},
    )

    def speed(self) -> Speed:
        """Just the five figures (of a measurement, a profile's expectation, ...)."""
        return Speed(**{name: getattr(self, name) for name in Speed.model_fields})

    @staticmethod
    def formats() -> dict[str, str]:
        """Each figure's display format, in declaration order."""
        extras = {name: f.json_schema_extra for name, f in Speed.model_fields.items()}
        return {name: str(e["format"]) for name, e in extras.items() if isinstance(e, dict)}


class ExpectedSpeed(Speed):
    """The chosen LLM on this hardware class, until a calibration replaces these figures."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = ""


class LatencyTargets(_Strict):
    cold_ttft_s: float = Field(gt=0, description="first answer token, nothing cached")
    warm_ttft_s: float = Field(gt=0, description="first answer token, prefix cached")

    @model_validator(mode="after")
    def _order(self) -> LatencyTargets:
        if self.warm_ttft_s > self.cold_ttft_s:
            raise ValueError(
                f"warm_ttft_s ({self.warm_ttft_s}) cannot exceed cold_ttft_s ({self.cold_ttft_s})"
            )
        return self


class AudioSettings(_Strict):
    input_sample_rate: int = Field(default=16000, ge=8000, le=48000)
    frame_ms: Literal[10, 20, 30] = 30
    vad_threshold: float = Field(default=0.5, gt=0, lt=1)
    endpoint_silence_ms: int = Field(default=600, ge=100, le=5000)
    # adaptive endpointing: the end silence after a complete sentence / mid-phrase
    endpoint_min_silence_ms: int = Field(default=400, ge=100, le=5000)
    endpoint_max_silence_ms: int = Field(default=900, ge=100, le=5000)
    max_utterance_s: float = Field(default=30.0, gt=0, le=120)
    stt_compute_type: Literal["int8", "int8_float16", "float16", "float32"] = "int8"
    stt_beam_size: int = Field(default=1, ge=1, le=10)
    # Whisper's CPU threads (CTranslate2); None: the LLM's threads. Tiny Whisper on a
    # fitted window can run faster on fewer threads than the LLM's (benchmarks/stt_window.py)
    stt_threads: int | None = Field(default=None, ge=1, le=64)
    tts_chunk_ms: int = Field(default=200, ge=20, le=2000)


class BudgetOverrides(_Strict):
    """Explicit figures that replace derived ones (each still checked against the rules)."""

    dialogue_budget_bytes: int | None = Field(default=None, ge=256)
    topic_budget_bytes: int | None = Field(default=None, ge=128)
    compaction_input_budget_bytes: int | None = Field(default=None, ge=256)
    router_context_budget_bytes: int | None = Field(default=None, ge=0)
    kv_cache_budget_bytes: int | None = Field(default=None, ge=0)
    warm_participants: int | None = Field(default=None, ge=0)


class RemoteModels(_Strict):
    """Models behind servers on the network, for a deployment's own profile (see
    docs/deploy.md); the ``--stt-url`` / ``--tts-url`` / ``--llm-url`` settings win."""

    stt_url: str | None = Field(default=None, pattern=r"^(auto|tcp://[^:/]+:\d+)$")
    tts_url: str | None = Field(default=None, pattern=r"^(auto|tcp://[^:/]+:\d+)$")
    tts_voice: str | None = None
    llm_url: str | None = Field(default=None, pattern=r"^https?://")
    llm_model: str | None = None


class DeviceProfile(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    description: str = ""
    device: DeviceSpec
    models: ModelChoice
    llm: LLMSettings
    expected: ExpectedSpeed
    latency: LatencyTargets
    audio: AudioSettings = AudioSettings()
    budgets: BudgetOverrides = BudgetOverrides()
    remote: RemoteModels = RemoteModels()

    @property
    def service_memory_bytes(self) -> int:
        return int(self.device.service_memory_gib * GIB)

    @model_validator(mode="after")
    def _consistent(self) -> DeviceProfile:
        if self.llm.threads > 2 * self.device.cpu_cores:
            raise ValueError(
                f"llm.threads ({self.llm.threads}) is more than twice device.cpu_cores "
                f"({self.device.cpu_cores})"
            )
        if self.llm.gpu_layers != 0 and self.device.accelerator != "cuda":
            raise ValueError(
                f"llm.gpu_layers is {self.llm.gpu_layers} but device.accelerator is "
                f"{self.device.accelerator!r}; llama.cpp offload needs 'cuda' here"
            )
        return self

    def check_models(self, catalogue: Catalogue) -> None:
        """Raise :class:`ProfileError` unless every model is catalogued in the right role
        and the context window fits the LLM's trained context."""
        for role in ("llm", "stt", "tts"):
            model_id = getattr(self.models, role)
            try:
                entry = catalogue.get(model_id)
            except CatalogueError as exc:
                raise ProfileError(f"profile {self.name!r}: models.{role}: {exc}") from None
            if entry.role != role:
                raise ProfileError(
                    f"profile {self.name!r}: models.{role} = {model_id!r} is a {entry.role} model"
                )
        llm = catalogue.get(self.models.llm)
        if llm.context_length and self.llm.context_window > llm.context_length:
            raise ProfileError(
                f"profile {self.name!r}: llm.context_window ({self.llm.context_window}) is larger "
                f"than {llm.id}'s context length ({llm.context_length}); lower llm.context_window"
            )


def parse_profile(data: dict, *, origin: str, catalogue: Catalogue | None = None) -> DeviceProfile:
    """Validate a profile's TOML data; errors name the file and the offending key."""
    try:
        profile = DeviceProfile.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "(top level)"
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = "unknown key"
            problems.append(f"  {where}: {msg}")
        raise ProfileError(f"profile {origin} is invalid:\n" + "\n".join(problems)) from None
    profile.check_models(catalogue or Catalogue.load())
    return profile


def load_profile_file(path: Path, catalogue: Catalogue | None = None) -> DeviceProfile:
    data = read_toml(path, ProfileError, "profile file")
    data.setdefault("name", path.stem)
    if data["name"] != path.stem:
        raise ProfileError(
            f"profile file {path}: name {data['name']!r} differs from the file name {path.stem!r}"
        )
    return parse_profile(data, origin=str(path), catalogue=catalogue)


def profile_dirs(config_dir: Path | None = None) -> list[Path]:
    """Where profiles are looked up: the shipped ones, then ``<config dir>/profiles``."""
    dirs = [PROFILE_DIR]
    if config_dir is not None and (config_dir / "profiles").is_dir():
        dirs.append(config_dir / "profiles")
    return dirs


def profile_files(config_dir: Path | None = None) -> Iterator[Path]:
    seen: dict[str, Path] = {}
    for directory in profile_dirs(config_dir):
        for path in sorted(directory.glob("*.toml")):
            seen[path.stem] = path  # the user's file replaces a shipped one of that name
    yield from seen.values()


def load_profiles(
    config_dir: Path | None = None, catalogue: Catalogue | None = None
) -> dict[str, DeviceProfile]:
    catalogue = catalogue or Catalogue.load()
    return {p.stem: load_profile_file(p, catalogue) for p in profile_files(config_dir)}


def find_profile(
    name_or_path: str, config_dir: Path | None = None, catalogue: Catalogue | None = None
) -> DeviceProfile:
    """A profile by name (shipped or the user's) or by path to a TOML file."""
    if name_or_path.endswith(".toml") or "/" in name_or_path:
        return load_profile_file(Path(name_or_path).expanduser(), catalogue)
    for path in profile_files(config_dir):
        if path.stem == name_or_path:
            return load_profile_file(path, catalogue)
    known = ", ".join(p.stem for p in profile_files(config_dir))
    raise ProfileError(f"no device profile named {name_or_path!r}; known profiles: {known}")
