"""Starting ``edge serve``: a taken port is found before any model loads (a second
``edge serve``), and the console's address on the device itself is a ``localhost`` one."""

from __future__ import annotations

import socket
import sys
import time
from dataclasses import replace

import pytest

from edge.decisions import ScriptedDecisions
from edge.llm import ScriptedLLM
from edge.server import EdgeService
from edge.server._service_addresses import WILDCARD_HOSTS
from tests.server_helpers import answer_for, settings

EDGE = [sys.executable, "-m", "edge"]


class LoadingLLM(ScriptedLLM):
    loaded = False

    async def load(self) -> None:
        self.loaded = True


@pytest.fixture
def taken_port():  # type: ignore[no-untyped-def]
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.mark.anyio
async def test_a_taken_port_is_found_before_the_models_load(taken_port: int) -> None:
    llm = LoadingLLM(answer_for)
    service = EdgeService(
        settings(port=taken_port), llm=llm, decisions=ScriptedDecisions(default="conversation")
    )
    with pytest.raises(OSError, match=f"WebSocket port {taken_port} on 127.0.0.1 is in use"):
        async with service:
            pass
    assert not llm.loaded


def test_edge_serve_on_a_taken_port_fails_at_once(taken_port: int) -> None:
    import subprocess

    start = time.monotonic()
    serve = subprocess.run(
        [*EDGE, "serve", "--host", "127.0.0.1", "--port", str(taken_port), "--no-mdns"]
        + ["--no-wyoming", "--profile", "ci-2core-24gb"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    err = " ".join(serve.stderr.split())
    assert serve.returncode == 2 and "is in use: is another `edge serve` running?" in err
    assert "Traceback" not in err and "[Errno" not in err
    assert time.monotonic() - start < 30


@pytest.mark.anyio
async def test_the_console_on_the_device_itself_is_a_localhost_url() -> None:
    async with EdgeService(
        settings(), llm=ScriptedLLM(answer_for), decisions=ScriptedDecisions()
    ) as service:
        assert service.local_console_url is None  # 127.0.0.1 is a secure origin already
        port = service.websocket.bound_port
        assert service.console_url.startswith(f"http://127.0.0.1:{port}/")
        # listening on every interface (never bound in tests: the settings' host names it)
        # the host name's URL is printed, and localhost's for the device itself
        for everywhere in WILDCARD_HOSTS:
            wide = service.settings.model_copy(update={"host": everywhere})
            service.addresses.parts = replace(service.parts, settings=wide)
            assert service.local_console_url == f"http://localhost:{port}/?token={service.token}"
            assert service.console_url.startswith(f"http://{socket.gethostname()}:{port}/")
