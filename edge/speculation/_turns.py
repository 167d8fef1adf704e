"""The provisional turn: start a spoken turn's routing and answer during the pause that may
end the utterance, and let the turn itself adopt them.

The voice pipeline publishes the pause's guess on ``voice.speculation`` (the words and the
utterance's id). :class:`TurnSpeculator` then, at interactive priority and without touching
any participant-visible state:

1. asks the router where a turn with those words would most likely go
   (``likely_destination``); the decision is kept by the :class:`PrefetchingDecisions` in
   front of the decision service, so the real turn gets it at once when it asks the same
   question (routing leaves the critical path, its result unchanged);
2. when that is the answering destination, starts its answer request on
   :class:`SpeculativeAnswers` (the service it streams from), output held back, as the
   provisional turn :class:`Guess` (utterance id, words);
3. hands the held answer text to each of ``speech`` (the voice pipeline's, Wyoming's
   ``prepare_reply``; each prepares only its own participants), which synthesizes its
   first piece ahead of time, used only if the real reply speaks exactly that piece.

The final transcript of that utterance (``voice.transcript``, published just before the
turn's ``user.query``) confirms the provisional turn when the words match: the turn's
answer request adopts it. Other words, resumed speech, a typed query, the participant
leaving, or a reply to them finishing before their query (an exchange the provisional
answer's context may lack) discard it, counted as discarded: it never produced a frame,
audio, acknowledgment or recorded exchange, because only the real turn does those.

An input without transcripts (Wyoming ``asr`` then ``handle``) speculates with
:meth:`TurnSpeculator.provisional` and the turn's query confirms it when its text matches.

Before any pause, each partial transcript (while the participant speaks) has the answer
request evaluated up to the words so far (``warm_words``, background priority), so the
answer, provisional or not (push-to-talk), evaluates only the last words and the
generation prompt.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import anyio

from edge.interaction import (
    PARTICIPANT_LEFT_TOPIC,
    USER_QUERY_TOPIC,
    VOICE_OUTPUT_TOPIC,
    ParticipantLeft,
    ResponseOutput,
    UserQuery,
)
from edge.llm import ChatMessage, GenerationOptions
from edge.runtime import Agent, BackgroundTasks, HandlerContext
from edge.voice import SPECULATION_TOPIC, TRANSCRIPT_TOPIC, Speculation, Transcript

from ._answers import Guess, SpeculativeAnswers

log = logging.getLogger(__name__)


class LikelyRoute(Protocol):
    """Where a turn would go, asked without running it (``AgentRouter``)."""

    async def likely_destination(self, participant_id: str, text: str) -> str | None: ...


class AnswerSource(Protocol):
    """How the answering destination asks its model (``Conversation``)."""

    def request_messages(self, participant_id: str, query: str) -> list[ChatMessage]: ...

    def answer_options(self, participant_id: str) -> GenerationOptions: ...

    def reply_text(self, deltas: AsyncIterable[str]) -> AsyncIterator[str]: ...

    async def warm_words(self, participant_id: str, words: str) -> None: ...


class PreparesSpeech(Protocol):
    """Synthesizes a reply's first piece ahead of it for the participants it speaks to
    (``VoicePipeline``, Wyoming's ``PreparedSpeech``), returning at once for others."""

    async def prepare_reply(self, participant_id: str, deltas: AsyncIterable[str]) -> None: ...


@dataclass(eq=False)
class _Provisional:
    guess: Guess
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    confirmed: bool = False  # the endpoint said these words
    asked: bool = False  # the turn's query came (its answer request adopts the answer)
    by_query: bool = False  # an input without transcripts: its query confirms


class TurnSpeculator(Agent):
    """Prepares likely turns ahead of their endpoint; see the module docstring."""

    def __init__(
        self,
        router: LikelyRoute,
        source: AnswerSource,
        answers: SpeculativeAnswers,
        *,
        destination: str = "conversation",
        speech: Sequence[PreparesSpeech] = (),
    ) -> None:
        super().__init__()
        self.router = router
        self.source = source
        self.answers = answers
        self.destination = destination
        self.speech = list(speech)
        self._turns: dict[str, _Provisional] = {}
        self._warming: set[str] = set()  # participants whose words so far are being warmed
        self._tasks = BackgroundTasks("turn speculation")
        self.add_handler(SPECULATION_TOPIC, self._on_speculation)
        self.add_handler(TRANSCRIPT_TOPIC, self._on_transcript)
        self.add_handler(USER_QUERY_TOPIC, self._on_query)
        self.add_handler(PARTICIPANT_LEFT_TOPIC, self._on_left)
        self.add_handler(VOICE_OUTPUT_TOPIC, self._on_reply)

    async def __aenter__(self) -> TurnSpeculator:
        await self._tasks.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for pid in list(self._turns):
            self.drop(pid)
        await self._tasks.close()

    # -- provisional turns ----------------------------------------------------------------

    def provisional(self, participant_id: str, guess: Guess, *, by_query: bool = False) -> None:
        """Start the provisional turn ``guess`` of ``participant_id`` (replacing another);
        ``by_query``: the turn's query confirms it (no transcript will)."""
        current = self._turns.get(participant_id)
        if current is not None and current.guess == guess and not current.confirmed:
            return  # already under way
        self.drop(participant_id)
        if not guess.text or not self._tasks.running:
            return
        turn = self._turns[participant_id] = _Provisional(guess, by_query=by_query)
        self._tasks.start_soon(self._prepare, participant_id, turn)

    def confirm(self, participant_id: str, guess: Guess) -> bool:
        """The endpoint's words: the participant's provisional turn is kept for the turn to
        adopt when it guessed exactly these (True), else discarded."""
        turn = self._turns.get(participant_id)
        if turn is None or turn.guess != guess:
            self.drop(participant_id)
            return False
        turn.confirmed = True
        self.answers.confirm(participant_id, guess)  # False while routing still decides
        return True

    def drop(self, participant_id: str) -> None:
        turn = self._turns.pop(participant_id, None)
        if turn is not None:
            turn.scope.cancel()
        self.answers.discard(participant_id)

    # -- handlers ---------------------------------------------------------------------------

    async def _on_speculation(self, message: Speculation, ctx: HandlerContext) -> None:
        pid = ctx.metadata.participant_id
        if pid is not None:
            self.provisional(pid, Guess(f"voice:{message.utterance}", message.text))

    async def _on_transcript(self, message: Transcript, ctx: HandlerContext) -> None:
        pid = ctx.metadata.participant_id
        if pid is None:
            return
        if not message.final:
            self._warm(pid, message.text)
        elif pid in self._turns:
            self.confirm(pid, Guess(f"voice:{message.utterance}", message.text))

    def _warm(self, pid: str, words: str) -> None:
        """A partial transcript: the answer's prompt is evaluated up to these words while
        the participant goes on speaking (one warm at a time; none beside a provisional
        turn, whose answer has its own prompt)."""
        if not words.strip() or pid in self._turns or pid in self._warming:
            return
        if not self._tasks.running:
            return
        self._warming.add(pid)
        self._tasks.start_soon(self._warm_words, pid, words)

    async def _warm_words(self, pid: str, words: str) -> None:
        try:
            await self.source.warm_words(pid, words)
        except Exception:  # best effort: the answer evaluates its whole request
            log.exception("warming %s's words so far failed", pid)
        finally:
            self._warming.discard(pid)

    async def _on_query(self, query: UserQuery, ctx: HandlerContext) -> None:
        """The turn's query: a provisional turn confirmed for these words is left for its
        answer request to adopt (an input without transcripts confirms it here); any other
        is discarded at once (the model is needed for the real turn)."""
        pid = ctx.metadata.participant_id
        turn = self._turns.get(pid) if pid is not None else None
        if pid is None or turn is None:
            return
        if turn.by_query and not turn.confirmed:
            self.confirm(pid, Guess(turn.guess.utterance, query.text))
            turn = self._turns.get(pid)
        if turn is not None and turn.confirmed and not turn.asked:
            if turn.guess.text == query.text:
                turn.asked = True
                return
        self.drop(pid)

    async def _on_reply(self, frame: ResponseOutput, ctx: HandlerContext) -> None:
        """A reply to the participant finished before their turn's query: the exchange it
        completes may be missing from the provisional answer's context."""
        pid = ctx.metadata.participant_id
        turn = self._turns.get(pid) if pid is not None else None
        if frame.final and turn is not None and pid is not None and not turn.asked:
            self.drop(pid)

    async def _on_left(self, message: ParticipantLeft, ctx: HandlerContext) -> None:
        if ctx.metadata.participant_id is not None:
            self.drop(ctx.metadata.participant_id)

    async def _prepare(self, pid: str, turn: _Provisional) -> None:
        with turn.scope:
            try:
                text = turn.guess.text
                route = await self.router.likely_destination(pid, text)
                if route != self.destination or self._turns.get(pid) is not turn:
                    return
                if turn.confirmed:
                    return  # the turn came first: it asks for its answer itself
                source = self.source
                messages = source.request_messages(pid, text)
                self.answers.speculate(pid, turn.guess, messages, source.answer_options(pid))
                for speech in self.speech:
                    await speech.prepare_reply(pid, source.reply_text(self.answers.held(pid)))
            except Exception:  # a failed guess costs nothing: the real turn runs as usual
                log.exception("speculating on %s's turn failed", pid)
