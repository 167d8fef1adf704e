"""Saved KV states per cache key (usually a participant), least recently used out."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Protocol


class _State(Protocol):
    @property
    def llama_state_size(self) -> int: ...


class KVStore:
    """Holds saved model states within ``budget_bytes``; the oldest is dropped first.

    A state larger than the whole budget is not kept. ``budget_bytes=0`` disables reuse
    across keys (the live context still serves its own owner).
    """

    def __init__(self, budget_bytes: int) -> None:
        if budget_bytes < 0:
            raise ValueError("kv cache budget must be >= 0 bytes")
        self.budget_bytes = budget_bytes
        self._states: OrderedDict[str, Any] = OrderedDict()
        self.used_bytes = 0
        self.evictions = 0

    def __contains__(self, key: object) -> bool:
        return key in self._states

    def __len__(self) -> int:
        return len(self._states)

    def keys(self) -> list[str]:
        return list(self._states)

    def put(self, key: str, state: _State) -> None:
        self.drop(key)
        size = int(state.llama_state_size)
        if size > self.budget_bytes:
            return
        while self._states and self.used_bytes + size > self.budget_bytes:
            _, old = self._states.popitem(last=False)
            self.used_bytes -= int(old.llama_state_size)
            self.evictions += 1
        self._states[key] = state
        self.used_bytes += size

    def get(self, key: str) -> Any | None:
        state = self._states.get(key)
        if state is not None:
            self._states.move_to_end(key)
        return state

    def drop(self, key: str) -> None:
        self.pop(key)

    def pop(self, key: str) -> Any | None:
        """Remove and return ``key``'s state (None when there is none)."""
        old = self._states.pop(key, None)
        if old is not None:
            self.used_bytes -= int(old.llama_state_size)
        return old

    def stats(self) -> dict[str, int]:
        """What it holds, of what budget, and how many states it has dropped to make room."""
        return {
            "saved_states": len(self._states),
            "saved_bytes": self.used_bytes,
            "budget_bytes": self.budget_bytes,
            "evictions": self.evictions,
        }

    def clear(self) -> None:
        self._states.clear()
        self.used_bytes = 0
