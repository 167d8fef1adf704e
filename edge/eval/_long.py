"""The long multi-participant recall set (part of ``edge eval conversation``, issue 41).

A lab session as it runs (``evals/long_cases.toml``): four participants take turns round
robin in one context manager on a device profile's budgets. Each states a fact, a name and
an arrangement, then corrects the arrangement; then ``turns`` ordinary turns (160 by
default, the participants in turn, each answered by the model), with a pause every 20 (the
device idle, so compaction runs); then each asks its questions, in the design phrasing and
in a held-out one written with the set, and in an unseen one written later and never
tuned on. Every statement and ordinary turn goes through
:meth:`~edge.conversation.Conversation.answer`, as a routed turn would; the questions
through :meth:`~edge.conversation.Conversation.reply`, not recorded, so one phrasing does
not answer another. The **control**: each participant's statements said by a fresh
participant, asked right after.

Reported: recall after the turns over the control (per phrasing), correction accuracy
(the new value and not the old), **leaks** (a reply to one participant naming another's
value), and the share of every reply (statements, ordinary turns, questions, controls)
that shows the prompt's scaffolding
(:func:`~edge.conversation.has_scaffolding`).
"""

from __future__ import annotations

import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC
from importlib import resources
from typing import TYPE_CHECKING, Any

from edge.conversation import (
    ContextConfig,
    ContextManager,
    Conversation,
    ConversationConfig,
    has_scaffolding,
)
from edge.llm import LLMService
from edge.routing import AgentTurn

if TYPE_CHECKING:
    from edge.device import ContextBudgets

from ._harness import _mentions, score, settle
from ._recall import FILLERS, MINUTE, T0

DEFAULT_TURNS = 160
PAUSE_EVERY = 20
PHRASINGS = ("design", "held_out", "unseen")
"""Each question's phrasings: the design one, the held-out one written with the set, and
the unseen one written later and never tuned on (``evals/long_cases.toml``)."""


@dataclass(frozen=True)
class LongCase:
    name: str
    kind: str  # fact, name, correction
    question: str
    held_out: str
    expect: tuple[str, ...]
    stale: tuple[str, ...] = ()
    unseen: str = ""

    def asked(self, phrasing: str) -> str:
        """The question in ``phrasing`` (one of :data:`PHRASINGS`)."""
        return {"design": self.question, "held_out": self.held_out, "unseen": self.unseen}[phrasing]

    @property
    def phrasings(self) -> tuple[str, ...]:
        return PHRASINGS if self.unseen else PHRASINGS[:2]


@dataclass(frozen=True)
class Participant:
    name: str
    said: tuple[str, ...]
    cases: tuple[LongCase, ...]


def load_participants() -> tuple[Participant, ...]:
    path = resources.files(__package__).joinpath("evals", "long_cases.toml")
    data = tomllib.loads(path.read_bytes().decode("utf-8"))
    return tuple(
        Participant(
            p["name"],
            tuple(p["said"]),
            tuple(
                LongCase(
                    c["name"],
                    c["kind"],
                    c["question"],
                    c["held_out"],
                    tuple(c["expect"]),
                    tuple(c.get("stale", ())),
                    c.get("unseen", ""),
                )
                for c in p["case"]
            ),
        )
        for p in data["participant"]
    )


PARTICIPANTS = load_participants()


@dataclass
class LongProbe:
    case: str
    kind: str
    participant: str
    phrasing: str  # one of PHRASINGS
    control: float
    recall: float
    control_answer: str
    recall_answer: str


@dataclass
class LongResult:
    turns: int
    probes: list[LongProbe] = field(default_factory=list)
    replies: list[dict[str, str]] = field(default_factory=list)
    """Every reply: participant, request, reply."""
    compactions: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    error: str = ""


def _session(
    llm: LLMService, budgets: ContextBudgets, now: list[int], max_tokens: int
) -> tuple[ContextManager, Conversation]:
    context = ContextConfig(compaction_quiet_s=0.5, rewarm=False, timezone=UTC, **budgets)
    ctx = ContextManager(llm, context, clock=lambda: now[0])
    config = ConversationConfig(max_tokens=max_tokens, temperature=0.0)
    return ctx, Conversation(llm, context=ctx, config=config, clock=lambda: now[0])


async def _started() -> None:
    return None


class _Session:
    """One context manager and conversation, a clock a minute per turn, every reply kept."""

    def __init__(self, llm: LLMService, budgets: ContextBudgets, max_tokens: int) -> None:
        self.now = [T0]
        self.ctx, self.conv = _session(llm, budgets, self.now, max_tokens)
        self.replies: list[dict[str, str]] = []
        self.compactions: dict[str, int] = {}
        self.ctx.add_hook("post_compact", self._count)
        self._n = 0

    def _count(self, report: Any) -> None:
        key = report.method if report.ok else "failed"
        self.compactions[key] = self.compactions.get(key, 0) + 1

    async def turn(self, pid: str, text: str) -> str:
        self._n += 1
        self.now[0] += MINUTE
        turn = AgentTurn(pid, f"t{self._n}", text, timestamp_us=self.now[0])
        reply = (await self.conv.answer(turn, started=_started)).text
        self.replies.append({"participant": pid, "request": text, "reply": reply})
        return reply

    async def ask(self, pid: str, question: str) -> str:
        self.now[0] += MINUTE
        reply = await self.conv.reply(pid, question)
        self.replies.append({"participant": pid, "request": question, "reply": reply})
        return reply


async def _controls(session: _Session, participants: tuple[Participant, ...]) -> dict:
    """Each participant's statements said by a fresh participant, each question asked
    right after: ``{(case, phrasing): answer}``."""
    out: dict[tuple[str, str], str] = {}
    for p in participants:
        pid = f"control-{p.name}"
        for text in p.said:
            await session.turn(pid, text)
        for case in p.cases:
            for phrasing in case.phrasings:
                out[(case.name, phrasing)] = await session.ask(pid, case.asked(phrasing))
    return out


async def _long_session(
    session: _Session, participants: tuple[Participant, ...], turns: int, timeout_s: float
) -> dict:
    """The statements round robin, ``turns`` ordinary turns round robin with a pause every
    :data:`PAUSE_EVERY`, then the questions: ``{(case, phrasing): answer}``."""
    async with session.ctx:
        for i in range(max(len(p.said) for p in participants)):
            for p in participants:
                if i < len(p.said):
                    await session.turn(p.name, p.said[i])
        for n in range(turns):
            p = participants[n % len(participants)]
            await session.turn(p.name, FILLERS[(n // len(participants)) % len(FILLERS)][0])
            if (n + 1) % PAUSE_EVERY == 0:
                await settle(session.ctx, timeout_s)
        out: dict[tuple[str, str], str] = {}
        for p in participants:
            for case in p.cases:
                for phrasing in case.phrasings:
                    out[(case.name, phrasing)] = await session.ask(p.name, case.asked(phrasing))
    return out


async def run_long_eval(
    llm: LLMService,
    budgets: ContextBudgets,
    *,
    turns: int = DEFAULT_TURNS,
    participants: tuple[Participant, ...] = PARTICIPANTS,
    max_tokens: int = 48,
    compaction_timeout_s: float = 300.0,
    progress: Callable[[str], None] | None = None,
) -> LongResult:
    """Run the long set: the controls, then the session; score each question."""
    started = time.perf_counter()
    result = LongResult(turns)
    control_session = _Session(llm, budgets, max_tokens)
    try:
        async with control_session.ctx:
            controls = await _controls(control_session, participants)
        if progress:
            progress("controls done")
        session = _Session(llm, budgets, max_tokens)
        answers = await _long_session(session, participants, turns, compaction_timeout_s)
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        result.seconds = time.perf_counter() - started
        return result
    for p in participants:
        for case in p.cases:
            for phrasing in case.phrasings:
                control, recall = controls[(case.name, phrasing)], answers[(case.name, phrasing)]
                result.probes.append(
                    LongProbe(
                        case.name,
                        case.kind,
                        p.name,
                        phrasing,
                        score(control, case.expect, case.stale),
                        score(recall, case.expect, case.stale),
                        control,
                        recall,
                    )
                )
    result.replies = control_session.replies + session.replies
    result.compactions = session.compactions
    result.seconds = time.perf_counter() - started
    return result


def leaks(result: LongResult, participants: tuple[Participant, ...] = PARTICIPANTS) -> list[dict]:
    """Replies to one participant (or their control) that name a value only another
    participant stated."""
    values = {
        p.name: {e for c in p.cases for e in (*c.expect, *c.stale) if _distinctive(e)}
        for p in participants
    }
    found = []
    for r in result.replies:
        owner = r["participant"].removeprefix("control-")
        own = values.get(owner, set())
        text = r["reply"].lower()
        for other, theirs in values.items():
            if other == owner:
                continue
            named = [v for v in theirs - own if _mentions(text, v)]
            if named:
                found.append({**r, "names": other, "values": named})
    return found


def _distinctive(value: str) -> bool:
    """A value a reply names only by knowing it: three digits or more ("4711", "16:00",
    "drawer 6" has a word too), or a name; not "9" or "six", which replies say anyway."""
    digits = sum(c.isdigit() for c in value)
    return digits >= 3 or (digits > 0 and " " in value) or (digits == 0 and len(value) > 5)


def summarize_long(result: LongResult) -> dict[str, Any]:
    """The figures: per phrasing, the control's and recall's mean, their ratio and the
    cases right of 12; correction accuracy after the turns; leaks; scaffolded replies."""
    out: dict[str, Any] = {"turns": result.turns, "seconds": result.seconds}
    for phrasing in PHRASINGS:
        rows = [p for p in result.probes if p.phrasing == phrasing]
        if not rows:
            continue
        control = sum(p.control for p in rows) / len(rows)
        recall = sum(p.recall for p in rows) / len(rows)
        corrections = [p for p in rows if p.kind == "correction"]
        out[phrasing] = {
            "cases": len(rows),
            "control": control,
            "recall": recall,
            "ratio": recall / control if control else None,
            "recall_right": sum(p.recall == 1.0 for p in rows),
            "control_right": sum(p.control == 1.0 for p in rows),
            "corrections": (
                sum(p.recall == 1.0 for p in corrections) / len(corrections)
                if corrections
                else None
            ),
        }
    scaffolded = [r for r in result.replies if has_scaffolding(r["reply"])]
    out["replies"] = len(result.replies)
    out["scaffolded"] = len(scaffolded)
    out["scaffolded_share"] = len(scaffolded) / len(result.replies) if result.replies else None
    out["scaffolded_examples"] = scaffolded[:5]
    found = leaks(result)
    out["leaks"] = len(found)
    out["leak_examples"] = found[:5]
    out["compactions"] = result.compactions
    return out
