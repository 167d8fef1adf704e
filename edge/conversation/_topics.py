"""Adapts configured runtime topics to participant-scoped context updates."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from edge.interaction import ConversationContextUpdate
from edge.runtime import Agent, Handler, HandlerContext, Topic

if TYPE_CHECKING:
    from ._manager import ContextManager

log = logging.getLogger(__name__)


class ContextSubscriber(Agent):
    """Applies :class:`ConversationContextUpdate` messages of the configured topics.

    The participant comes from the message metadata and the recorded time from its
    timestamp. A global update (no participant) applies to every participant the manager
    holds context for. Updates after the manager is closed are dropped. A message on any
    of ``activity_topics`` only touches the manager (:meth:`ContextManager.touch`).
    """

    def __init__(
        self,
        manager: ContextManager,
        summary_topics: tuple[str, ...],
        incremental_topics: tuple[str, ...],
        activity_topics: Sequence[Topic[Any]] = (),
    ) -> None:
        super().__init__()
        self._manager = manager
        for name in summary_topics + incremental_topics:
            self.add_handler(Topic(name, ConversationContextUpdate), self._handler(name))
        for topic in activity_topics:
            self.add_handler(topic, self._touch)

    async def _touch(self, message: object, ctx: HandlerContext) -> None:
        self._manager.touch()

    def _handler(self, topic: str) -> Handler:
        async def handle(message: ConversationContextUpdate, ctx: HandlerContext) -> None:
            meta = ctx.metadata
            if meta.participant_id is None:
                targets = self._manager.participants()
                if not targets:
                    log.info("global update on %r with no participants; nothing to apply", topic)
            else:
                targets = [meta.participant_id]
            for participant_id in targets:
                await self._manager.update(
                    participant_id, topic, message.text, timestamp_us=meta.timestamp_us
                )

        return handle
