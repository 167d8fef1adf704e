"""A client's clock line kept out of the prompt prefix its model state reuses.

Home Assistant's conversation agents end their system prompt with the time to the second
("Current time is 14:03:27. Today's date is 2026-12-05."), rendered afresh for every
request when the agent has no date-time tool (its Ollama integration's default). In the
first message, that line made every request a new prompt from there on, so the whole
history after it was evaluated again each turn, and each turn's first token came later
than the one before (``benchmarks/versus_chain.py`` path (e) sends that prompt).

Here the lines of the first system message that hold a time of day move to a system
message just before the newest message, so the system prompt and the history stay the
prefix the model's state already holds. The model reads the same words. Once the answer
is out and the device has been quiet for a moment, the state is evaluated again at
background priority without the clock line and with the answer (:func:`settle`), so the
next request, which repeats that exchange in its history, evaluates only its clock line
and its question, however long the answer was.

This happens only where the model's own chat template renders a system message there
(ChatML does; some templates refuse one after the first message), and never for a remote
backend, whose template is not ours to check: otherwise the messages go as sent.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence

from edge.llm import ChatFormatter, ChatMessage, Priority, ReportsActivity, Warmable

log = logging.getLogger(__name__)

SETTLE_QUIET_S = 0.25
"""How long the device stays quiet before the state is settled (the conversation's re-warm
waits as long)."""
MAX_SETTLING = 8
"""Settles pending at once per model: each key's newest only, and beyond this many the
oldest is dropped, so clients sending ever new system prompts cannot pile up background
work for the next quiet moment."""
_SETTLING: dict[tuple[int, str], asyncio.Task[None]] = {}  # (id(llm), cache key) -> settle

CLOCK = re.compile(
    r"\b\d{1,2}:\d{2}:\d{2}\b|(?i:\b(?:current|currently|now|today)\b)[^\n]*\b\d{1,2}:\d{2}\b"
)
"""The time now in a line: to the second (14:03:27), or to the minute in a line that says
it is the current time ("It is now 14:03"). A time the prompt states as a fact
("calibration is at 10:00") stays where it is."""

_LATE_SYSTEM: dict[int, tuple[ChatFormatter, bool]] = {}
"""id(formatter) -> (formatter, whether its template takes one); the formatter is held so
its id is never another's."""


def clock_lines_last(
    messages: Sequence[ChatMessage], formatter: ChatFormatter | None
) -> list[ChatMessage]:
    """``messages`` with the clock lines of their first (system) message moved into a
    system message before the last message, where ``formatter``'s template renders one."""
    out = list(messages)
    if len(out) < 2 or out[0].role != "system" or not CLOCK.search(out[0].content):
        return out
    if formatter is None or not renders_late_system(formatter):
        return out
    lines = out[0].content.splitlines(keepends=True)
    clock = "".join(line for line in lines if CLOCK.search(line)).strip()
    stable = "".join(line for line in lines if not CLOCK.search(line)).rstrip()
    head = [ChatMessage(role="system", content=stable)] if stable else []
    return [*head, *out[1:-1], ChatMessage(role="system", content=clock), out[-1]]


def renders_late_system(formatter: ChatFormatter) -> bool:
    """Whether ``formatter``'s chat template renders a system message after the first
    turn (asked once per model)."""
    held, known = _LATE_SYSTEM.get(id(formatter), (None, None))
    if held is not formatter or known is None:
        probe = [
            ChatMessage(role="system", content="s"),
            ChatMessage(role="user", content="u"),
            ChatMessage(role="assistant", content="a"),
            ChatMessage(role="system", content="late system line"),
            ChatMessage(role="user", content="v"),
        ]
        try:
            known = "late system line" in formatter.format_chat(probe)
        except Exception:  # a template that refuses it raises its own error type
            known = False
        _LATE_SYSTEM[id(formatter)] = (formatter, known)
    return known


def settle(llm: object, asked: Sequence[ChatMessage], answer: str, cache_key: str) -> None:
    """After an answer to messages whose clock line moved (``asked``), evaluate
    ``cache_key``'s state as the next request will start: the messages without the clock
    line, then the answer. Background priority, once the device is quiet; a failure only
    costs the next request that evaluation."""
    if not isinstance(llm, Warmable) or len(asked) < 2 or asked[-2].role != "system":
        return
    exchange = [*asked[:-2], asked[-1], ChatMessage(role="assistant", content=answer)]
    unsettle(llm, cache_key)
    mine = [k for k in _SETTLING if k[0] == id(llm)]
    for oldest in mine[: max(0, len(mine) + 1 - MAX_SETTLING)]:
        _SETTLING.pop(oldest).cancel()
    slot = (id(llm), cache_key)
    task = asyncio.get_running_loop().create_task(_settle(llm, exchange, cache_key))
    _SETTLING[slot] = task

    def forget(done: asyncio.Task[None]) -> None:
        if _SETTLING.get(slot) is done:
            del _SETTLING[slot]

    task.add_done_callback(forget)


def unsettle(llm: object, cache_key: str | None = None) -> None:
    """Drop ``llm``'s pending settle for ``cache_key`` (a newer request or answer
    supersedes it), or all of them (``None``: the service is closing)."""
    for slot in [k for k in _SETTLING if k[0] == id(llm) and cache_key in (None, k[1])]:
        _SETTLING.pop(slot).cancel()


async def _settle(llm: Warmable, exchange: list[ChatMessage], cache_key: str) -> None:
    try:
        if isinstance(llm, ReportsActivity):
            await llm.activity.wait_quiet(SETTLE_QUIET_S)
        await llm.warm(exchange, cache_key=cache_key, priority=Priority.BACKGROUND)
    except Exception as exc:  # the model closed, or the state did not fit: no harm done
        log.debug("settling %s after a moved clock line: %s", cache_key, exc)
