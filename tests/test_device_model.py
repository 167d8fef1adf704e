"""Calibration against the real default model (short: one load, ~600 prompt tokens)."""

from __future__ import annotations

from pathlib import Path

import pytest
from device_helpers import ci_hardware

from edge.catalogue import Catalogue, ModelMissingError
from edge.device import (
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
    pytest.importorskip("llama_cpp")
    catalogue = Catalogue.load()
    entry = catalogue.default("llm")
    try:
        path = entry.locate()
    except ModelMissingError as exc:
        pytest.skip(str(exc))
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
    try:
        budgets = derive_budgets(inputs)
    except ValueError as exc:  # a loaded machine can measure too slow for the targets
        assert "raise" in str(exc)
    else:
        assert budgets.dialogue_budget_bytes >= 1024
