"""Writing a participant's context: exchanges (one with an ``exchange_id`` is recorded once:
its id's identity is kept; nothing is computed from an exchange's words), topic updates,
and what a write sets off (a re-warm of the prefix after an exchange; a compaction at once,
without the model, of a section pressed for room)."""

from __future__ import annotations

import logging

from edge.interaction import Exchange
from edge.store import Record

from ._compacting import Compaction
from ._config import check_participant
from ._context import exchange_key
from ._render import DIALOGUE
from ._schedule import Scheduler
from ._views import Views

log = logging.getLogger(__name__)


class Writer:
    """Records exchanges and topic updates into ``views`` (the store first)."""

    def __init__(self, views: Views, compaction: Compaction, schedule: Scheduler) -> None:
        self.views = views
        self.config = views.config
        self.compaction = compaction
        self.schedule = schedule

    async def record_exchange(self, participant_id: str, exchange: Exchange) -> bool:
        check_participant(participant_id)
        if not isinstance(exchange.user, str) or not isinstance(exchange.assistant, str):
            raise TypeError("an exchange needs str user and assistant text")
        if self.views.closed:
            log.debug("context manager closed; exchange for %r dropped", participant_id)
            return False
        ts = self.views.clock() if exchange.timestamp_us is None else int(exchange.timestamp_us)
        ids = [] if exchange.exchange_id is None else [exchange_key(exchange.exchange_id)]
        part = self.views.participant(participant_id)  # cached before the write: the view gets it
        if ids and ids[0] in part.identities:
            return False
        record = Record("exchange", DIALOGUE, ts, user=exchange.user, assistant=exchange.assistant)
        return await self._record(participant_id, record, ids)

    async def update(
        self, participant_id: str, topic: str, text: str, timestamp_us: int | None
    ) -> None:
        check_participant(participant_id)
        if not isinstance(text, str):
            raise TypeError("a context update needs str text")
        if topic not in self.views.budgets or topic == DIALOGUE:
            topics = list(self.config.topics) or "none"
            raise ValueError(f"unknown context topic {topic!r}; configured: {topics}")
        if self.views.closed:
            log.debug("context manager closed; update of %r dropped", topic)
            return
        ts = self.views.clock() if timestamp_us is None else int(timestamp_us)
        self.views.participant(participant_id)  # cached before the write, so the view gets it
        kind = "state" if topic in self.config.summary_context_topics else "update"
        await self._record(participant_id, Record(kind, topic, ts, text=text), [])

    async def _record(self, participant_id: str, record: Record, ids: list[bytes]) -> bool:
        """Write ``record`` (durable when this returns); then re-warm the participant's
        prefix after an exchange, and compact the section at once when it is pressed."""
        self.schedule.start()
        stored, section = await self.views.write(participant_id, record, ids)
        if section is None:
            return stored
        part = self.views.participants[participant_id]
        if record.kind == "exchange" and part.system is not None and self.config.rewarm:
            part.warm_pending = True  # the next answer then evaluates only its request
        if section.needs_compaction() and self.compaction.pressed(section):
            await self.compaction.without_model(part, section)
        if section.needs_compaction() or part.warm_pending:
            self.schedule.wake()
        return True
