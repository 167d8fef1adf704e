"""Which model state a stateless request continues: a client's conversations kept apart.

Stateless requests that open with the same first message (one app's system prompt, sent
by several people's clients, or one client's several chats) shared one cache key, so two
chats taking turns each found the other's history in the state and evaluated their own
whole history again: a chat's sixth turn evaluated 396 of its 424 prompt tokens instead
of about 30. Here each first message has up to :data:`SLOTS_PER_PREFIX` keys, one per
conversation. A request goes to the key whose state holds its history (the same rounds,
the newest ones after a cut at the start, or its question asked before), else to a key
of its own: a new one seeded from the first message's state while fewer than
:data:`SLOTS_PER_PREFIX` exist, then the least recently used. Of the keys that hold it,
one no request is using goes first, so concurrent conversations also batch.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import takewhile

from edge.llm import ChatMessage

SLOTS_PER_PREFIX = 4
"""Conversations of one first message whose states are kept apart."""
MAX_PREFIXES = 64
"""First messages remembered; beyond this, the one used least recently (none of its
requests running) is forgotten: a client sending ever new first messages (chats without
a system prompt) does not grow the service's memory."""

Dialogue = tuple[Hashable, ...]
"""A conversation's messages after its first one, each as a hash of its role and text (a
slot remembers a conversation in a few bytes a message, however long its texts)."""


def dialogue(messages: Sequence[ChatMessage]) -> Dialogue:
    """``messages`` after the first (its system prompt, where a clock line stays: the
    messages as the client sent them)."""
    return tuple(hash((m.role, m.content)) for m in messages[1:])


def held_run(held: Dialogue, asked: Dialogue) -> int:
    """How many of ``asked``'s first messages ``held`` holds in a row, from its start or
    after a cut at its start (a client dropping its oldest rounds)."""
    starts = [i for i, message in enumerate(held) if asked and message == asked[0]]
    return max((_common(held[i:], asked) for i in starts), default=0)


def _common(a: Dialogue, b: Dialogue) -> int:
    return sum(1 for _ in takewhile(lambda pair: pair[0] == pair[1], zip(a, b, strict=False)))


@dataclass
class Slot:
    key: str
    held: Dialogue = ()  # what its state holds after the last answer
    busy: int = 0  # requests using it now
    used: int = 0  # when it was last taken (a counter)


class ConversationSlots:
    """The cache keys of stateless requests, per first message; see the module doc."""

    def __init__(self, per_prefix: int = SLOTS_PER_PREFIX) -> None:
        if per_prefix < 1:
            raise ValueError("per_prefix must be at least 1")
        self.per_prefix = per_prefix
        self._slots: dict[str, list[Slot]] = {}
        self._clock = itertools.count(1)

    def take(self, prefix: str, asked: Dialogue) -> tuple[Slot, str | None]:
        """The slot for a request under ``prefix`` asking ``asked`` (history and newest
        message), and the key to seed a new slot's state from (None: none needed)."""
        slots = self._slots.setdefault(prefix, [])
        self._forget_oldest(keep=prefix)
        slot, seed = self._holding(slots, asked), None
        if slot is None:
            slot, seed = self._own(prefix, slots)
        slot.busy += 1
        slot.used = next(self._clock)
        return slot, seed

    def done(self, slot: Slot, held: Dialogue | None) -> None:
        """A request on ``slot`` ended; ``held``: what its state now holds (None: unknown,
        the request failed, so nothing is continued from it)."""
        slot.busy -= 1
        slot.held = held if held is not None else ()

    def _forget_oldest(self, keep: str) -> None:
        idle = [
            p for p, slots in self._slots.items() if p != keep and not any(s.busy for s in slots)
        ]
        while len(self._slots) > MAX_PREFIXES and idle:
            oldest = min(idle, key=lambda p: max((s.used for s in self._slots[p]), default=0))
            idle.remove(oldest)
            del self._slots[oldest]

    def _holding(self, slots: list[Slot], asked: Dialogue) -> Slot | None:
        """The slot whose state holds ``asked``'s whole history, longest run first, then
        one that is free, then the most recent. A first message (no history) matches
        only a slot that was asked it before, never a conversation under way."""
        need = max(len(asked) - 1, 1)
        scored = [(held_run(s.held, asked), s) for s in slots]
        fits = [(n, s) for n, s in scored if n >= need]
        if not fits:
            return None
        return max(fits, key=lambda f: (f[0], f[1].busy == 0, f[1].used))[1]

    def _own(self, prefix: str, slots: list[Slot]) -> tuple[Slot, str | None]:
        """A slot for a conversation no state holds: an empty free one, a new one, or the
        least recently used (a free one first)."""
        newest = max(slots, key=lambda s: s.used, default=None)
        for slot in slots:
            if not slot.held and slot.busy == 0:
                return slot, None
        if len(slots) < self.per_prefix:
            slot = Slot(prefix if not slots else f"{prefix}:{len(slots)}")
            slots.append(slot)
            return slot, newest.key if newest is not None else None
        return min(slots, key=lambda s: (s.busy > 0, s.used)), None
