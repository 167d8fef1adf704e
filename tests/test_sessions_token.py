"""A participant whose session token was lost: ``edge client`` says how to get a new one
(exit 3, not "unreachable"), and ``edge sessions token ID`` issues it, history kept."""

from __future__ import annotations

import re
import sys

import anyio
import pytest

from edge.server import EdgeClient
from tests.server_helpers import make_service

pytestmark = pytest.mark.anyio

EDGE = [sys.executable, "-m", "edge"]


async def _edge(*args: str) -> tuple[int, str, str]:
    with anyio.fail_after(60):
        done = await anyio.run_process([*EDGE, *args], check=False)
    return done.returncode, done.stdout.decode(), " ".join(done.stderr.decode().split())


async def test_a_lost_session_token_is_reissued_with_the_history_kept() -> None:
    async with make_service() as service:
        url = service.websocket_url
        async with EdgeClient(url, participant_id="ana") as client:  # its token is lost
            await client.ask("my locker is 42", limit_s=10)
        code, _, err = await _edge("client", "--url", url, "--participant", "ana", "--text", "hi")
        assert code == 3, err
        assert "edge sessions token ana" in err and "session_token" not in err
        assert "cannot talk to" not in err
        code, out, err = await _edge("sessions", "token", "ana")
        assert code == 0, err
        token = re.search(r"--resume (\S+)", out)
        assert token, out
        async with EdgeClient(url, participant_id="ana", resume=token[1]) as client:
            assert client.welcome is not None and client.welcome.resumed
            history = await client.history()
        assert history.total == 1 and history.entries[0]["user"] == "my locker is 42"
        code, _, err = await _edge("sessions", "token", "nobody")
        assert code == 1 and "no stored participant 'nobody'" in err
