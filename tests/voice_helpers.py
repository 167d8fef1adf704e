"""Fakes and helpers for the voice tests: an energy VAD, a tone-naming STT, a tone TTS."""

from __future__ import annotations

import difflib
import re
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import numpy as np

from edge.runtime import Agent, HandlerContext, Topic
from edge.server import EdgeService, ServiceSettings, SpeechParts
from edge.voice import Recognition, SimulatedSpeaker, Synthesis, VoiceConfig

RATE = 16_000


def tone(seconds: float, freq: float = 440.0, rate: int = RATE, level: float = 0.3) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (level * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def silence(seconds: float, rate: int = RATE) -> np.ndarray:
    return np.zeros(int(seconds * rate), dtype=np.float32)


async def wait_for(condition: Callable[[], object], limit: float = 5.0) -> None:
    """Poll ``condition`` until true; fail after ``limit`` seconds."""
    with anyio.fail_after(limit):
        while not condition():  # noqa: ASYNC110 - polling test helper
            await anyio.sleep(0.01)


class EnergyVAD:
    """Probability 1 for a 512-sample window with RMS above 0.01, else 0."""

    window = 512

    def __init__(self) -> None:
        self._pending = np.zeros(0, dtype=np.float32)

    def process(self, audio: np.ndarray) -> np.ndarray:
        audio = np.concatenate([self._pending, audio])
        n = len(audio) // self.window
        self._pending = audio[n * self.window :]
        frames = audio[: n * self.window].reshape(n, self.window)
        return (np.sqrt((frames**2).mean(axis=1)) > 0.01).astype(np.float32)


class ToneSTT:
    """ "Recognizes" the dominant frequency of the audio's loud part: ``"tone 440"``."""

    sample_rate = RATE

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.calls: list[float] = []  # audio seconds of each call

    def transcribe(self, audio: np.ndarray) -> Recognition:
        self.calls.append(len(audio) / RATE)
        time.sleep(self.delay_s)
        loud = audio[np.abs(audio) > 0.05]
        if len(loud) < RATE // 20:
            return Recognition("", len(audio) / RATE, self.delay_s)
        spectrum = np.abs(np.fft.rfft(audio))
        freq = np.argmax(spectrum) * RATE / len(audio)
        return Recognition(f"tone {round(freq / 10) * 10}", len(audio) / RATE, self.delay_s)


class ToneTTS:
    """0.1 s of tone per word, at 16 kHz."""

    sample_rate = RATE

    def __init__(self) -> None:
        self.spoken: list[str] = []

    def synthesize(self, text: str) -> Synthesis:
        self.spoken.append(text)
        words = max(1, len(text.split()))
        return Synthesis(tone(0.1 * words, 300.0), RATE, 0.0)


class Recorder(Agent):
    """Records every message of the given topics with its metadata."""

    def __init__(self, *topics: Topic[Any]) -> None:
        super().__init__()
        self.seen: dict[str, list[tuple[Any, Any, float]]] = defaultdict(list)
        for topic in topics:
            self.add_handler(topic, self._make(topic.name))

    def _make(self, name: str):  # type: ignore[no-untyped-def]
        async def record(message: Any, ctx: HandlerContext) -> None:
            self.seen[name].append((message, ctx.metadata, time.perf_counter()))

        return record

    def messages(self, topic: Topic[Any]) -> list[Any]:
        return [m for m, _, _ in self.seen[topic.name]]


@asynccontextmanager
async def spoken_service(
    llm: Any,
    *,
    stt: Any,
    tts: Any,
    config: VoiceConfig,
    vad_factory: Any = None,
    participant: str = "p1",
    recorder: Recorder | None = None,
    preload: bool = False,
) -> AsyncIterator[tuple[EdgeService, SimulatedSpeaker]]:
    """The whole service in process (no sockets, no notes destination) with a
    :class:`SimulatedSpeaker` for ``participant`` that wants spoken replies."""
    settings = ServiceSettings(host="127.0.0.1", port=0, wyoming_port=None, mdns=False, notes=False)
    service = EdgeService(
        settings,
        llm=llm,
        speech=SpeechParts(stt=stt, tts=tts, config=config, vad_factory=vad_factory),
    )
    client = SimulatedSpeaker(participant)
    service.runtime.register("client", client)
    if recorder is not None:
        service.runtime.register("recorder", recorder)
    service.hub.attach(participant, client)
    await service.start(preload=preload, listen=False)
    try:
        yield service, client
    finally:
        await service.stop()


def audio_after_interruption(rec: Recorder, request_id: str) -> list[Any]:
    """Audio chunks of ``request_id`` published after the first ``Interrupted``.

    Order, not time: ``publish`` awaits its handlers, so the recorder sees every message
    as it is published, and this list is exact however slow the machine is."""
    from edge.interaction import INTERRUPTED_TOPIC
    from edge.voice import AUDIO_OUTPUT_TOPIC

    published = sorted(
        [(at, 0, None) for _, _, at in rec.seen[INTERRUPTED_TOPIC.name]]
        + [(at, 1, m) for m, _, at in rec.seen[AUDIO_OUTPUT_TOPIC.name]],
        key=lambda e: (e[0], e[1]),
    )
    kinds = [kind for _, kind, _ in published]
    after = published[kinds.index(0) + 1 :]
    return [m for _, kind, m in after if kind == 1 and m.request_id == request_id]


__all__ = [
    "EnergyVAD",
    "Recorder",
    "ToneSTT",
    "ToneTTS",
    "audio_after_interruption",
    "silence",
    "spoken_service",
    "tone",
    "wait_for",
]


def words(text: str) -> list[str]:
    """Lower-case words without punctuation, to compare transcripts."""
    return re.sub(r"[^a-z0-9 ]", " ", text.lower()).split()


def heard_as(heard: str, said: str, slack: int = 1) -> bool:
    """Whisper heard what Piper said, give or take ``slack`` words: a short function word
    ("in"/"and") can come out differently on another CPU, the sentence may not."""
    a, b = words(heard), words(said)
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    same = sum(block.size for block in matcher.get_matching_blocks())
    return max(len(a), len(b)) - same <= slack
