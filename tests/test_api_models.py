"""``edge serve`` with the real default models (over TLS, as by default), driven by the
clients people use: the ``openai`` SDK (chat, transcription, speech) and the ``ollama``
client (list, show, chat)."""

from __future__ import annotations

import base64
import io
import os
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import numpy as np
import pytest

from edge.voice import PiperTTS, wav_bytes
from tests.api_helpers import ollama_client, openai_client, trust

pytestmark = [pytest.mark.model, pytest.mark.anyio]

EDGE = [sys.executable, "-m", "edge"]
QUESTION = "What is the capital of France?"


@dataclass
class Served:
    base: str  # https://127.0.0.1:PORT
    token: str
    verify: ssl.SSLContext
    process: subprocess.Popen[str]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``edge serve`` on 127.0.0.1 with its default models and TLS."""
    data = tmp_path_factory.mktemp("api-serve")
    env = {**os.environ, "EDGE_DATA_DIR": str(data)}
    env.pop("EDGE_TLS", None)
    command = [*EDGE, "serve", "--host", "127.0.0.1", "--port", "0", "--no-mdns", "--no-wyoming"]
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert process.stdout is not None
        base = ""
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            if line.startswith("OpenAI API: "):
                base = line.split()[2].removesuffix("/v1")
                break
        assert base.startswith("https://127.0.0.1:"), "edge serve did not start"
        token = (data / "token").read_text().strip()
        yield Served(base, token, trust(data), process)
    finally:
        process.terminate()
        process.wait(timeout=60)


@pytest.fixture(scope="module")
def recording() -> bytes:
    """Piper (the default voice, without its random variation) asking ``QUESTION``: WAV."""
    tts = PiperTTS(noise_scale=0.0, noise_w_scale=0.0)
    synthesis = tts.synthesize(QUESTION)
    silence = np.zeros(synthesis.sample_rate // 2, np.float32)
    audio = np.concatenate([silence, synthesis.audio, silence])
    return wav_bytes(audio, synthesis.sample_rate)


def flac(wav: bytes) -> bytes:
    """The same recording as FLAC (faster-whisper reads it through PyAV)."""
    import av

    out = io.BytesIO()
    with av.open(io.BytesIO(wav)) as source, av.open(out, "w", format="flac") as sink:
        stream = sink.add_stream("flac", rate=source.streams.audio[0].rate)
        for frame in source.decode(audio=0):
            for packet in stream.encode(frame):
                sink.mux(packet)
        for packet in stream.encode(None):
            sink.mux(packet)
    return out.getvalue()


async def test_chat_whole_and_streamed_stateless_and_as_a_participant(served: Served) -> None:
    async with openai_client(served.base, served.token, served.verify) as client:
        models = [m.id async for m in client.models.list()]
        assert models[0].startswith(("smollm", "qwen", "llama")), models
        messages = [{"role": "user", "content": QUESTION}]
        # greedy, and checked for an answer about the question rather than its exact words:
        # the 135M model's greedy answer moves with the thread count (adaptive threads), and
        # it sometimes names the capital wrongly; this checks the API path, not the model
        whole = await client.chat.completions.create(
            model=models[0], messages=messages, temperature=0
        )
        assert any(w in (whole.choices[0].message.content or "") for w in ("Paris", "France"))
        assert whole.choices[0].finish_reason in ("stop", "length")
        assert whole.usage is not None and whole.usage.prompt_tokens > 5
        stream = await client.chat.completions.create(
            model=models[0],
            messages=messages,
            stream=True,
            user="ada",
            max_tokens=40,
            temperature=0,
        )
        pieces = [c.choices[0].delta.content async for c in stream if c.choices]
        assert any(w in "".join(p or "" for p in pieces) for w in ("Paris", "France"))
        assert len([p for p in pieces if p]) > 1


async def test_responses_streamed_then_continued_by_previous_response_id(served: Served) -> None:
    async with openai_client(served.base, served.token, served.verify) as client:
        events = [
            event
            async for event in await client.responses.create(
                model="edge", input=QUESTION, temperature=0, stream=True
            )
        ]
        done = events[-1]
        assert done.type in ("response.completed", "response.incomplete")
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert text and done.response.output_text == text
        assert any(w in text for w in ("Paris", "France"))  # see above
        assert done.response.usage is not None and done.response.usage.input_tokens > 5
        follow_up = await client.responses.create(
            model="edge",
            input="Say that again.",
            previous_response_id=done.response.id,
            temperature=0,
        )
        assert follow_up.output_text and follow_up.previous_response_id == done.response.id
        # the follow-up was asked with the first exchange before it: its prompt holds both
        assert follow_up.usage is not None
        assert follow_up.usage.input_tokens > done.response.usage.input_tokens


async def test_transcription_of_a_piper_recording(served: Served, recording: bytes) -> None:
    async with openai_client(served.base, served.token, served.verify) as client:
        heard = await client.audio.transcriptions.create(
            model="whisper-1", file=("question.wav", recording, "audio/wav")
        )
        assert "capital of France" in heard.text
        text = await client.audio.transcriptions.create(
            model="whisper-1", file=("question.flac", flac(recording)), response_format="text"
        )
        assert "capital of France" in text
        verbose = await client.audio.transcriptions.create(
            model="whisper-1", file=("q.wav", recording), response_format="verbose_json"
        )
        assert verbose.duration > 1.5 and "capital" in verbose.text


async def test_speech_wav_and_pcm_streamed_and_heard_again(served: Served) -> None:
    async with openai_client(served.base, served.token, served.verify) as client:
        sentences = "Paris is the capital of France. It is on the Seine."
        chunks = []
        async with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=sentences, response_format="pcm"
        ) as response:
            async for chunk in response.iter_bytes():
                chunks.append(chunk)
        pcm = b"".join(chunks)
        assert len(pcm) / 2 / 24_000 > 2.0  # 24 kHz PCM16, two sentences
        wav = (
            await client.audio.speech.create(model="tts-1", voice="alloy", input=QUESTION)
        ).read()
        assert wav[:4] == b"RIFF" and wav[8:12] == b"WAVE"
        heard = await client.audio.transcriptions.create(model="whisper-1", file=("a.wav", wav))
        assert "capital of France" in heard.text
        assert served.process.poll() is None  # and the service runs on


async def test_ollama_list_show_and_chat_streamed(served: Served) -> None:
    async with ollama_client(served.base, served.token, served.verify) as client:
        listed = await client.list()
        name = listed.models[0].model
        assert name and name.endswith(":latest")
        shown = await client.show(name)
        assert shown.modelinfo and shown.modelinfo["general.context_length"] > 0
        parts = [
            part
            async for part in await client.chat(
                model=name,
                messages=[{"role": "user", "content": QUESTION}],
                stream=True,
                options={"num_ctx": 4096},
                keep_alive="5m",
            )
        ]
        text = "".join(p.message.content or "" for p in parts)
        assert parts[-1].done and any(w in text for w in ("Paris", "France"))  # see above


async def test_ollama_generate_streamed_and_whole(served: Served) -> None:
    async with ollama_client(served.base, served.token, served.verify) as client:
        name = (await client.list()).models[0].model
        parts = [
            part
            async for part in await client.generate(
                model=name, prompt=QUESTION, system="Answer in one short sentence.", stream=True
            )
        ]
        text = "".join(p.response for p in parts)
        final = parts[-1]
        assert final.done and final.done_reason in ("stop", "length")
        assert any(w in text for w in ("Paris", "France"))  # see above
        assert final.prompt_eval_count and final.eval_count and final.eval_duration
        whole = await client.generate(model=name, prompt=QUESTION, stream=False)
        assert whole.done and any(w in whole.response for w in ("Paris", "France"))


def pcm24(wav: bytes) -> bytes:
    """A WAV recording as the Realtime API's input: PCM16 mono at 24 kHz."""
    from edge.voice import float_to_pcm16, read_wav, resample

    audio = read_wav(wav)
    return float_to_pcm16(resample(audio.audio, audio.sample_rate, 24_000))


async def stream_audio(connection: Any, pcm: bytes, chunk_s: float = 0.1) -> None:
    """Real-time paced microphone audio, as a headset sends it."""
    step = int(24_000 * chunk_s) * 2
    for i in range(0, len(pcm), step):
        await connection.input_audio_buffer.append(
            audio=base64.b64encode(pcm[i : i + step]).decode()
        )
        await anyio.sleep(chunk_s)


async def test_a_realtime_spoken_turn_and_a_barge_in_that_cancels(
    served: Served, recording: bytes
) -> None:
    question = pcm24(recording) + bytes(2 * 24_000 * 2)  # and two seconds of silence
    async with openai_client(served.base, served.token, served.verify) as client:
        async with client.realtime.connect(
            model="edge", websocket_connection_options={"ssl": served.verify}
        ) as connection:
            await connection.session.update(
                session={"type": "realtime", "output_modalities": ["audio"]}
            )
            seen: list[Any] = []
            speech_ends = anyio.current_time() + len(pcm24(recording)) / 2 / 24_000
            async with anyio.create_task_group() as tg:
                tg.start_soon(stream_audio, connection, question)
                async for received in connection:
                    seen.append(received)
                    if received.type == "input_audio_buffer.speech_started":
                        started_at = anyio.current_time()
                    if received.type == "response.done":
                        break
            assert started_at < speech_ends  # while the question is still being spoken
            kinds = [e.type for e in seen]
            heard = next(
                e for e in seen if e.type == "conversation.item.input_audio_transcription.completed"
            )
            assert "capital of France" in heard.transcript
            assert (
                kinds.index("input_audio_buffer.speech_started")
                < kinds.index("input_audio_buffer.speech_stopped")
                < kinds.index("response.created")
            )
            transcript = "".join(
                e.delta for e in seen if e.type == "response.output_audio_transcript.delta"
            )
            assert any(w in transcript for w in ("Paris", "France"))  # see above
            audio = b"".join(
                base64.b64decode(e.delta) for e in seen if e.type == "response.output_audio.delta"
            )
            assert len(audio) / 2 / 24_000 > 0.5  # speech, at 24 kHz
            assert seen[-1].response.status == "completed"

            # a long answer, interrupted by speaking over it: the response is cancelled
            await connection.conversation.item.create(
                item={
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "Tell me a long story about a dragon."}
                    ],
                }
            )
            await connection.response.create()
            after: list[str] = []
            async with anyio.create_task_group() as tg:
                async for received in connection:
                    after.append(received.type)
                    if (
                        received.type == "response.output_audio.delta"
                        and after.count(received.type) == 1
                    ):
                        tg.start_soon(stream_audio, connection, question)  # the barge-in
                    if received.type == "response.done":
                        status = received.response.status
                        break
                tg.cancel_scope.cancel()
            assert status == "cancelled"
            assert "input_audio_buffer.speech_started" in after
