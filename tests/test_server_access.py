"""Access control: the device token, browser origins, participant ids, the hello deadline."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from edge.server import (
    EdgeClient,
    ProtocolError,
    load_or_create_token,
    local_token,
    parse_client_message,
    read_token,
    rotate_token,
    token_path,
)
from tests.server_helpers import make_service

pytestmark = pytest.mark.anyio


def test_token_file_is_created_private_and_rotates(tmp_path: Path) -> None:
    token = load_or_create_token(tmp_path)
    assert len(token) >= 32 and read_token(tmp_path) == token
    assert stat.S_IMODE(os.stat(token_path(tmp_path)).st_mode) == 0o600
    assert load_or_create_token(tmp_path) == token  # stable across starts
    assert rotate_token(tmp_path) != token
    assert local_token("ws://lab-box.example:8765") is None  # never handed to another host


def test_edge_token_command_shows_and_rotates(tmp_path: Path) -> None:
    def run(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "edge", "token", "--data-dir", str(tmp_path), *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    first = run()
    assert first == run() == read_token(tmp_path)
    assert run("--rotate") not in (first, "")


async def test_a_session_needs_the_device_token() -> None:
    async with make_service() as service:
        url = service.websocket_url
        assert service.token and read_token(service.settings.data_dir) == service.token
        for token, says in ((None, "needs its device access token"), ("guess", "wrong")):
            async with connect(url) as ws:
                hello: dict[str, object] = {"type": "hello", "participant_id": "mallory"}
                if token:
                    hello["token"] = token
                await ws.send(json.dumps(hello))
                error = json.loads(await ws.recv())
                assert error["type"] == "error" and says in error["message"], error
                assert error["in_reply_to"] == "hello"
                with pytest.raises(ConnectionClosed) as closed:
                    await ws.recv()
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        assert "mallory" not in service.hub.connected()
        # the token in hello (found on this machine by EdgeClient) or as a bearer header
        async with EdgeClient(url, participant_id="alice") as alice:
            assert (await alice.ask("hi", limit_s=10)).text
    async with make_service(insecure=True) as service:
        assert service.token is None
        async with EdgeClient(service.websocket_url, token="") as anyone:
            assert (await anyone.ask("hi", limit_s=10)).text


async def test_a_refused_hello_says_what_its_person_should_do() -> None:
    """A browser page opened without ``?token=`` is told to open the address `edge serve`
    printed; a program is told about ``--token``; neither about "hello.token" alone."""
    async with make_service() as service:
        url = service.websocket_url
        page = url.replace("ws://", "http://")
        for origin, says in ((page, "?token="), (None, "pass --token")):
            headers = {"Origin": origin} if origin else {}
            async with connect(url, additional_headers=headers) as ws:
                await ws.send(json.dumps({"type": "hello", "participant_id": "someone"}))
                error = json.loads(await ws.recv())
            assert error["type"] == "error" and says in error["message"], error
            assert "edge token" in error["message"]
        with pytest.raises(ConnectionError, match="wrong device access token.*--token"):
            async with EdgeClient(url, token="not it"):
                pass


def test_the_host_name_edge_serve_prints_finds_the_local_token(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`edge serve` on every interface prints its address with this machine's host name:
    `edge client --url` with it finds the token on this machine, as for 127.0.0.1; another
    host's name or address never gets it."""
    import socket

    monkeypatch.setenv("EDGE_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("EDGE_TOKEN", raising=False)
    token = load_or_create_token(tmp_path)
    host = socket.gethostname()
    for url in (f"wss://{host}:8765", f"ws://{host.split('.')[0]}.local:8765", "ws://[::1]:1"):
        assert local_token(url) == token, url
    for url in ("wss://lab-box.example:8765", "ws://192.0.2.7:8765", f"ws://{host}x:8765"):
        assert local_token(url) is None, url


async def test_only_the_whole_token_opens_a_session() -> None:
    """An empty token, a prefix of the real one and the real one plus a character are all
    wrong (a comparison of prefixes or of lengths would let some through)."""
    async with make_service() as service:
        token = service.token
        assert token
        for presented in ("", token[:-1], token[:8], token + "x", token.upper(), " " + token):
            async with connect(service.websocket_url) as ws:
                hello = {"type": "hello", "participant_id": "mallory", "token": presented}
                await ws.send(json.dumps(hello))
                error = json.loads(await ws.recv())
                assert error["type"] == "error" and error["in_reply_to"] == "hello", presented
                with pytest.raises(ConnectionClosed):
                    await ws.recv()
        assert "mallory" not in service.hub.connected()


async def test_bearer_header_and_origins() -> None:
    async with make_service(allowed_origins=("https://console.example",)) as service:
        url = service.websocket_url
        host = url.removeprefix("ws://")
        good = {"Authorization": f"Bearer {service.token}"}
        async with connect(url, additional_headers=good) as ws:  # no token in hello needed
            await ws.send(json.dumps({"type": "hello", "participant_id": "headset"}))
            assert json.loads(await ws.recv())["type"] == "welcome"
        with pytest.raises(InvalidStatus) as refused:
            await connect(url, additional_headers={"Authorization": "Bearer nope"})
        assert refused.value.response.status_code == 401
        for origin, allowed in (
            (f"http://{host}", True),  # the service's own page
            ("https://console.example", True),  # allow-listed
            ("https://evil.example", False),
            ("null", False),
        ):
            if allowed:
                async with connect(url, origin=origin, additional_headers=good):  # type: ignore[arg-type]
                    pass
            else:
                with pytest.raises(InvalidStatus) as refused:
                    await connect(url, origin=origin)  # type: ignore[arg-type]
                assert refused.value.response.status_code == 403


async def test_hello_deadline_and_id_rules() -> None:
    async with make_service(hello_timeout_s=0.3) as service:
        url = service.websocket_url
        host, port = url.removeprefix("ws://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))  # not even HTTP
        with anyio.fail_after(5):
            assert await reader.read() == b""  # closed by the server at the deadline
        writer.close()
        async with connect(url) as ws:  # says nothing: closed at the deadline
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
            assert "no hello within" in closed.value.rcvd.reason
        async with EdgeClient(url) as anonymous, EdgeClient(url) as other:
            for pid in (anonymous.participant_id, other.participant_id):
                assert pid.startswith("p-") and len(pid) == 14
            assert anonymous.participant_id != other.participant_id
        for bad in ("lab!", "lab?", "wyoming:kitchen", "a\nforged log line", "", "x" * 65, "-a"):
            with pytest.raises(ConnectionError, match="participant_id must be 1-64 characters"):
                async with EdgeClient(url, participant_id=None) as client:
                    await client.send(json.dumps({"type": "hello", "participant_id": bad}))
                    raise ConnectionError((await client.receive())[0].message)  # type: ignore[union-attr]


def test_parsing_survives_nested_json_and_huge_numbers() -> None:
    for raw, says in (
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"type": "text", "text": ' + "9" * 5000 + "}", "not valid JSON"),
        ('{"type": "hello", "display_name": ' + "[" * 500 + "]" * 500 + "}", "hello"),
        ('{"type": "' + "x" * 10_000 + '"}', "unknown message type"),
    ):
        with pytest.raises(ProtocolError, match=says) as err:
            parse_client_message(raw)
        assert len(str(err.value)) < 400
    assert parse_client_message('{"type": "hello", "protocol": 1}').protocol == 1  # type: ignore[union-attr]
