"""The saved KV states' store: least recently used out, and what it reports."""

from __future__ import annotations

from dataclasses import dataclass

from edge.llm import KVStore


@dataclass
class State:
    llama_state_size: int


def test_the_least_recently_used_state_makes_room_and_is_counted() -> None:
    store = KVStore(budget_bytes=100)
    store.put("a", State(40))
    store.put("b", State(40))
    assert store.get("a") is not None  # b is now the least recently used
    store.put("c", State(40))
    assert store.keys() == ["a", "c"]
    store.put("huge", State(101))  # larger than the whole budget: not kept, nothing dropped
    assert store.stats() == {
        "saved_states": 2,
        "saved_bytes": 80,
        "budget_bytes": 100,
        "evictions": 1,
    }
