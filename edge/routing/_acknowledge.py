"""Intention acknowledgments: a brief "on it" spoken while a slow first answer is prepared.

One :class:`Acknowledgment` per admitted turn. It waits for the silence threshold (or
starts at once when the destination's recent first answers were all slower than that),
asks the acknowledgment model for a bounded, non-reasoning line, then commits and emits
it. The destination's ``started()`` signal cancels an acknowledgment that has not been
committed yet, and waits for one that has until it is delivered.
"""

from __future__ import annotations

import logging
import math
import re
from collections import deque
from collections.abc import Awaitable, Callable
from importlib import resources

import anyio

from edge.llm import LLMService, Priority

from ._types import AgentTurn, RoutingAid

log = logging.getLogger(__name__)

MAX_ACK_TOKENS = 24
"""Output-token budget of one acknowledgment."""
MAX_ACK_WORDS = 12
_SAMPLES = 5
_CONFIDENT_SAMPLES = 3


def _template(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


class FirstResponseTimes:
    """Recent first-response times per route, to predict a slow first answer.

    A prediction is confident when the last few samples were all slower than the delay:
    then the acknowledgment starts immediately instead of after the delay.
    """

    def __init__(self) -> None:
        self._samples: dict[str, deque[float]] = {}

    def record(self, route: str, seconds: float) -> None:
        self._samples.setdefault(route, deque(maxlen=_SAMPLES)).append(seconds)

    def samples(self, route: str) -> tuple[float, ...]:
        return tuple(self._samples.get(route, ()))

    def start_after(self, route: str, delay: float) -> float:
        recent = self.samples(route)
        if len(recent) >= _CONFIDENT_SAMPLES and min(recent[-_CONFIDENT_SAMPLES:]) > delay:
            return 0.0
        return delay


def validate_acknowledgment_config(llm: object, delay: float | None) -> None:
    if (llm is None) != (delay is None):
        raise ValueError(
            "acknowledgment_llm and RouterConfig.acknowledgment_delay_s must be given together"
        )
    if delay is not None:
        if not math.isfinite(delay) or delay <= 0:
            raise ValueError(f"acknowledgment_delay_s must be finite and positive, got {delay}")


class Acknowledger:
    """Makes acknowledgment lines with the configured model."""

    def __init__(self, llm: LLMService, delay_s: float) -> None:
        self.llm = llm
        self.delay_s = float(delay_s)
        self.times = FirstResponseTimes()
        self._system = _template("acknowledgment_system.txt").strip()
        self._user = _template("acknowledgment_user.txt").strip()

    def start_after(self, route: str) -> float:
        return self.times.start_after(route, self.delay_s)

    async def generate(self, turn: AgentTurn, route: str, aid: RoutingAid | None) -> str:
        description = aid.description if aid is not None else route
        messages = [
            {"role": "system", "content": self._system},
            {
                "role": "user",
                "content": self._user.format(
                    route=route, description=description, query=turn.query
                ),
            },
        ]
        response = await self.llm.chat(
            messages,
            max_tokens=MAX_ACK_TOKENS,
            temperature=0.2,
            stop=["\n"],
            priority=Priority.INTERACTIVE,
            cache_key="acknowledgments",
        )
        if response.finish_reason == "error":
            log.warning("acknowledgment failed: %s", response.error)
            return ""
        return clean_acknowledgment(response.content)


def clean_acknowledgment(text: str) -> str:
    """One short line: no reasoning tags, quotes or trailing fragments."""
    text = re.sub(r"<think>.*?(</think>|$)", "", text, flags=re.S).strip()
    line = text.splitlines()[0].strip().strip('"').strip() if text else ""
    words = line.split()
    if len(words) > MAX_ACK_WORDS:
        line = " ".join(words[:MAX_ACK_WORDS]).rstrip(",;:") + "..."
    return line


Emit = Callable[[str], Awaitable[None]]


class Acknowledgment:
    """The acknowledgment of one turn; run :meth:`run` in the turn's task group."""

    def __init__(
        self,
        acknowledger: Acknowledger,
        turn: AgentTurn,
        route: str,
        aid: RoutingAid | None,
        emit: Emit,
    ) -> None:
        self._ack = acknowledger
        self._turn = turn
        self._route = route
        self._aid = aid
        self._emit = emit
        self._pending = anyio.CancelScope()
        self._delivered = anyio.Event()
        self.committed = False
        self.text = ""

    async def run(self) -> None:
        try:
            with self._pending:
                await anyio.sleep(self._ack.start_after(self._route))
                text = await self._ack.generate(self._turn, self._route, self._aid)
                if text:
                    self.committed = True
                    self.text = text
            if self.committed:
                await self._emit(text)
        except Exception:
            log.exception("acknowledgment for turn %s failed", self._turn.turn_id)
        finally:
            self._delivered.set()

    def suppress(self) -> None:
        """Cancel the acknowledgment unless it is already committed."""
        if not self.committed:
            self._pending.cancel()

    async def settle(self) -> None:
        """Suppress a pending acknowledgment, or wait for a committed one's delivery."""
        self.suppress()
        if self.committed:
            await self._delivered.wait()
