"""The model catalogue: which models exist, where their files are, and checking them."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

Role = Literal["llm", "stt", "tts", "vad"]

REPO_ROOT = Path(__file__).resolve().parents[2]
# models/catalogue.toml, through a link in the package (a wheel ships the file itself)
BUILTIN_CATALOGUE = Path(__file__).resolve().parent / "catalogue.toml"


class CatalogueError(ValueError):
    """The catalogue file is malformed, or names an unknown model."""


class ModelMissingError(FileNotFoundError):
    """A catalogued model is not installed; the message says how to install it."""


def derived_models_dir() -> Path:
    """Where models built from other entries live (``EDGE_MODELS_DIR``, else inside the
    Python environment the service runs in, so a virtual environment carries its own)."""
    configured = os.environ.get("EDGE_MODELS_DIR")
    return Path(configured) if configured else Path(sys.prefix) / "share" / "xr-edge" / "models"


class ModelEntry(BaseModel):
    """One supported model. Exactly one of ``package`` (+ ``file``), ``path`` or
    ``derive_from`` (+ ``quantize``): a GGUF converted from another entry's file by
    ``edge models --prepare``, for a weight format this device's kernels run faster."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    role: Role
    format: Literal["gguf", "ctranslate2", "piper-onnx", "onnx"]
    package: str | None = None
    version: str | None = None
    file: str | None = None
    path: str | None = None
    derive_from: str | None = None
    quantize: Literal["q8_0"] | None = None
    size_bytes: int | None = Field(default=None, gt=0)
    context_length: int | None = Field(default=None, gt=0)
    sample_rate: int | None = Field(default=None, gt=0)
    license: str = "unknown"
    default: bool = False
    description: str = ""
    sha256: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_source(self) -> ModelEntry:
        sources = [s for s in (self.package, self.path, self.derive_from) if s is not None]
        if len(sources) != 1:
            raise ValueError(
                f"model {self.id!r}: give one of package (with file), path or derive_from"
            )
        if (self.derive_from is None) != (self.quantize is None) or (
            self.derive_from is not None and self.format != "gguf"
        ):
            raise ValueError(
                f"model {self.id!r}: derive_from and quantize go together, for a gguf model"
            )
        if self.package is not None and not self.file:
            raise ValueError(
                f"model {self.id!r}: a package model needs file (its path inside the package)"
            )
        return self

    @property
    def source(self) -> str:
        if self.derive_from:
            return f"{self.quantize} conversion of {self.derive_from}"
        return f"pip package {self.package}" if self.package else f"file {self.path}"

    @property
    def derived_path(self) -> Path:
        """Where ``edge models --prepare`` writes a derived model."""
        return derived_models_dir() / f"{self.id}.gguf"

    def install_hint(self) -> str:
        if self.derive_from:
            return (
                f"build it from {self.derive_from} with: edge models --prepare "
                "(make run and make test do this)"
            )
        if self.package:
            pin = f"=={self.version}" if self.version else ""
            return (
                f"install it with: pip install --no-deps {self.package}{pin} "
                "(make run and make test do this)"
            )
        return f"place the model at {self.path}, or point the profile at another catalogue entry"

    def locate(self) -> Path:
        """Where the model's file (or directory) is, or :class:`ModelMissingError`."""
        where = self.derived_path if self.derive_from else None
        if self.path is not None:
            where = Path(os.path.expanduser(self.path))
        if where is not None:
            if not where.exists():
                raise ModelMissingError(
                    f"model {self.id!r} not found at {where}: {self.install_hint()}"
                )
            return where
        assert self.package is not None and self.file is not None
        try:
            dist = importlib.metadata.distribution(self.package)
        except importlib.metadata.PackageNotFoundError:
            raise ModelMissingError(
                f"model {self.id!r} needs the package {self.package!r}, which is not installed: "
                f"{self.install_hint()}"
            ) from None
        where = Path(str(dist.locate_file(self.file)))
        if not where.exists():
            raise ModelMissingError(
                f"model {self.id!r}: package {self.package!r} is installed but has no {self.file}: "
                f"{self.install_hint()}"
            )
        return where

    def installed(self) -> bool:
        try:
            self.locate()
        except ModelMissingError:
            return False
        return True

    def verify(self) -> dict[str, bool]:
        """Check every listed digest; maps each checked name to whether it matched."""
        where = self.locate()
        base = where if where.is_dir() else where.parent
        results: dict[str, bool] = {}
        for name, expected in self.sha256.items():
            target = where if name == "." else base / name
            results[name] = target.exists() and sha256_file(target) == expected.lower()
        return results


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


class Catalogue:
    """The built-in catalogue plus the user's additions (later files override ids)."""

    def __init__(self, entries: list[ModelEntry]) -> None:
        self._entries: dict[str, ModelEntry] = {}
        for entry in entries:
            self._entries[entry.id] = entry

    @classmethod
    def load(cls, *extra: Path) -> Catalogue:
        files = [BUILTIN_CATALOGUE]
        user = os.environ.get("EDGE_MODELS_FILE")
        default_user = Path(os.path.expanduser("~/.config/edge/models.toml"))
        if user:
            files.append(Path(user))
        elif default_user.exists():
            files.append(default_user)
        files.extend(extra)
        entries: list[ModelEntry] = []
        for file in files:
            entries.extend(read_catalogue(file))
        return cls(entries)

    def __iter__(self) -> Iterator[ModelEntry]:
        return iter(self._entries.values())

    def __contains__(self, model_id: object) -> bool:
        return model_id in self._entries

    def get(self, model_id: str) -> ModelEntry:
        try:
            return self._entries[model_id]
        except KeyError:
            known = ", ".join(sorted(self._entries))
            raise CatalogueError(
                f"unknown model {model_id!r}; the catalogue has: {known}"
            ) from None

    def default(self, role: Role) -> ModelEntry:
        for entry in self._entries.values():
            if entry.role == role and entry.default:
                return entry
        raise CatalogueError(f"the catalogue has no default {role} model")


def read_toml(path: Path, error: type[Exception], what: str) -> dict[str, Any]:
    """The TOML file at ``path``; ``error`` names ``what`` it is when it is missing or
    not valid TOML (shared by the catalogue and the device profiles)."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{what} {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{what} {path} is not valid TOML: {exc}") from None


def read_catalogue(file: Path) -> list[ModelEntry]:
    data = read_toml(file, CatalogueError, "catalogue file")
    unknown = set(data) - {"model"}
    if unknown:
        raise CatalogueError(
            f"{file}: unknown top-level keys {sorted(unknown)}; use [[model]] tables"
        )
    entries = []
    for i, raw in enumerate(data.get("model", [])):
        try:
            entries.append(ModelEntry.model_validate(raw))
        except ValidationError as exc:
            raise CatalogueError(f"{file}: model #{i + 1} ({raw.get('id', '?')}): {exc}") from None
    return entries


def default_model_path(role: Role) -> Path:
    """Path of the default model for ``role`` from the loaded catalogue."""
    return Catalogue.load().default(role).locate()
