"""A minimal destination: answer each query straight from an LLM, streamed.

:class:`LLMResponder` is what ``edge talk`` uses when the router and conversation
packages are not available, and what the voice tests and benchmarks use as the far end
of the loop. It streams the model's deltas as :class:`ResponseOutput` frames (request id
= the query's message id), and stops a participant's answer when they ask something new
or are interrupted. Use it as ``async with responder, runtime:``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import anyio

from edge.interaction import (
    INTERRUPTED_TOPIC,
    USER_QUERY_TOPIC,
    VOICE_OUTPUT_TOPIC,
    Interrupted,
    ResponseOutput,
    UserQuery,
)
from edge.llm import LLMService
from edge.runtime import Agent, BackgroundTasks, HandlerContext, Topic

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (Path(__file__).parent / "responder_prompt.txt").read_text(encoding="utf-8").strip()


class LLMResponder(Agent):
    """Answers queries with ``llm``, one answer at a time per participant."""

    def __init__(
        self,
        llm: LLMService,
        *,
        source: str = "assistant",
        system_prompt: str = SYSTEM_PROMPT,
        max_tokens: int = 128,
        query_topic: Topic[UserQuery] = USER_QUERY_TOPIC,
        output_topic: Topic[ResponseOutput] = VOICE_OUTPUT_TOPIC,
        interrupted_topic: Topic[Interrupted] = INTERRUPTED_TOPIC,
    ) -> None:
        super().__init__()
        self.llm = llm
        self.source = source
        self.system_prompt = system_prompt
        self.max_tokens = max_tokens
        self._output_topic = output_topic
        self._answers: dict[str, anyio.CancelScope] = {}
        self._tasks = BackgroundTasks("the responder")
        self.add_handler(query_topic, self._on_query)
        self.add_handler(interrupted_topic, self._on_interrupted)

    async def __aenter__(self) -> LLMResponder:
        await self._tasks.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._tasks.close()

    async def _on_query(self, query: UserQuery, ctx: HandlerContext) -> None:
        participant = ctx.metadata.participant_id or ""
        self._cancel(participant)
        if not self._tasks.running:
            raise RuntimeError("the responder is not running: use `async with responder:`")
        scope = anyio.CancelScope()
        self._answers[participant] = scope
        self._tasks.start_soon(self._answer, query, ctx, scope)

    async def _on_interrupted(self, message: Interrupted, ctx: HandlerContext) -> None:
        participant = ctx.metadata.participant_id
        for pid in [participant] if participant is not None else list(self._answers):
            self._cancel(pid)

    def _cancel(self, participant: str) -> None:
        scope = self._answers.pop(participant, None)
        if scope is not None:
            scope.cancel()

    async def _answer(
        self, query: UserQuery, ctx: HandlerContext, scope: anyio.CancelScope
    ) -> None:
        request_id = ctx.metadata.message_id
        timestamp = query.timestamp_us or ctx.metadata.timestamp_us
        sequence = 0

        async def emit(text: str, final: bool) -> None:
            nonlocal sequence
            frame = ResponseOutput(
                text=text,
                request_id=request_id,
                source=self.source,
                sequence=sequence,
                final=final,
                timestamp_us=timestamp,
            )
            sequence += 1
            await ctx.publish(self._output_topic, frame, source=self.source)

        messages = [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": query.text},
        ]
        with scope:
            try:
                stream = self.llm.stream(
                    messages, max_tokens=self.max_tokens, cache_key=ctx.metadata.participant_id
                )
                async with stream:
                    async for delta in stream:
                        await emit(delta, False)
                await emit("", True)
            except Exception:
                log.exception("answering %s failed", request_id)
                with anyio.CancelScope(shield=True):
                    await emit(" Sorry, I could not answer that.", True)
        if scope.cancelled_caught and sequence:
            with anyio.CancelScope(shield=True):
                await emit("", True)
        if self._answers.get(ctx.metadata.participant_id or "") is scope:
            del self._answers[ctx.metadata.participant_id or ""]
