"""Reading a participant's context: what an answer request is shown (the context blocks,
the recalled block, the current time), what a warm evaluates, what they stated, and the
records themselves."""

from __future__ import annotations

from collections.abc import Callable

from edge.llm import ChatMessage

from . import _persist
from ._compaction import CompactionReport
from ._config import check_participant
from ._context import ParticipantContext, TranscriptEntry
from ._recall import InView, Recall, in_view
from ._render import DIALOGUE, ContextBlock
from ._state import ContextState
from ._stated import StatedAnswer, stated_answer


class Reader:
    """The reads of ``state``'s participants, with ``recall``'s statements; ``clock``
    returns Unix microseconds (the current time shown)."""

    def __init__(self, state: ContextState, recall: Recall, clock: Callable[[], int]) -> None:
        self._state = state
        self._recall = recall
        self._renderer = recall.renderer
        self._clock = clock

    def blocks(self, participant_id: str) -> list[ContextBlock]:
        """The model's view: summaries first, then entries in recorded-time order, each
        section within its budget (oldest uncompacted entries left out while over it)."""
        part = self._state.cached(participant_id)
        return part.blocks(self._renderer) if part else []

    def render(self, participant_id: str, *, now_us: int | None = None) -> str:
        """The context message: :meth:`blocks` then the current time."""
        return self.render_blocks(self.blocks(participant_id), now_us=now_us)

    def render_blocks(
        self,
        blocks: list[ContextBlock],
        *,
        now_us: int | None = None,
        recalled: ContextBlock | None = None,
    ) -> str:
        """A context message from chosen ``blocks`` (e.g. a subset of :meth:`blocks`), then
        the current time, then ``recalled`` (see :meth:`recalled`)."""
        now = self._clock() if now_us is None else now_us
        return self._renderer.context_message(list(blocks), now, recalled)

    def messages(
        self, participant_id: str, *, system: str, request: str, now_us: int | None = None
    ) -> list[ChatMessage]:
        """An answer request's three messages: ``system``, the context, ``request``.

        ``system`` is remembered so compaction can re-warm the same prompt prefix."""
        check_participant(participant_id)
        self._state.remember_system(participant_id, system)
        blocks = self.blocks(participant_id)
        recalled = self._recalled(participant_id, request, blocks)
        context = self.render_blocks(blocks, now_us=now_us, recalled=recalled)
        return [
            ChatMessage(role="system", content=system),
            ChatMessage(role="user", content=context),
            ChatMessage(role="user", content=request),
        ]

    def recalled(self, participant_id: str, request: str) -> ContextBlock | None:
        """The earlier statements most relevant to ``request`` that the model no longer
        sees, newest first, within ``recall_budget_bytes`` (None when there are none).
        :meth:`messages` places it after the context and the current time, right before the
        request. What precedes it is what the participant's cache is warmed with, followed
        by the block chosen ahead of the request: a block that is its start evaluates
        nothing anew; any other, each of its tokens."""
        return self._recalled(participant_id, request, self.blocks(participant_id))

    def _recalled(
        self, participant_id: str, request: str, blocks: list[ContextBlock]
    ) -> ContextBlock | None:
        part = self._state.peek(participant_id)
        if part is None or self._recall.budget_bytes <= 0:
            return None
        return self._recall.block(participant_id, request, in_view(part, blocks))

    def prefix(self, view: ParticipantContext) -> str:
        """The context message a warm evaluates: ``view``'s blocks (a participant's, or
        what a compaction will leave them), the current time, and the recalled block
        chosen ahead of the next request (a request whose own recall it holds evaluates
        no recalled token anew; one without recall drops it for free: it comes last)."""
        blocks = view.blocks(self._renderer)
        ahead = self._recall.ahead_block(view.participant_id, in_view(view, blocks))
        return self._renderer.context_message(blocks, self._clock(), ahead)

    def stated(self, participant_id: str, request: str) -> StatedAnswer | None:
        """The reply to ``request`` told back from what the participant stated, when it
        asks for a fact they may have stated ("What is my locker code?", "When is the
        briefing now?"): their newest statement about it, the one a correction replaced
        left out, in the second person; :data:`~edge.recall.NOT_STATED` when they stated
        nothing about it. None when the request asks for something else, or their record
        cannot tell (the model answers). Only their own statements, with recall's search
        (``recall_budget_bytes`` 0: always None)."""
        check_participant(participant_id)
        part = self._state.cached(participant_id)
        view = in_view(part, part.blocks(self._renderer)) if part else InView("")
        return stated_answer(self._recall, participant_id, request, view)

    def transcript(
        self, participant_id: str, *, offset: int = 0, limit: int | None = None
    ) -> list[TranscriptEntry]:
        """The whole conversation, verbatim, in recorded-time order (from ``offset``, at
        most ``limit`` entries): everything ever recorded with a durable store or
        ``keep_transcript=True``, otherwise what is not yet compacted."""
        records = self._state.records(participant_id, offset, limit or -1)
        return [_persist.transcript_entry(r) for r in records]

    def summary(self, participant_id: str, section: str = DIALOGUE) -> str:
        part = self._state.cached(participant_id)
        return part.sections[section].summary if part and section in part.sections else ""

    def last_compaction(self, participant_id: str) -> CompactionReport | None:
        return self._state.last_compaction(participant_id)
