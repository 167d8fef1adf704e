"""``edge serve`` with the real default models (over TLS, as by default), driven by the
clients people use: the ``openai`` SDK (chat, transcription, speech) and the ``ollama``
client (list, show, chat)."""

from __future__ import annotations

import io
import os
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

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
        whole = await client.chat.completions.create(model=models[0], messages=messages)
        assert "Paris" in (whole.choices[0].message.content or "")
        assert whole.usage is not None and whole.usage.prompt_tokens > 5
        stream = await client.chat.completions.create(
            model=models[0], messages=messages, stream=True, user="ada", max_tokens=40
        )
        pieces = [c.choices[0].delta.content async for c in stream if c.choices]
        assert "Paris" in "".join(p or "" for p in pieces)
        assert len([p for p in pieces if p]) > 1


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
        assert parts[-1].done and "Paris" in "".join(p.message.content or "" for p in parts)
