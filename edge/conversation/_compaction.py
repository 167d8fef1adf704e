"""One compaction: plan the input, ask the model, handle every failure the spec lists.

The manager decides *when* to compact (``_background.py``); this module decides *what*
goes into a request and turns the model's reply into a summary or a failure.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from edge.llm import ChatMessage, LLMError, LLMService, Priority

from ._context import Entry, Section
from ._extractive import extractive_summary, summary_gaps
from ._render import DIALOGUE, Renderer
from ._text import clip_middle, nbytes

log = logging.getLogger(__name__)


def _prompt(name: str) -> str:
    return resources.files(__package__).joinpath("prompts", name).read_text("utf-8").strip()


class CompactionPrompts(BaseModel):
    """What the model is told to keep when it compacts dialogue, an incremental source, or
    an over-long summary. The manager appends the size limit and the plain-text output
    format to each, so custom prompts do not state them."""

    model_config = ConfigDict(frozen=True)

    dialogue: str = _prompt("compact_dialogue.txt")
    topic: str = _prompt("compact_topic.txt")
    shorten: str = _prompt("shorten_summary.txt")


@dataclass(frozen=True)
class CompactionRequest:
    """What a compaction is about to summarize; given to ``pre_compact`` hooks."""

    participant_id: str
    section: str
    previous_summary: str
    entries: tuple[str, ...]
    limit_bytes: int


@dataclass
class CompactionAttempt:
    """One model request of a compaction."""

    kind: Literal["summarize", "shorten"]
    outcome: Literal["ok", "empty", "length", "error", "over_limit"]
    output_bytes: int = 0
    metrics: dict[str, Any] | None = None
    error: str | None = None


Method = Literal["llm", "clip", "extractive", "hook", "custom", "cancelled"]


@dataclass(frozen=True)
class Summarized:
    """What producing one summary gave: ``text`` (None: no summary, the entries are kept),
    how it was made, why it is not the model's own (or why there is none), and the model
    requests it took. The manager turns it into the one :class:`CompactionReport`."""

    text: str | None
    method: Method
    reason: str = ""
    attempts: tuple[CompactionAttempt, ...] = ()

    @property
    def request_failed(self) -> str | None:
        """How the model's summary request failed (``"empty"``, ``"length"``, ``"error"``)
        when that is why there is no summary; else None."""
        if self.text is not None or self.method != "llm" or not self.attempts:
            return None
        outcome = self.attempts[0].outcome
        return outcome if outcome in ("empty", "length", "error") else None


@dataclass(frozen=True)
class CompactionReport:
    """How the most recent compaction of a participant went.

    ``method`` is ``"llm"`` (the model wrote it), ``"clip"`` (the model's summary was over
    the limit twice and was clipped), ``"extractive"`` (the model's summary lost or invented
    the participant's numbers or names, or its summary requests failed
    ``compaction_failure_limit`` times in a row, named in ``reason``: the participant's
    statements were kept verbatim instead), ``"hook"`` (a ``pre_compact`` hook supplied it)
    or ``"custom"`` (``compact(summary=...)``). ``ok`` False means the entries were kept: a
    failed summary request (``reason`` ``"summary request: empty"``, ``"length"`` or
    ``"error"``) is retried after the section's next entry.
    """

    participant_id: str
    section: str
    method: Method
    ok: bool
    entries_compacted: int
    input_bytes: int
    summary_bytes: int = 0
    duration_s: float = 0.0
    reason: str = ""
    attempts: list[CompactionAttempt] = field(default_factory=list)


PreCompactHook = Callable[[CompactionRequest], "bool | str | Awaitable[bool | str | None] | None"]
PostCompactHook = Callable[[CompactionReport], "Awaitable[None] | None"]


async def call_hook(hook: Callable[[Any], Any], arg: Any) -> Any:
    result = hook(arg)
    if inspect.isawaitable(result):
        result = await result
    return result


ASSISTANT_CLIP_BYTES = 160
"""An assistant reply is sent to compaction with at most this many bytes (start and end):
the participant's words matter more than the assistant's, and a small model echoes less."""


def compaction_text(entry: Entry, renderer: Renderer) -> str:
    """How an entry is shown to the summarizer: an exchange with its reply shortened."""
    if entry.user or entry.assistant:
        reply = clip_middle(entry.assistant, ASSISTANT_CLIP_BYTES)
        return renderer.exchange(entry.timestamp_us, entry.user, reply)
    return entry.rendered


def plan(
    candidates: list[Entry], previous: str, input_budget: int, renderer: Renderer
) -> tuple[list[Entry], list[str]]:
    """The oldest ``candidates`` that fit one request together with the previous summary.

    An entry bigger than the room left keeps its start and end, so it still compacts.
    """
    room = input_budget - nbytes(previous)
    taken: list[Entry] = []
    texts: list[str] = []
    for entry in candidates:
        text = compaction_text(entry, renderer)
        size = nbytes(text)
        if size <= room:
            taken.append(entry)
            texts.append(text)
            room -= size
        elif not taken:
            taken.append(entry)
            texts.append(clip_middle(text, max(room, 64)))
            break
        else:
            break
    return taken, texts


def previous_text(section: Section, renderer: Renderer) -> str:
    if not section.summary or not section.span:
        return ""
    return renderer.summary(section.name, section.span[0], section.span[1], section.summary)


def _format_rule(limit: int) -> str:
    return (
        f"Write plain text only, no headings, lists or markdown, "
        f"under {limit} characters (about {max(limit // 6, 10)} words)."
    )


def max_tokens_for(limit: int) -> int:
    """Output tokens allowed for a summary of ``limit`` bytes: about 1.5 bytes a token
    (numbers and times tokenize densely), so a cut-off means the model ran well over it."""
    return max(64, limit * 2 // 3 + 32)


class Compactor:
    """Runs compaction requests against one model with one set of prompts."""

    def __init__(self, llm: LLMService, prompts: CompactionPrompts, failure_limit: int) -> None:
        self.llm = llm
        self.prompts = prompts
        self.failure_limit = failure_limit

    def messages(
        self, section: Section, previous: str, entries: list[str], limit: int
    ) -> list[ChatMessage]:
        """System: the section's prompt plus the limit; user: the task, then the previous
        summary and the entries inside one quoted block (small models echo less that way)."""
        dialogue = section.name == DIALOGUE
        instructions = self.prompts.dialogue if dialogue else self.prompts.topic
        what = "this conversation" if dialogue else f"these updates from {section.name}"
        quoted = "\n\n".join([previous, *entries] if previous else entries)
        user = f'Summarize {what} in two or three sentences.\n\n"""\n{quoted}\n"""'
        return [
            ChatMessage(role="system", content=f"{instructions}\n\n{_format_rule(limit)}"),
            ChatMessage(role="user", content=user),
        ]

    async def _ask(
        self, kind: Literal["summarize", "shorten"], messages: list[ChatMessage], limit: int
    ) -> tuple[str | None, CompactionAttempt]:
        """The model's text (None after a failure) and the attempt, as it ended."""
        try:
            response = await self.llm.chat(
                messages, max_tokens=max_tokens_for(limit), priority=Priority.BACKGROUND
            )
        except LLMError as exc:
            return None, CompactionAttempt(kind, "error", error=str(exc))
        text = response.content.strip().strip('"').strip()
        metrics = response.metrics.as_dict() if response.metrics else None
        outcome: Literal["ok", "empty", "length", "error", "over_limit"] = "ok"
        if response.finish_reason in ("error", "length"):
            outcome = response.finish_reason
        elif not text:
            outcome = "empty"
        elif nbytes(text) > limit:
            outcome = "over_limit"
        attempt = CompactionAttempt(kind, outcome, nbytes(text), metrics, response.error)
        if outcome in ("error", "empty") or (outcome == "length" and not text):
            return None, attempt
        return text, attempt

    async def summarize(
        self,
        section: Section,
        previous: str,
        entries: list[str],
        taken: list[Entry] | None = None,
    ) -> Summarized:
        """A summary within ``section.summary_limit``: the model's, when it keeps every
        number and name of the participant's statements in ``taken`` and the previous
        summary; else an extractive one made of those statements (``method="extractive"``).
        A failed request (empty, cut off, an error) gives no text (the entries are kept),
        unless it is the section's ``failure_limit``-th in a row: then the extractive one."""
        model = await self._model_summary(section, previous, entries)
        if model.text is None:
            failures = [*section.failures, model.attempts[0].outcome]
            if taken is None or len(failures) < self.failure_limit:
                return model
            n = len(failures)
            reason = f"{n} failed summary request{'s' * (n > 1)} in a row: {', '.join(failures)}"
        else:
            gaps = summary_gaps(model.text, section.summary, taken or [])
            if not gaps or taken is None:
                return model
            reason = "model summary lacked or invented: " + ", ".join(gaps[:8])
        fallback = extractive_summary(
            section.summary, taken, section.summary_limit, dialogue=section.name == DIALOGUE
        )
        if not fallback:
            return Summarized(None, model.method, reason, model.attempts)
        return Summarized(fallback, "extractive", reason, model.attempts)

    async def _model_summary(
        self, section: Section, previous: str, entries: list[str]
    ) -> Summarized:
        limit = section.summary_limit
        messages = self.messages(section, previous, entries, limit)
        text, first = await self._ask("summarize", messages, limit)
        if text is None or first.outcome in ("length", "error", "empty"):
            return Summarized(None, "llm", f"summary request: {first.outcome}", (first,))
        if first.outcome == "ok":
            return Summarized(text, "llm", "", (first,))
        shorten = [
            ChatMessage(role="system", content=f"{self.prompts.shorten}\n\n{_format_rule(limit)}"),
            ChatMessage(role="user", content=f'Shorten this summary.\n\n"""\n{text}\n"""'),
        ]
        short, second = await self._ask("shorten", shorten, limit)
        if short is not None and second.outcome == "ok":
            return Summarized(short, "llm", "", (first, second))
        best = short if (short is not None and second.outcome == "over_limit") else text
        return Summarized(clip_middle(best, limit), "clip", "", (first, second))


def elapsed_since(started: float) -> float:
    return time.perf_counter() - started
