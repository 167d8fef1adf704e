"""Speech streamed to remote Wyoming servers as it happens: the utterance sent to the
recognizer while it is spoken (the real ``wyoming-faster-whisper``, and our own ``edge
serve`` Wyoming asr, which streams its transcripts), a stream dropped mid-utterance,
partial transcripts streamed by a server (a small scripted one: neither real server sends
transcript chunks before the utterance ends), and a reply's sentences streamed to the real
``wyoming-piper`` over one connection, closed by a barge-in. Connections are counted (and
what the client sent on them read) at a proxy."""

from __future__ import annotations

import time

import anyio
import pytest

from edge.decisions import ScriptedDecisions
from edge.llm import ScriptedLLM, ScriptedReply
from edge.server import EdgeService, SpeechParts
from edge.voice import VoiceConfig
from tests.remote_helpers import QUESTION, Servers, speaker
from tests.server_helpers import answer_for, settings
from tests.stream_helpers import proxy_to, streaming_asr
from tests.voice_helpers import heard_as

pytestmark = [pytest.mark.anyio, pytest.mark.model]

ONLY_THE_STREAM = VoiceConfig(playback_speed=0, partial_interval_s=0, speculative_final=False)
"""No partial or speculative passes: every transcript of the turn comes from the stream."""


def remote(stt_url: str, servers: Servers, config: VoiceConfig = ONLY_THE_STREAM) -> EdgeService:
    return EdgeService(
        settings(voice=True, stt_url=stt_url, tts_url=servers.url("piper"), remote_timeout_s=5),
        llm=ScriptedLLM(answer_for),
        decisions=ScriptedDecisions("conversation"),
        speech=SpeechParts(config=config),
    )


async def test_the_utterance_streams_to_remote_whisper_over_one_connection_as_it_is_spoken(
    servers: Servers, question: bytes
) -> None:
    async with proxy_to(servers.url("whisper")) as proxy:
        service = remote(proxy.url, servers)
        async with service, speaker(service) as client:
            began = time.perf_counter()  # (the service warmed the recognizer up at start)
            spoken_until = await client.speak(question, trailing_silence_s=1.0)
            turn = await client.collect_turn(limit_s=60)
            assert heard_as(turn.query, QUESTION), turn.query
            assert not turn.errors
            listener, _ = service.voice.session("p1")  # type: ignore[union-attr]
            stats = listener.stats[-1]
    audio = proxy.with_audio(since=began)
    assert len(audio) == 1, proxy.connections  # the whole utterance over one connection
    streamed = audio[0]
    assert streamed.first_audio_at is not None
    assert streamed.first_audio_at < spoken_until - 1.0  # sent while it was spoken
    assert streamed.last_sent_at >= spoken_until
    assert stats.passes == 1 and stats.final_pass_s < 5


async def test_a_stream_not_needed_is_closed_without_asking_for_a_transcript(
    servers: Servers, question: bytes
) -> None:
    """The pause's pass covered the utterance: its text is the final transcript, and the
    utterance's stream is closed without ``audio-stop`` (the server decodes nothing)."""
    config = VoiceConfig(playback_speed=0, partial_interval_s=0, speculative_final=True)
    async with proxy_to(servers.url("whisper")) as proxy:
        service = remote(proxy.url, servers, config)
        async with service, speaker(service) as client:
            began = time.perf_counter()
            await client.speak(question, trailing_silence_s=1.0)
            turn = await client.collect_turn(limit_s=60)
            assert heard_as(turn.query, QUESTION), turn.query
            listener, _ = service.voice.session("p1")  # type: ignore[union-attr]
            assert listener.stats[-1].reused_pass  # the pause's pass gave the final text
            streams = [c for c in proxy.with_audio(since=began) if c.events("audio-start")]
            stream = min(streams, key=lambda c: c.opened_at)  # opened at speech start
            with anyio.fail_after(5):
                await stream.closed.wait()
    assert len(streams) == 2  # the stream and the pause's pass
    assert not stream.events("audio-stop")


async def test_a_stream_dropped_mid_utterance_still_gives_the_final_transcript(
    servers: Servers, question: bytes
) -> None:
    async with proxy_to(servers.url("whisper")) as proxy:
        service = remote(proxy.url, servers)
        async with service, speaker(service) as client:
            proxy.drop_after = len(question) // 2  # the stream is cut half way through
            began = time.perf_counter()
            await client.speak(question, trailing_silence_s=1.0)
            turn = await client.collect_turn(limit_s=60)
            assert heard_as(turn.query, QUESTION), turn.query  # nothing lost
            assert not turn.errors
            report = service.backends.health()["stt"]
    assert proxy.dropped == 1
    _streamed, whole = proxy.with_audio(since=began)  # the cut stream, then one whole request
    assert whole.sent > len(question)
    assert report["state"] == "ok", report  # the whole request answered


async def test_a_spoken_turn_through_the_edge_wyoming_asr_streams_its_transcript(
    servers: Servers, question: bytes
) -> None:
    asr = EdgeService(
        settings(voice=True, wyoming_port=0),
        llm=ScriptedLLM(answer_for),
        decisions=ScriptedDecisions("conversation"),
    )
    async with asr:
        assert asr.wyoming is not None
        upstream = f"tcp://127.0.0.1:{asr.wyoming.bound_port}"
        async with proxy_to(upstream) as proxy:
            service = remote(proxy.url, servers)
            async with service, speaker(service) as client:
                began = time.perf_counter()
                spoken_until = await client.speak(question, trailing_silence_s=1.0)
                turn = await client.collect_turn(limit_s=60)
                assert heard_as(turn.query, QUESTION), turn.query
                assert not turn.errors
                report = service.backends.health()["stt"]
    assert report["streams_transcripts"] is True  # its info says so; it streams the final
    assert report["transcripts"].startswith("final only"), report  # no passes were made
    (streamed,) = proxy.with_audio(since=began)
    assert streamed.first_audio_at is not None
    assert streamed.first_audio_at < spoken_until - 1.0


async def test_partial_transcripts_come_from_a_server_that_streams_them(
    servers: Servers, question: bytes
) -> None:
    config = VoiceConfig(playback_speed=0, partial_interval_s=0.5, speculative_final=False)
    async with streaming_asr(QUESTION) as url, proxy_to(url) as proxy:
        service = remote(proxy.url, servers, config)
        async with service, speaker(service) as client:
            began = time.perf_counter()
            await client.speak(question, trailing_silence_s=1.0)
            turn = await client.collect_turn(limit_s=60)
            report = service.backends.health()["stt"]
    assert report["transcripts"] == "partial (streamed by the server) and final", report
    partials = [t.text for t in turn.transcripts if not t.final]
    assert partials and partials[0] == "w1", partials  # as the server streamed them
    assert all(p.startswith("w1") for p in partials), partials
    assert turn.query == QUESTION
    assert len(proxy.with_audio(since=began)) == 1  # no separate partial passes


def reply_for(text: str, delay_s: float) -> ScriptedLLM:
    return ScriptedLLM(lambda messages: ScriptedReply(text, delay_s=delay_s))


def remote_tts(tts_url: str, llm: ScriptedLLM, speed: float) -> EdgeService:
    return EdgeService(
        settings(voice=True, tts_url=tts_url, remote_timeout_s=5, reply_sentences=0),
        llm=llm,
        decisions=ScriptedDecisions("conversation"),
        speech=SpeechParts(config=VoiceConfig(playback_speed=speed, partial_interval_s=0)),
    )


async def test_a_reply_streams_to_remote_piper_sentence_by_sentence_over_one_connection(
    servers: Servers,
) -> None:
    reply = "The first sentence is short. Then a second one follows. And the third ends it."
    async with proxy_to(servers.url("piper")) as proxy:
        service = remote_tts(proxy.url, reply_for(reply, delay_s=0.08), speed=0)
        async with service, speaker(service) as client:
            arrivals: list[tuple[str, float]] = []

            def note(message: object) -> None:
                kind = getattr(message, "type", "")
                if kind == "audio" or (kind == "reply" and getattr(message, "final", False)):
                    arrivals.append((kind, time.perf_counter()))

            began = time.perf_counter()
            turn = await client.ask("tell me three things", limit_s=60, on_message=note)
            assert turn.text == reply and len(turn.pcm) > 16_000
            assert not turn.errors
            report = service.backends.health()["tts"]
    assert report["streams_synthesis"] is True
    first_audio = next(at for kind, at in arrivals if kind == "audio")
    reply_done = next(at for kind, at in arrivals if kind == "reply")
    assert first_audio < reply_done  # spoken while the model still wrote (not held back)
    streams = [c for c in proxy.connections if c.opened_at > began and c.events("synthesize-start")]
    assert len(streams) == 1, proxy.connections  # one connection for the reply
    (stream,) = streams
    assert stream.events("synthesize-chunk") == 3 and stream.events("synthesize-stop") == 1
    assert not stream.events("synthesize")  # no per-sentence requests beside it
    assert stream.closed_at is not None


async def test_a_barge_in_closes_the_reply_stream_and_nothing_more_is_asked(
    servers: Servers,
) -> None:
    long_reply = " ".join(f"This is sentence number {n} of a long answer." for n in range(12))
    async with proxy_to(servers.url("piper")) as proxy:
        service = remote_tts(proxy.url, reply_for(long_reply, delay_s=0), speed=1.0)
        async with service, speaker(service) as client:
            began = time.perf_counter()
            await client.send({"type": "text", "text": "a long answer please"})
            interrupted_at = 0.0
            with anyio.fail_after(30):
                while not interrupted_at:
                    message, _ = await client.receive()
                    if getattr(message, "type", "") == "audio":
                        await client.send({"type": "interrupt"})
                        interrupted_at = time.perf_counter()
            streams = [c for c in proxy.connections if c.opened_at > began]
            (stream,) = [c for c in streams if c.events("synthesize-start")]
            with anyio.fail_after(10):
                await stream.closed.wait()
            await anyio.sleep(1.0)  # (a speaker still asking would open a connection now)
            later = [c for c in proxy.connections if c.opened_at > interrupted_at]
    assert stream.closed_at - interrupted_at < 3.0
    assert stream.events("synthesize-chunk") < 12  # the rest was never asked for
    assert not stream.events("synthesize-stop")  # closed, not finished
    assert not later, later
