"""docs/deploy.md's commands for the speech servers work offline: each starts on the models
this package installed (found by `edge models --path`), never downloading one, and
answers (Piper speaks). The GPU and mDNS options are left out here (no GPU in tests;
mDNS on loopback only)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import anyio
import pytest
from wyoming.client import AsyncTcpClient
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize

from benchmarks.chain_services import Service, free_port, service_env, wait_for_port

pytestmark = [pytest.mark.anyio, pytest.mark.model]

DOCS = Path(__file__).resolve().parents[1] / "docs" / "deploy.md"
LEFT_OUT = ("--device cuda", "--compute-type float16", "--zeroconf")


def speech_commands() -> dict[str, str]:
    """The docs' command line of each speech server, continuation lines joined."""
    text = DOCS.read_text().replace("\\\n", " ")
    return {
        m[1]: " ".join(m[0].split())
        for m in re.finditer(r"^python -m (wyoming_faster_whisper|wyoming_piper) .*$", text, re.M)
    }


def runnable(command: str, port: int, work: Path) -> str:
    """The docs' command on loopback, with this checkout's `edge` and a temporary data dir."""
    for option in LEFT_OUT:
        command = command.replace(option, "")
    command = re.sub(r"tcp://0\.0\.0\.0:\d+", f"tcp://127.0.0.1:{port}", command)
    command = command.replace("/srv/whisper", str(work / "whisper"))
    command = command.replace("python -m", f"{sys.executable} -m")
    return command.replace("$(edge models", f"$({sys.executable} -m edge models")


async def test_the_speech_servers_start_offline_from_the_docs_commands(tmp_path) -> None:  # type: ignore[no-untyped-def]
    commands = speech_commands()
    assert set(commands) == {"wyoming_faster_whisper", "wyoming_piper"}, commands
    for name, command in commands.items():
        assert "--local-files-only" in command and "--data-dir" in command, command
        assert "$(edge models --path --role" in command, command
        port = free_port()
        argv = ["bash", "-c", f"exec {runnable(command, port, tmp_path)}"]
        service = Service(name, argv, port, tmp_path / f"{name}.log")
        env = {**service_env(), "HF_HUB_OFFLINE": "1"}
        service.start(env)
        try:
            await anyio.to_thread.run_sync(wait_for_port, service, port, 120)
            async with AsyncTcpClient("127.0.0.1", port) as client:
                await client.write_event(Describe().event())
                with anyio.fail_after(60):
                    while not Info.is_type((event := await client.read_event()).type):  # type: ignore[union-attr]
                        pass
                info = Info.from_event(event)  # type: ignore[arg-type]
                assert info.asr or info.tts, info
                if name == "wyoming_piper":
                    await client.write_event(Synthesize(text="Ready.").event())
                    with anyio.fail_after(60):
                        event = await client.read_event()
                    assert event is not None and event.type == "audio-start", event
        finally:
            service.stop()
