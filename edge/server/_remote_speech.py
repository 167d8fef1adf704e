"""The service's models behind servers: remote speech over Wyoming, found over mDNS with
``auto``, and what ``/health`` and the banner say about each backend.

:class:`Backends` is built from the settings before the voice pipeline: it makes the
:class:`~edge.voice.WyomingSTT` / :class:`~edge.voice.WyomingTTS` (wrapped with the local
model for ``--fallback local``), resolves ``auto`` at start (a ``_wyoming._tcp`` server on
the LAN whose ``info`` offers what is needed, never an xr-edge service, which answers with
its whole agent), and reports every backend (``stt``, ``tts``, ``llm``): where it runs,
its state (``ok``, ``degraded``, ``down``), its last error and its latency p50. A remote
LLM (``--llm-url``) is asked for its models every :data:`LLM_PROBE_S` seconds while the
service runs, so its state is known without waiting for a turn to fail.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio

from edge.voice import (
    DEGRADED_FOR_S,
    FallbackSTT,
    FallbackTTS,
    RemoteBackend,
    RemoteSpeechError,
    WyomingSTT,
    WyomingTTS,
    pick_asr,
    pick_voice,
)

from ._mdns import WYOMING_SERVICE, discover
from ._settings import ServiceSettings

log = logging.getLogger(__name__)

LANGUAGE = "en"
LLM_PROBE_S = 10.0
DISCOVERY_WAIT_S = 3.0
DISCOVERY_SETTLE_S = 2.0
"""Browsing goes on this long after the first server answers: the others answer the
browser's next queries (a first answer sent unicast can reach another socket on port
5353 of this machine instead)."""
_EDGE_TXT = (b"protocol", b"path")  # what an xr-edge service's records carry


class NoSpeechServerFound(RuntimeError):
    """``auto`` found no Wyoming server offering what is needed."""


class LlmProbe:
    """A remote LLM's state from its model list (``GET /models``), asked periodically."""

    def __init__(self, llm: Any, url: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.llm = llm
        self.url = url
        self.state = "unknown"
        self.last_error: str | None = None
        self._latencies: deque[float] = deque(maxlen=50)
        self._clock = clock
        self._failed_at: float | None = None

    async def probe(self) -> None:
        started = time.perf_counter()
        try:
            health = await self.llm.health()
        except Exception as exc:  # health() never raises by contract; a bug still must not
            health = None
            detail = str(exc) or type(exc).__name__
        if health is not None and health.ok:
            self._latencies.append(time.perf_counter() - started)
            recent = self._failed_at is not None and (
                self._clock() - self._failed_at < DEGRADED_FOR_S
            )
            self.state = "degraded" if recent else "ok"
            return
        self.state = "down"
        self._failed_at = self._clock()
        self.last_error = health.detail if health is not None else detail

    async def run(self, every_s: float = LLM_PROBE_S) -> None:
        while True:
            await anyio.sleep(every_s)
            await self.probe()

    def health(self) -> dict[str, Any]:
        p50 = statistics.median(self._latencies) * 1000 if self._latencies else None
        return {
            "where": "remote",
            "url": self.url,
            "state": self.state,
            "last_error": self.last_error,
            "latency_p50_ms": round(p50, 1) if p50 is not None else None,
        }


class Backends:
    """Where each model runs and how it is doing; see the module docstring."""

    def __init__(self, settings: ServiceSettings, instance_name: str = "") -> None:
        self.settings = settings
        self.instance_name = instance_name
        self.stt: WyomingSTT | None = None
        self.tts: WyomingTTS | None = None
        self.llm: LlmProbe | None = None
        self.chosen: dict[str, str] = {}  # role -> how auto chose
        self._pipeline: Any = None

    # -- construction ---------------------------------------------------------------------

    def speech_models(
        self, local_stt: Callable[[], Any], local_tts: Callable[[], Any]
    ) -> tuple[Any, Any]:
        """(stt, tts) for the voice pipeline: remote where a URL is set, else None (the
        service makes its local model); ``fallback local`` puts the local one behind."""
        s = self.settings
        stt = tts = None
        if s.stt_url:
            self.stt = WyomingSTT(self._backend("stt", s.stt_url), language=LANGUAGE)
            stt = FallbackSTT(self.stt, local_stt()) if s.fallback == "local" else self.stt
        if s.tts_url:
            backend = self._backend("tts", s.tts_url)
            self.tts = WyomingTTS(backend, voice=s.tts_voice, language=LANGUAGE)
            tts = FallbackTTS(self.tts, local_tts()) if s.fallback == "local" else self.tts
        return stt, tts

    def _backend(self, role: str, url: str) -> RemoteBackend:
        target = None if url == "auto" else url
        return RemoteBackend(role, target, timeout_s=self.settings.remote_timeout_s)

    def watch(self, pipeline: Any, llm: Any) -> None:
        """The voice pipeline (for its pass cost) and the LLM (probed when remote)."""
        self._pipeline = pipeline
        if self.settings.llm_url:
            self.llm = LlmProbe(llm, self.settings.llm_url)

    # -- start ------------------------------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Resolve ``auto`` (mDNS), then probe a remote LLM until the block ends."""
        await self.resolve()
        if self.llm is None:
            yield
            return
        await self.llm.probe()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.llm.run)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()

    async def resolve(self) -> None:
        """Find the servers of the roles set to ``auto`` over mDNS."""
        for role, model in (("stt", self.stt), ("tts", self.tts)):
            if model is not None and model.backend.url is None:
                try:
                    url, why = await self.discover(role)
                except NoSpeechServerFound as exc:
                    if self.settings.fallback != "local":
                        raise
                    self.chosen[role] = f"{exc}; the local model answers"
                    log.warning("%s", self.chosen[role])
                    continue
                model.backend.retarget(url)
                self.chosen[role] = why
                log.info("%s: %s", role, why)

    async def discover(self, role: str) -> tuple[str, str]:
        """A Wyoming server found over mDNS for ``role``: (its URL, why it was chosen)."""
        s = self.settings
        infos = await discover(
            WYOMING_SERVICE,
            interfaces=s.mdns_interfaces,
            wait_s=DISCOVERY_WAIT_S,
            settle_s=DISCOVERY_SETTLE_S,
        )
        candidates = [(i.name, _address(i)) for i in infos if not self._ours(i)]
        fits: list[tuple[float, str, str]] = []
        for name, url in candidates:
            if url is None:
                continue
            offer = await anyio.to_thread.run_sync(self._offer, role, url)
            if offer is not None:
                fits.append((offer[0], url, f"{url} ({name}: {offer[1]})"))
        if not fits:
            seen = ", ".join(name for name, _ in candidates) or "none"
            raise NoSpeechServerFound(
                f"--{role}-url auto: no Wyoming {_kind(role)} server in {LANGUAGE!r} found "
                f"over mDNS in {DISCOVERY_WAIT_S:g} s (servers seen: {seen})"
            )
        _, url, why = min(fits)
        return url, f"found over mDNS: {why}"

    def _ours(self, info: Any) -> bool:
        props = info.properties or {}
        own = self.instance_name and info.name.startswith(self.instance_name)
        return bool(own) or all(key in props for key in _EDGE_TXT)

    def _offer(self, role: str, url: str) -> tuple[float, str] | None:
        """(rank, what it offers) when the server at ``url`` fits ``role``; lower first."""
        backend = RemoteBackend(role, url, timeout_s=min(3.0, self.settings.remote_timeout_s))
        started = time.perf_counter()
        try:
            info = backend.describe()
        except RemoteSpeechError as exc:
            log.info("mDNS: %s does not answer describe: %s", url, exc)
            return None
        latency = time.perf_counter() - started
        if role == "stt":
            found = pick_asr(info, LANGUAGE)
            if found is None:
                return None
            program, model = found
            streams = program.supports_transcript_streaming
            return latency - (1.0 if streams else 0.0), f"asr {program.name}, model {model}"
        voice = pick_voice(info, self.settings.tts_voice, LANGUAGE)
        if voice is None:
            return None
        streams = voice[1]
        return latency - (1.0 if streams else 0.0), f"tts voice {voice[0].name}"

    # -- reporting ------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """Each backend for ``/health``."""
        stt = self._speech_health(self.stt) if self.stt else {"where": "in process"}
        if self._pipeline is not None:
            stt["transcripts"] = self.transcripts()
        tts = self._speech_health(self.tts) if self.tts else {"where": "in process"}
        llm = self.llm.health() if self.llm is not None else {"where": "in process"}
        return {"stt": stt, "tts": tts, "llm": llm}

    def _speech_health(self, model: WyomingSTT | WyomingTTS) -> dict[str, Any]:
        entry: dict[str, Any] = {"where": "remote", **model.backend.health()}
        entry["serves"] = model.description
        if isinstance(model, WyomingSTT):
            entry["streams_transcripts"] = model.streams_transcripts
        else:
            entry["streams_synthesis"] = model.streams_synthesis
        if self.settings.fallback == "local":
            entry["fallback"] = "local"
        if model.backend.role in self.chosen:
            entry["chosen"] = self.chosen[model.backend.role]
        return entry

    def transcripts(self) -> str:
        """``partial and final``: streamed by a server that has streamed transcript
        chunks while an utterance was spoken, or while a pass is short enough for
        partials (the listener's own rule); else ``final only`` (speculation still runs
        at a pause)."""
        if self.stt is not None and self.stt.partials_streamed:
            return "partial (streamed by the server) and final"
        pipeline = self._pipeline
        config = pipeline.config
        cost = pipeline.stt_cost.seconds
        budget = min(config.partial_interval_s, config.vad.end_silence_ms / 1000)
        if config.partial_interval_s > 0 and cost <= budget:
            return "partial and final"
        return f"final only (a pass takes {cost * 1000:.0f} ms)"

    def banner(self) -> dict[str, str]:
        """One line per backend for ``edge serve``'s banner."""
        lines: dict[str, str] = {}
        for role, entry in self.health().items():
            if entry["where"] != "remote":
                lines[f"{role} backend"] = "in process"
                continue
            text = f"{entry.get('serves') or entry['url']}: {entry['state']}"
            if entry.get("transcripts"):
                text += f"; transcripts {entry['transcripts']}"
            if entry.get("chosen"):
                text += f"; {entry['chosen']}"
            if entry.get("fallback"):
                text += "; local fallback"
            lines[f"{role} backend"] = text
        return lines

    def any_down(self) -> bool:
        return any(entry.get("state") == "down" for entry in self.health().values())


def profile_remotes(settings: ServiceSettings, remote: Any) -> ServiceSettings:
    """``settings`` with the profile's ``[remote]`` entries where no setting is given."""
    given = {k: v for k, v in remote.model_dump().items() if v is not None}
    update = {k: v for k, v in given.items() if getattr(settings, k) is None}
    return settings.model_copy(update=update) if update else settings


def _kind(role: str) -> str:
    return "asr" if role == "stt" else "tts"


def _address(info: Any) -> str | None:
    addresses: Sequence[str] = info.parsed_addresses()
    ipv4 = [a for a in addresses if ":" not in a]
    return f"tcp://{ipv4[0]}:{info.port}" if ipv4 and info.port else None
