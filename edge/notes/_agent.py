"""The notes agent: a RoutableAgent that takes dictated notes while it holds focus."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from edge.interaction import VOICE_OUTPUT_TOPIC, ConversationContextUpdate, ResponseOutput
from edge.routing import Admission, AgentTurn, DestinationResult, RoutingAid, reply_frame
from edge.runtime import Topic

from ._drafts import DraftKeeper
from ._phrases import ROUTE_EXAMPLES, note_start, split_done

log = logging.getLogger(__name__)

NOTES_TOPIC: Topic[ConversationContextUpdate] = Topic("notes", ConversationContextUpdate)
"""Default incremental context topic: each message is one completed note."""

STARTED_TEXT = "Okay, I'm taking a note. Say done when you're finished."
CONTINUED_TEXT = "Got it."
SAVED_TEXT = "Note saved."
EMPTY_TEXT = "There was nothing to save."


class NotesAgent:
    """Takes focus while a participant dictates a note.

    "Take a note ..." starts a note (any words after the request are its first part);
    every following turn is dictation until the participant says "done" or "that's
    all". The finished note is published as a
    :class:`~edge.interaction.ConversationContextUpdate` on ``notes_topic`` (an
    incremental context topic, so the conversation can answer from it later), and focus is
    released. Confirmations are short replies on ``output_topic`` with the turn id as
    request id and ``route_name`` as source.

    When the router releases the agent mid-note (another destination took focus), the
    words dictated so far are saved as a note rather than lost.

    With ``drafts`` (the service keeps them in the sessions store), each dictated line is
    kept before it is acknowledged, and a departure keeps the draft: the participant's
    next connection (a reconnect, a reload, a restart of the service) goes on dictating
    the same note (:meth:`resume` gives the agent their focus back). Without it a
    departure discards the draft. ``participant_left`` forgets the saved notes held in
    memory (they are in the conversation's context).
    """

    def __init__(
        self,
        runtime: Any,
        *,
        route_name: str = "notes",
        notes_topic: Topic[ConversationContextUpdate] = NOTES_TOPIC,
        output_topic: Topic[ResponseOutput] = VOICE_OUTPUT_TOPIC,
        max_note_bytes: int = 4000,
        drafts: DraftKeeper | None = None,
    ) -> None:
        if max_note_bytes <= 0:
            raise ValueError("max_note_bytes must be positive")
        self.runtime = runtime
        self.route_name = route_name
        self.notes_topic = notes_topic
        self.output_topic = output_topic
        self.max_note_bytes = max_note_bytes
        self.drafts = drafts
        self._drafts: dict[str, list[str]] = {}
        self._saved: dict[str, list[str]] = {}

    # --------------------------------------------------------------- RoutableAgent

    def routing_aid(self, participant_id: str) -> RoutingAid:
        dictating = participant_id in self._drafts
        return RoutingAid(
            name=self.route_name,
            description="Takes dictated notes and reminders for the participant, "
            "until they say done.",
            eligible=True,
            eligibility="dictating a note" if dictating else "available",
            examples=ROUTE_EXAMPLES,
        )

    async def admit(self, turn: AgentTurn, *, focused: bool) -> Admission:
        if focused and turn.participant_id in self._drafts:
            return Admission("accept")
        if note_start(turn.query) is not None:
            return Admission("accept")
        return Admission("decline")

    async def answer(
        self, turn: AgentTurn, *, started: Callable[[], Awaitable[None]]
    ) -> DestinationResult:
        pid = turn.participant_id
        draft = self._drafts.get(pid)
        starting = draft is None
        if draft is None:
            content = note_start(turn.query)
            content = turn.query.strip() if content is None else content  # fallback answer
            draft = []
        else:
            content = turn.query
        content, finished = split_done(content)
        if content:
            draft.append(content)
            if sum(len(part.encode()) for part in draft) > self.max_note_bytes:
                draft[:] = [self._join(draft)]  # what the note keeps: the draft stays bounded
        if not finished:
            self._drafts[pid] = draft
            await self._keep(pid, draft)  # durable before it is acknowledged
            await started()
            await self._say(turn, STARTED_TEXT if starting else CONTINUED_TEXT)
            return DestinationResult("focus", f"(dictating a note) {content}".strip())
        self._drafts.pop(pid, None)
        note = self._join(draft)
        await started()
        if not note:
            await self._keep(pid, None)
            await self._say(turn, EMPTY_TEXT)
            return DestinationResult("release", "(no note saved)")
        await self._publish_note(pid, note, turn.timestamp_us)
        await self._keep(pid, None)
        await self._say(turn, SAVED_TEXT)
        return DestinationResult("release", f"Saved a note: {note}")

    async def release(self, participant_id: str) -> None:
        draft = self._drafts.pop(participant_id, None)
        note = self._join(draft or [])
        if note:
            await self._publish_note(participant_id, note, None)
        if draft is not None:
            await self._keep(participant_id, None)

    async def participant_left(self, participant_id: str) -> None:
        """The draft stays kept (``drafts``) for the participant's next connection."""
        self._drafts.pop(participant_id, None)
        self._saved.pop(participant_id, None)

    async def resume(self, participant_id: str) -> bool:
        """A returning participant: True (focus back to notes) when a note of theirs was
        being dictated; its lines so far are restored."""
        if participant_id in self._drafts:
            return True
        draft = await self.drafts.load(participant_id) if self.drafts is not None else None
        if draft is None:
            return False
        self._drafts[participant_id] = draft
        return True

    # --------------------------------------------------------------- helpers

    def notes(self, participant_id: str) -> tuple[str, ...]:
        """The participant's saved notes, oldest first."""
        return tuple(self._saved.get(participant_id, ()))

    def dictating(self, participant_id: str) -> bool:
        return participant_id in self._drafts

    async def _keep(self, participant_id: str, draft: list[str] | None) -> None:
        if self.drafts is not None:
            await self.drafts.save(participant_id, draft)

    def _join(self, parts: list[str]) -> str:
        note = " ".join(p.strip() for p in parts if p.strip())
        data = note.encode("utf-8")
        if len(data) > self.max_note_bytes:
            note = data[: self.max_note_bytes].decode("utf-8", errors="ignore")
        return note

    async def _publish_note(self, participant_id: str, note: str, timestamp_us: int | None) -> None:
        self._saved.setdefault(participant_id, []).append(note)
        await self.runtime.publish(
            self.notes_topic,
            ConversationContextUpdate(text=f"Note: {note}"),
            participant_id=participant_id,
            source=self.route_name,
            timestamp_us=timestamp_us,
        )

    async def _say(self, turn: AgentTurn, text: str) -> None:
        await self.runtime.publish(
            self.output_topic,
            reply_frame(turn, self.route_name, text),
            participant_id=turn.participant_id,
            source=self.route_name,
            correlation_id=turn.turn_id,
        )
