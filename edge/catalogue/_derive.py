"""Derived models: another entry's GGUF converted, once, to a weight format this device
runs faster (``edge models --prepare``, which ``make run`` and ``make test`` run).

The conversion itself is the caller's ``convert`` (the service passes
``edge.llm.quantize_gguf``): the catalogue knows no model runtime, so ``llm`` may import it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ._catalogue import Catalogue, CatalogueError, ModelEntry

Convert = Callable[[Path, Path, str], None]
"""``convert(source, target, kind)`` writes ``source``'s weights to ``target`` in format
``kind`` (e.g. ``"q8_0"``), as ``edge.llm.quantize_gguf`` does."""


def prepare(
    catalogue: Catalogue,
    entry: ModelEntry,
    *,
    convert: Convert | None = None,
    force: bool = False,
) -> tuple[Path, bool]:
    """Build a derived ``entry`` from its source entry with ``convert`` unless it is
    already there (or ``force``); returns where it is and whether it was built now. The
    source must pass its digests first; the file appears under its final name only when
    complete."""
    if entry.derive_from is None or entry.quantize is None:
        raise CatalogueError(f"model {entry.id!r} is not derived from another entry")
    target = entry.derived_path
    if target.exists() and not force:
        return target, False
    source = catalogue.get(entry.derive_from)
    source_path = source.locate()
    bad = [name for name, ok in source.verify().items() if not ok]
    if bad:
        raise CatalogueError(
            f"model {entry.id!r}: its source {source.id!r} fails its SHA-256 check "
            f"({', '.join(bad)}); reinstall it before converting"
        )
    if convert is None:
        raise CatalogueError(f"model {entry.id!r} must be built, and no converter was given")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        convert(source_path, partial, entry.quantize)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target, True


def prepare_all(
    catalogue: Catalogue, *, convert: Convert | None = None, force: bool = False
) -> list[tuple[ModelEntry, Path, bool]]:
    """Every derived entry whose source is installed (a missing source of a default
    model is an error, :class:`ModelMissingError`; other missing sources are skipped)."""
    done = []
    for entry in catalogue:
        if entry.derive_from is None:
            continue
        if not entry.default and not catalogue.get(entry.derive_from).installed():
            continue
        done.append((entry, *prepare(catalogue, entry, convert=convert, force=force)))
    return done
