"""One measured figure (its repetitions, mean ± sd) and one run (its machine, settings and
figures), with the key two runs are matched on by ``edge bench compare``."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

KEY_FIELDS = ("stage", "test", "model", "backend", "threads", "ngl", "participants", "load")


@dataclass
class Figure:
    """``values`` of one test (one per repetition); ``expected`` is what the device
    profile predicts for it, when it predicts this figure."""

    stage: str
    test: str
    unit: str
    better: Literal["lower", "higher"]
    model: str = "-"
    backend: str = "CPU"
    threads: int | None = None
    ngl: int | None = None
    participants: int | None = None
    load: int = 0
    values: list[float] = field(default_factory=list)
    expected: float | None = None

    @property
    def mean(self) -> float:
        vals = [v for v in self.values if not math.isnan(v)]
        return statistics.fmean(vals) if vals else math.nan

    @property
    def sd(self) -> float:
        vals = [v for v in self.values if not math.isnan(v)]
        return statistics.stdev(vals) if len(vals) > 1 else 0.0

    def key(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in KEY_FIELDS)

    def row(self) -> dict[str, Any]:
        """A flat record: every field, the mean, sd and repetitions."""
        out = asdict(self)
        out.update(mean=self.mean, sd=self.sd, n=len(self.values))
        return out

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Figure:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in row.items() if k in names})


@dataclass
class Run:
    """One ``edge bench`` invocation: where it ran, what it was asked, what it measured."""

    run_id: str
    started_at: str
    machine: dict[str, Any]
    settings: dict[str, Any]
    figures: list[Figure] = field(default_factory=list)

    def document(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "started_at": self.started_at,
            "machine": self.machine,
            "settings": self.settings,
            "figures": [f.row() for f in self.figures],
        }

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> Run:
        return cls(
            run_id=doc["run_id"],
            started_at=doc.get("started_at", ""),
            machine=doc.get("machine", {}),
            settings=doc.get("settings", {}),
            figures=[Figure.from_row(r) for r in doc.get("figures", [])],
        )


def _scale(unit: str, mean: float) -> tuple[float, str]:
    """Seconds under one are shown in milliseconds."""
    return (1000.0, "ms") if unit == "s" and abs(mean) < 1 else (1.0, unit)


def _digits(value: float) -> int:
    return 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2 if abs(value) >= 1 else 3


def _suffix(unit: str) -> str:
    return "" if unit in ("x", "") else f" {unit}"


def fmt_value(value: float, unit: str) -> str:
    """A figure's number at a precision that suits its size."""
    if math.isnan(value):
        return "-"
    factor, shown = _scale(unit, value)
    return f"{value * factor:,.{_digits(value * factor)}f}{_suffix(shown)}"


def fmt_mean_sd(fig: Figure) -> str:
    """``mean ± sd unit`` (just the mean for one repetition)."""
    if math.isnan(fig.mean) or len(fig.values) < 2:
        return fmt_value(fig.mean, fig.unit)
    factor, shown = _scale(fig.unit, fig.mean)
    mean, sd = fig.mean * factor, fig.sd * factor
    d = _digits(mean)
    return f"{mean:,.{d}f} ± {sd:,.{d}f}{_suffix(shown)}"
