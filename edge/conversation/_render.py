"""How context is shown to the model: times, entry and summary blocks, the context message.

The layout keeps everything stable first so a local model reuses its KV prefix: summaries,
then entries in recorded-time order, the current time, and last the statements recalled
for the current request (new to each request, unless the block the prefix was warmed with
holds them: see :meth:`~edge.conversation._recall.Recall.block`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Literal

BlockKind = Literal["summary", "exchange", "update", "state", "recalled"]

DIALOGUE = "dialogue"
"""Name of the dialogue section (topics are named after their runtime topic)."""


@dataclass(frozen=True)
class ContextBlock:
    """One block of a participant's rendered context, as the model sees it.

    ``kind`` is ``"summary"`` (a rolling summary of a section, covering ``start_us`` to
    ``timestamp_us``), ``"exchange"`` (a completed dialogue exchange), ``"update"`` (an
    incremental topic update), ``"state"`` (a summary topic's current state) or
    ``"recalled"`` (earlier statements brought back for the current request).
    ``section`` is ``"dialogue"`` or the topic name; ``text`` the rendered block; and
    ``clipped`` is True when the block keeps only its start and end to fit a budget.
    """

    kind: BlockKind
    section: str
    text: str
    timestamp_us: int
    start_us: int | None = None
    clipped: bool = False


class Renderer:
    """Formats times and blocks in one time zone (the device's local zone by default)."""

    def __init__(self, tz: tzinfo | None = None) -> None:
        self.tz = tz

    def _dt(self, timestamp_us: int) -> datetime:
        dt = datetime.fromtimestamp(timestamp_us / 1e6, self.tz)
        return dt

    def time(self, timestamp_us: int) -> str:
        return self._dt(timestamp_us).strftime("%H:%M")

    def now(self, timestamp_us: int) -> str:
        return self._dt(timestamp_us).strftime("%A %d %B %Y, %H:%M")

    @staticmethod
    def label(section: str) -> str:
        return "the earlier conversation" if section == DIALOGUE else section

    def exchange(self, timestamp_us: int, user: str, assistant: str) -> str:
        return f"[{self.time(timestamp_us)}] User: {user}\nAssistant: {assistant}"

    def update(self, section: str, timestamp_us: int, text: str) -> str:
        return f"[{self.time(timestamp_us)}] {section}: {text}"

    def state(self, section: str, timestamp_us: int, text: str) -> str:
        return f"[{self.time(timestamp_us)}] {section} (latest): {text}"

    def summary(self, section: str, start_us: int, end_us: int, text: str) -> str:
        span = f"{self.time(start_us)} to {self.time(end_us)}"
        return f"Summary of {self.label(section)} ({span}): {text}"

    def context_message(
        self,
        blocks: list[ContextBlock],
        now_us: int | None,
        recalled: ContextBlock | None = None,
    ) -> str:
        """Blocks in the given order, then the current time (omitted when ``now_us`` is
        None), then the ``recalled`` block for this request, if any.

        Everything up to the current time is what a model's cache is warmed with between
        turns (the time's date and hour rarely change before the next turn), followed by
        the recalled block chosen ahead of the request; a request evaluates its own
        recalled block anew only when that one does not hold it."""
        parts = [b.text for b in blocks] or ["(No earlier conversation or context.)"]
        body = "Context:\n\n" + "\n\n".join(parts)
        if now_us is not None:
            body = f"{body}\n\nCurrent time: {self.now(now_us)}"
        if recalled is not None:
            body = f"{body}\n\n{recalled.text}"
        return body
