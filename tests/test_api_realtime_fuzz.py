"""Property-based fuzzing (hypothesis) of the Realtime API: random client events, most of
them shaped like the served ones with hostile fields, into a live session (scripted voice
and model). Every bad event gets an ``invalid_request_error`` error event, never an
internal error, and the session then still answers ``session.update``. Bounded in
examples and time (~15 s)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import example, given
from hypothesis import strategies as st
from websockets.asyncio.client import connect

from edge.api._realtime import HANDLERS
from tests.api_helpers import TOKEN, web_url
from tests.fuzz_helpers import any_json, fuzz_settings
from tests.test_api_realtime import voice_service

LIVE = fuzz_settings(25, 10_000)
values = any_json(max_leaves=12, wide_numbers=True)
audio = st.one_of(
    st.binary(max_size=4800).map(lambda b: base64.b64encode(b).decode()),
    st.text(max_size=40),
    values,
)
session = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["realtime", "transcription", ""]) | values,
        "instructions": st.text(max_size=60) | values,
        "output_modalities": st.lists(st.sampled_from(["audio", "text", "video"])) | values,
        "audio": st.fixed_dictionaries(
            {},
            optional={
                "input": st.fixed_dictionaries(
                    {},
                    optional={
                        "turn_detection": st.none()
                        | st.fixed_dictionaries(
                            {"type": st.sampled_from(["server_vad", "semantic_vad", "x"])},
                            optional={"silence_duration_ms": values, "threshold": values},
                        )
                        | values,
                        "format": values,
                    },
                ),
                "output": values,
            },
        )
        | values,
    },
)
item = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["message", "function_call", ""]) | values,
        "role": st.sampled_from(["user", "assistant", "system", "tool"]) | values,
        "content": st.lists(
            st.fixed_dictionaries(
                {"type": st.sampled_from(["input_text", "input_audio", "text"]) | values},
                optional={"text": st.text(max_size=40) | values, "audio": audio},
            ),
            max_size=3,
        )
        | values,
    },
)
fields = st.fixed_dictionaries(
    {},
    optional={
        "event_id": values,
        "session": session | values,
        "audio": audio,
        "item": item | values,
        "response": st.dictionaries(
            st.sampled_from(["instructions", "output_modalities", "conversation"]), values
        )
        | values,
        "item_id": values,
    },
)
events = st.builds(
    lambda kind, extra: {**extra, "type": kind},
    st.sampled_from(sorted(HANDLERS)) | st.text(max_size=12) | values,
    fields,
)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BlockingPortal, str]]:
    with pytest.MonkeyPatch.context() as env:  # conftest.py's settings, for the whole module
        env.setenv("EDGE_TLS", "false")
        env.setenv("EDGE_DATA_DIR", str(tmp_path_factory.mktemp("edge-data")))
        env.setenv("EDGE_CONFIG_DIR", str(tmp_path_factory.mktemp("edge-config")))
        with start_blocking_portal("asyncio") as portal:
            yield from _serving(portal)


def _serving(portal: BlockingPortal) -> Iterator[tuple[BlockingPortal, str]]:
    with portal.wrap_async_context_manager(voice_service()) as service:
        yield portal, web_url(service).replace("http", "ws", 1) + "/v1/realtime"


async def _until(ws: Any, kind: str, seen: list[dict[str, Any]]) -> None:
    while True:
        event = json.loads(await ws.recv())
        seen.append(event)
        if event["type"] == kind:
            return


@LIVE
@given(st.lists(events, min_size=1, max_size=5))
@example([{"type": "input_audio_buffer.append", "audio": 1.0}])  # was an internal error
def test_random_events_get_client_errors_and_the_session_goes_on(
    live: tuple[BlockingPortal, str], sent: list[dict[str, Any]]
) -> None:
    portal, url = live

    async def attack() -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with anyio.fail_after(20):
            async with connect(url, additional_headers=headers, max_size=None) as ws:
                await _until(ws, "session.created", seen)
                for event in sent:
                    await ws.send(json.dumps(event))
                await ws.send(json.dumps({"type": "session.update", "session": {}}))
                await _until(ws, "session.updated", seen)
        return seen

    seen = portal.call(attack)
    errors = [e["error"] for e in seen if e["type"] == "error"]
    assert all(e["type"] == "invalid_request_error" for e in errors), (sent, errors)
