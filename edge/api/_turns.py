"""Who is talking: an API request's answer, stateless or as a participant's turn.

* **Stateless** (no participant named): the client's own messages are answered as they
  are, nothing recorded (:mod:`edge.api._stateless`).
* **A participant** (``user``, ``X-Edge-Participant``, a Realtime session): the participant
  ``api:<name>`` (the colon is outside the WebSocket id rule, so only the API reaches them)
  joins at its first request and stays (context loaded) until idle for ``idle_s``. Its
  newest user message is a turn through the gateway and the router, like a typed
  WebSocket turn: its context, routing and memory, and the exchange recorded. Its turns
  run one at a time; the reply streams as the hub delivers it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import anyio

from edge.server import (
    BACKEND_FAILED,
    PARTICIPANT_ID_RULE,
    ROUTER_SOURCE,
    TOO_LONG,
    ClientError,
    ErrorMessage,
    Gateway,
    ParticipantTaken,
    Reply,
    ServerMessage,
    Status,
    check_participant_id,
)

from ._errors import ApiError

SOURCE = "api"
PREFIX = "api:"
TURN_LIMIT_S = 120.0  # a participant's turn (and the wait for the one before it)


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_eval_s: float | None = None  # the prompt's evaluation (None: not measured)
    generation_s: float | None = None  # first token to last

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class Answer:
    """One request's answer: ``pieces`` streams the text; ``usage`` and ``finish_reason``
    are complete once it has ended."""

    pieces: AsyncIterator[str]
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = "stop"
    participant: str | None = None


def participant_id(name: str) -> str:
    """``api:<name>``; a name outside the participant id rule is refused (never
    normalised: two names never share one history)."""
    try:
        check_participant_id(name)
    except ValueError:
        message = f"a participant name (user) must be {PARTICIPANT_ID_RULE}"
        raise ApiError(400, message, param="user") from None
    return PREFIX + name


class TurnFeed:
    """A participant turn's reply frames as the hub delivers them, until ``idle``."""

    def __init__(self) -> None:
        self.frames: list[Reply] = []
        self.idle = False
        self.error: ErrorMessage | None = None
        self.turn_id: str | None = None
        self._changed = anyio.Event()

    def push(self, message: ServerMessage) -> None:
        if isinstance(message, Reply):
            self.frames.append(message)
        elif isinstance(message, Status) and message.state == "idle":
            self.idle = True
        elif isinstance(message, ErrorMessage) and message.code in (BACKEND_FAILED, TOO_LONG):
            self.error = message
        else:
            return
        self._changed.set()
        self._changed = anyio.Event()

    async def pieces(self, turn_id: str, deadline: float) -> AsyncIterator[str]:
        """The turn's text, piece by piece, until it is idle (or ``deadline`` passes)."""
        seen, started = 0, False
        while True:
            changed = self._changed
            new, seen = self.frames[seen:], len(self.frames)
            for frame in new:
                if frame.request_id != turn_id or not frame.text:
                    continue
                piece = frame.text.strip() + " " if frame.source == ROUTER_SOURCE else frame.text
                piece = piece if started else piece.lstrip()
                if piece:
                    started = True
                    yield piece
            if self.idle or anyio.current_time() >= deadline:
                return
            with anyio.move_on_after(deadline - anyio.current_time()):
                await changed.wait()


class Member:
    """One API participant as the hub sees it (a sink), with its turn lock."""

    wants_audio = False

    def __init__(self, pid: str, now: float) -> None:
        self.pid = pid
        self.lock = anyio.Semaphore(1)  # not a Lock: a turn's stream moves between tasks
        self.feed = TurnFeed()
        self.last_used = now
        self.joined = False

    def deliver(self, message: ServerMessage, payload: bytes | None = None) -> None:
        self.feed.push(message)


class Participants:
    """The API's participants; see the module docstring."""

    def __init__(
        self,
        gateway: Gateway,
        *,
        idle_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.gateway = gateway
        self.idle_s = idle_s
        self._clock = clock
        self._members: dict[str, Member] = {}
        self._expiry: asyncio.Task[None] | None = None

    def active(self) -> list[str]:
        return list(self._members)

    def answer(self, name: str, text: str, count: Callable[[str], int] | None = None) -> Answer:
        pid = participant_id(name)
        answer = Answer(pieces=_empty(), participant=pid)
        answer.pieces = self._turn(pid, text, answer, count)
        return answer

    def _watch(self) -> None:
        """Idle participants leave even when no request comes: a task looks while any
        API participant is joined."""
        if self._expiry is None or self._expiry.done():
            self._expiry = asyncio.get_running_loop().create_task(self._expire_while_joined())

    async def _expire_while_joined(self) -> None:
        while self._members:
            await anyio.sleep(max(0.05, min(30.0, self.idle_s / 4)))
            await self.expire()

    async def _turn(
        self, pid: str, text: str, answer: Answer, count: Callable[[str], int] | None
    ) -> AsyncIterator[str]:
        await self.expire()
        self._watch()
        member = await self._member(pid)
        try:
            await self._join(member)
            member.feed = feed = TurnFeed()
            try:
                turn_id = await self.gateway.query(pid, text, SOURCE)
            except ClientError as exc:
                raise ApiError(400, str(exc), param="messages") from None
            reply = ""
            try:
                async for piece in feed.pieces(turn_id, anyio.current_time() + TURN_LIMIT_S):
                    reply += piece
                    yield piece
            finally:
                if not feed.idle:  # the client left (or the turn ran too long): stop it
                    with anyio.CancelScope(shield=True):
                        await self.gateway.interrupt(pid, turn_id, SOURCE)
            if feed.error is not None and not reply:
                raise ApiError(
                    503 if feed.error.code == BACKEND_FAILED else 400, feed.error.message
                )
            if count is not None:
                answer.usage = Usage(count(text), count(reply))
        finally:
            member.last_used = self._clock()
            member.lock.release()

    async def _member(self, pid: str) -> Member:
        """The participant's member, its turn lock held (a member that left meanwhile is
        replaced by a new one)."""
        while True:
            member = self._members.get(pid) or self._members.setdefault(
                pid, Member(pid, self._clock())
            )
            with anyio.fail_after(TURN_LIMIT_S):
                await member.lock.acquire()
            if self._members.get(pid) is member:
                return member
            member.lock.release()

    async def _join(self, member: Member) -> None:
        if member.joined:
            return
        try:  # a departure still being published is waited for
            await self.gateway.hub.arrive(member.pid, member)
        except ParticipantTaken as exc:
            raise ApiError(409, f"{exc} (in a Realtime session)", param="user") from None
        try:
            await self.gateway.join(member.pid, "API client", SOURCE)
        except BaseException:
            self.gateway.hub.detach(member.pid, member)
            raise
        member.joined = True

    async def expire(self) -> list[str]:
        """Participants idle for ``idle_s`` leave (their context is suspended, as for a
        WebSocket participant who left)."""
        now = self._clock()
        idle = [m for m in self._members.values() if now - m.last_used >= self.idle_s]
        return [m.pid for m in idle if await self._leave(m, "idle")]

    async def _leave(self, member: Member, reason: str) -> bool:
        """The member leaves unless a turn of theirs runs; its lock is held meanwhile, so a
        new request waits, then joins anew."""
        try:
            member.lock.acquire_nowait()
        except anyio.WouldBlock:
            return False
        try:
            if self._members.get(member.pid) is not member:
                return False
            del self._members[member.pid]
            if member.joined:
                async with self.gateway.hub.departure(member.pid, member):
                    await self.gateway.leave(member.pid, reason, SOURCE)
            return True
        finally:
            member.lock.release()

    async def release(self, pid: str) -> None:
        """The participant leaves the API now unless a turn of theirs is running (a
        Realtime session of theirs is starting)."""
        member = self._members.get(pid)
        if member is not None:
            await self._leave(member, "moved to a Realtime session")

    async def close(self) -> None:
        """Every API participant leaves (the service is stopping)."""
        if self._expiry is not None:
            self._expiry.cancel()
        for member in list(self._members.values()):
            if not await self._leave(member, "server stopping") and member.joined:
                self._members.pop(member.pid, None)  # a turn still running: it ends now
                async with self.gateway.hub.departure(member.pid, member):
                    await self.gateway.leave(member.pid, "server stopping", SOURCE)


async def _empty() -> AsyncIterator[str]:
    return
    yield  # pragma: no cover
