"""Writing a participant's context: exchanges (one with an ``exchange_id`` is recorded once:
its id's identity is kept; nothing is computed from an exchange's words), topic updates,
and what a write sets off (a re-warm of the prefix after an exchange; a compaction at once,
without the model, of a section pressed for room)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from edge.interaction import Exchange
from edge.store import Record

from ._config import ContextConfig, check_participant
from ._context import ParticipantContext, Section, exchange_key
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
        """Record one completed exchange; False when its ``exchange_id`` is recorded already
        or the manager is closed (one without an id is recorded each time)."""
        return await self.record(
            participant_id, Exchange(user, assistant, exchange_id, timestamp_us)
        )

    async def record(self, participant_id: str, exchange: Exchange) -> bool:
        """:meth:`record_exchange` of an :class:`~edge.interaction.Exchange`."""
        check_participant(participant_id)
        if self.state.closed:
            log.debug("context manager closed; exchange for %r dropped", participant_id)
            return False
        ts = self.clock() if exchange.timestamp_us is None else int(exchange.timestamp_us)
        ids = [] if exchange.exchange_id is None else [exchange_key(exchange.exchange_id)]
        part = self.state.participant(participant_id)  # cached before the write: the view gets it
        if ids and ids[0] in part.identities:
            return False
        record = Record("exchange", DIALOGUE, ts, user=exchange.user, assistant=exchange.assistant)
        return await self._record(participant_id, record, ids)

    async def update(
        self, participant_id: str, topic: str, text: str, *, timestamp_us: int | None = None
    ) -> None:
        """Apply a topic's update: a summary topic's replaces its state (clipped to the
        topic budget), an incremental topic's is appended and compacted later."""
        check_participant(participant_id)
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
