"""Everyday mistakes with ``edge client`` get a sentence, never a Python traceback: the
console's ``http://`` address, an invalid ``--participant``, a port nobody listens on."""

from __future__ import annotations

import os
import sys

import anyio
import pytest

from edge.cli._target import TargetError, client_url
from tests.server_helpers import make_service

EDGE = [sys.executable, "-m", "edge"]


async def _edge_client(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    with anyio.fail_after(60):
        done = await anyio.run_process([*EDGE, "client", *args], check=False, env=env)
    return done.returncode, done.stdout.decode(), " ".join(done.stderr.decode().split())


@pytest.mark.anyio
async def test_the_consoles_address_works_as_url() -> None:
    async with make_service() as service:
        console = service.console_url  # http://127.0.0.1:PORT/?token=…
        assert console.startswith("http://")
        # the URL's token is the one sent (not EDGE_TOKEN's)
        env = {**os.environ, "EDGE_TOKEN": "not-the-token"}
        code, out, err = await _edge_client("--url", console, "--text", "hi", env=env)
    assert code == 0, err
    assert "You said: hi." in out and "Traceback" not in err


@pytest.mark.anyio
async def test_mistakes_are_sentences_not_tracebacks() -> None:
    code, _, err = await _edge_client("--participant", "bad id!", "--text", "hi")
    assert code == 2 and "Traceback" not in err
    assert "argument --participant: participant_id must be 1-64 characters" in err
    code, _, err = await _edge_client("--url", "ftp://box:8765", "--text", "hi")
    assert code == 2 and "Traceback" not in err and "not the service's address" in err
    code, _, err = await _edge_client("--url", "ws://127.0.0.1:9", "--text", "hi")
    assert code == 2 and "Traceback" not in err
    assert "cannot talk to ws://127.0.0.1:9: nothing listens there" in err
    assert "Is `edge serve` running" in err


def test_client_url() -> None:
    assert client_url("ws://box:8765") == ("ws://box:8765", None)
    assert client_url("http://box:8765/?token=a%2Bb") == ("ws://box:8765", "a+b")
    assert client_url("https://box/") == ("wss://box", None)
    for bad in ("box:8765", "ws://", "ws://box:port"):
        with pytest.raises(TargetError):
            client_url(bad)


def test_a_dropped_connection_is_not_called_unreachable() -> None:
    from websockets.exceptions import ConnectionClosedError
    from websockets.frames import Close

    from edge.cli._target import unreachable

    closed = ConnectionClosedError(Close(1009, "message too big"), None)
    said = unreachable("ws://box:8765", closed)
    assert said.startswith("the service at ws://box:8765 closed the connection: ")
    assert "1009" in said and "running" not in said


@pytest.mark.anyio
async def test_a_plain_address_for_a_tls_service_is_told_to_use_wss() -> None:
    """`edge serve` serves TLS by default: ws:// (or the console's http://) to its port is
    told to use wss:// instead of "Is `edge serve` running?"."""
    async with make_service(tls=True) as service:
        port = service.websocket.bound_port
        for url in (f"ws://127.0.0.1:{port}", f"http://127.0.0.1:{port}/"):
            code, _, err = await _edge_client("--url", url, "--text", "hi")
            assert code == 2 and "Traceback" not in err, err
            assert "serves TLS" in err and f"use wss://127.0.0.1:{port}" in err, err
            assert "Is `edge serve` running" not in err
