"""Answer speculation: start a spoken turn's routing and answer during the pause that may
end the utterance, and let the turn itself adopt them.

The voice pipeline publishes the pause's speculative transcript on ``voice.speculation``.
:class:`TurnSpeculator` then, at interactive priority and without touching any
participant-visible state:

1. asks the router where a turn with those words would most likely go
   (``AgentRouter.likely_destination``); the decision is kept by the
   ``PrefetchingDecisions`` in front of the decision service, so the real turn gets it
   at once when it asks the same question (routing leaves the critical path, its result
   unchanged);
2. when that is the conversation, starts the conversation's exact answer request on the
   ``SpeculativeLLM`` the conversation streams from, output held back;
3. hands the held answer text to ``prepare_speech`` (the voice pipeline's
   ``prepare_reply``), which synthesizes its first piece ahead of time, published only if
   the real reply starts with exactly that piece.

When the endpoint confirms the same words, the turn runs through the router as always
and the conversation's request adopts the speculation (same messages and options). When
the words differ, speech resumes or the participant leaves, the speculation is cancelled
and counted as discarded: it never produced a frame, audio, acknowledgment or recorded
exchange, because only the real turn does those.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, Awaitable, Callable

import anyio

from edge.conversation import Conversation
from edge.interaction import PARTICIPANT_LEFT_TOPIC, USER_QUERY_TOPIC, ParticipantLeft, UserQuery
from edge.llm import SpeculativeLLM
from edge.routing import AgentRouter
from edge.runtime import Agent, BackgroundTasks, HandlerContext
from edge.voice import SPECULATION_TOPIC, Speculation

log = logging.getLogger(__name__)


class TurnSpeculator(Agent):
    """Prepares likely turns ahead of their endpoint; see the module docstring."""

    def __init__(
        self,
        router: AgentRouter,
        conversation: Conversation,
        answers: SpeculativeLLM,
        *,
        destination: str = "conversation",
        prepare_speech: Callable[[str, AsyncIterable[str]], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__()
        self.router = router
        self.conversation = conversation
        self.answers = answers
        self.destination = destination
        self.prepare_speech = prepare_speech
        self._guesses: dict[str, tuple[str, anyio.CancelScope]] = {}
        self._tasks = BackgroundTasks("turn speculation")
        self.add_handler(SPECULATION_TOPIC, self._on_speculation)
        self.add_handler(USER_QUERY_TOPIC, self._on_query)
        self.add_handler(PARTICIPANT_LEFT_TOPIC, self._on_left)

    async def __aenter__(self) -> TurnSpeculator:
        await self._tasks.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for pid in list(self._guesses):
            self._drop(pid)
        await self._tasks.close()

    async def _on_speculation(self, message: Speculation, ctx: HandlerContext) -> None:
        pid = ctx.metadata.participant_id
        if pid is None:
            return
        self._drop(pid)
        if not message.text or not self._tasks.running:
            return
        scope = anyio.CancelScope()
        self._guesses[pid] = (message.text, scope)
        self._tasks.start_soon(self._prepare, pid, message.text, scope)

    async def _on_query(self, query: UserQuery, ctx: HandlerContext) -> None:
        """The turn's words: a guess that said something else is discarded at once (the
        model is needed for the real turn); a matching one is left for it to adopt."""
        pid = ctx.metadata.participant_id
        guess = self._guesses.pop(pid, None) if pid is not None else None
        if guess is not None and guess[0] != query.text:
            guess[1].cancel()
            self.answers.discard(pid)  # type: ignore[arg-type]

    async def _on_left(self, message: ParticipantLeft, ctx: HandlerContext) -> None:
        if ctx.metadata.participant_id is not None:
            self._drop(ctx.metadata.participant_id)

    def _drop(self, pid: str) -> None:
        guess = self._guesses.pop(pid, None)
        if guess is not None:
            guess[1].cancel()
        self.answers.discard(pid)

    async def _prepare(self, pid: str, text: str, scope: anyio.CancelScope) -> None:
        with scope:
            try:
                route = await self.router.likely_destination(pid, text)
                if route != self.destination or self._guesses.get(pid, ("", None))[1] is not scope:
                    return  # elsewhere, or the turn itself came first: it asks for its answer
                conversation = self.conversation
                self.answers.speculate(
                    pid,
                    conversation.request_messages(pid, text, prepared=True),
                    conversation.answer_options(pid),
                )
                if self.prepare_speech is not None:
                    held = conversation.reply_text(self.answers.held(pid))
                    await self.prepare_speech(pid, held)
            except Exception:  # a failed guess costs nothing: the real turn runs as usual
                log.exception("speculating on %s's turn failed", pid)
