"""Property-based fuzzing (hypothesis) of both protocols' framing and content.

Pure parsers are fuzzed directly; then a running service (scripted model) takes random
frames on both protocols, and after each example a well-behaved client must still be
answered. Examples and deadlines are bounded so the module stays within ~30 s.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import given
from hypothesis import strategies as st
from wyoming.client import AsyncTcpClient
from wyoming.info import Describe, Info

from edge.decisions import ScriptedDecisions
from edge.llm import ScriptedLLM
from edge.server import CLIENT_TYPES, EdgeClient, EdgeService, ProtocolError, parse_client_message
from edge.server._wyoming_read import EventError, FramingError, ReadLimits, read_event
from tests.fuzz_helpers import any_json, fuzz_settings
from tests.server_helpers import answer_for
from tests.server_helpers import settings as service_settings

FAST = fuzz_settings(300, 1000, live=False)
LIVE = fuzz_settings(40, 5000)
json_values = any_json()
FIELDS = ("participant_id", "text", "topic", "audio", "want_audio", "protocol", "token", "type")
messages = st.builds(
    lambda kind, extra: {"type": kind, **extra},
    st.sampled_from([*CLIENT_TYPES, "shout", ""]) | st.text(max_size=8),
    st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), json_values, max_size=4),
)
hostile_text = st.one_of(
    st.text(max_size=200),
    messages.map(json.dumps),
    st.integers(1, 3000).map(lambda n: "[" * n + "]" * n),
    st.integers(4300, 6000).map(lambda n: '{"type": "text", "text": ' + "7" * n + "}"),
    st.binary(max_size=64).map(lambda b: b.decode("latin-1")),
)


@FAST
@given(hostile_text)
def test_parse_client_message_only_ever_raises_protocol_error(raw: str) -> None:
    try:
        message = parse_client_message(raw)
    except ProtocolError as exc:
        assert str(exc) and len(str(exc)) < 2000
    else:
        assert message.type in CLIENT_TYPES


lengths = st.one_of(
    st.none(),
    st.integers(-5, 300),
    st.integers(1 << 20, 1 << 40),
    st.text(max_size=5),
    st.booleans(),
    st.floats(allow_nan=False),
    st.lists(st.integers(), max_size=2),
)
headers = st.fixed_dictionaries(
    {"type": st.text(max_size=12) | st.integers() | st.none()},
    optional={"data_length": lengths, "payload_length": lengths, "data": json_values},
)
wyoming_streams = st.one_of(
    st.binary(max_size=400),
    st.tuples(headers, st.binary(max_size=400)).map(
        lambda hb: json.dumps(hb[0]).encode() + b"\n" + hb[1]
    ),
)


@FAST
@given(wyoming_streams)
def test_wyoming_reader_checks_lengths_and_types_before_reading(stream: bytes) -> None:
    async def read_all() -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(stream)
        reader.feed_eof()
        limits = ReadLimits(read_timeout_s=1, max_data_bytes=256, max_payload_bytes=256)
        for _ in range(50):
            try:
                event = await read_event(reader, limits)
            except EventError:
                continue
            except FramingError:
                return
            if event is None:
                return
            assert isinstance(event.type, str) and isinstance(event.data, dict)
            assert len(event.payload or b"") <= 256

    asyncio.run(asyncio.wait_for(read_all(), 5))


# -- a running service ------------------------------------------------------------------


@pytest.fixture(scope="module")
def live() -> Iterator[tuple[BlockingPortal, EdgeService]]:
    import tempfile

    with tempfile.TemporaryDirectory() as data_dir:
        service = EdgeService(
            service_settings(
                wyoming_port=0, hello_timeout_s=2, wyoming_read_timeout_s=0.5, data_dir=data_dir
            ),
            llm=ScriptedLLM(answer_for),
            decisions=ScriptedDecisions(default="conversation"),
        )
        with start_blocking_portal("asyncio") as portal:
            with portal.wrap_async_context_manager(service):
                yield portal, service


async def _still_answers(service: EdgeService) -> None:
    with anyio.fail_after(10):
        async with EdgeClient(service.websocket_url, token=service.token) as client:
            turn = await client.ask("still there", limit_s=10)
            assert turn.text == "You said: still there. That is all."
        assert service.wyoming is not None
        async with AsyncTcpClient("127.0.0.1", service.wyoming.bound_port) as wy:
            await wy.write_event(Describe().event())
            event = await wy.read_event()
            assert event is not None and Info.is_type(event.type)


frames = st.lists(st.one_of(hostile_text, st.binary(max_size=2000)), min_size=1, max_size=6)


@LIVE
@given(frames=frames, say_hello=st.booleans())
def test_websocket_takes_random_frames_and_keeps_serving(
    live: tuple[BlockingPortal, EdgeService], frames: list[Any], say_hello: bool
) -> None:
    portal, service = live

    async def attack() -> None:
        with anyio.fail_after(10):
            async with EdgeClient(service.websocket_url, token=service.token) as client:
                if not say_hello:  # a second hello, among the garbage
                    frames.insert(0, json.dumps({"type": "hello"}))
                for frame in frames:
                    await client.send_audio(frame) if isinstance(frame, bytes) else (
                        await client.send(frame)
                    )
                await client.send(json.dumps({"type": "bye"}))
                while True:  # every bad frame got an error; bye is answered last
                    message, _ = await client.receive()
                    if message.type == "bye":
                        break
        await _still_answers(service)

    portal.call(attack)


@LIVE
@given(wyoming_streams)
def test_wyoming_takes_random_bytes_and_keeps_serving(
    live: tuple[BlockingPortal, EdgeService], stream: bytes
) -> None:
    portal, service = live

    async def attack() -> None:
        assert service.wyoming is not None
        with anyio.fail_after(10):
            reader, writer = await asyncio.open_connection("127.0.0.1", service.wyoming.bound_port)
            writer.write(stream)
            await writer.drain()
            writer.write_eof()
            while await reader.read(65536):  # the server answers and closes (or times out)
                pass
            writer.close()
        await _still_answers(service)

    portal.call(attack)
