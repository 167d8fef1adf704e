"""Calibration against the real default model (short: one load, ~600 prompt tokens)."""

from __future__ import annotations

from pathlib import Path

import pytest
from device_helpers import ci_hardware
from required import require, require_default_model

from edge.catalogue import Catalogue
from edge.device import (
    BudgetError,
    CalibrationStore,
    budget_inputs,
    calibrate,
    derive_budgets,
    load_profiles,
    measure_llm,
)

pytestmark = [pytest.mark.anyio, pytest.mark.model]


async def short_measure(path: Path, threads: int, gpu_layers: int):
    return await measure_llm(path, threads, gpu_layers, generate_tokens=16, repeats=1)


async def test_real_calibration_is_plausible_and_reused(tmp_path: Path) -> None:
    require("llama_cpp")
    catalogue = Catalogue.load()
    entry = catalogue.default("llm")
    path = require_default_model("llm")
    store = CalibrationStore(tmp_path / "calibration.json")
    hw = ci_hardware()
    cal, reused = await calibrate(
        entry, path, hw, threads=2, gpu_layers=0, store=store, measure=short_measure
    )
    assert not reused
    assert cal.prompt_tokens >= 300 and cal.generated_tokens >= 2
    assert cal.prompt_tokens_per_s > 5 and cal.generation_tokens_per_s > 1
    assert 2.0 < cal.text_bytes_per_token < 6.0
    # SmolLM2-135M: 30 layers x 3 KV heads x 64 dims x 2 (K, V) x 2 bytes (f16) = 23,040,
    # plus a few bytes of cell metadata per token in the saved state
    assert 23040 <= cal.kv_bytes_per_token <= 23040 * 1.01
    assert "sha256" in cal.model_key

    async def must_not_measure(*_: object) -> None:
        raise AssertionError("a stored calibration should have been reused")

    again, reused = await calibrate(
        entry, path, hw, threads=2, gpu_layers=0, store=store, measure=must_not_measure
    )
    assert reused and again == cal
    profile = load_profiles(catalogue=catalogue)["ci-2core-24gb"]
    inputs, _ = budget_inputs(profile, catalogue, calibration=cal)
    assert inputs.sources["prompt_tokens_per_s"] == "calibrated"
    assert inputs.prompt_tokens_per_s == cal.prompt_tokens_per_s
    try:
        budgets = derive_budgets(inputs)
    except BudgetError as exc:
        # A loaded machine can measure too slow for the latency targets; then the rejection
        # must be due to the speed alone: the same measurement at the profile's stated speed
        # derives (so a derivation that always rejects still fails here).
        assert "raise" in str(exc) or "lower" in str(exc)
        stated, _ = budget_inputs(profile, catalogue)
        faster = {k: getattr(stated, k) for k in ("prompt_tokens_per_s", "generation_tokens_per_s")}
        assert cal.prompt_tokens_per_s < stated.prompt_tokens_per_s, exc
        budgets = derive_budgets(inputs.model_copy(update=faster))
    assert budgets.dialogue_budget_bytes >= 1024
