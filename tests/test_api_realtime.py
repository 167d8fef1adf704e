"""The Realtime API at ``/v1/realtime``, driven by the ``openai`` SDK, on scripted models
(tone "speech", an energy VAD, a scripted LLM): its events, push-to-talk, text items,
cancelling, errors and access."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from edge.api import serve_api
from edge.api._realtime import MAX_INSTRUCTIONS_BYTES
from edge.decisions import ScriptedDecisions
from edge.llm import ScriptedLLM, ScriptedReply
from edge.server import EdgeService, SpeechParts
from edge.voice import VoiceConfig, float_to_pcm16
from tests.api_helpers import TOKEN, openai_client, web_url
from tests.server_helpers import answer_for, settings
from tests.voice_helpers import EnergyVAD, ToneSTT, ToneTTS, silence, tone

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def voice_service(llm: ScriptedLLM | None = None) -> AsyncIterator[EdgeService]:
    service = EdgeService(
        settings(voice=True, token=TOKEN),
        llm=llm or ScriptedLLM(replies=answer_for),
        decisions=ScriptedDecisions(default="conversation"),
        speech=SpeechParts(
            stt=ToneSTT(),
            tts=ToneTTS(),
            config=VoiceConfig(partial_interval_s=0),
            vad_factory=EnergyVAD,
        ),
    )
    serve_api(service)
    async with service:
        yield service


@asynccontextmanager
async def realtime(service: EdgeService, key: str = TOKEN, **headers: str) -> AsyncIterator[Any]:
    async with openai_client(web_url(service), key=key) as client:
        async with client.realtime.connect(model="edge", extra_headers=headers) as connection:
            yield connection


async def events_until(connection: Any, last: str) -> list[Any]:
    seen = []
    with anyio.fail_after(30):
        async for received in connection:
            seen.append(received)
            if received.type == last:
                return seen
    raise AssertionError(f"the connection ended before {last}")


def b64(pcm: bytes) -> str:
    return base64.b64encode(pcm).decode()


async def test_a_push_to_talk_turn_streams_transcript_text_and_24_khz_audio() -> None:
    async with voice_service() as service, realtime(service) as connection:
        created = await events_until(connection, "session.created")
        assert created[-1].session.audio.input.format.rate == 24_000
        await connection.session.update(
            session={"type": "realtime", "audio": {"input": {"turn_detection": None}}}
        )
        # a pause longer than the endpoint does not end the utterance: only commit does
        speech = np.concatenate([tone(0.5, 440.0, 24_000), silence(1.5, 24_000)])
        pcm = float_to_pcm16(np.concatenate([speech, tone(0.3, 440.0, 24_000)]))
        for i in range(0, len(pcm), 4800):
            await connection.input_audio_buffer.append(audio=b64(pcm[i : i + 4800]))
        await connection.input_audio_buffer.commit()
        seen = await events_until(connection, "response.done")
        kinds = [e.type for e in seen]
        heard = [e for e in seen if e.type.endswith("input_audio_transcription.completed")]
        assert [e.transcript for e in heard] == ["tone 440"]  # one utterance
        assert kinds.index("input_audio_buffer.speech_stopped") < kinds.index("response.created")
        text = "".join(e.delta for e in seen if e.type == "response.output_audio_transcript.delta")
        assert text == "You said: tone 440. That is all."
        audio = [e for e in seen if e.type == "response.output_audio.delta"]
        assert audio and all(e.response_id == seen[-1].response.id for e in audio)
        assert seen[-1].response.status == "completed"
        assert seen[-1].response.output[0].content[0].transcript == text
        assert [r.user for r in service.store.history(service.hub.connected()[0])[0]] == [
            "tone 440"
        ]


async def test_text_items_answered_as_text_and_a_cancelled_response() -> None:
    slow = ScriptedLLM(
        replies=[ScriptedReply("Quick answer."), ScriptedReply("One " * 200, delay_s=0.05)]
    )
    async with (
        voice_service(slow) as service,
        realtime(service, **{"X-Edge-Participant": "kim"}) as connection,
    ):
        await connection.session.update(session={"type": "realtime", "output_modalities": ["text"]})
        item = {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Hi"}],
        }
        await connection.conversation.item.create(item=item)
        await connection.response.create()
        seen = await events_until(connection, "response.done")
        assert (
            "".join(e.delta for e in seen if e.type == "response.output_text.delta")
            == "Quick answer."
        )
        assert not [e for e in seen if e.type == "response.output_audio.delta"]
        await connection.conversation.item.create(item=item)
        await connection.response.create()
        await events_until(connection, "response.output_text.delta")
        await connection.response.cancel()
        done = (await events_until(connection, "response.done"))[-1]
        assert done.response.status == "cancelled"
        assert "api:kim" in service.hub.connected()  # the named participant


async def test_speech_started_comes_when_speech_begins_before_any_transcript() -> None:
    """``speech_started`` comes while the participant is still speaking (the VAD's start,
    not a transcript: partial transcripts are off here), and once per utterance."""
    async with voice_service() as service, realtime(service) as connection:
        await events_until(connection, "session.created")
        speech = float_to_pcm16(tone(0.6, 440.0, 24_000))
        for i in range(0, len(speech), 4800):
            await connection.input_audio_buffer.append(audio=b64(speech[i : i + 4800]))
        started = (await events_until(connection, "input_audio_buffer.speech_started"))[-1]
        more = float_to_pcm16(np.concatenate([tone(0.3, 440.0, 24_000), silence(1.5, 24_000)]))
        for i in range(0, len(more), 4800):
            await connection.input_audio_buffer.append(audio=b64(more[i : i + 4800]))
        seen = await events_until(connection, "response.done")
    kinds = [e.type for e in seen]
    assert "input_audio_buffer.speech_started" not in kinds  # once per utterance
    stopped = seen[kinds.index("input_audio_buffer.speech_stopped")]
    assert stopped.item_id == started.item_id
    assert 0 < started.audio_start_ms <= 600
    heard = [e for e in seen if e.type.endswith("input_audio_transcription.completed")]
    assert [e.transcript for e in heard] == ["tone 440"]


async def test_session_instructions_shape_this_sessions_answers_only() -> None:
    llm = ScriptedLLM(replies=answer_for)
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}

    async def ask(connection: Any) -> str:
        await connection.conversation.item.create(item=item)
        await connection.response.create()
        await events_until(connection, "response.done")
        return llm.requests[-1].messages[0].content  # the system message

    async with voice_service(llm) as service:
        async with realtime(service) as connection, realtime(service) as other:
            await connection.session.update(
                session={"type": "realtime", "instructions": "Answer like a pirate."}
            )
            updated = (await events_until(connection, "session.updated"))[-1]
            pirate = await ask(connection)
            plain = await ask(other)
            await connection.session.update(session={"type": "realtime", "instructions": ""})
            again = await ask(connection)
        assert service.gateway.instructions == {}  # gone with the sessions
    assert updated.session.instructions == "Answer like a pirate."
    assert pirate.endswith("\n\nAnswer like a pirate.")
    assert pirate.startswith(plain) and "pirate" not in plain and "pirate" not in again


async def test_oversized_instructions_get_an_error_and_are_not_kept() -> None:
    async with voice_service() as service, realtime(service) as connection:
        await events_until(connection, "session.created")
        long = "x" * (MAX_INSTRUCTIONS_BYTES + 1)
        await connection.session.update(session={"type": "realtime", "instructions": long})
        error = (await events_until(connection, "error"))[-1].error
        assert f"limited to {MAX_INSTRUCTIONS_BYTES} bytes" in error.message
        assert service.gateway.instructions == {}


async def test_bad_events_get_error_events_and_the_session_goes_on() -> None:
    async with voice_service() as service, realtime(service) as connection:
        await events_until(connection, "session.created")
        await connection.send({"type": "input_audio_buffer.append", "audio": "not base64!"})
        await connection.send({"type": "conversation.item.delete", "item_id": "x"})
        await connection.input_audio_buffer.commit()
        await connection.send_raw("[" * 5000 + "]" * 5000)  # nested past the JSON parser's depth
        errors = []
        for _ in range(4):
            errors.append((await events_until(connection, "error"))[-1].error)
        assert "base64" in errors[0].message
        assert "unsupported event type 'conversation.item.delete'" in errors[1].message
        assert "under 100 ms of audio" in errors[2].message
        assert "not valid JSON" in errors[3].message
        await connection.session.update(session={"type": "realtime"})
        assert (await events_until(connection, "session.updated"))[-1].type == "session.updated"


async def test_text_waiting_for_response_create_is_bounded_and_the_session_goes_on() -> None:
    async with voice_service() as service, realtime(service) as connection:
        await events_until(connection, "session.created")
        await connection.session.update(session={"audio": True})  # type: ignore[typeddict-item]
        refused = (await events_until(connection, "error"))[-1].error
        assert refused.message == "session.audio must be an object"
        for text in ("Hello.", "word " * 3_199):  # 6 + 15,995 characters
            part = {"type": "input_text", "text": text}
            await connection.conversation.item.create(
                item={"type": "message", "role": "user", "content": [part]}
            )
        error = (await events_until(connection, "error"))[-1].error
        assert "waiting for response.create are over 16,000 characters" in error.message
        await connection.response.create()
        seen = await events_until(connection, "response.done")
        text = "".join(e.delta for e in seen if e.type == "response.output_audio_transcript.delta")
        assert text == "You said: Hello.. That is all."  # the first message alone


async def test_a_wrong_key_is_refused_before_the_session_opens() -> None:
    async with voice_service() as service:
        with pytest.raises(InvalidStatus) as refused:
            async with realtime(service, key="wrong"):
                pass
        assert refused.value.response.status_code == 401
        url = service.websocket_url + "/v1/realtime"
        async with connect(url) as plain:  # no Authorization header at all
            refusal = json.loads(await plain.recv())
            assert (
                refusal["type"] == "error" and "device access token" in refusal["error"]["message"]
            )
            with pytest.raises(ConnectionClosed) as closed:
                await plain.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


def test_a_response_whose_speech_never_ends_is_done_after_a_while() -> None:
    import time

    from edge.api._realtime_out import SPEECH_WAIT_S, RealtimeEvents
    from edge.server import QueryEcho, Reply, Status

    events = RealtimeEvents(voice="joe")
    events.convert(QueryEcho(request_id="t1", text="hi"), None)
    frame = Reply(text="Hello.", request_id="t1", source="conversation", sequence=0, final=True)
    assert [e["type"] for e in events.convert(frame, None)] == [
        "response.output_audio_transcript.delta"
    ]
    assert events.convert(Status(state="idle"), None) == []  # its speech is still to come
    assert events.expire(time.monotonic()) == []
    done = events.expire(time.monotonic() + SPEECH_WAIT_S + 1)
    assert done[-1]["type"] == "response.done"
    assert done[-1]["response"]["status"] == "completed"
