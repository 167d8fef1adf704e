"""Speech on remote Wyoming servers: the real ``wyoming-faster-whisper`` and
``wyoming-piper`` (and llama-cpp-python's server for the LLM), started here on 127.0.0.1
with our default models. A spoken turn through all three; each killed mid-turn; one
stalled past its timeout; one down at start; ``--fallback local``; discovery over mDNS on
loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from edge.decisions import ScriptedDecisions
from edge.llm import ScriptedLLM
from edge.server import EdgeService, SpeechParts
from edge.server._mdns import WYOMING_SERVICE, MdnsAdvertiser
from edge.voice import VoiceConfig
from tests.remote_helpers import QUESTION, Servers, backends, speaker, wait_for_retry
from tests.server_helpers import answer_for, settings
from tests.voice_helpers import heard_as

pytestmark = [pytest.mark.anyio, pytest.mark.model]


def remote_service(servers: Servers, **kw: object) -> EdgeService:
    """The service with remote speech and a scripted LLM (the speech is under test)."""
    options: dict[str, object] = {
        "voice": True,
        "stt_url": servers.url("whisper"),
        "tts_url": servers.url("piper"),
        "remote_timeout_s": 5.0,
    }
    options.update(kw)
    return EdgeService(
        settings(**options),
        llm=ScriptedLLM(answer_for),
        decisions=ScriptedDecisions("conversation"),
        speech=SpeechParts(config=VoiceConfig(playback_speed=0, partial_interval_s=0)),
    )


async def health(service: EdgeService) -> dict:
    """``GET /health`` over HTTP, as a monitor asks it."""
    url = service.websocket_url.replace("ws://", "http://") + "/health"
    async with httpx.AsyncClient() as http:
        return (await http.get(url, timeout=5)).json()


async def test_a_spoken_turn_through_remote_whisper_and_piper(
    servers: Servers, question: bytes
) -> None:
    service = remote_service(servers)
    async with service, speaker(service) as client:
        await client.speak(question, realtime=False)
        turn = await client.collect_turn(limit_s=60)
        assert heard_as(turn.query, QUESTION), turn.query
        assert turn.text.startswith("You said:") and len(turn.pcm) > 16_000
        assert not turn.errors
        report = (await health(service))["backends"]
    assert report["stt"]["state"] == "ok" and report["stt"]["latency_p50_ms"] > 0
    assert report["tts"]["where"] == "remote" and report["tts"]["requests"] >= 2
    assert report["llm"] == {"where": "in process"}


async def test_remote_stt_killed_mid_utterance_is_an_error_naming_it_then_comes_back(
    servers: Servers, question: bytes
) -> None:
    service = remote_service(servers)
    half = len(question) // 2 // 2 * 2
    try:
        async with service, speaker(service) as client:
            assert (await client.ask("remember the word heron", limit_s=20)).text
            await client.speak(question[:half], realtime=False, trailing_silence_s=0)
            servers.kill("whisper")
            await client.speak(question[half:], realtime=False)
            failed = await client.collect_turn(limit_s=30)
            assert failed.errors and failed.errors[0].code == "backend_failed"
            message = failed.errors[0].message
            assert "speech recognition (Wyoming tcp://127.0.0.1:" in message, message
            report = await health(service)
            assert report["status"] == "degraded"
            assert report["backends"]["stt"]["state"] == "down"
            servers.start("whisper")
            await wait_for_retry(service, "stt")
            await client.speak(question, realtime=False)
            turn = await client.collect_turn(limit_s=60)
            assert heard_as(turn.query, QUESTION), turn.query
            history = await client.history()
            assert "heron" in str(history.entries)  # the context was kept
            assert backends(service)["stt"]["state"] == "degraded"  # answering again
    finally:
        if servers.services["whisper"].proc.poll() is not None:  # type: ignore[union-attr]
            servers.start("whisper")


async def test_remote_tts_killed_mid_reply_names_it_and_the_next_reply_is_spoken(
    servers: Servers,
) -> None:
    long_reply = " ".join(f"This is sentence number {n} of a long answer." for n in range(12))
    llm = ScriptedLLM(lambda messages: long_reply if "long" in messages[-1].content else "Fine.")
    service = EdgeService(
        settings(
            voice=True,
            stt_url=servers.url("whisper"),
            tts_url=servers.url("piper"),
            remote_timeout_s=5.0,
            reply_sentences=0,
        ),
        llm=llm,
        decisions=ScriptedDecisions("conversation"),
        speech=SpeechParts(config=VoiceConfig(playback_speed=1.0, partial_interval_s=0)),
    )
    try:
        async with service, speaker(service) as client:
            killed = False

            def kill_at_first_audio(message: object) -> None:
                nonlocal killed
                if not killed and getattr(message, "type", "") == "audio":
                    servers.kill("piper")
                    killed = True

            turn = await client.ask("a long one please", limit_s=60, on_message=kill_at_first_audio)
            assert killed and turn.text == long_reply  # the text is all there
            assert any("speech synthesis (Wyoming" in e.message for e in turn.errors), turn.errors
            assert len(turn.pcm) < 22_050 * 2 * 10  # the speech was cut short
            servers.start("piper")
            await wait_for_retry(service, "tts")
            again = await client.ask("and now?", limit_s=30)
            assert again.pcm and not again.errors
    finally:
        if servers.services["piper"].proc.poll() is not None:  # type: ignore[union-attr]
            servers.start("piper")


async def test_a_stalled_remote_stt_hits_its_timeout_and_the_service_answers_after(
    servers: Servers, question: bytes
) -> None:
    service = remote_service(servers, remote_timeout_s=1.5)
    async with service, speaker(service) as client:
        servers.pause("whisper", True)
        try:
            with anyio.fail_after(20):
                await client.speak(question, realtime=False)
                failed = await client.collect_turn(limit_s=20)
        finally:
            servers.pause("whisper", False)
        assert failed.errors and "no answer within 1.5 s (stalled)" in failed.errors[0].message
        assert (await client.ask("still there?", limit_s=20)).text  # typed turns go on
        assert service.backends.stt is not None
        service.backends.stt.backend.timeout_s = 30  # it works off the stalled requests first
        await wait_for_retry(service, "stt")
        await client.speak(question, realtime=False)
        assert heard_as((await client.collect_turn(limit_s=60)).query, QUESTION)


async def test_a_remote_down_at_start_does_not_stop_the_service(
    servers: Servers, question: bytes, tmp_path: Path
) -> None:
    dead = Servers(tmp_path, ("whisper",))  # its port: nothing listens there yet
    service = remote_service(servers, stt_url=dead.url("whisper"))
    try:
        async with service, speaker(service) as client:
            assert backends(service)["stt"]["state"] == "down"
            await client.speak(question, realtime=False)
            failed = await client.collect_turn(limit_s=30)
            assert failed.errors and "connection refused" in failed.errors[0].message
            dead.start("whisper")
            await wait_for_retry(service, "stt")
            await client.speak(question, realtime=False)
            assert heard_as((await client.collect_turn(limit_s=60)).query, QUESTION)
    finally:
        dead.stop()


async def test_fallback_local_answers_while_the_remote_is_down(
    servers: Servers, question: bytes, tmp_path: Path
) -> None:
    dead = Servers(tmp_path, ())
    service = EdgeService(
        settings(
            voice=True,
            stt_url=dead.url("whisper"),
            tts_url=dead.url("piper"),
            fallback="local",
        ),
        llm=ScriptedLLM(answer_for),
        decisions=ScriptedDecisions("conversation"),
        speech=SpeechParts(config=VoiceConfig(playback_speed=0, partial_interval_s=0)),
    )
    async with service, speaker(service) as client:
        await client.speak(question, realtime=False)
        turn = await client.collect_turn(limit_s=60)
        assert heard_as(turn.query, QUESTION) and turn.pcm and not turn.errors
        report = backends(service)
    assert report["stt"]["state"] == "down" and report["stt"]["fallback_uses"] >= 1
    assert report["tts"]["fallback"] == "local" and report["tts"]["fallback_uses"] >= 1


@pytest.mark.mdns
async def test_auto_finds_the_speech_servers_over_mdns_and_never_an_edge_service(
    servers: Servers, question: bytes
) -> None:
    loopback = ["127.0.0.1"]
    other_edge = MdnsAdvertiser("edge on another box", interfaces=loopback)
    other_edge.add(
        WYOMING_SERVICE, servers.ports["whisper"], loopback, {"protocol": "1", "path": "/"}
    )
    whisper = MdnsAdvertiser("whisper box", interfaces=loopback)
    whisper.add(WYOMING_SERVICE, servers.ports["whisper"], loopback, {})
    piper = MdnsAdvertiser("piper box", interfaces=loopback)
    piper.add(WYOMING_SERVICE, servers.ports["piper"], loopback, {})
    service = remote_service(servers, stt_url="auto", tts_url="auto", mdns_interfaces=loopback)
    async with other_edge, whisper, piper, service, speaker(service) as client:
        chosen = service.describe()["backends"]
        assert f"found over mDNS: {servers.url('whisper')} (whisper box" in chosen["stt backend"]
        assert f"found over mDNS: {servers.url('piper')} (piper box" in chosen["tts backend"]
        await client.speak(question, realtime=False)
        assert heard_as((await client.collect_turn(limit_s=60)).query, QUESTION)


@pytest.fixture(scope="module")
def llama(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """llama-cpp-python's OpenAI-compatible server with our default model."""
    with Servers(tmp_path_factory.mktemp("llama"), ("llama",)) as found:
        yield found


def all_remote(servers: Servers, llama: Servers) -> EdgeService:
    return EdgeService(
        settings(
            voice=True,
            stt_url=servers.url("whisper"),
            tts_url=servers.url("piper"),
            llm_url=llama.url("llama"),
            remote_timeout_s=10.0,
            reply_sentences=1,  # short answers: the small model on a loaded CPU is slow
        ),
        decisions=ScriptedDecisions("conversation"),
        speech=SpeechParts(config=VoiceConfig(playback_speed=0, partial_interval_s=0)),
    )


async def test_a_spoken_turn_through_remote_stt_llm_and_tts(
    servers: Servers, llama: Servers, question: bytes
) -> None:
    service = all_remote(servers, llama)
    async with service, speaker(service) as client:
        await client.speak(question, realtime=False)
        turn = await client.collect_turn(limit_s=90)
        assert heard_as(turn.query, QUESTION), turn.query
        assert turn.text.strip() and len(turn.pcm) > 16_000, turn.text  # the model's words
        assert not turn.errors
        report = (await health(service))["backends"]
    assert {role: entry["where"] for role, entry in report.items()} == {
        "stt": "remote",
        "tts": "remote",
        "llm": "remote",
    }
    assert all(entry["state"] == "ok" for entry in report.values()), report
    assert report["llm"]["latency_p50_ms"] > 0


async def test_the_remote_llm_killed_mid_reply_ends_the_turn_and_the_service_goes_on(
    servers: Servers, llama: Servers
) -> None:
    service = all_remote(servers, llama)
    try:
        async with service, speaker(service) as client:
            assert (await client.ask("My name is Ada. Say hello.", limit_s=60)).text
            killed = False

            def kill_at_first_reply(message: object) -> None:
                nonlocal killed
                if not killed and getattr(message, "type", "") == "reply":
                    llama.kill("llama")
                    killed = True

            broken = await client.ask(
                "Tell me a long story about a heron.", limit_s=60, on_message=kill_at_first_reply
            )
            assert killed and broken.replies and broken.replies[-1].final  # the turn ended
            named = [e for e in broken.errors if e.code == "backend_failed"]
            assert named and f":{llama.ports['llama']}" in named[0].message, broken.errors
            assert service.backends.llm is not None
            await service.backends.llm.probe()
            report = (await health(service))["backends"]["llm"]
            assert report["state"] == "down" and llama.url("llama") in report["url"]
            assert report["last_error"], report
            llama.start("llama")
            await service.backends.llm.probe()
            assert backends(service)["llm"]["state"] == "degraded"  # answering again
            again = await client.ask("Tell me my name, please.", limit_s=60)  # the model
            assert again.text.strip() and not again.errors
            history = str((await client.history()).entries)
            assert "My name is Ada" in history and "Tell me my name, please." in history
    finally:
        if llama.services["llama"].proc.poll() is not None:  # type: ignore[union-attr]
            llama.start("llama")
