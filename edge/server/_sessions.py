"""Sessions that outlive connections, and the session features of the protocol.

:class:`Sessions` sits between the protocol adapters and the durable store
(:mod:`edge.store`) plus the :class:`~edge.conversation.ContextManager`: it opens a
participant's session (a new participant gets a session token; an existing one must
present it), answers the session requests (history, context view, compact, last
compaction, export, import), erases a participant on ``forget``, enforces retention and
reports the store for ``/health``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict
from typing import Any

import anyio

from edge.conversation import ContextManager
from edge.notes import kept_draft
from edge.runtime import BackgroundTasks, now_us
from edge.store import (
    Retention,
    SessionRefused,
    SessionStore,
    export_participant,
    import_participant,
    token_hash,
)

from ._gateway import ClientError
from ._protocol import (
    Compacted,
    CompactRequest,
    ContextView,
    ContextViewRequest,
    ExportMessage,
    ExportRequest,
    HistoryPage,
    HistoryRequest,
    Imported,
    ImportRequest,
    LastCompaction,
    LastCompactionRequest,
    ServerMessage,
)

log = logging.getLogger(__name__)

RETENTION_INTERVAL_S = 3600.0
FORGOTTEN_POLL_S = 0.5
"""How often a running service looks for participants `edge sessions forget` erased."""
MAX_REPLY_BYTES = 2 << 20
"""The most a history page or an export may encode to: half the 4 MiB frame
:class:`~edge.server.EdgeClient` accepts, so any client with a sane limit can read it."""


class Sessions:
    """The service's participants' sessions, over one store and one context manager."""

    def __init__(
        self,
        store: SessionStore,
        context: ContextManager,
        retention: Retention | None = None,
    ) -> None:
        self.store = store
        self.context = context
        self.retention = retention or Retention()
        self.on_forget: list[Callable[[str], Awaitable[None]]] = []
        """Called with the participant's id after :meth:`forget` erased their context
        (e.g. the decision service dropping the state it prepared for them)."""
        self._opened: dict[str, int] = {}  # the participants this service held: since when

    async def open(self, participant_id: str, resume: str | None) -> tuple[str, bool]:
        """``(session_token, resumed)`` for a hello; a resumed participant's context is
        loaded and their prompt prefix re-warmed in the background."""
        try:
            token, resumed = await self.store.run(self.store.claim, participant_id, resume)
        except SessionRefused as exc:
            raise ClientError(str(exc)) from None
        self._opened[participant_id] = now_us()
        if resumed:
            await self.context.resume(participant_id)
        return token, resumed

    async def check(self, participant_id: str, resume: str | None) -> None:
        """Raise :class:`ClientError` unless ``resume`` is the participant's session token."""
        try:
            await self.store.run(self.store.claim, participant_id, resume)
        except SessionRefused as exc:
            raise ClientError(str(exc)) from None

    async def forget(self, participant_id: str) -> None:
        self._opened.pop(participant_id, None)
        await self.context.clear(participant_id)
        for hook in self.on_forget:
            await hook(participant_id)

    @asynccontextmanager
    async def forgotten_watch(
        self,
        connected: Callable[[], list[str]],
        end: Callable[[str], Awaitable[None]],
        interval_s: float = FORGOTTEN_POLL_S,
    ) -> AsyncIterator[None]:
        """While open, erase what this service holds of a participant that another process
        erased from the store (`edge sessions forget`): ``end`` ends their connection (one
        of ``connected()``) and waits for its departure, then their context goes
        everywhere, so nothing answers from it and nothing written meanwhile stays."""
        tasks = BackgroundTasks("forgotten participants")
        await tasks.open()
        try:
            tasks.start_soon(self._forgotten_loop, connected, end, interval_s)
            yield
        finally:
            await tasks.close()

    async def _forgotten_loop(
        self,
        connected: Callable[[], list[str]],
        end: Callable[[str], Awaitable[None]],
        interval_s: float,
    ) -> None:
        while True:
            try:
                await self.erase_forgotten(connected(), end)
            except Exception:
                log.exception("erasing participants forgotten on the device failed")
            await anyio.sleep(interval_s)

    async def erase_forgotten(
        self, connected: list[str], end: Callable[[str], Awaitable[None]]
    ) -> list[str]:
        """One look for participants forgotten by another process; returns those erased."""
        held = {*connected, *self.context.participants()}
        self._opened = {pid: at for pid, at in self._opened.items() if pid in held}
        forgotten = await self.store.run(self.store.forgotten)
        if not forgotten:
            return []
        held_by_hash = {token_hash(pid): pid for pid in held}
        erased = []
        for digest, at_us in forgotten.items():
            pid = held_by_hash.get(digest)
            if pid is not None and self._opened.get(pid, 0) <= at_us:  # not a later session
                log.info("participant %s was forgotten on the device: erasing them", pid)
                await end(pid)
                await self.forget(pid)
                erased.append(pid)
        await self.store.run(self.store.handled_forgotten, list(forgotten))
        return erased

    async def answer(self, participant_id: str, request: Any) -> ServerMessage:
        """The reply to one session request of the connection that owns the participant."""
        if isinstance(request, HistoryRequest):
            return self.history(participant_id, request.offset, request.limit)
        if isinstance(request, ContextViewRequest):
            return self.view(participant_id)
        if isinstance(request, CompactRequest):
            return await self._compact(participant_id, request)
        if isinstance(request, LastCompactionRequest):
            report = self.context.last_compaction(participant_id)
            return LastCompaction(report=asdict(report) if report is not None else None)
        if isinstance(request, ExportRequest):
            return ExportMessage(document=self.export(participant_id))
        if isinstance(request, ImportRequest):
            return await self._import(participant_id, request.document)
        raise ClientError(f"not a session request: {getattr(request, 'type', request)!r}")

    def history(self, participant_id: str, offset: int, limit: int) -> HistoryPage:
        """Up to ``limit`` entries from ``offset``, fewer when they would encode to more
        than :data:`MAX_REPLY_BYTES` (at least one): the client pages on from
        ``offset + len(entries)`` up to ``total``."""
        records, total = self.store.history(participant_id, offset=offset, limit=limit)
        entries: list[dict[str, Any]] = []
        size = 0
        for record in records:
            entry = asdict(record)
            size += len(json.dumps(entry, ensure_ascii=False).encode())
            if entries and size > MAX_REPLY_BYTES:
                break
            entries.append(entry)
        return HistoryPage(offset=offset, total=total, entries=entries)

    def view(self, participant_id: str) -> ContextView:
        blocks = self.context.blocks(participant_id)
        sections: dict[str, dict[str, Any]] = {}
        for name, budget in self.context.budgets.items():
            mine = [b for b in blocks if b.section == name]
            sections[name] = {
                "budget_bytes": budget,
                "used_bytes": sum(len(b.text.encode()) for b in mine),
                "entries": sum(b.kind != "summary" for b in mine),
                "summary": self.context.summary(participant_id, name),
            }
        dictating = kept_draft(self.store, participant_id)
        return ContextView(
            blocks=[asdict(b) for b in blocks], sections=sections, dictating=dictating
        )

    async def _compact(self, participant_id: str, request: CompactRequest) -> Compacted:
        try:
            reports = await self.context.compact(
                participant_id,
                section=request.section,
                summary=request.summary,
                keep_last=request.keep_last,
            )
        except ValueError as exc:
            raise ClientError(str(exc)) from None
        return Compacted(reports=[asdict(r) for r in reports])

    def export(self, participant_id: str) -> dict[str, Any]:
        try:
            document = export_participant(self.store, participant_id)
        except KeyError:
            raise ClientError("nothing is stored for this participant yet") from None
        size = len(json.dumps(document, ensure_ascii=False).encode())
        if size > MAX_REPLY_BYTES:
            raise ClientError(
                f"this participant's export is {size / (1 << 20):.1f} MiB, more than one "
                f"message carries ({MAX_REPLY_BYTES >> 20} MiB): run `edge sessions export "
                f"{participant_id}` on the device, or page through `history`"
            )
        return document

    async def _import(self, participant_id: str, document: dict[str, Any]) -> Imported:
        await self.context.suspend(participant_id)
        try:
            await self.store.run(
                lambda: import_participant(self.store, document, participant_id, replace=True)
            )
        except ValueError as exc:
            raise ClientError(str(exc)) from None
        await self.context.resume(participant_id)
        return Imported(participant_id=participant_id, records=len(document.get("records", ())))

    # -- housekeeping -------------------------------------------------------------------

    async def enforce_retention(self, active: list[str]) -> dict[str, int]:
        result = await self.store.run(self.store.enforce, self.retention, active)
        if any(result.values()):
            log.info("retention: %s", json.dumps(result))
        return result

    @asynccontextmanager
    async def retention_task(
        self, active: Callable[[], list[str]], interval_s: float = RETENTION_INTERVAL_S
    ) -> AsyncIterator[None]:
        """While open, enforce retention now and every ``interval_s``; ``active()`` names
        the participants that must not be erased (those connected)."""
        tasks = BackgroundTasks("session retention")
        await tasks.open()
        try:
            tasks.start_soon(self._retention_loop, active, interval_s)
            yield
        finally:
            await tasks.close()

    async def _retention_loop(self, active: Callable[[], list[str]], interval_s: float) -> None:
        while True:
            try:
                await self.enforce_retention(list(active()))
            except Exception:
                log.exception("enforcing session retention failed")
            await anyio.sleep(interval_s)

    def health(self) -> dict[str, Any]:
        return {
            "durable": self.store.on_disk,
            "store_bytes": self.store.size_bytes(),
            "stored_participants": len(self.store.participants()),
        }
