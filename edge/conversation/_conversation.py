"""The conversation engine: a routed destination that answers from the context manager."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, AsyncIterable, Callable
from contextlib import aclosing
from dataclasses import dataclass, replace
from importlib import resources
from typing import Literal, TypedDict, Unpack

import anyio

from edge.interaction import Exchange, ResponseOutput
from edge.llm import (
    ChatMessage,
    GenerationOptions,
    LLMService,
    Priority,
    RequestMetrics,
    TextStream,
)
from edge.routing import (
    Admission,
    AgentTurn,
    DestinationResult,
    RoutingAid,
    StartedSignal,
    reply_frame,
)
from edge.runtime import AgentRuntime, Topic, now_us

from ._dialogue import ContextDialogue
from ._manager import ContextManager
from ._reply import ReplyFilter, sentence_bound
from ._stated import StatedAnswer
from ._window import fitted

log = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = (
    resources.files(__package__).joinpath("prompts", "core.txt").read_text("utf-8").strip()
)
DEFAULT_DESCRIPTION = (
    "General conversation: answers questions from general knowledge and follows up on "
    "earlier dialogue and background context."
)
ROUTE_EXAMPLES = (
    "what is",
    "tell me about",
    "how do",
    "why does",
    "explain",
    "summarize",
    "translate",
)
"""Phrases typical of general requests, offered to routing as lexical evidence."""
FINAL_FRAME_TIMEOUT_S = 5.0
MAX_METRICS = 256
DEFAULT_STOP = ("\nUser:",)
"""Where an answer ends if the model goes on to write the participant's next turn itself
(small models continue the transcript-like context with a ``User:`` line and an answer to
it): that invented turn is never spoken or recorded. A line the model quotes from the
context (``[14:20] User: …``) is kept without its label (:class:`ReplyFilter`): the small
default model often answers by quoting one, and cutting it there lost the answer."""


@dataclass(frozen=True)
class ConversationConfig:
    """How a conversation answers: ``system_prompt`` then ``instructions`` as the system
    message; ``name``, ``description`` and ``examples`` for routing; generation bounds
    (``max_tokens``, ``temperature``, ``stop``); ``seed_key``, a cache key holding the
    system message's state that a participant without state of their own starts from;
    ``max_sentences``, where a reply ends (by default the number the instructions state,
    "one to three short sentences": 3; None: no bound)."""

    instructions: str = ""
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    name: str = "conversation"
    description: str = DEFAULT_DESCRIPTION
    examples: tuple[str, ...] = ROUTE_EXAMPLES
    max_tokens: int | None = None
    temperature: float | None = None
    stop: tuple[str, ...] = DEFAULT_STOP
    seed_key: str | None = None
    max_sentences: int | Literal["instructions"] | None = "instructions"

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a conversation needs a non-empty name")
        ReplyFilter(self.reply_bound)  # a bad bound fails here, not at the first answer

    @property
    def reply_bound(self) -> int | None:
        """The sentences a reply may have (``max_sentences`` resolved)."""
        if self.max_sentences == "instructions":
            return sentence_bound(self.instructions.strip())
        return self.max_sentences


class ConversationOptions(TypedDict, total=False):
    """The spec's keywords of ``Conversation(llm, context=..., instructions=..., ...)``,
    applied over its :class:`ConversationConfig` (every other field is set there)."""

    instructions: str
    system_prompt: str


def configured(
    config: ConversationConfig | None, options: ConversationOptions
) -> ConversationConfig:
    """``config`` (default: the defaults) with ``options`` applied over it."""
    unknown = sorted(set(options) - set(ConversationOptions.__annotations__))
    if unknown:
        raise TypeError(f"unknown conversation option(s): {', '.join(unknown)}")
    base = config if config is not None else ConversationConfig()
    return replace(base, **options) if options else base


class Conversation:
    """Answers routed turns with the model, using a shared :class:`ContextManager`.

    The request is three messages: the config's ``system_prompt`` followed by its
    ``instructions``; the participant's context (summaries, then entries in recorded-time
    order, then the current time); and the current request. The answer streams as
    :class:`~edge.interaction.ResponseOutput` frames on ``output_topic`` of ``runtime``
    (a reply to the turn id, with the config's ``name`` as source and the turn's
    timestamp). Without a runtime the answer is only returned. Each completed exchange is
    recorded in the context (through :attr:`dialogue`) under the turn's ``exchange_id``; a
    cancelled or failed answer records nothing. The context owns the dialogue:
    :attr:`dialogue` is the router's view of it, and a router given it leaves this
    conversation's exchanges to it.

    A question about what the participant stated ("What is my locker code?", "When is
    the briefing now?") is answered from their record, not generated
    (:meth:`ContextManager.stated`): their newest statement about it told back, or that
    they stated nothing about it; the model answers everything else.

    What the model writes passes a :class:`ReplyFilter` before it is published or
    recorded: lines echoing the prompt's structure (``Current time: …``) are dropped, the
    prompt's labels (``User:``, ``Assistant:``, ``[14:20] notes:``, ...) removed from the
    start of a line, and the reply ends at the sentence boundary where the config's
    ``max_sentences`` is reached, generation stopping there.

    Each answer reuses the participant's KV prefix (``cache_key`` = participant id); with
    ``seed_key`` (which the application warms), a participant with no state of their own
    yet starts from the system message's state.
    """

    def __init__(
        self,
        llm: LLMService,
        *,
        context: ContextManager,
        config: ConversationConfig | None = None,
        runtime: AgentRuntime | None = None,
        output_topic: Topic[ResponseOutput] | None = None,
        clock: Callable[[], int] = now_us,
        **options: Unpack[ConversationOptions],
    ) -> None:
        if (runtime is None) != (output_topic is None):
            raise ValueError("pass runtime and output_topic together (or neither)")
        self.config = config = configured(config, options)
        self.llm = llm
        self.context = context
        self.dialogue = ContextDialogue(context)
        self.runtime = runtime
        self.output_topic = output_topic
        self.name = config.name
        self.stop = tuple(config.stop)
        self.max_tokens = config.max_tokens
        self.max_sentences = config.reply_bound
        self._clock = clock
        self._closed = False
        self._metrics: dict[str, RequestMetrics] = {}
        self.session_instructions: dict[str, str] = {}  # per participant, by their client

    def system_for(self, participant_id: str) -> str:
        """The system message, with the participant's session instructions (a Realtime
        ``session.update``'s) after it."""
        extra = self.session_instructions.get(participant_id, "").strip()
        return f"{self.system_message}\n\n{extra}" if extra else self.system_message

    @property
    def system_message(self) -> str:
        """The system prompt followed by the application instructions (no clock in it, so it
        is an identical prefix across requests)."""
        parts = (self.config.system_prompt.strip(), self.config.instructions.strip())
        return "\n\n".join(p for p in parts if p)

    # ----------------------------------------------------------------- RoutableAgent

    def routing_aid(self, participant_id: str) -> RoutingAid:
        return RoutingAid(
            self.name,
            self.config.description,
            eligible=not self._closed,
            eligibility="closed" if self._closed else "available",
            examples=tuple(self.config.examples),
        )

    async def admit(self, turn: AgentTurn, *, focused: bool) -> Admission:
        return Admission("decline" if self._closed else "accept")

    async def answer(self, turn: AgentTurn, *, started: StartedSignal) -> DestinationResult:
        """Answer ``turn`` from the participant's context: stream the reply, record it."""
        if self._closed:
            raise RuntimeError(f"conversation {self.name!r} is closed")
        if not isinstance(turn.participant_id, str) or not turn.participant_id:
            raise ValueError("the turn needs a participant id")
        if not isinstance(turn.query, str) or not turn.query.strip():
            raise ValueError("the turn needs a non-empty query")
        stated = self.context.stated(turn.participant_id, turn.query)
        with self.context.answering():
            if stated is not None:  # told back from the record, not generated
                text = await self._tell(turn, self._told(turn.participant_id, stated), started)
            else:
                messages = self.request_messages(turn.participant_id, turn.query)
                text = await self._stream(turn, messages, started)
        exchange = Exchange(turn.query, text, turn.exchange_id, turn.timestamp_us)
        with anyio.CancelScope(shield=True):  # a completed exchange is never lost
            await self.dialogue.record(turn.participant_id, exchange)
        return DestinationResult("answer", text)

    async def release(self, participant_id: str) -> None:
        """Route release keeps the participant's context (the manager is shared)."""

    async def participant_left(self, participant_id: str) -> None:
        """Departure keeps context too; the application clears the manager."""

    async def close(self) -> None:
        """Stop new answers; answers in flight finish."""
        self._closed = True

    def answer_options(self, participant_id: str) -> GenerationOptions:
        """How an answer for ``participant_id`` is generated (a speculation that should be
        adopted by the turn must ask with the same options)."""
        return GenerationOptions(
            max_tokens=self.max_tokens,
            temperature=self.config.temperature,
            stop=self.stop,
            priority=Priority.INTERACTIVE,
            cache_key=participant_id,
            seed_key=self.config.seed_key,
        )

    async def reply_text(self, deltas: AsyncIterable[str]) -> AsyncGenerator[str]:
        """An answer's ``deltas`` as this conversation publishes them (filtered and
        bounded), for one that prepares a reply ahead of its turn."""
        reply = ReplyFilter(self.max_sentences)
        async for delta in deltas:
            text = reply.feed(delta)
            if text:
                yield text
            if reply.done:
                return
        tail = reply.flush()
        if tail:
            yield tail

    async def reply(self, participant_id: str, query: str) -> str:
        """The reply :meth:`answer` would give ``query`` now (told back from the record,
        or the model's, filtered and bounded), without publishing or recording it: for
        evaluations. :meth:`last_metrics` then says what it cost."""
        stated = self.context.stated(participant_id, query)
        if stated is not None:
            return self._told(participant_id, stated)
        messages = self.request_messages(participant_id, query)
        stream = self.llm.stream(messages, self.answer_options(participant_id))
        self._remember(participant_id, stream.metrics)
        try:
            async with aclosing(self.reply_text(stream)) as texts:
                return "".join([text async for text in texts])
        finally:
            await self._drain(stream)

    def _told(self, participant_id: str, stated: StatedAnswer) -> str:
        """The reply told back from the record, bounded like a generated one; its metrics
        are its own (nothing queued, nothing evaluated)."""
        started = time.perf_counter()
        reply = ReplyFilter(self.max_sentences)
        text = (reply.feed(stated.text) + reply.flush()).strip() or stated.text
        spent = time.perf_counter() - started
        self._remember(
            participant_id,
            RequestMetrics(cache_key=participant_id, queue_wait_s=0.0, ttft_s=spent, total_s=spent),
        )
        return text

    def _remember(self, participant_id: str, metrics: RequestMetrics) -> None:
        self._metrics.pop(participant_id, None)
        self._metrics[participant_id] = metrics  # newest last; bounded
        while len(self._metrics) > MAX_METRICS:
            self._metrics.pop(next(iter(self._metrics)))

    def last_metrics(self, participant_id: str) -> RequestMetrics | None:
        """What the participant's latest answer request cost (queue wait, time to first
        token, prompt tokens reused from the KV cache, ...)."""
        return self._metrics.get(participant_id)

    # ----------------------------------------------------------------- requests

    def request_messages(self, participant_id: str, query: str) -> list[ChatMessage]:
        """The three messages of an answer request, fitted to the model's context window
        (:func:`~edge.conversation._window.fitted`)."""
        return fitted(
            self.llm,
            self.context,
            self.system_for(participant_id),
            participant_id,
            query,
            now_us=self._clock(),
            max_tokens=self.max_tokens,
        )

    async def warm_words(self, participant_id: str, words: str) -> None:
        """The participant is still speaking ``words`` (a partial transcript): their answer
        request is evaluated up to them, so the answer evaluates only the words after."""
        await self.context.warm_words(participant_id, self.request_messages(participant_id, words))

    # ----------------------------------------------------------------- streaming

    async def _publish(self, turn: AgentTurn, text: str, sequence: int, final: bool) -> None:
        if self.runtime is None or self.output_topic is None:
            return
        await self.runtime.publish(
            self.output_topic,
            reply_frame(turn, self.name, text, sequence, final),
            participant_id=turn.participant_id,
            source=self.name,
            correlation_id=turn.turn_id,
            timestamp_us=turn.timestamp_us,
        )

    async def _stream(self, turn: AgentTurn, messages: list, started: StartedSignal) -> str:
        stream = self.llm.stream(messages, self.answer_options(turn.participant_id))
        self._remember(turn.participant_id, stream.metrics)
        sequence = 0
        parts: list[str] = []

        async def emit(text: str) -> None:
            nonlocal sequence
            if not text:
                return
            if sequence == 0:
                await started()
            await self._publish(turn, text, sequence, final=False)
            sequence += 1
            parts.append(text)

        try:
            async with aclosing(self.reply_text(stream)) as texts:
                async for text in texts:  # ends where the length is reached
                    await emit(text)
        except BaseException:
            # A model failure, cancellation or failed publication: drain the model (shielded),
            # close an open stream with an empty final frame (best effort), propagate.
            await self._drain(stream)
            if sequence:
                await self._final(turn, sequence)
            raise
        await self._drain(stream)
        if sequence == 0:
            await started()
        await self._publish(turn, "", sequence, final=True)
        return "".join(parts)

    async def _tell(self, turn: AgentTurn, text: str, started: StartedSignal) -> str:
        """Publish a reply that is already whole: one frame, then the final one."""
        await started()
        if text:
            await self._publish(turn, text, 0, final=False)
        await self._publish(turn, "", 1 if text else 0, final=True)
        return text

    @staticmethod
    async def _drain(stream: TextStream) -> None:
        with anyio.CancelScope(shield=True):
            await stream.aclose()

    async def _final(self, turn: AgentTurn, sequence: int) -> None:
        """Close an open stream with an empty final frame, even while being cancelled."""
        with anyio.move_on_after(FINAL_FRAME_TIMEOUT_S, shield=True):
            try:
                await self._publish(turn, "", sequence, final=True)
            except Exception:
                log.exception("could not finalize the reply stream of turn %s", turn.turn_id)
