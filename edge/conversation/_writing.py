"""Writing a participant's context: exchanges (each with its identities, so none is
recorded twice), topic updates, and what a write sets off (a re-warm of the prefix after
an exchange; a compaction at once, without the model, of a section pressed for room)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from edge.store import Record

from ._compacting import Compaction
from ._config import check_participant
from ._context import content_identities, identity
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

    async def record_exchange(
        self,
        participant_id: str,
        user: str,
        assistant: str,
        timestamp_us: int | None,
        exchange_id: object | None,
    ) -> bool:
        check_participant(participant_id)
        if not isinstance(user, str) or not isinstance(assistant, str):
            raise TypeError("an exchange needs str user and assistant text")
        if self.views.closed:
            log.debug("context manager closed; exchange for %r dropped", participant_id)
            return False
        ts = self.views.clock() if timestamp_us is None else int(timestamp_us)
        ids = content_identities(user, assistant, timestamp_us)
        if exchange_id is not None:
            ids = [identity(("id", exchange_id)), *ids]
        if ids[0] in self.views.participant(participant_id).identities:
            return False
        record = Record("exchange", DIALOGUE, ts, user=user, assistant=assistant)
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

    async def reconcile(
        self,
        participant_id: str,
        history: Sequence[Any],
        exchange_ids: Sequence[object | None],
        timestamps: Sequence[int | None],
    ) -> int:
        check_participant(participant_id)
        items = list(history)
        ids = list(exchange_ids) + [None] * (len(items) - len(exchange_ids))
        times = list(timestamps) + [None] * (len(items) - len(timestamps))
        part = self.views.participants.get(participant_id)
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
                participant_id, item.user, item.assistant, times[i], ids[i]
            )
        return recorded
