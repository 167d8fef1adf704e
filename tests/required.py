"""Required parts fail the run when missing; they are never skipped.

``pytest.importorskip`` turns a broken install into a skip that CI reports as green. The
project's own packages, its declared dependencies and the default models are required, so a
test that needs one imports it through :func:`require` and fails with how to install it.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

INSTALL = "install the project and its default models: `make setup` (or "
INSTALL += "`pip install -e '.[test]' && pip install --no-deps -r models/requirements.txt`)"


def require(module: str) -> ModuleType:
    """Import ``module`` or fail the test saying how to install it (never a skip)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        pytest.fail(f"required module {module!r} cannot be imported ({exc}); {INSTALL}")


def require_default_model(role: str) -> Path:
    """The default model for ``role`` or a failure naming the package that provides it."""
    from edge.catalogue import Catalogue, ModelMissingError

    try:
        return Catalogue.load().default(role).locate()  # type: ignore[arg-type]
    except ModelMissingError as exc:
        pytest.fail(f"the default {role} model is missing: {exc}")
