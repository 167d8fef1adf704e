"""Compaction of a participant's sections: when a section is compacted at once without the
model, how one compaction step runs (plan, hooks, summary, the successor prefix), and its
commit (to the store and the cached view, by the state's owner). What one model request
does is ``_compaction.py``'s; when background compaction runs is ``_schedule.py``'s."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Literal, Protocol, cast

from ._background import Jobs, Quiet
from ._compaction import (
    CompactionReport,
    CompactionRequest,
    Compactor,
    PostCompactHook,
    PreCompactHook,
    Summarized,
    call_hook,
    plan,
    previous_text,
)
from ._context import Entry, ParticipantContext, Section, Successor
from ._extractive import extractive_summary
from ._render import DIALOGUE, Renderer
from ._state import ContextState
from ._text import clip_middle, nbytes

log = logging.getLogger(__name__)


def keep_for(section: Section) -> int:
    """Entries a compaction leaves in ``section``: the newest dialogue exchange."""
    return 1 if section.kind == DIALOGUE else 0


class Successors(Protocol):
    """What a compaction asks of the owner of the participants' prompt prefixes
    (``Prefixes``): the prefix its summary will leave, warmed aside before it commits, and
    made the participant's after (or dropped)."""

    async def warm_successor(
        self, part: ParticipantContext, section: Section, summary: str, taken: list[Entry]
    ) -> Successor | None: ...

    async def adopt(self, part: ParticipantContext, successor: Successor | None) -> bool: ...

    async def drop(self, key: str) -> None: ...


class Compaction:
    """Compacts the sections of ``state``'s participants with ``compactor`` (the model),
    ``input_budget_bytes`` bounding one request, and commits the result; ``successors``
    warms the prefix a summary leaves, ``jobs`` tracks each step (a clear cancels it),
    ``quiet`` says whether answers come too close together for a quiet period, and
    ``wake`` tells the background worker about the work a commit leaves."""

    def __init__(
        self,
        state: ContextState,
        compactor: Compactor,
        successors: Successors,
        jobs: Jobs,
        quiet: Quiet,
        renderer: Renderer,
        input_budget_bytes: int,
        wake: Callable[[], None],
    ) -> None:
        self.state = state
        self.compactor = compactor
        self.successors = successors
        self.jobs = jobs
        self.quiet = quiet
        self.renderer = renderer
        self.input_budget_bytes = input_budget_bytes
        self.wake = wake
        self.pre_hooks: list[PreCompactHook] = []
        self.post_hooks: list[PostCompactHook] = []

    def add_hook(
        self,
        event: Literal["pre_compact", "post_compact"],
        hook: PreCompactHook | PostCompactHook,
    ) -> None:
        """``pre_compact(request)`` runs before each compaction: return None to proceed,
        False to skip it (entries kept, retried after the next entry) or a string to use as
        the summary. ``post_compact(report)`` sees every result. Either may be async."""
        if event == "pre_compact":
            self.pre_hooks.append(cast(PreCompactHook, hook))  # the event names the kind
        elif event == "post_compact":
            self.post_hooks.append(cast(PostCompactHook, hook))
        else:
            raise ValueError(f"unknown hook event {event!r}; use 'pre_compact' or 'post_compact'")

    # ----------------------------------------------------------------- without the model

    async def relieve(self, part: ParticipantContext, section: Section) -> None:
        """After a write to ``section``: compact it at once without the model when it is
        pressed (:meth:`pressed`)."""
        if section.needs_compaction() and self.pressed(section):
            await self.without_model(part, section)

    def pressed(self, section: Section) -> bool:
        """Whether ``section`` overflows its budget while answers come too close together
        (less than ``compaction_quiet_s`` apart) to give its compaction a quiet period:
        the view would then leave its oldest entries out, shifting the prompt's start
        (and re-evaluating it) on turn after turn."""
        if not self.quiet.answers_close():
            return False
        used = nbytes(previous_text(section, self.renderer)) + section.pending_bytes
        return used > section.budget

    async def without_model(self, part: ParticipantContext, section: Section) -> None:
        """Compact ``section`` now without the model: the participant's statements verbatim
        (the extractive summary), all but the newest dialogue exchange, so the prompt's
        start changes once per budget instead of on every turn. Skipped while background
        work holds the participant: a model compaction or re-warm that found no quiet
        model is cancelled (it would start again when the device is idle)."""
        lock = self.state.lock(part.participant_id)
        if lock.locked():
            await self.jobs.cancel(part.participant_id)
        async with lock:
            if not self.state.current(part):
                return
            started = time.perf_counter()
            taken = self.state.candidates(part, section, keep_for(section))
            if not taken:
                return
            text = extractive_summary(
                section.summary, taken, section.summary_limit, dialogue=section.kind == DIALOGUE
            )
            made = Summarized(
                text or None, "extractive", "no quiet period: compacted without the model"
            )
            previous = previous_text(section, self.renderer)
            texts = [e.rendered for e in taken]
            await self.commit(part, section, made, taken, previous, texts, started)

    # ----------------------------------------------------------------- with the model

    async def run(self, part: ParticipantContext, section: Section) -> None:
        """One background step of ``section`` (the participant's lock held)."""
        self.state.begin_compaction(part)
        try:
            await self.step(part, section, self.state.candidates(part, section, keep_for(section)))
        finally:
            self.state.end_compaction(part)

    async def compact(
        self,
        participant_id: str,
        *,
        section: str | None = None,
        summary: str | None = None,
        keep_last: int | None = None,
    ) -> list[CompactionReport]:
        """Compact now, without waiting for a quiet device: every compacted section, or
        ``section``, keeping the newest ``keep_last`` entries (at least the newest dialogue
        exchange). ``summary`` replaces the model's summary with your own."""
        part = self.state.cached(participant_id)
        if part is None:
            return []
        compacted = [s.name for s in part.sections.values() if s.kind != "summary"]
        names = [section] if section else compacted
        for name in names:
            if name not in compacted:
                raise ValueError(f"{name!r} is not a compacted section of this manager")
        reports: list[CompactionReport] = []
        async with self.state.lock(part.participant_id):
            for name in names:
                sec = part.sections[name]
                keep = max(keep_last or 0, keep_for(sec))
                while self.state.current(part):
                    candidates = self.state.candidates(part, sec, keep)
                    if not candidates:
                        break
                    report = await self.step(part, sec, candidates, custom=summary)
                    reports.append(report)
                    if not report.ok or summary is not None:
                        break
        return reports

    async def step(
        self,
        part: ParticipantContext,
        section: Section,
        candidates: list[Entry],
        *,
        custom: str | None = None,
    ) -> CompactionReport:
        """One compaction request of ``section``, cancellable by ``clear()``."""
        started = time.perf_counter()
        previous = previous_text(section, self.renderer)
        if custom is not None:
            taken, texts = candidates, [e.rendered for e in candidates]
        else:
            taken, texts = plan(candidates, previous, self.input_budget_bytes, self.renderer)
        made = Summarized(None, "cancelled", "cancelled")
        successor: Successor | None = None
        try:
            with self.jobs.track(part.participant_id):
                made = await self.summarize(part, section, previous, texts, custom, taken)
                if made.text is not None:
                    successor = await self.successors.warm_successor(
                        part, section, made.text, taken
                    )
            report = await self.commit(part, section, made, taken, previous, texts, started)
            if report.ok:  # applied: the prefix warmed aside becomes the participant's
                adopted, successor = await self.successors.adopt(part, successor), None
                if adopted:  # it is exactly their prefix now: no re-warm
                    self.state.take_warm(part)
            return report
        finally:
            if successor is not None:  # warmed, then not adopted (no summary, a clear)
                await self.successors.drop(successor[0])

    async def summarize(
        self,
        part: ParticipantContext,
        section: Section,
        previous: str,
        texts: list[str],
        custom: str | None,
        taken: list[Entry] | None = None,
    ) -> Summarized:
        limit = section.summary_limit
        if custom is not None:
            return Summarized(clip_middle(custom, limit) if custom.strip() else None, "custom")
        request = CompactionRequest(
            part.participant_id, section.name, section.summary, tuple(texts), limit
        )
        for hook in self.pre_hooks:
            decision = await call_hook(hook, request)
            if decision is False:
                return Summarized(None, "cancelled", "pre_compact hook skipped it")
            if isinstance(decision, str):
                return Summarized(
                    clip_middle(decision, limit) if decision.strip() else None, "hook"
                )
        return await self.compactor.summarize(section, previous, texts, taken)

    # ----------------------------------------------------------------- the commit

    async def commit(
        self,
        part: ParticipantContext,
        section: Section,
        made: Summarized,
        taken: list[Entry],
        previous: str,
        texts: list[str],
        started: float,
    ) -> CompactionReport:
        """Apply ``made`` to the store (one transaction) and the cached view; report it."""
        if not self.state.current(part):
            made = Summarized(None, "cancelled", "participant cleared", made.attempts)
        report = _report(part, section, made, taken, previous, texts, started)
        if made.reason in ("participant cleared", "cancelled"):
            return report  # cleared, or superseded (see without_model): no failure
        if made.text is None:
            log.warning(
                "compaction of %r for %r failed (%s); entries kept until the next one",
                section.name,
                part.participant_id,
                report.reason,
            )
        await self.state.apply_compaction(part, section, made, taken, report)
        for hook in self.post_hooks:
            try:
                await call_hook(hook, report)
            except Exception:
                log.exception("post_compact hook failed")
        self.wake()
        return report


def _report(
    part: ParticipantContext,
    section: Section,
    made: Summarized,
    taken: list[Entry],
    previous: str,
    texts: list[str],
    started: float,
) -> CompactionReport:
    result = made.text
    return CompactionReport(
        part.participant_id,
        section.name,
        made.method,
        result is not None,
        len(taken),
        nbytes(previous) + sum(nbytes(t) for t in texts),
        nbytes(result) if result is not None else 0,
        time.perf_counter() - started,
        made.reason or ("" if result is not None else "no summary"),
        list(made.attempts),
    )
