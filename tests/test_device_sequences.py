"""Concurrent LLM sequences (continuous batching) sized from the device's memory."""

from __future__ import annotations

from edge.catalogue import Catalogue
from edge.device import budget_inputs, derive_budgets, load_profiles


def inputs(name: str):  # type: ignore[no-untyped-def]
    catalogue = Catalogue.load()
    return budget_inputs(load_profiles(catalogue=catalogue)[name], catalogue)[0]


def test_sequences_are_the_profile_maximum_when_memory_holds_their_windows() -> None:
    b = derive_budgets(inputs("jetson-agx-orin-64gb"))
    assert b.llm_sequences == 8
    assert "per window" in b.explain["llm_sequences"]
    assert derive_budgets(inputs("ci-2core-24gb")).llm_sequences == 1  # one at a time


def test_sequences_shrink_to_what_memory_holds_and_never_below_one() -> None:
    x = inputs("jetson-agx-orin-64gb")
    window = x.context_window * x.kv_bytes_per_token
    full = derive_budgets(x)
    spare = full.memory_left_bytes - full.kv_cache_budget_bytes
    # memory for exactly two more windows beyond what the cached states take
    less = x.model_copy(update={"memory_bytes": x.memory_bytes - spare + 2 * window + 1})
    assert derive_budgets(less).llm_sequences == 3
    counts = []
    for gib in (64, 32, 16, 10, 8, 7, 6):
        memory = min(x.memory_bytes, gib * 2**30)
        counts.append(derive_budgets(x.model_copy(update={"memory_bytes": memory})).llm_sequences)
    assert counts == sorted(counts, reverse=True) and counts[-1] == 1 and counts[0] == 8
