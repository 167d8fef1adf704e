"""``edge say`` / ``edge transcribe``: errors without models, one real round trip."""

from __future__ import annotations

import numpy as np
import pytest

from edge.cli import main
from edge.server import SpeechParts
from edge.voice import write_wav
from tests.voice_helpers import heard_as


def test_say_refuses_unspeakable_text(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["say", "...  !!", "-o", str(tmp_path / "x.wav")]) == 2
    assert "nothing speakable" in capsys.readouterr().err
    assert not (tmp_path / "x.wav").exists()


def test_transcribe_bad_files(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["transcribe", str(tmp_path / "missing.wav")]) == 2
    assert "no such WAV file" in capsys.readouterr().err
    (tmp_path / "junk.wav").write_bytes(b"RIFF junk")
    assert main(["transcribe", str(tmp_path / "junk.wav")]) == 2
    write_wav(tmp_path / "empty.wav", np.zeros(0, np.float32), 16_000)
    assert main(["transcribe", str(tmp_path / "empty.wav")]) == 2
    assert "no audio" in capsys.readouterr().err


def test_transcribe_silence_finds_no_speech(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    write_wav(tmp_path / "quiet.wav", np.zeros(32_000, np.float32), 16_000)
    assert main(["transcribe", str(tmp_path / "quiet.wav")]) == 1
    assert "no speech" in capsys.readouterr().err


@pytest.mark.model
def test_say_then_transcribe(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "q.wav"
    assert main(["say", "Turn on the lights in the lab.", "-o", str(out), "--rate", "16000"]) == 0
    assert out.stat().st_size > 16_000
    capsys.readouterr()
    assert main(["transcribe", str(out)]) == 0
    heard = capsys.readouterr().out
    # Piper speaks with its random variation here, so allow Whisper one word of slack
    # (a fresh-clone run once heard "on the lights in the lab.")
    assert heard_as(heard, "Turn on the lights in the lab."), heard


@pytest.mark.anyio
async def test_a_spoken_turn_with_the_speech_server_down_names_it(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """`edge client --audio … --save-audio …` while the remote Piper server is down: the
    client names the server that failed, not "does it run with voice?"."""
    import socket

    import anyio

    from edge.decisions import ScriptedDecisions
    from edge.llm import ScriptedLLM
    from edge.server import EdgeService
    from edge.voice import VoiceConfig
    from tests.server_helpers import answer_for, settings
    from tests.voice_helpers import EnergyVAD, ToneSTT, silence, tone

    with socket.socket() as probe:  # a port nobody listens on: the Piper server is down
        probe.bind(("127.0.0.1", 0))
        dead = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    service = EdgeService(
        settings(voice=True, tts_url=dead, remote_timeout_s=2.0),
        llm=ScriptedLLM(answer_for),
        decisions=ScriptedDecisions("conversation"),
        speech=SpeechParts(
            stt=ToneSTT(),
            config=VoiceConfig(playback_speed=0, partial_interval_s=0),
            vad_factory=EnergyVAD,
        ),
    )
    question = tmp_path / "q.wav"
    write_wav(question, np.concatenate([silence(0.3), tone(0.8), silence(1.0)]), 16_000)
    async with service:
        client = ["client", "--url", service.websocket_url, "--audio", str(question)]
        saved = ["--save-audio", str(tmp_path / "a.wav"), "--fast"]
        assert await anyio.to_thread.run_sync(main, [*client, *saved]) == 1
    said = " ".join(capsys.readouterr().err.split())
    assert f"error: no reply audio: speech synthesis (Wyoming {dead})" in said, said
    assert "does it run with voice" not in said
