"""The WebSocket session protocol end to end with a scripted model (no real models)."""

from __future__ import annotations

import json
from datetime import UTC

import anyio
import pytest

from edge.decisions import ScriptedDecisions
from edge.llm import ScriptedLLM, ScriptedReply
from edge.server import (
    EdgeClient,
    EdgeService,
    SpeechParts,
    parse_client_message,
)
from edge.server._protocol import (
    AudioFormat,
    ErrorMessage,
    Goodbye,
    ProtocolError,
    QueryEcho,
    Reply,
    Status,
)
from edge.voice import chunk_pcm
from tests.conversation_helpers import T0, Clock
from tests.server_helpers import (
    LONG_REPLY,
    Departures,
    answer_for,
    make_service,
    receive_until,
    settings,
    speaking_a_long_reply,
    tone_service,
    wait_for,
)

pytestmark = pytest.mark.anyio


async def test_text_turn_streams_reply_frames_in_order() -> None:
    async with make_service() as service:
        url = service.websocket_url
        assert url.startswith("ws://127.0.0.1:")
        async with EdgeClient(url, participant_id="alice", display_name="Alice") as client:
            assert client.welcome is not None
            assert client.welcome.participant_id == "alice"
            assert client.welcome.context_topics == ["scene"]
            seen: list[object] = []
            turn = await client.ask("the sky is blue", limit_s=10, on_message=seen.append)
        assert turn.text == "You said: the sky is blue. That is all."
        frames = [r for r in turn.replies if r.source == "conversation"]
        assert len(frames) > 2  # streamed, one frame per word
        assert [f.sequence for f in frames] == list(range(len(frames)))
        assert frames[-1].final and not any(f.final for f in frames[:-1])
        assert all(f.request_id == turn.request_id for f in frames)
        kinds = [type(m).__name__ for m in seen]
        assert kinds[0] == "QueryEcho" and kinds[-1] == "Status"
        assert Status(state="processing") in seen
        # the exchange is in the participant's context
        assert "the sky is blue" in service.context.render("alice")


async def test_two_participants_one_sends_garbage() -> None:
    async with make_service() as service:
        url = service.websocket_url
        async with (
            EdgeClient(url, participant_id="good") as good,
            EdgeClient(url, participant_id="bad") as bad,
        ):
            problems = [
                "{not json",
                json.dumps([1, 2]),
                json.dumps({"type": "shout", "text": "hi"}),
                json.dumps({"type": "text"}),
                json.dumps({"type": "text", "text": "   "}),
                json.dumps({"type": "context", "topic": "weather", "text": "rain"}),
                json.dumps({"type": "hello", "participant_id": "again"}),
            ]
            for raw in problems:
                await bad.send(raw)
            await bad.send_audio(b"\x00\x01")  # no audio format in hello, and no voice here
            await bad.send_audio(b"\x00\x01")  # the same problem is reported once
            await bad.send(json.dumps({"type": "interrupt", "request_id": 5}))
            errors: list[ErrorMessage] = []
            with anyio.fail_after(5):
                while len(errors) < len(problems) + 2:
                    message, _ = await bad.receive()
                    assert isinstance(message, ErrorMessage), message
                    errors.append(message)
            texts = [e.message for e in errors]
            assert "not valid JSON" in texts[0]
            assert "JSON object" in texts[1]
            assert "unknown message type 'shout'" in texts[2]
            assert "text: Field required" in texts[3]
            assert "needs some text" in texts[4]
            assert "unknown context topic 'weather'" in texts[5] and "scene" in texts[5]
            assert "already joined as 'bad'" in texts[6]
            assert "audio format" in texts[7] and errors[7].in_reply_to == "audio"
            assert "request_id: Input should be a valid string" in texts[8]
            # both sessions go on: the good one is unaffected, the bad one still answers
            async with anyio.create_task_group() as tg:
                results: dict[str, str] = {}

                async def ask(name: str, client: EdgeClient, text: str) -> None:
                    results[name] = (await client.ask(text, limit_s=10)).text

                tg.start_soon(ask, "good", good, "first question")
                tg.start_soon(ask, "bad", bad, "second question")
            assert results == {
                "good": "You said: first question. That is all.",
                "bad": "You said: second question. That is all.",
            }
        # a second connection cannot take a connected participant id
        async with EdgeClient(url, participant_id="taken") as first:
            with pytest.raises(ConnectionError, match="already connected"):
                async with EdgeClient(url, participant_id="taken"):
                    pass
            assert (await first.ask("still here", limit_s=10)).text.startswith("You said")


async def test_dropped_connection_leaves_and_clears_only_that_context() -> None:
    service = make_service()
    departures = Departures()
    service.runtime.register("departures", departures)
    async with service:
        url = service.websocket_url
        async with EdgeClient(url, participant_id="stays") as stays:
            await stays.ask("remember the red valve", limit_s=10)
            dropper = EdgeClient(url, participant_id="drops")
            await dropper.__aenter__()
            await dropper.ask("remember the green valve", limit_s=10)
            await dropper.send({"type": "context", "topic": "scene", "text": "A lab bench."})
            await wait_for(lambda: "A lab bench" in service.context.render("drops"))
            assert dropper.ws is not None
            dropper.ws.transport.abort()  # no close handshake: the connection just drops
            await wait_for(lambda: departures.left)
            assert departures.left == [("drops", "connection closed")]
            assert "drops" not in service.context.participants()
            assert "red valve" in service.context.render("stays")
            assert "stays" in service.hub.connected() and "drops" not in service.hub.connected()
            # the remaining participant carries on, and bye ends a session cleanly
            assert (
                await stays.ask("and now?", limit_s=10)
            ).text == "You said: and now?. That is all."
            await stays.send({"type": "bye"})
            with anyio.fail_after(5):
                message, _ = await stays.receive()
                while not isinstance(message, Goodbye):
                    message, _ = await stays.receive()
            await wait_for(lambda: len(departures.left) >= 2)
            assert departures.left[1] == ("stays", "bye")


async def test_interrupt_cancels_the_running_turn() -> None:
    slow = ScriptedLLM(lambda m: ScriptedReply("one two three four five six", delay_s=0.3))
    async with EdgeService(
        settings(), llm=slow, decisions=ScriptedDecisions(default="conversation")
    ) as service:
        async with EdgeClient(service.websocket_url, participant_id="p") as client:
            await client.send({"type": "text", "text": "talk slowly"})
            echo = None
            with anyio.fail_after(5):
                while not isinstance(echo, QueryEcho):
                    echo, _ = await client.receive()
                first, _ = await client.receive()
                while not isinstance(first, Reply):
                    first, _ = await client.receive()
            await client.send({"type": "interrupt", "request_id": echo.request_id})
            frames = [first]
            with anyio.fail_after(5):
                while True:
                    message, _ = await client.receive()
                    if isinstance(message, Reply):
                        frames.append(message)
                    if isinstance(message, Status) and message.state == "idle":
                        break
        assert frames[-1].final  # the stream is closed with a final frame
        assert len(frames) < 6  # and it stopped early
    assert slow.requests[0].cancelled


async def test_shutdown_closes_sessions_and_publishes_departures() -> None:
    service = make_service()
    departures = Departures()
    service.runtime.register("departures", departures)
    async with service:
        client = EdgeClient(service.websocket_url, participant_id="late")
        await client.__aenter__()
        await client.ask("hello", limit_s=10)
    assert departures.left == [("late", "connection closed")]
    assert service.llm.closed  # type: ignore[attr-defined]
    await client.__aexit__(None, None, None)


def test_protocol_parsing_names_the_problem() -> None:
    assert parse_client_message('{"type": "bye"}').type == "bye"
    hello = parse_client_message(
        '{"type": "hello", "audio": {"sample_rate": 48000, "channels": 2}, "want_audio": true}'
    )
    assert hello.audio.sample_rate == 48000  # type: ignore[union-attr]
    with pytest.raises(ProtocolError, match="protocol 2 .and 1., not 7"):
        parse_client_message('{"type": "hello", "protocol": 7}')
    with pytest.raises(ProtocolError, match=r"audio.sample_rate"):
        parse_client_message('{"type": "hello", "audio": {"sample_rate": 100}}')
    with pytest.raises(ProtocolError, match="Extra inputs"):
        parse_client_message('{"type": "bye", "now": true}')


async def test_only_clients_that_want_audio_get_speech() -> None:
    import numpy as np

    from edge.voice import VoiceConfig, float_to_pcm16
    from tests.voice_helpers import EnergyVAD, ToneSTT, ToneTTS, silence, tone

    tts = ToneTTS()
    service = EdgeService(
        settings(voice=True),
        llm=ScriptedLLM(answer_for),
        decisions=ScriptedDecisions(default="conversation"),
        speech=SpeechParts(
            stt=ToneSTT(),
            tts=tts,
            config=VoiceConfig(playback_speed=0, partial_interval_s=0),
            vad_factory=EnergyVAD,
        ),
    )
    async with service:
        url = service.websocket_url
        async with (
            EdgeClient(url, participant_id="reader") as reader,
            EdgeClient(
                url, participant_id="speaker", audio=AudioFormat(sample_rate=16000), want_audio=True
            ) as speaker,
        ):
            assert reader.welcome is not None and reader.welcome.audio_out_rate is None
            assert speaker.welcome is not None and speaker.welcome.audio_out_rate == 16000
            read = await reader.ask("just text please", limit_s=10)
            assert read.text and not read.audio
            assert not any("just text" in spoken for spoken in tts.spoken)

            touched: list[bool] = []  # speech counts as activity: compaction waits
            service.context.touch = lambda: touched.append(True)  # type: ignore[method-assign]
            pcm = float_to_pcm16(np.concatenate([tone(0.6, 440.0), silence(1.0)]))
            for piece in chunk_pcm(pcm, 16000, 100):
                await speaker.send_audio(piece)
            heard = await speaker.collect_turn(limit_s=10)
            assert heard.query == "tone 440"
            assert [t.text for t in heard.transcripts if t.final] == ["tone 440"]
            assert touched  # by its transcript
            assert heard.text == "You said: tone 440. That is all."
            assert heard.audio and heard.audio[-1][0].final and len(heard.pcm) > 0
            typed = await speaker.ask("say it", limit_s=10)
            assert typed.audio and typed.text == "You said: say it. That is all."


async def test_a_client_that_stops_reading_is_dropped_not_waited_for() -> None:
    from edge.interaction import VOICE_OUTPUT_TOPIC, ResponseOutput

    service = make_service(outbox_size=16)
    departures = Departures()
    service.runtime.register("departures", departures)
    async with service:
        url = service.websocket_url
        stuck = EdgeClient(url, participant_id="stuck")
        await stuck.__aenter__()
        async with EdgeClient(url, participant_id="fine") as fine:
            big = "x" * 20_000
            with anyio.fail_after(20):  # publishing never blocks on the stuck client
                for i in range(2_000):
                    await service.runtime.publish(
                        VOICE_OUTPUT_TOPIC,
                        ResponseOutput(text=big, request_id="r", sequence=i, final=False),
                        participant_id="stuck",
                    )
                    if departures.left:
                        break
            await wait_for(lambda: departures.left)
            assert departures.left == [("stuck", "client too slow")]
            assert (await fine.ask("are you there", limit_s=10)).text.startswith("You said")
        assert stuck.ws is not None
        stuck.ws.transport.abort()  # its unread backlog would hold a graceful close


async def test_router_only_turns_and_notes_reach_the_client_and_context() -> None:
    def choose(question):  # type: ignore[no-untyped-def]
        text = question.text.lower()
        return "notes" if "note" in text or "done" in text else "clarify"

    service = EdgeService(
        settings(notes=True), llm=ScriptedLLM(answer_for), decisions=ScriptedDecisions(choose)
    )
    async with service:
        async with EdgeClient(service.websocket_url, participant_id="n") as client:
            assert client.welcome is not None
            assert client.welcome.context_topics == ["scene", "notes"]
            unclear = await client.ask("hmm", limit_s=10)
            assert unclear.replies and {r.source for r in unclear.replies} == {"router"}
            assert unclear.text.startswith("Sorry")
            started = await client.ask("Take a note: the rotor is worn", limit_s=10)
            assert {r.source for r in started.replies} == {"notes"}
            saved = await client.ask("done", limit_s=10)
            assert saved.text == "Note saved."
            await wait_for(lambda: "rotor is worn" in service.context.render("n"))


async def test_barge_in_over_the_session_stops_speech_and_starts_the_next_turn() -> None:
    import numpy as np

    from edge.server._protocol import AudioMessage, InterruptedMessage
    from edge.voice import VoiceConfig, float_to_pcm16
    from tests.voice_helpers import silence, tone

    llm = ScriptedLLM([LONG_REPLY], default="Short answer.")
    service = tone_service(llm, VoiceConfig(playback_speed=1.0, partial_interval_s=0))  # real time
    async with (
        service,
        EdgeClient(
            service.websocket_url,
            participant_id="p",
            audio=AudioFormat(sample_rate=16000),
            want_audio=True,
        ) as client,
    ):
        read = await speaking_a_long_reply(client, 10)
        first_id = next((m.request_id for m in read if isinstance(m, QueryEcho)), None)
        pcm = float_to_pcm16(np.concatenate([tone(0.6, 440.0), silence(1.0)]))
        for piece in chunk_pcm(pcm, 16000, 100):
            await client.send_audio(piece)
        interrupted = await receive_until(client, InterruptedMessage, 10)
        assert interrupted.reason == "barge-in"
        late: list[AudioMessage] = []

        def old_audio(message: object) -> None:
            if isinstance(message, AudioMessage) and message.request_id == first_id:
                late.append(message)

        # the barge-in became the next turn, and the old reply went silent
        turn = await client.collect_turn(limit_s=10, on_message=old_audio)
        assert turn.query == "tone 440" and turn.text == "Short answer."
        # Order, not time: one connection's frames arrive in the order the server sent
        # them, so these are exactly the old reply's chunks sent after the interruption.
        assert len(late) <= 1  # at most the chunk being published when it stopped


async def test_a_turn_typed_while_the_previous_one_still_answers_gets_its_reply() -> None:
    # the new turn cancels the one still streaming, whose end (its status: idle) then
    # arrives after the new turn's query: it must not read as the new turn's end
    llm = ScriptedLLM(
        [ScriptedReply("One two three four five six seven.", delay_s=0.2)],
        default="Short answer.",
    )
    service = EdgeService(settings(), llm=llm, decisions=ScriptedDecisions(default="conversation"))
    async with service, EdgeClient(service.websocket_url, participant_id="p") as client:
        await client.send({"type": "text", "text": "tell me a long story"})
        with anyio.fail_after(5):
            while not isinstance((await client.receive())[0], Reply):
                pass  # the first answer is streaming
        states: list[str] = []

        def status(message: object) -> None:
            if isinstance(message, Status):
                states.append(message.state)

        turn = await client.ask("and now?", limit_s=5, on_message=status)
    assert turn.text == "Short answer."
    assert states == ["processing", "idle"]


async def test_health_over_plain_http() -> None:
    import httpx

    async with make_service() as service, EdgeClient(service.websocket_url, participant_id="h"):
        url = service.websocket_url.replace("ws://", "http://") + "/health"
        async with httpx.AsyncClient() as http:
            response = await http.get(url)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["status"] == "ok" and body["participants"] == 1 and body["voice"] is False
    assert "model_state" not in body  # a model that keeps no KV states reports none


class CountingStates(ScriptedLLM):
    """A scripted model that reports KV states as the local llama.cpp model does."""

    def cache_stats(self) -> dict[str, int]:
        return {"sequences": 8, "live_sequences": 3, "saved_states": 2, "evictions": 1}


async def test_health_says_what_the_models_kv_states_hold_and_how_many_were_dropped() -> None:
    import httpx

    service = EdgeService(settings(), llm=CountingStates(answer_for), decisions=ScriptedDecisions())
    async with service:
        url = service.websocket_url.replace("ws://", "http://") + "/health"
        async with httpx.AsyncClient() as http:
            body = (await http.get(url)).json()
    assert body["model_state"] == CountingStates(answer_for).cache_stats()


async def test_the_service_clock_stamps_every_turn_the_model_is_shown() -> None:
    # a pinned clock pins the whole prompt: the turns' times come from it too, not from the
    # runtime's publication time (a model test's prompt once changed with the wall minute)
    service = EdgeService(
        settings(),
        llm=ScriptedLLM(answer_for),
        decisions=ScriptedDecisions(default="conversation"),
        clock=Clock(T0, step_us=1_000),
        timezone=UTC,
    )
    async with service, EdgeClient(service.websocket_url, participant_id="p1") as client:
        await client.ask("first")
        await client.ask("second")
    prompt = service.llm.requests[-1].messages[1].content  # type: ignore[attr-defined]
    assert "[22:13] User: first" in prompt
    assert "Current time: Tuesday 14 November 2023, 22:13" in prompt
