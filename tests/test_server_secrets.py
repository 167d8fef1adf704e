"""The device token and session tokens: rotation takes effect in the running service, a
malformed hello ends the connection like a wrong token, and no token reaches a log."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from edge.server import EdgeClient, read_token
from edge.server._redact import redact
from tests.server_helpers import make_service

EDGE = [sys.executable, "-m", "edge"]


@pytest.mark.anyio
async def test_rotation_takes_effect_in_the_running_service() -> None:
    async with make_service() as service:
        url = service.websocket_url
        old = service.token
        assert old is not None
        async with EdgeClient(url, participant_id="before") as before:
            with anyio.fail_after(30):
                done = await anyio.run_process([*EDGE, "token", "--rotate"])
            new = done.stdout.decode().strip()
            assert new and new != old
            # the running service takes the new token at once, and only it
            async with EdgeClient(url, participant_id="after") as after:  # reads the file
                assert (await after.ask("hi", limit_s=10)).text
            with pytest.raises(ConnectionError, match="wrong device access token"):
                async with EdgeClient(url, token=old):
                    pass
            assert service.token == new and new in service.console_url
            # a session opened before the rotation keeps going
            assert (await before.ask("still here", limit_s=10)).text


@pytest.mark.anyio
async def test_a_malformed_hello_closes_the_connection_like_a_wrong_token() -> None:
    async with make_service() as service:
        for token in ("x" * 257, "wrong"):
            async with connect(service.websocket_url) as ws:
                await ws.send(json.dumps({"type": "hello", "token": token}))
                with anyio.fail_after(5):  # not the 10 s hello deadline
                    error = json.loads(await ws.recv())
                    assert error["type"] == "error" and error["in_reply_to"] == "hello"
                    with pytest.raises(ConnectionClosed) as closed:
                        await ws.recv()
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


def test_redact_hides_every_secret_value() -> None:
    hello = '{"type": "hello", "token": "abc\\"def", "resume": "r1", "participant_id": "p"}'
    assert redact(hello) == (
        '{"type": "hello", "token": "[redacted]", "resume": "[redacted]", "participant_id": "p"}'
    )
    assert redact('{"session_token":"s1"}') == '{"session_token":"[redacted]"}'
    assert redact("GET /?token=abc&x=1 HTTP/1.1") == "GET /?token=[redacted]&x=1 HTTP/1.1"


LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (DEBUG|INFO|WARNING|ERROR) ")


def _start_serve(log: Path) -> tuple[subprocess.Popen[str], str, str]:
    serve = subprocess.Popen(
        [*EDGE, "-vv", "serve", "--host", "127.0.0.1", "--port", "0", "--no-wyoming"]
        + ["--no-mdns", "--no-voice", "--profile", "ci-2core-24gb"]
        + ["--llm-url", "http://127.0.0.1:9/v1"],
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )
    assert serve.stdout is not None
    url = console = ""
    deadline = time.monotonic() + 60
    while not console and time.monotonic() < deadline:
        line = serve.stdout.readline()
        if not line:
            break
        if line.startswith("serving on "):
            url = line.split()[-1]
        elif line.startswith("console: "):
            console = line.split()[-1]
    assert url and console, log.read_text()
    return serve, url, console


def test_no_token_reaches_a_log_at_vv(tmp_path: Path) -> None:
    import os

    log = tmp_path / "serve.log"
    serve, url, console = _start_serve(log)
    try:
        token = read_token(Path(os.environ["EDGE_DATA_DIR"]))
        assert token and token in console
        assert httpx.get(console, timeout=10).status_code == 200
        client = [*EDGE, "-vv", "client", "--url", url, "--participant", "cli", "--text", "hi"]
        first = subprocess.run(client, capture_output=True, text=True, timeout=60)
        session = re.search(r"--resume\s+(\S+)", first.stderr)
        assert session, first.stderr
        again = subprocess.run(
            [*client, "--resume", session[1]], capture_output=True, text=True, timeout=60
        )
        assert "resumed session" in again.stderr, again.stderr  # (its LLM is unreachable)
        serve.terminate()
        serve.wait(timeout=30)
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
    text = log.read_text() + first.stderr + again.stderr
    lines = [line for line in text.splitlines() if LOG_LINE.match(line)]
    hellos = [line for line in lines if '"type": "hello"' in line]
    assert hellos and all("[redacted]" in line for line in hellos)  # the frames are logged
    for secret in (token, session[1]):
        assert not [line for line in lines if secret in line]


def test_redact_hides_a_value_the_text_cuts_short() -> None:
    assert (
        redact('{"type": "hello", "token": "4lvICc-baI') == '{"type": "hello", "token": "[redacted]'
    )
    assert redact('{"resume": "abc\\') == '{"resume": "[redacted]'


@pytest.mark.anyio
async def test_no_fragment_of_a_token_reaches_a_debug_log(caplog) -> None:  # type: ignore[no-untyped-def]
    """The library logs each frame of a fragmented message apart (a fragment may hold any
    part of a token), and frames sent as binary as hex or text: none shows a token's part."""
    import logging

    from edge.decisions import ScriptedDecisions
    from edge.llm import ScriptedLLM
    from edge.server import EdgeService
    from tests.server_helpers import answer_for, settings

    caplog.set_level(logging.DEBUG, logger="websockets")
    service = EdgeService(settings(), llm=ScriptedLLM(answer_for), decisions=ScriptedDecisions())
    async with service:
        token = service.token
        assert token
        hello = json.dumps({"type": "hello", "participant_id": "p", "token": token})
        async with connect(service.websocket_url) as ws:
            await ws.send([hello[:30], hello[30:50], hello[50:]])  # a fragmented message
            assert json.loads(await ws.recv())["type"] == "welcome"
            await ws.send(json.dumps({"type": "hello", "token": token}).encode())  # as binary
            await ws.send(json.dumps({"type": "bye"}))
            with anyio.fail_after(30):
                while json.loads(await ws.recv())["type"] != "bye":
                    pass
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "fragmented message, not logged" in logged
    pieces = {token[i : i + 6] for i in range(len(token) - 5)}
    assert not [p for p in pieces if p in logged], logged
