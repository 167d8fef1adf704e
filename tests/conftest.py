"""Shared fixtures. Async tests use the anyio plugin on asyncio."""

from __future__ import annotations

import pytest

# Tests that share what one machine has only one of run one at a time when `make test`
# spreads the suite over workers (pytest-xdist, ``--dist loadgroup``): the real models'
# tests (each keeps the cores busy, and some time a spoken turn), and mDNS on loopback
# (a browser there sees every service advertised on it).
SERIAL_GROUPS = {"model": "model", "mdns": "mdns"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``model`` or ``mdns`` join one xdist group each (run in turn by one
    worker); tests marked ``gpu`` need CUDA (an NVIDIA GPU and the CUDA build of llama.cpp,
    ``make gpu-check``): skipped, saying why, everywhere else."""
    for item in items:
        for marker, group in SERIAL_GROUPS.items():
            if marker in item.keywords:
                item.add_marker(pytest.mark.xdist_group(group))
                break
    gpu = [item for item in items if "gpu" in item.keywords]
    if not gpu:
        return
    from edge.device import llama_gpu_offload

    if not llama_gpu_offload():
        skip = pytest.mark.skip(reason="needs CUDA: an NVIDIA GPU and `make gpu-check`")
        for item in gpu:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _data_dir_in_tmp(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Every test (and every ``edge`` process it starts) keeps service state in a temporary
    directory, never the user's data directory."""
    monkeypatch.setenv("EDGE_DATA_DIR", str(tmp_path_factory.mktemp("edge-data")))


@pytest.fixture(autouse=True)
def _client_config_in_tmp(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
):
    """Clients keep their pinned certificates in a temporary directory, never the user's."""
    monkeypatch.setenv("EDGE_CONFIG_DIR", str(tmp_path_factory.mktemp("edge-config")))


@pytest.fixture(autouse=True)
def _plain_by_default(monkeypatch: pytest.MonkeyPatch):
    """Services in tests serve plain ws:// unless a test asks for TLS (``tls=True``, or
    ``EDGE_TLS`` removed for the default ``edge serve`` runs); the TLS tests do."""
    monkeypatch.setenv("EDGE_TLS", "false")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def models():  # type: ignore[no-untyped-def]
    """The real default STT (Whisper tiny.en) and TTS (Piper joe), loaded once per test
    run and shared by every module that asks (they keep no state between calls).
    Piper speaks without its random variation, so a test hears the same audio every run
    (a randomly long pause after "Stop." once split a test's utterance in two)."""
    from edge.voice import PiperTTS, WhisperSTT

    stt, tts = WhisperSTT(), PiperTTS(noise_scale=0.0, noise_w_scale=0.0)
    stt.load()
    tts.load()
    return stt, tts


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Real ``wyoming-faster-whisper`` and ``wyoming-piper`` on 127.0.0.1 (one pair per
    test module that asks for them)."""
    from tests.remote_helpers import Servers

    with Servers(tmp_path_factory.mktemp("servers"), ("whisper", "piper")) as found:
        yield found


@pytest.fixture(scope="module")
def question(servers) -> bytes:  # type: ignore[no-untyped-def]
    """``remote_helpers.QUESTION`` spoken by the remote Piper (16 kHz PCM16)."""
    from tests.remote_helpers import QUESTION, spoken

    return spoken(servers.url("piper"), QUESTION)
