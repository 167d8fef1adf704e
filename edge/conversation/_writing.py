"""Writing a participant's context: exchanges (each with its identities, so none is
recorded twice), topic updates, and what a write sets off (a re-warm of the prefix after
an exchange; a compaction at once, without the model, of a section pressed for room)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from edge.store import Record

from ._config import ContextConfig, check_participant
from ._context import ParticipantContext, Section, content_identities, identity
from ._render import DIALOGUE
from ._state import ContextState

log = logging.getLogger(__name__)


class Writer:
    """Records exchanges and topic updates into ``state`` (the store first), at ``clock``'s
    time (Unix microseconds) unless given one. ``start()`` runs the background worker (on
    the first write, without ``async with``), ``relieve(part, section)`` compacts a
    section pressed for room at once, ``wake()`` tells the worker about new work."""

    def __init__(
        self,
        state: ContextState,
        config: ContextConfig,
        clock: Callable[[], int],
        start: Callable[[], None],
        relieve: Callable[[ParticipantContext, Section], Awaitable[None]],
        wake: Callable[[], None],
    ) -> None:
        self.state = state
        self.config = config
        self.clock = clock
        self.start = start
        self.relieve = relieve
        self.wake = wake

    async def record_exchange(
        self,
        participant_id: str,
        user: str,
        assistant: str,
        *,
        timestamp_us: int | None = None,
        exchange_id: object | None = None,
    ) -> bool:
        """Record one completed exchange; False when it was already recorded (same
        ``exchange_id``, or same content and time) or the manager is closed."""
        check_participant(participant_id)
        if not isinstance(user, str) or not isinstance(assistant, str):
            raise TypeError("an exchange needs str user and assistant text")
        if self.state.closed:
            log.debug("context manager closed; exchange for %r dropped", participant_id)
            return False
        ts = self.clock() if timestamp_us is None else int(timestamp_us)
        ids = content_identities(user, assistant, timestamp_us)
        if exchange_id is not None:
            ids = [identity(("id", exchange_id)), *ids]
        if ids[0] in self.state.participant(participant_id).identities:
            return False
        record = Record("exchange", DIALOGUE, ts, user=user, assistant=assistant)
        return await self._record(participant_id, record, ids)

    async def update(
        self, participant_id: str, topic: str, text: str, *, timestamp_us: int | None = None
    ) -> None:
        """Apply a topic's update: a summary topic's replaces its state (clipped to the
        topic budget), an incremental topic's is appended and compacted later."""
        check_participant(participant_id)
        if not isinstance(text, str):
            raise TypeError("a context update needs str text")
        if topic not in self.config.topics:
            topics = list(self.config.topics) or "none"
            raise ValueError(f"unknown context topic {topic!r}; configured: {topics}")
        if self.state.closed:
            log.debug("context manager closed; update of %r dropped", topic)
            return
        ts = self.clock() if timestamp_us is None else int(timestamp_us)
        self.state.participant(participant_id)  # cached before the write, so the view gets it
        summary = topic in self.config.summary_context_topics
        record = Record("state" if summary else "update", topic, ts, text=text)
        await self._record(participant_id, record, [])

    async def _record(self, participant_id: str, record: Record, ids: list[bytes]) -> bool:
        """Write ``record`` (durable when this returns); then re-warm the participant's
        prefix after an exchange, and compact the section at once when it is pressed."""
        self.start()
        stored, section = await self.state.write(participant_id, record, ids)
        part = self.state.peek(participant_id)
        if section is None or part is None:
            return stored
        if record.kind == "exchange" and part.system is not None and self.config.rewarm:
            self.state.mark_warm(part)  # the next answer then evaluates only its request
        await self.relieve(part, section)
        if section.needs_compaction() or self.state.wants_warm(part):
            self.wake()
        return True

    async def reconcile(
        self,
        participant_id: str,
        history: Sequence[Any],
        *,
        exchange_ids: Sequence[object | None] = (),
        timestamps: Sequence[int | None] = (),
    ) -> int:
        """Record the contiguous tail of ``history`` (objects with ``user`` and
        ``assistant``, e.g. the router's) that follows the newest exchange already known;
        returns how many were recorded. Earlier unknown exchanges are not replayed."""
        check_participant(participant_id)
        items = list(history)
        ids = list(exchange_ids) + [None] * (len(items) - len(exchange_ids))
        times = list(timestamps) + [None] * (len(items) - len(timestamps))
        part = self.state.peek(participant_id)
        start = len(items)
        for i in range(len(items) - 1, -1, -1):
            keys = content_identities(items[i].user, items[i].assistant, times[i])
            if ids[i] is not None:
                keys.insert(0, identity(("id", ids[i])))
            if part is not None and part.knows(keys):
                break
            start = i
        recorded = 0
        for i in range(start, len(items)):
            item = items[i]
            recorded += await self.record_exchange(
                participant_id,
                item.user,
                item.assistant,
                timestamp_us=times[i],
                exchange_id=ids[i],
            )
        return recorded
