"""Live-model evaluation of conversation with compaction (``edge eval conversation``).

Two themes, each case a scripted session followed by one question:

* **stale summaries across sections**: an older fact ends up in one section's summary
  while a newer, conflicting fact sits in another section; the answer must use the newer;
* **long sessions** with corrections, and with oversized exchanges and updates that
  compaction must clip without losing what comes before and after.

Budgets are small so the real model compacts within a few exchanges. Each answer scores
1 when it contains an expected phrase and no stale one, 0.5 when it contains both, else 0.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from typing import TYPE_CHECKING, Any

import anyio

from edge.conversation import ContextConfig, ContextManager, Conversation, ConversationConfig
from edge.llm import LLMService
from edge.routing import AgentTurn

if TYPE_CHECKING:
    from edge.device import ContextBudgets


MINUTE = 60 * 1_000_000
T0 = 1_790_000_000_000_000  # Unix microseconds, a fixed day so runs compare

BUDGETS: ContextBudgets = {
    "dialogue_budget_bytes": 1_600,
    "topic_budget_bytes": 800,
    "compaction_input_budget_bytes": 1_100,
}


@dataclass(frozen=True)
class Event:
    """At ``minute`` into the session: an exchange (``user``/``assistant``) or an update of
    ``topic`` with ``text``."""

    minute: float
    user: str = ""
    assistant: str = ""
    topic: str = ""
    text: str = ""


@dataclass(frozen=True)
class Case:
    name: str
    theme: str
    events: tuple[Event, ...]
    question: str
    expect: tuple[str, ...]
    stale: tuple[str, ...] = ()
    summary_topics: tuple[str, ...] = ()
    incremental_topics: tuple[str, ...] = ()


FILLER = (
    ("Can you remind me to drink water?", "Sure, drink some water now and then."),
    ("What's a good break length?", "About five to ten minutes every hour works well."),
    ("Is it noisy in here today?", "I can't hear the room, but you can ask the others."),
    ("Tell me a short fun fact.", "Octopuses have three hearts."),
    ("How do I spell centrifuge?", "C-E-N-T-R-I-F-U-G-E."),
    ("Thanks for the help so far.", "You're welcome."),
    ("What day comes after Monday?", "Tuesday."),
    ("Give me a word that rhymes with lab.", "Cab."),
)


def filler(start: float, count: int, step: float = 1.0) -> tuple[Event, ...]:
    return tuple(Event(start + i * step, *FILLER[i % len(FILLER)]) for i in range(count))


def _big(head: str, tail: str, size: int) -> str:
    middle = " ".join(f"line {i}: reading nominal, value {i * 7 % 100}." for i in range(size))
    return f"{head} {middle} {tail}"


CASES: tuple[Case, ...] = (
    Case(
        "meeting-moved-in-notes",
        "stale summary",
        (
            Event(0, "The calibration meeting is at 14:00 today.", "Got it, 14:00 today."),
            *filler(1, 14),
            Event(20, topic="notes", text="Calibration meeting moved to 16:00."),
        ),
        "What time is the calibration meeting?",
        ("16:00", "16.00", "4 pm", "4pm", "4:00", "four"),
        ("14:00", "2 pm", "2pm"),
        incremental_topics=("notes",),
    ),
    Case(
        "freezer-corrected-in-dialogue",
        "stale summary",
        (
            *[
                Event(i, topic="notes", text=t)
                for i, t in enumerate(
                    (
                        "Freezer B is set to minus 80 degrees.",
                        "Sample rack 3 was moved to freezer A.",
                        "The autoclave finished its cycle.",
                        "Pipette tips restocked in drawer 2.",
                        "Centrifuge 1 serviced.",
                        "Fume hood airflow checked.",
                        "Incubator at 37 degrees.",
                        "Waste bins emptied.",
                        "Gloves restocked.",
                        "Microscope 2 booked for Friday.",
                        "Freezer A door seal replaced.",
                        "Water bath cleaned.",
                    )
                )
            ],
            *filler(13, 3),
            Event(
                20,
                "Freezer B was switched to minus 20 degrees this morning.",
                "Understood, freezer B is now at minus 20 degrees.",
            ),
        ),
        "What temperature is freezer B set to?",
        ("20",),
        ("80",),
        incremental_topics=("notes",),
    ),
    Case(
        "door-code-state-vs-summary",
        "stale summary",
        (
            Event(0, "The lab door code is 1234.", "Noted, the door code is 1234."),
            *filler(1, 14),
            Event(18, topic="door", text="The lab door code is 4812 since this morning."),
        ),
        "What is the lab door code?",
        ("4812",),
        ("1234",),
        summary_topics=("door",),
    ),
    Case(
        "name-correction-long-session",
        "long session",
        (
            Event(0, "Hi, my name is Dana.", "Nice to meet you, Dana."),
            *filler(1, 10),
            Event(
                12, "Sorry, I misspoke: my name is actually Mira, not Dana.", "No problem, Mira."
            ),
            *filler(13, 20),
        ),
        "What is my name?",
        ("mira",),
        ("dana",),
    ),
    Case(
        "oversized-update",
        "long session",
        (
            *filler(0, 4),
            Event(
                5,
                topic="log",
                text=_big(
                    "Incident: pump P3 failed.", "Resolution: replaced the seal on pump P3.", 160
                ),
            ),
            *[Event(6 + i, topic="log", text=f"Routine check {i} passed.") for i in range(6)],
            *filler(12, 4),
        ),
        "Which pump failed?",
        ("p3",),
        (),
        incremental_topics=("log",),
    ),
    Case(
        "oversized-exchange",
        "long session",
        (
            Event(0, "The spare rotor is in cabinet 7.", "OK, spare rotor in cabinet 7."),
            *filler(1, 4),
            Event(
                6, _big("Please keep this instrument log:", "End of log.", 200), "I have the log."
            ),
            *filler(7, 8),
        ),
        "Where is the spare rotor?",
        ("cabinet 7", "seven"),
        (),
    ),
)


@dataclass
class CaseResult:
    name: str
    theme: str
    score: float
    answer: str
    compactions: int
    failed_compactions: int
    seconds: float
    ttft_s: float | None = None
    error: str = ""
    context_bytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def _mentions(text: str, phrase: str) -> bool:
    """``phrase`` as whole words in ``text`` (so "4:00" is not found in "14:00"), its last
    word also in the plural ("500 milligram" is in "500 milligrams": a case that expected
    the one was scored 0 for the other)."""
    return re.search(rf"(?<!\w){re.escape(phrase.lower())}s?(?!\w)", text) is not None


def score(answer: str, expect: Sequence[str], stale: Sequence[str]) -> float:
    text = answer.lower()
    hit = any(_mentions(text, e) for e in expect)
    old = any(_mentions(text, s) for s in stale)
    return 1.0 if hit and not old else 0.5 if hit else 0.0


async def settle(ctx: ContextManager, timeout_s: float) -> None:
    """Until the manager's background work is done (at most ``timeout_s``)."""
    with anyio.move_on_after(timeout_s):
        while ctx.busy():  # noqa: ASYNC110 (polling state)
            await anyio.sleep(0.05)


async def run_case(
    llm: LLMService, case: Case, *, max_tokens: int = 48, compaction_timeout_s: float = 120.0
) -> CaseResult:
    now = [T0]
    reports: list[Any] = []
    ctx = ContextManager(
        llm,
        ContextConfig(compaction_quiet_s=0, rewarm=False, timezone=UTC, **BUDGETS),
        summary_context_topics=case.summary_topics,
        incremental_context_topics=case.incremental_topics,
        clock=lambda: now[0],
    )
    ctx.add_hook("post_compact", reports.append)
    config = ConversationConfig(max_tokens=max_tokens, temperature=0.0)
    conversation = Conversation(llm, context=ctx, config=config, clock=lambda: now[0])
    pid = f"eval-{case.name}"
    started = time.perf_counter()
    answer, error, ttft, context_bytes = "", "", None, 0
    async with ctx:
        for event in case.events:
            ts = T0 + int(event.minute * MINUTE)
            now[0] = ts
            if event.topic:
                await ctx.update(pid, event.topic, event.text, timestamp_us=ts)
            else:
                await ctx.record_exchange(pid, event.user, event.assistant, timestamp_us=ts)
            await settle(ctx, compaction_timeout_s)
        now[0] += 2 * MINUTE
        context_bytes = len(ctx.render(pid).encode())

        async def started_signal() -> None:
            return None

        stated = ctx.stated(pid, case.question) is not None
        try:
            result = await conversation.answer(
                AgentTurn(pid, "eval", case.question, timestamp_us=now[0]),
                started=started_signal,
            )
            answer = result.text.strip()
            metrics = conversation.last_metrics(pid)
            ttft = metrics.ttft_s if metrics else None
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
    return CaseResult(
        case.name,
        case.theme,
        score(answer, case.expect, case.stale) if not error else 0.0,
        answer,
        sum(r.ok for r in reports),
        sum(not r.ok for r in reports),
        time.perf_counter() - started,
        ttft,
        error,
        context_bytes,
        {"stated": stated},
    )


async def run_eval(
    llm: LLMService,
    cases: Sequence[Case] = CASES,
    progress: Callable[[CaseResult], None] | None = None,
) -> list[CaseResult]:
    results = []
    for case in cases:
        result = await run_case(llm, case)
        results.append(result)
        if progress:
            progress(result)
    return results
