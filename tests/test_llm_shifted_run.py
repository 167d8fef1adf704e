"""Finding the run a trimmed prompt keeps from a held state (pure logic)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from edge.llm._engine import common_prefix, shifted_run


def test_the_run_after_a_cut_span_is_found() -> None:
    held = [1, 2, 3, *range(100, 140), *range(200, 300), 7]
    target = [1, 2, 3, *range(200, 300), 8, 9]  # the 100s cut out, then new tokens
    start = common_prefix(held, target)
    assert shifted_run(held, target, start, min_run=16) == (43, 100)


def test_a_run_shorter_than_the_minimum_or_a_new_prompt_is_not_shifted() -> None:
    held = [1, *range(100, 110), *range(200, 210)]
    assert shifted_run(held, [1, *range(200, 210)], 1, min_run=16) is None
    assert shifted_run(held, [1, *range(500, 600)], 1, min_run=16) is None
    assert shifted_run(held, [1], 1, min_run=16) is None


@given(
    st.lists(st.integers(0, 5), max_size=20),
    st.lists(st.integers(0, 5), max_size=20),
    st.lists(st.integers(0, 5), min_size=8, max_size=40),
    st.lists(st.integers(0, 5), max_size=10),
)
def test_a_found_run_is_what_the_target_goes_on_with(
    prefix: list[int], cut: list[int], kept: list[int], new: list[int]
) -> None:
    held, target = prefix + cut + kept, prefix + kept + new
    start = common_prefix(held, target)
    found = shifted_run(held, target, start, min_run=8)
    if found is None:
        return
    offset, length = found
    assert start < offset and length >= 8
    assert held[offset : offset + length] == target[start : start + length]
