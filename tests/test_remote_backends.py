"""Remote backends without models: addresses, the back-off and health of a backend, a
server answering garbage or stalling (raw sockets on 127.0.0.1), the error frames naming
a failed backend, and the speaker going on after the plan's head is spoken."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import anyio
import numpy as np
import pydantic
import pytest

from edge.catalogue import REPO_ROOT
from edge.device import ProfileError
from edge.interaction import ResponseOutput
from edge.llm import LLMHealth, ScriptedLLM
from edge.server import EdgeService, ServiceSettings
from edge.server._remote_speech import LlmProbe
from edge.voice import (
    AudioOutput,
    RemoteBackend,
    RemoteSpeechError,
    Speaker,
    VoiceConfig,
    WyomingSTT,
    WyomingTTS,
    parse_wyoming_url,
)
from tests.server_helpers import answer_for, settings
from tests.voice_helpers import ToneTTS

pytestmark = pytest.mark.anyio


class RawServer:
    """A TCP server on 127.0.0.1 that answers every connection with ``reply`` (bytes),
    or with nothing at all (``reply`` None: it reads and stalls)."""

    def __init__(self, reply: bytes | None) -> None:
        self.reply = reply
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"tcp://127.0.0.1:{self.port}"
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        held: list[socket.socket] = []
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.connections += 1
            held.append(conn)
            if self.reply is not None:
                conn.sendall(self.reply)
                conn.close()
        for conn in held:
            conn.close()

    def __enter__(self) -> RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def closed_port() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    yield f"tcp://127.0.0.1:{port}"


def test_a_wyoming_address_is_tcp_host_port() -> None:
    assert parse_wyoming_url("tcp://gpu-box:10300") == ("gpu-box", 10300)
    for bad in ("http://gpu-box:10300", "tcp://gpu-box", "gpu-box:10300", "tcp://:1"):
        with pytest.raises(ValueError, match="give tcp://HOST:PORT"):
            parse_wyoming_url(bad)
    assert ServiceSettings(stt_url="auto", tts_url=" tcp://h:1 ").tts_url == "tcp://h:1"
    with pytest.raises(pydantic.ValidationError, match="not a Wyoming address"):
        ServiceSettings(stt_url="http://h:1")
    with pytest.raises(pydantic.ValidationError):
        ServiceSettings(fallback="remote")


def test_a_backend_down_fails_fast_during_its_back_off_then_tries_again(closed_port) -> None:
    now = [100.0]
    backend = RemoteBackend("stt", closed_port, timeout_s=2, clock=lambda: now[0])
    stt = WyomingSTT(backend)
    speech = np.ones(16_000, np.float32) * 0.1
    stt.load()  # down at start: a warning, not an error
    assert backend.health()["state"] == "down" and backend.health()["retry_in_s"] == 0.5
    with pytest.raises(RemoteSpeechError, match=r"is down .* tried again in 0.5 s"):
        stt.transcribe(speech)
    assert backend.requests == 1  # the fast failure asked nothing
    now[0] += 0.5
    with pytest.raises(RemoteSpeechError, match="speech recognition .* connection refused"):
        stt.transcribe(speech)  # tried again (its info first): refused
    assert backend.requests == 2 and backend.health()["retry_in_s"] == 1.0  # doubled
    now[0] += 1.0
    with pytest.raises(RemoteSpeechError, match="connection refused"):
        stt.transcribe(speech)
    assert backend.requests == 3 and backend.errors == 3
    now[0] += 2.0 - 0.003  # 3 ms of the back-off left: /health still shows it, not 0
    assert backend.health()["retry_in_s"] == 0.01
    with pytest.raises(RemoteSpeechError, match=r"tried again in 0.1 s"):
        stt.transcribe(speech)


def test_a_server_answering_garbage_is_a_named_error() -> None:
    with RawServer(b"this is not a wyoming event\n") as server:
        backend = RemoteBackend("tts", server.url, timeout_s=2)
        with pytest.raises(RemoteSpeechError, match="speech synthesis .* not a Wyoming event"):
            WyomingTTS(backend)._check()
        health = backend.health()
        assert health["state"] == "down" and "not a Wyoming event" in health["last_error"]
    wrong = b'{"type": "info", "data": {"asr": "not a list"}}\n'
    with RawServer(wrong) as server:
        backend = RemoteBackend("stt", server.url, timeout_s=2)
        with pytest.raises(RemoteSpeechError, match="speech recognition .* failed: "):
            WyomingSTT(backend)._check()


def test_a_stalled_server_hits_the_timeout() -> None:
    with RawServer(None) as server:
        backend = RemoteBackend("stt", server.url, timeout_s=0.5)
        started = time.perf_counter()
        with pytest.raises(RemoteSpeechError, match=r"no answer within 0.5 s \(stalled\)"):
            backend.describe()
        assert time.perf_counter() - started < 3


async def test_the_speaker_goes_on_after_the_sentences_in_reach_are_spoken() -> None:
    """A whole reply arrives at once, synthesis is quick and playback paced: once the
    sentences within the look-ahead are spoken, the next ones must still be synthesized
    (the player's progress wakes the synthesizer; the reply's frames no longer do)."""
    chunks: list[AudioOutput] = []

    async def publish(chunk: AudioOutput, correlation_id: str | None) -> None:
        chunks.append(chunk)

    config = VoiceConfig(playback_speed=8.0, tts_lookahead=1, chunk_ms=20, playback_lead_s=0)
    speaker = Speaker("p1", config, ToneTTS(), anyio.CapacityLimiter(1), publish)
    text = " ".join(f"Sentence {n} is short." for n in range(5))
    async with anyio.create_task_group() as tg:
        await tg.start(speaker.run)
        speaker.on_output(ResponseOutput(text=text, request_id="r1", final=True, source="c"))
        for _ in range(250):  # 5 s
            if chunks and chunks[-1].final:
                break
            await anyio.sleep(0.02)
        tg.cancel_scope.cancel()
    spoken = [c.text for c in chunks if c.text]
    assert len(spoken) == 5, spoken


def test_a_profile_names_remote_models_and_the_settings_win(tmp_path) -> None:  # type: ignore[no-untyped-def]
    shipped = (REPO_ROOT / "firmware-config" / "ci-2core-24gb.toml").read_text()
    lab = tmp_path / "lab-box.toml"
    lab.write_text(
        shipped.replace('name = "ci-2core-24gb"', 'name = "lab-box"')
        + '\n[remote]\nstt_url = "tcp://gpu-box:10300"\ntts_url = "auto"\n'
    )
    service = EdgeService(
        settings(voice=True, profile=str(lab), tts_url="tcp://other:10200"),
        llm=ScriptedLLM(answer_for),
    )
    assert service.settings.stt_url == "tcp://gpu-box:10300"  # from the profile
    assert service.settings.tts_url == "tcp://other:10200"  # the setting wins
    assert service.models["stt"] == "Wyoming tcp://gpu-box:10300"
    assert service.backends.stt is not None and service.backends.tts is not None
    bad = tmp_path / "bad-box.toml"
    bad.write_text(shipped.replace('"ci-2core-24gb"', '"bad-box"') + '\n[remote]\nstt_url = "x"\n')
    with pytest.raises(ProfileError, match="remote.stt_url"):
        EdgeService(settings(voice=True, profile=str(bad)), llm=ScriptedLLM(answer_for))


async def test_the_remote_llm_probe_shows_down_then_degraded_then_ok() -> None:
    class Flaky:
        ok = False

        async def health(self) -> LLMHealth:
            return LLMHealth(self.ok, "openai", "m", "" if self.ok else "connection refused")

    now = [0.0]
    llm = Flaky()
    probe = LlmProbe(llm, "http://gpu-box:8000/v1", clock=lambda: now[0])
    await probe.probe()
    assert probe.health()["state"] == "down"
    assert probe.health()["last_error"] == "connection refused"
    llm.ok = True
    await probe.probe()
    assert probe.health()["state"] == "degraded" and probe.health()["latency_p50_ms"] >= 0
    now[0] += 61
    await probe.probe()
    assert probe.health()["state"] == "ok"
