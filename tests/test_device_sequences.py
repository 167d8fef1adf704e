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
    assert "per sequence" in b.explain["llm_sequences"]
    assert derive_budgets(inputs("ci-2core-24gb")).llm_sequences == 8  # two per participant


def test_sequences_shrink_to_what_memory_holds_and_never_below_one() -> None:
    x = inputs("jetson-agx-orin-64gb")
    full = derive_budgets(x)
    window = full.sequence_window_tokens * x.kv_bytes_per_token
    spare = full.memory_left_bytes - full.kv_cache_budget_bytes
    # memory for exactly two more windows beyond what the cached states take (as many
    # of those as before: fewer would leave more for sequences)
    warm = x.overrides.model_copy(update={"warm_participants": full.warm_participants})
    less = x.model_copy(
        update={"memory_bytes": x.memory_bytes - spare + 2 * window + 1, "overrides": warm}
    )
    assert derive_budgets(less).llm_sequences == 3
    counts = []
    for gib in (64, 32, 16, 10, 8, 7, 6):
        memory = min(x.memory_bytes, gib * 2**30)
        counts.append(derive_budgets(x.model_copy(update={"memory_bytes": memory})).llm_sequences)
    assert counts == sorted(counts, reverse=True) and counts[-1] == 1 and counts[0] == 8


def test_a_sequence_holds_the_largest_prompt_the_budgets_make_not_the_whole_window() -> None:
    for name in ("ci-2core-24gb", "jetson-agx-orin-64gb", "snapdragon-xr2-gen2-headset"):
        b = derive_budgets(inputs(name))
        largest = max(
            b.answer_prompt_tokens_max + b.reserved_output_tokens,
            b.routing_prompt_tokens_max,
            b.compaction_prompt_tokens_max,
        )
        assert largest * 1.5 <= b.sequence_window_tokens < largest * 1.5 + 256
        assert b.sequence_window_tokens <= b.context_window
        assert b.sequence_window_tokens % 256 == 0
    # the CI profile's budgets fill well under half of SmolLM2's 8,192-token window
    assert derive_budgets(inputs("ci-2core-24gb")).sequence_window_tokens < 8192 // 2


def test_a_window_smaller_than_the_prompts_need_caps_the_sequence_window() -> None:
    x = inputs("ci-2core-24gb")
    b = derive_budgets(x.model_copy(update={"context_window": 2560}))
    assert b.sequence_window_tokens == 2560


def test_the_model_gets_the_sequence_window_only_when_it_batches() -> None:
    from edge.device import load_device_config

    batched = load_device_config("ci-2core-24gb")
    cfg = batched.llm_config()
    assert cfg.sequences == 8 and cfg.n_ctx == batched.budgets.sequence_window_tokens
    alone = batched.model_copy(
        update={"budgets": batched.budgets.model_copy(update={"llm_sequences": 1})}
    )
    assert alone.llm_config().n_ctx == batched.budgets.context_window
