"""``edge serve`` as a process with the real default models, and ``edge talk`` on a
Piper-spoken recording: the commands a user runs, end to end (no mocks)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from voice_helpers import heard_as

from edge.cli import main
from edge.voice import read_wav

pytestmark = pytest.mark.model

EDGE = [sys.executable, "-m", "edge"]
QUESTION = "What is the capital of France?"


def say(text: str, path: Path) -> Path:
    assert main(["say", text, "-o", str(path), "--rate", "16000"]) == 0
    return path


def serving_url(serve: subprocess.Popen[str], limit_s: float = 240) -> str:
    assert serve.stdout is not None
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        line = serve.stdout.readline()
        if not line:
            break
        if line.startswith("serving on "):
            return line.split()[-1]
    serve.kill()
    raise AssertionError(f"edge serve did not start: {serve.communicate()[1][-2000:]}")


def test_edge_serve_with_the_real_models_answers_text_and_speech(tmp_path: Path) -> None:
    question = say(QUESTION, tmp_path / "q.wav")
    serve = subprocess.Popen(
        [*EDGE, "serve", "--host", "127.0.0.1", "--port", "0", "--no-wyoming", "--no-mdns"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = serving_url(serve)
        assert url.startswith("ws://127.0.0.1:")
        client = [*EDGE, "client", "--url", url]
        text = subprocess.run(
            [*client, "--text", QUESTION], capture_output=True, text=True, timeout=300
        )
        assert text.returncode == 0, text.stderr
        assert text.stdout.strip() and "something went wrong" not in text.stdout
        answer = tmp_path / "a.wav"
        spoken = subprocess.run(
            [*client, "--audio", str(question), "--save-audio", str(answer), "--fast"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert spoken.returncode == 0, spoken.stderr
        heard = spoken.stderr.split("heard:", 1)[1].splitlines()[0]
        assert heard_as(heard, QUESTION)  # Whisper heard what Piper said
        assert read_wav(answer).duration_s > 0.5  # Piper spoke the reply
        serve.send_signal(signal.SIGINT)
        _, err = serve.communicate(timeout=60)
        assert serve.returncode == 0, err
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()


def test_edge_talk_answers_a_spoken_question(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    question = say(QUESTION, tmp_path / "q.wav")
    answer = tmp_path / "a.wav"
    capsys.readouterr()
    assert main(["talk", str(question), "-o", str(answer), "--fast"]) == 0
    out = capsys.readouterr().out
    said = out.split("you said:", 1)[1].splitlines()[0]
    replied = out.split("answer:", 1)[1].splitlines()[0]
    assert heard_as(said, QUESTION)
    assert replied.strip()
    assert read_wav(answer).duration_s > 0.5
