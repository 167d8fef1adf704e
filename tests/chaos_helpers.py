"""A room full of people for the chaos tests: four Piper voices talk to one service over
WebSocket, each doing at random (a fixed seed) what people in a lab do: ask hands-free,
barge in on a reply, hold to talk, dictate a note, drop the link mid-sentence and
resume, leave and come back. Each person records what they were promised (every
finished utterance answered or refused with an error) and what must not be lost (each
answered exchange, each dictated line); :func:`check_room` checks it afterwards."""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
import numpy as np
from websockets.exceptions import ConnectionClosed

from edge.server import AudioFormat, EdgeClient, EdgeService
from edge.voice import PiperTTS, float_to_pcm16, resample

RATE = 16_000
VOICES = ((1.0, 1.0), (0.85, 1.08), (1.15, 0.93), (1.0, 0.88))
"""Four voices from Piper's one: (length scale, pitch factor: the samples read at this
multiple of the voice's rate)."""
QUESTIONS = (
    "What is the capital of France?",
    "What do bees make?",
    "How many legs does a spider have?",
    "What is frozen water called?",
)
HOLD_PARTS = ("Tell me about the weather", "in the mountains today.")
NOTE_START = "Take a note. The rotor is worn."
NOTE_LINES = ("The belt is loose.", "Check the left pump.")
DONE = "Done."
TEXTS = (*QUESTIONS, *HOLD_PARTS, NOTE_START, *NOTE_LINES, DONE)
TURN_LIMIT_S = 60.0  # a turn's reply, on a loaded two-core machine
ACTIONS = ("ask", "ask", "barge", "hold", "dictate", "drop", "leave")


def record_voices(tts: PiperTTS) -> list[dict[str, bytes]]:
    """Each voice's recording of every text, 16 kHz PCM16 after 0.2 s of silence."""
    kept = tts.length_scale
    voices: list[dict[str, bytes]] = []
    try:
        for length_scale, pitch in VOICES:
            tts.length_scale = length_scale
            lines = {}
            for text in TEXTS:
                spoken = tts.synthesize(text)
                audio = resample(spoken.audio, int(spoken.sample_rate * pitch), RATE)
                lead = np.zeros(RATE // 5, np.float32)
                lines[text] = float_to_pcm16(np.concatenate([lead, audio]))
            voices.append(lines)
    finally:
        tts.length_scale = kept
    return voices


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


@dataclass
class Person:
    """One participant's random afternoon and what it was promised."""

    name: str
    voice: dict[str, bytes]
    rng: random.Random
    service: EdgeService
    client: EdgeClient | None = None
    token: str | None = None
    exchanges: list[str] = field(default_factory=list)  # heard queries that got a reply
    errors: list[str] = field(default_factory=list)  # finished utterances refused
    notes: list[tuple[list[str], bool]] = field(default_factory=list)  # (lines, saved)
    unanswered: list[str] = field(default_factory=list)  # finished, neither reply nor error
    ended: list[str] = field(default_factory=list)  # links the server closed on them
    actions: list[str] = field(default_factory=list)

    async def connect(self) -> EdgeClient:
        if self.client is None:
            client = EdgeClient(
                self.service.websocket_url,
                participant_id=self.name,
                audio=AudioFormat(sample_rate=RATE),
                want_audio=True,
                token=self.service.token,
                resume=self.token,
            )
            await client.__aenter__()
            assert client.welcome is not None
            if self.token is not None and not client.welcome.resumed:
                self.ended.append("a resume was not resumed")
            self.token = client.session_token
            self.client = client
        return self.client

    async def close(self, *, abort: bool = False) -> None:
        client, self.client = self.client, None
        if client is None or client.ws is None:
            return
        if abort:
            client.ws.transport.abort()  # the link drops: no close handshake
        else:
            await client.__aexit__(None, None, None)

    async def live(self, until: float) -> None:
        """Random actions until ``until`` (perf_counter); a link the server closed is
        recorded and the person comes back."""
        while time.perf_counter() < until:
            action = self.rng.choice(ACTIONS)
            self.actions.append(action)
            try:
                await getattr(self, action)()
            except ConnectionClosed as exc:
                self.ended.append(f"{action}: {exc!r}")
                self.client = None
            await anyio.sleep(self.rng.uniform(0.0, 0.3))
        await self.close()

    async def speak(self, text: str, tail_s: float = 1.0) -> None:
        client = await self.connect()
        await client.speak(self.voice[text], trailing_silence_s=tail_s, chunk_ms=100)

    async def turn(self, said: str) -> Any:
        """The reply to the utterance just finished: counted as an exchange, an error or
        (a failure of the check) neither."""
        assert self.client is not None
        try:
            result = await self.client.collect_turn(limit_s=TURN_LIMIT_S)
        except TimeoutError:
            self.unanswered.append(said)
            return None
        if result.request_id and result.text.strip():
            self.exchanges.append(result.query)
        elif result.errors:
            self.errors.append(f"{said}: {result.errors[0].message}")
        else:
            self.unanswered.append(said)
        return result

    async def ask(self) -> None:
        text = self.rng.choice(QUESTIONS)
        await self.speak(text)
        await self.turn(text)

    async def barge(self) -> None:
        """Ask, and ask again over the first reply's speech."""
        first, second = self.rng.sample(QUESTIONS, 2)
        await self.speak(first)
        client = self.client
        assert client is not None
        heard = False
        with anyio.move_on_after(TURN_LIMIT_S):
            while not heard:  # until the reply's speech plays (or the turn ends without)
                message, _ = await client.receive()
                heard = (message.type == "audio" and bool(message.bytes)) or (
                    message.type == "error"
                    or (message.type == "status" and message.state == "idle")
                )
        if not heard:
            self.unanswered.append(first)
        await self.speak(second)
        await self.turn(second)

    async def hold(self) -> None:
        """Push to talk with a long pause inside the utterance."""
        client = await self.connect()
        await client.hold()
        await self.speak(HOLD_PARTS[0], tail_s=1.2)
        await self.speak(HOLD_PARTS[1], tail_s=0.2)
        await client.end_of_utterance()
        await self.turn(" ".join(HOLD_PARTS))

    async def dictate(self) -> None:
        """A note of up to three lines, the link dropped mid-note at random."""
        lines: list[str] = []
        for text in (NOTE_START, *NOTE_LINES[: self.rng.randint(0, 2)], DONE):
            await self.speak(text)
            result = await self.turn(text)
            reply = result.text if result is not None else ""
            if text is NOTE_START and "taking a note" not in reply:
                return  # not heard as a note: an ordinary exchange
            if text is DONE:
                self.notes.append((lines, reply == "Note saved."))
                return
            if "taking a note" in reply or reply == "Got it.":
                lines.append(result.query)
            if self.rng.random() < 0.3:
                await self.close(abort=True)  # the draft is kept across the drop

    async def drop(self) -> None:
        """The link drops in the middle of a sentence (that utterance is unfinished)."""
        client = await self.connect()
        pcm = self.voice[self.rng.choice(QUESTIONS)]
        await client.speak(pcm[: len(pcm) // 2 // 2 * 2], trailing_silence_s=0.0)
        await self.close(abort=True)

    async def leave(self) -> None:
        await self.close()
        await anyio.sleep(self.rng.uniform(0.1, 0.6))


def rss_mb() -> float:
    """This process's resident memory (MB)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 1e6


def room(service: EdgeService, voices: list[dict[str, bytes]], seed: int) -> list[Person]:
    """Four people, each with their own voice and random choices from ``seed``."""
    return [
        Person(f"chaos-{k}", voices[k], random.Random(seed * 10 + k), service) for k in range(4)
    ]


async def run_room(people: list[Person], seconds: float) -> None:
    """Everyone lives their random life for ``seconds`` (then finishes what they do)."""
    until = time.perf_counter() + seconds
    async with anyio.create_task_group() as tg:
        for person in people:
            tg.start_soon(person.live, until)


async def history_of(person: Person) -> list[dict[str, Any]]:
    """Everything recorded for ``person`` (they resume to read it)."""
    client = await person.connect()
    entries: list[dict[str, Any]] = []
    while True:
        page = await client.history(offset=len(entries), limit=50)
        entries.extend(page.entries)
        if len(entries) >= page.total or not page.entries:
            break
    await person.close()
    return entries


async def check_room(people: list[Person]) -> dict[str, Any]:
    """The room's promises; returns a summary (raises AssertionError naming a broken one)."""
    for p in people:
        assert not p.unanswered, (
            f"{p.name}: utterances with neither reply nor error: {p.unanswered}"
        )
        assert not p.ended, f"{p.name}: links the service ended: {p.ended}"
        entries = await history_of(p)
        said = [e.get("user") for e in entries if e.get("kind") == "exchange"]
        for query in p.exchanges:
            assert query in said, f"{p.name}: exchange {query!r} lost from {said}"
        notes = " ".join(e.get("text", "") for e in entries if e.get("section") == "notes")
        for lines, saved in p.notes:
            for line in lines if saved else ():
                content = [w for w in words(line) if w not in ("take", "a", "note")]
                assert set(content) <= set(words(notes)), f"{p.name}: {line!r} not in {notes!r}"
    return {
        p.name: {
            "actions": len(p.actions),
            "exchanges": len(p.exchanges),
            "errors": len(p.errors),
            "notes": len(p.notes),
        }
        for p in people
    }
