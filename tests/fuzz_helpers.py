"""What the fuzz tests share: their hypothesis settings (examples scaled by
``EDGE_FUZZ_SCALE``, 20 in ``make soak``) and a strategy for any JSON value."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

SCALE = int(os.environ.get("EDGE_FUZZ_SCALE", "1"))


def fuzz_settings(examples: int, deadline_ms: int, *, live: bool = True) -> settings:
    """``examples`` (times SCALE) with ``deadline_ms`` each; ``live``: examples against a
    running service, held by a module fixture."""
    checks = [HealthCheck.too_slow]
    if live:
        checks.append(HealthCheck.function_scoped_fixture)
    return settings(
        max_examples=examples * SCALE,
        deadline=deadline_ms,
        suppress_health_check=checks,
        database=None,
    )


def any_json(max_leaves: int = 20, wide_numbers: bool = False) -> st.SearchStrategy[object]:
    """Any JSON value; ``wide_numbers`` adds integers past 64 bits and infinities."""
    numbers = (
        st.integers(-(2**70), 2**70) | st.floats(allow_nan=False)
        if wide_numbers
        else st.integers() | st.floats(allow_nan=False)
    )
    return st.recursive(
        st.none() | st.booleans() | numbers | st.text(max_size=30),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
        max_leaves=max_leaves,
    )
