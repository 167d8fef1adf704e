"""The dialogue a :class:`ContextManager` owns, as routing sees it: the one place an
exchange goes into the context (:meth:`ContextDialogue.record`) and comes out of its
store (:meth:`ContextDialogue.recent`), and the conversation spec's history
reconciliation over them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from edge.interaction import Exchange

from ._config import check_participant
from ._context import exchange_key

if TYPE_CHECKING:
    from ._manager import ContextManager


class ContextDialogue:
    """The router's view of the dialogue a :class:`ContextManager` owns (an
    :class:`edge.routing.DialogueHistory`): the newest recorded exchanges, each identified
    by its stored record; an exchange is recorded under its own ``exchange_id``, so one
    recorded already is not recorded twice. Departure leaves the dialogue to the
    application (the service suspends it).

    A router given this dialogue leaves the exchanges of the conversation that owns it to
    the conversation (it records its own), and records the other destinations' here."""

    PAGE = 16

    def __init__(self, context: ContextManager) -> None:
        self.context = context

    def recent(self, participant_id: str, budget_bytes: int) -> list[Exchange]:
        kept: list[Exchange] = []
        used = 0
        for exchange in self._newest_first(participant_id):
            if used + exchange.size > budget_bytes:
                break
            kept.append(exchange)
            used += exchange.size
        return kept[::-1]

    async def record(self, participant_id: str, exchange: Exchange) -> None:
        await self._record(participant_id, exchange)

    async def forget(self, participant_id: str) -> None:
        """Nothing: the application suspends or clears the participant's context."""

    async def reconcile(
        self,
        participant_id: str,
        history: Sequence[Exchange],
        exchange_ids: Sequence[object | None] = (),
        timestamps: Sequence[int | None] = (),
    ) -> int:
        """Record the contiguous tail of ``history`` (e.g. a turn's, with the ids and times
        of :func:`edge.routing.current_turn_context` aligned to it; an exchange's own
        fill in where none is given) that follows the newest exchange already known (by
        its id, or by its words); returns how many were recorded. Earlier unknown
        exchanges are not replayed."""
        check_participant(participant_id)
        if self.context.closed:
            return 0
        items = [
            Exchange(
                e.user,
                e.assistant,
                exchange_ids[i] if i < len(exchange_ids) else e.exchange_id,
                timestamps[i] if i < len(timestamps) else e.timestamp_us,
            )
            for i, e in enumerate(history)
        ]
        said: set[tuple[str, str]] | None = None  # stored exchanges' words, read once
        start = len(items)
        while start:
            e = items[start - 1]
            if e.exchange_id is not None and self._knows(participant_id, e.exchange_id):
                break
            if said is None:
                said = {(s.user, s.assistant) for s in self._newest_first(participant_id)}
            if (e.user, e.assistant) in said:
                break
            start -= 1
        recorded = 0
        for e in items[start:]:
            recorded += await self._record(participant_id, e)
        return recorded

    async def _record(self, participant_id: str, exchange: Exchange) -> bool:
        return await self.context.writer.record(participant_id, exchange)

    def _knows(self, participant_id: str, exchange_id: object) -> bool:
        return self.context.store.records.knows(participant_id, exchange_key(exchange_id))

    def _newest_first(self, participant_id: str) -> Iterator[Exchange]:
        """The participant's stored exchanges, newest first, read a page at a time."""
        store = self.context.store
        if self.context.closed or not store.exists(participant_id):
            return
        _, end = store.history(participant_id, limit=0)
        while end > 0:
            start = max(end - self.PAGE, 0)
            records, _ = store.history(participant_id, offset=start, limit=end - start)
            for r in reversed(records):
                if r.kind == "exchange":
                    yield Exchange(r.user, r.assistant, r.id, r.timestamp_us)
            end = start
