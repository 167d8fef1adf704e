"""Long-session recall eval (part of ``edge eval conversation``).

Each case (``evals/recall_cases.toml``): the participant states a fact (or a fact and its
correction), dictates a note, or the scene changes; then ordinary turns follow, with the
device idle between them so compaction runs; then the question. One session per case is
probed three times with the same question, without recording the probe: right after the
fact (**control**: measures the model), after 10 turns and after 30 (**recall**: measures
the memory). Budgets are a device profile's (the CI profile by default), recall included.

The cases were written before the memory design and are split deterministically into a
design half and a held-out half (:func:`split`), reported separately. Later held-out sets
are reported on their own (:data:`LATER_SETS`): ``evals/recall_cases_fresh.toml``
("fresh") was written after the design was revised, by someone who did not design it (the
first held-out half's results had been seen while the design changed; the fresh set's
answers were read in session 22 to find an invented summary);
``evals/recall_cases_unseen.toml`` ("unseen") and ``evals/recall_cases_sealed.toml``
("sealed") in session 24, each by a writer who read neither the memory design's code nor
the other sets. The unseen set was measured once on the design as it stood, then read to
find what failed; the sealed set stayed unread until the session's changes were made.
``evals/recall_cases_blind.toml`` ("blind", notes and scenes only) in session 25, by a
writer who read no file of the project, to test one wording change out of sample.
"""

from __future__ import annotations

import hashlib
import random
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from importlib import resources
from typing import TYPE_CHECKING, Any, cast

from edge.conversation import ContextConfig, ContextManager, Conversation, ConversationConfig
from edge.llm import LLMService

if TYPE_CHECKING:
    from edge.device import ContextBudgets


from ._harness import _mentions, score, settle

MINUTE = 60 * 1_000_000
T0 = 1_790_000_000_000_000
PROBES = (0, 10, 30)
"""Ordinary turns before each probe: 0 is the control."""
ACK = "Okay, noted."
SCENE, NOTES = "scene", "notes"
DEFAULT_PROFILE = "ci-2core-24gb"


@dataclass(frozen=True)
class RecallCase:
    name: str
    kind: str  # fact, correction, note, scene
    question: str
    expect: tuple[str, ...]
    stale: tuple[str, ...] = ()
    said: tuple[str, ...] = ()
    note: str = ""
    scene: tuple[str, ...] = ()
    later: str = ""
    """The later held-out set it belongs to (one of :data:`LATER_SETS`), "" for the first."""

    @property
    def held_out(self) -> bool:
        return self.name in HELD_OUT

    @property
    def half(self) -> str:
        """``design``, ``held_out``, or the later held-out set's name."""
        return self.later or ("held_out" if self.held_out else "design")


def _load(name: str, *, later: str = "") -> dict[str, Any]:
    path = resources.files(__package__).joinpath("evals", name)
    data = tomllib.loads(path.read_bytes().decode("utf-8")) if path.is_file() else {}
    data["case"] = tuple(
        RecallCase(
            c["name"],
            c["kind"],
            c["question"],
            tuple(c["expect"]),
            tuple(c.get("stale", ())),
            tuple(c.get("said", ())),
            c.get("note", ""),
            tuple(c.get("scene", ())),
            later,
        )
        for c in data.get("case", ())
    )
    return data


def split(names: Sequence[str]) -> tuple[list[str], list[str]]:
    """Design and held-out halves: names ordered by a hash of the name, first half design."""
    ordered = sorted(names, key=lambda n: hashlib.blake2b(n.encode(), digest_size=8).digest())
    half = (len(ordered) + 1) // 2
    return ordered[:half], ordered[half:]


_MAIN = _load("recall_cases.toml")
FILLERS = tuple((f["user"], f["assistant"]) for f in _MAIN["filler"])
LATER_SETS = ("fresh", "unseen", "sealed", "blind")
"""Held-out sets written after the first, each in ``evals/recall_cases_<name>.toml``."""
RECALL_CASES = _MAIN["case"] + tuple(
    c for name in LATER_SETS for c in _load(f"recall_cases_{name}.toml", later=name)["case"]
)
DESIGN, HELD_OUT = (frozenset(h) for h in split([c.name for c in _MAIN["case"]]))
HALVES = ("design", "held_out", *LATER_SETS)


@dataclass
class Probe:
    turns: int
    score: float
    answer: str
    recalled: bool
    context_bytes: int
    section_bytes: dict[str, int]
    ttft_s: float | None = None
    kept: bool = False
    """Whether the request's context held an expected answer (the memory's part; the
    score is the model's use of it); for an answer from the record, whether it did."""
    stated: bool = False
    """Whether the answer was told back from the participant's record (no model call)."""


@dataclass
class RecallResult:
    name: str
    kind: str
    half: str
    probes: list[Probe] = field(default_factory=list)
    compactions: list[dict[str, Any]] = field(default_factory=list)
    over_budget: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str = ""

    def score(self, turns: int) -> float:
        return next((p.score for p in self.probes if p.turns == turns), 0.0)


BUDGET_OPTIONS = (
    "dialogue_budget_bytes",
    "topic_budget_bytes",
    "compaction_input_budget_bytes",
    "recall_budget_bytes",
)
"""The context manager options a device profile sizes."""


def profile_budgets(profile: str = DEFAULT_PROFILE) -> ContextBudgets:
    """A device profile's context-manager budgets (recall included)."""
    from edge.device import load_device_config

    config = load_device_config(profile).context_config()
    return cast("ContextBudgets", {name: getattr(config, name) for name in BUDGET_OPTIONS})


def section_bytes(ctx: ContextManager, pid: str, request: str) -> dict[str, int]:
    """Rendered bytes per section (and the recalled block) of the request's context."""
    out: dict[str, int] = {}
    blocks = ctx.blocks(pid)
    recalled = ctx.recalled(pid, request)
    for block in blocks + ([recalled] if recalled else []):
        out[block.section] = out.get(block.section, 0) + len(block.text.encode())
    return out


async def _probe(
    llm: LLMService, conv: Conversation, ctx: ContextManager, case: RecallCase, pid: str
) -> Probe:
    """Ask the question as an answer would (told back from the record, or the model's
    reply, filtered), without recording the exchange."""
    messages = conv.request_messages(pid, case.question)
    stated = ctx.stated(pid, case.question)
    answer = (await conv.reply(pid, case.question)).strip()
    metrics = conv.last_metrics(pid)
    held = stated.text if stated is not None else messages[1].content
    return Probe(
        0,
        score(answer, case.expect, case.stale),
        answer,
        ctx.recalled(pid, case.question) is not None,
        len(messages[1].content.encode()),
        section_bytes(ctx, pid, case.question),
        metrics.ttft_s if metrics else None,
        any(_mentions(held.lower(), e) for e in case.expect),
        stated is not None,
    )


async def _fact(ctx: ContextManager, case: RecallCase, pid: str, ts: int) -> int:
    for text in case.said:
        await ctx.record_exchange(pid, text, ACK, timestamp_us=ts)
        ts += MINUTE
    if case.note:
        await ctx.update(pid, NOTES, case.note, timestamp_us=ts)
        ts += MINUTE
    for text in case.scene:
        await ctx.update(pid, SCENE, text, timestamp_us=ts)
        ts += MINUTE
    return ts


def _over_budget(ctx: ContextManager, probe: Probe, recall_budget: int) -> list[str]:
    budgets = {**ctx.budgets, "recalled": recall_budget}
    return [
        f"{name} {size} > {budgets[name]} at {probe.turns} turns"
        for name, size in probe.section_bytes.items()
        if size > budgets.get(name, size)
    ]


def recall_session(
    llm: LLMService, budgets: ContextBudgets, now: list[int], max_tokens: int = 48
) -> tuple[ContextManager, Conversation]:
    """The context manager and conversation a recall case runs in: the device's
    ``budgets``, the scene and notes topics, a clock the case moves (``now[0]``),
    compaction as soon as it is due and no re-warm (the eval measures answers)."""
    ctx = ContextManager(
        llm,
        ContextConfig(compaction_quiet_s=0, rewarm=False, timezone=UTC, **budgets),
        summary_context_topics=(SCENE,),
        incremental_context_topics=(NOTES,),
        clock=lambda: now[0],
    )
    config = ConversationConfig(max_tokens=max_tokens, temperature=0.0)
    conv = Conversation(llm, context=ctx, config=config, clock=lambda: now[0])
    return ctx, conv


async def run_recall_case(
    llm: LLMService,
    case: RecallCase,
    budgets: ContextBudgets,
    *,
    max_tokens: int = 48,
    compaction_timeout_s: float = 120.0,
) -> RecallResult:
    now = [T0]
    result = RecallResult(case.name, case.kind, case.half)
    ctx, conv = recall_session(llm, budgets, now, max_tokens)
    ctx.add_hook(
        "post_compact",
        lambda r: result.compactions.append(
            {"section": r.section, "ok": r.ok, "method": r.method, "reason": r.reason}
        ),
    )
    pid = f"recall-{case.name}"
    started = time.perf_counter()
    recall_budget = budgets.get("recall_budget_bytes", 1_000)
    try:
        async with ctx:
            now[0] = await _fact(ctx, case, pid, T0)
            done = 0
            for turns in PROBES:
                for i in range(done, turns):
                    user, assistant = FILLERS[i % len(FILLERS)]
                    await ctx.record_exchange(pid, user, assistant, timestamp_us=now[0])
                    now[0] += MINUTE
                    await settle(ctx, compaction_timeout_s)
                done = turns
                probe = await _probe(llm, conv, ctx, case, pid)
                probe.turns = turns
                result.probes.append(probe)
                result.over_budget += _over_budget(ctx, probe, recall_budget)
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    result.seconds = time.perf_counter() - started
    return result


async def run_recall_eval(
    llm: LLMService,
    cases: Sequence[RecallCase] = RECALL_CASES,
    budgets: ContextBudgets | None = None,
    progress: Callable[[RecallResult], None] | None = None,
) -> list[RecallResult]:
    budgets = budgets if budgets is not None else profile_budgets()
    results = []
    for case in cases:
        result = await run_recall_case(llm, case, budgets)
        results.append(result)
        if progress:
            progress(result)
    return results


BOOTSTRAP_RESAMPLES = 2_000


def ratio_interval(pairs: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """A 95 % interval of sum(recall) / sum(control) over (control, recall) score pairs,
    by the paired bootstrap over cases (seeded: the same scores give the same interval).
    With 14 cases a set, one answer moves a ratio by about 7 points; the interval says how
    far the figure can be read."""
    if not pairs:
        return None
    rng = random.Random(0)
    ratios = []
    for _ in range(BOOTSTRAP_RESAMPLES):
        sample = rng.choices(pairs, k=len(pairs))
        control = sum(c for c, _ in sample)
        if control:
            ratios.append(sum(r for _, r in sample) / control)
    if not ratios:
        return None
    ratios.sort()
    return ratios[int(0.025 * len(ratios))], ratios[int(0.975 * len(ratios)) - 1]


def _half_summary(rows: Sequence[RecallResult]) -> dict[str, Any]:
    """One set's figures. ``ratio``: recall's mean over control's (the issue's measure; an
    answer the model misses at once and gets later counts for recall). ``retained``: of
    the control's score, the share still scored after the turns (what the memory kept of
    what the model knew). ``kept``: the share of probes whose context held an expected
    answer (the memory alone, whatever the model then made of it)."""
    means = {t: sum(r.score(t) for r in rows) / len(rows) for t in PROBES}
    control = means[0]
    out: dict[str, Any] = {"cases": len(rows), "control": control}
    for t in PROBES[1:]:
        pairs = [(r.score(0), r.score(t)) for r in rows]
        known = sum(c for c, _ in pairs)
        probes = [p for r in rows for p in r.probes if p.turns == t]
        out[f"recall_{t}"] = means[t]
        out[f"ratio_{t}"] = means[t] / control if control else None
        out[f"ratio_{t}_interval"] = ratio_interval(pairs)
        out[f"retained_{t}"] = sum(min(c, r) for c, r in pairs) / known if known else None
        out[f"kept_{t}"] = sum(p.kept for p in probes) / len(probes) if probes else None
    return out


def summarize(results: Sequence[RecallResult]) -> dict[str, Any]:
    """Each set's figures (:func:`_half_summary`), and all of them together as ``all``
    when more than one set ran; compaction methods; sections over budget."""
    out: dict[str, Any] = {}
    for half in HALVES:
        rows = [r for r in results if r.half == half]
        if rows:
            out[half] = _half_summary(rows)
    if len(out) > 1:
        out["all"] = _half_summary(results)
    compactions = [c for r in results for c in r.compactions]
    usable = [c for c in compactions if c["ok"]]
    methods: dict[str, int] = {}
    for c in compactions:
        methods[c["method"]] = methods.get(c["method"], 0) + 1
    out["compactions"] = {
        "total": len(compactions),
        "usable": len(usable),
        "usable_share": len(usable) / len(compactions) if compactions else None,
        "methods": methods,
    }
    out["over_budget"] = [o for r in results for o in r.over_budget]
    return out
