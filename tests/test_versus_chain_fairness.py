"""The chain in ``benchmarks/versus_chain.py`` runs as Home Assistant users run it, and with
what our own path uses: a handicap given to the chain cannot come back unnoticed.

Home Assistant's Whisper add-on ships beam size 1, int8 and English; our path decodes with the
profile's beam and compute type. Every thread setting of the chain is the machine's cores, and
so is our LLM's; our Whisper's is the profile's ``stt_threads`` (``benchmarks/stt_window.py``
measures both windows on one thread and on two), which the results record.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import pytest

from edge.decisions import ScriptedDecisions
from edge.device import load_device_config
from edge.llm import ScriptedLLM
from edge.server import EdgeClient, EdgeService
from tests.server_helpers import settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import chain_paths  # noqa: E402
import chain_services  # noqa: E402


def flag(argv: list[str], name: str) -> str:
    assert name in argv, f"the chain's command line has no {name}: {argv}"
    return argv[argv.index(name) + 1]


def our_path() -> EdgeService:
    """``edge serve``'s voice path on this machine's profile (models not loaded)."""
    return EdgeService(
        settings(voice=True),
        llm=ScriptedLLM(),
        decisions=ScriptedDecisions(default="x"),
        device=load_device_config(),
    )


def test_the_chains_whisper_decodes_as_the_addon_and_as_our_path(tmp_path: Path) -> None:
    argv = chain_services.chain_argv("python", {"whisper": 1, "llama": 2, "piper": 3}, tmp_path)
    whisper = argv["whisper"]
    stt = our_path().voice.stt
    addon = chain_services.ADDON_WHISPER
    assert int(flag(whisper, "--beam-size")) == addon["beam_size"] == stt.beam_size
    assert flag(whisper, "--compute-type") == addon["compute_type"] == stt.compute_type
    assert flag(whisper, "--language") == addon["language"] == stt.language


def test_every_thread_setting_of_the_chain_is_the_cores(tmp_path: Path) -> None:
    argv = chain_services.chain_argv("python", {"whisper": 1, "llama": 2, "piper": 3}, tmp_path)
    cores = chain_services.cores()
    assert int(flag(argv["whisper"], "--cpu-threads")) == cores
    assert int(flag(argv["llama"], "--n_threads")) == cores
    assert int(flag(argv["llama"], "--n_threads_batch")) == cores
    service = our_path()
    assert service.device is not None and service.device.threads == cores


def test_our_whisper_runs_on_the_profiles_stt_threads_as_the_results_record() -> None:
    import versus_chain

    service = our_path()
    assert service.device is not None
    wanted = service.device.profile.audio.stt_threads or service.device.threads
    assert service.voice.stt.cpu_threads == min(wanted, service.device.threads)
    assert versus_chain.our_settings()["whisper"]["cpu_threads"] == service.voice.stt.cpu_threads


def test_the_chains_settings_are_what_its_command_lines_say(tmp_path: Path) -> None:
    cfg = chain_services.chain_settings()
    argv = chain_services.chain_argv("python", {"whisper": 1, "llama": 2, "piper": 3}, tmp_path)
    assert flag(argv["whisper"], "--model") == cfg["whisper"]["model"]
    assert flag(argv["llama"], "--model") == cfg["llama"]["model"]
    assert "--no-streaming" not in argv["piper"] and cfg["piper"]["streaming"]


def test_the_websocket_paths_send_the_frames_the_console_sends() -> None:
    """Hands-free's endpoint is seen when the frame holding its last silent VAD window
    arrives: the benchmark's WebSocket client may send no shorter frames than the clients
    we ship (the console, ``EdgeClient.speak``), or it would time a client that is not
    there."""
    audio_js = (ROOT / "edge/server/console/audio.js").read_text()
    found = re.search(r"export const FRAME_MS = (\d+);", audio_js)
    assert found, "the console's FRAME_MS is gone"
    console_ms = int(found.group(1))
    speak_ms = inspect.signature(EdgeClient.speak).parameters["chunk_ms"].default
    assert chain_paths.WS_FRAME_S * 1000 == console_ms == speak_ms
    assert console_ms * 16 == 512  # one window of Silero's VAD at 16 kHz


@pytest.mark.anyio
async def test_the_websocket_clients_send_whole_frames_only() -> None:
    """As the console's worklet posts a frame only once it is full."""
    sent: list[bytes] = []

    async def record(pcm: bytes) -> None:
        sent.append(pcm)

    await chain_paths.stream_microphone(record, bytes(5000), 0.0)
    assert [len(piece) for piece in sent] == [1024] * 4
