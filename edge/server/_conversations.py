"""Wyoming conversations that outlive a connection.

Home Assistant opens a connection per request and names the dialogue with a
``conversation_id`` in the transcript's context. :class:`HaConversationParticipants` maps each id to
one participant (``wyoming:<id>``: the colon is outside the WebSocket participant id rule,
so no WebSocket client can name one), joined at its first request and kept, with its
context and history, until it has been idle for ``idle_s``; then (or at shutdown) it
leaves like any participant. Only one request of a conversation runs at a time, and a
request that comes while its conversation is leaving waits for the departure, then joins
it again (so the departure never lands after the new join).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio

from ._gateway import ClientError, Gateway
from ._protocol import PARTICIPANT_ID_RULE, check_participant_id

SOURCE = "wyoming"


class HaConversationParticipants:
    def __init__(
        self,
        gateway: Gateway,
        *,
        idle_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.gateway = gateway
        self.idle_s = idle_s
        self._clock = clock
        self._last_used: dict[str, float] = {}  # participant → last request end
        self._busy: set[str] = set()
        self._leaving: dict[str, anyio.Event] = {}  # departures being published

    @staticmethod
    def participant(conversation_id: str) -> str:
        """``wyoming:<id>``; an id outside the rule is refused, never normalised (two ids
        must never share one history)."""
        try:
            check_participant_id(conversation_id)
        except ValueError:
            raise ClientError(
                f"conversation_id must be {PARTICIPANT_ID_RULE.replace('participant_id', '')}"
            ) from None
        return f"{SOURCE}:{conversation_id}"

    def active(self) -> list[str]:
        return list(self._last_used)

    async def begin(self, conversation_id: str) -> str:
        """The conversation's participant, joined if new; marks it busy."""
        pid = self.participant(conversation_id)
        if pid in self._busy:
            raise ClientError(f"conversation {conversation_id!r} is busy with another request")
        self._busy.add(pid)
        if pid not in self._last_used:
            try:
                while (leaving := self._leaving.get(pid)) is not None:
                    await leaving.wait()
                await self.gateway.join(pid, "Home Assistant conversation", SOURCE)
            except BaseException:
                self._busy.discard(pid)
                raise
        self._last_used[pid] = self._clock()
        return pid

    def end(self, participant_id: str) -> None:
        self._busy.discard(participant_id)
        if participant_id in self._last_used:
            self._last_used[participant_id] = self._clock()

    async def expire(self) -> list[str]:
        """Let conversations idle for ``idle_s`` leave; returns who left."""
        now = self._clock()
        gone = [
            pid
            for pid, used in self._last_used.items()
            if pid not in self._busy and now - used >= self.idle_s
        ]
        for pid in gone:
            del self._last_used[pid]
            await self._leave(pid, "conversation idle")
        return gone

    async def _leave(self, participant_id: str, reason: str) -> None:
        self._leaving[participant_id] = done = anyio.Event()
        try:
            await self.gateway.leave(participant_id, reason, SOURCE)  # bounded, never raises
        finally:
            del self._leaving[participant_id]
            done.set()

    async def run(self) -> None:
        """Expire idle conversations until cancelled."""
        while True:
            await anyio.sleep(max(1.0, min(30.0, self.idle_s / 4)))
            await self.expire()

    async def close(self) -> None:
        """Every remaining conversation leaves (shutdown)."""
        for pid in list(self._last_used):
            del self._last_used[pid]
            await self._leave(pid, "server stopping")
