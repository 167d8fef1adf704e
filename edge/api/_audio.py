"""OpenAI's audio API over the voice pipeline's own models: ``POST /v1/audio/transcriptions``
(a multipart upload in any format faster-whisper decodes: WAV, MP3, FLAC, Ogg, WebM, M4A,
...) and ``POST /v1/audio/speech`` (WAV or raw PCM16 at 24 kHz, streamed sentence by
sentence as it is synthesized)."""

from __future__ import annotations

import io
import struct
from collections.abc import AsyncIterator
from typing import Any, Literal

import anyio
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from edge.voice import (
    STT_RATE,
    NothingToSpeakError,
    SentenceSplitter,
    StreamResampler,
    float_to_pcm16,
    speakable,
)

from ._errors import ApiError, invalid
from ._faces import Faces

OUT_RATE = 24_000  # OpenAI's PCM rate (and ours for WAV too)
WINDOW_S = 30  # Whisper's window: a long recording is transcribed window by window
FORMATS = ("json", "text", "verbose_json")


def _need(model: Any, what: str) -> Any:
    if model is None:
        raise ApiError(503, f"this server runs without voice: no {what}")
    return model


def decode(data: bytes) -> np.ndarray:
    """16 kHz mono float32 from any container and codec PyAV reads (faster-whisper's
    decoder)."""
    from faster_whisper.audio import decode_audio

    try:
        return decode_audio(io.BytesIO(data), sampling_rate=STT_RATE)
    except Exception as exc:  # PyAV's errors name the problem; the type does not matter
        raise ApiError(400, f"file: could not decode the audio ({exc})", param="file") from None


async def _form_file(request: Request) -> tuple[bytes, dict[str, str]]:
    try:
        form = await request.form(max_files=1, max_fields=32, max_part_size=64 * 1024)
    except ApiError:
        raise
    except Exception as exc:
        raise ApiError(400, f"the body is not a valid multipart form: {exc}") from None
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise ApiError(400, "file is required (a multipart upload)", param="file")
    data = await upload.read()
    await form.close()
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    return data, fields


async def transcriptions(faces: Faces, request: Request) -> Response:
    stt = _need(faces.stt, "speech recognition")
    data, fields = await _form_file(request)
    fmt = fields.get("response_format", "json")
    if fmt not in FORMATS:
        raise ApiError(
            400, f"response_format must be one of {', '.join(FORMATS)}", param="response_format"
        )
    audio = await anyio.to_thread.run_sync(decode, data)
    duration = len(audio) / STT_RATE
    if duration > faces.limits.max_audio_s:
        limit = faces.limits.max_audio_s
        raise ApiError(400, f"file: the recording is over {limit:g} s", param="file")
    texts = []
    for start in range(0, max(len(audio), 1), WINDOW_S * STT_RATE):
        piece = audio[start : start + WINDOW_S * STT_RATE]
        result = await anyio.to_thread.run_sync(stt.transcribe, piece)
        texts.append(result.text.strip())
    text = " ".join(t for t in texts if t)
    if fmt == "text":
        return PlainTextResponse(text + "\n")
    if fmt == "verbose_json":
        segment = {"id": 0, "seek": 0, "start": 0.0, "end": duration, "text": text}
        return JSONResponse(
            {
                "task": "transcribe",
                "language": "english",
                "duration": duration,
                "text": text,
                "segments": [segment] if text else [],
            }
        )
    return JSONResponse({"text": text})


class SpeechRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # fields we do not serve are accepted, unused

    input: str = Field(min_length=1)
    model: str = ""
    voice: Any = None
    response_format: Literal["wav", "pcm"] = "wav"
    speed: float = Field(default=1.0, ge=0.25, le=4.0)


async def speech(faces: Faces, request: Request) -> Response:
    tts = _need(faces.tts, "speech synthesis")
    try:
        body = SpeechRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        raise invalid(exc) from None
    limit = faces.limits.max_speech_chars
    if len(body.input) > limit:
        raise ApiError(400, f"input is over {limit:,} characters", param="input")
    if not speakable(body.input):
        raise ApiError(400, "input has nothing to speak", param="input")
    sentences = [*(splitter := SentenceSplitter()).feed(body.input), *splitter.flush()]
    media = "audio/wav" if body.response_format == "wav" else "audio/pcm"
    return StreamingResponse(_spoken(tts, sentences, body.response_format), media_type=media)


async def _spoken(tts: Any, sentences: list[str], fmt: str) -> AsyncIterator[bytes]:
    """Each sentence as soon as it is synthesized (the voice is held one sentence at a
    time, so other participants' speech interleaves), resampled to 24 kHz."""
    if fmt == "wav":
        yield wav_header(OUT_RATE)
    resampler = StreamResampler(tts.sample_rate, OUT_RATE)
    for sentence in sentences:
        try:
            synthesis = await anyio.to_thread.run_sync(tts.synthesize, sentence)
        except NothingToSpeakError:
            continue
        yield float_to_pcm16(resampler.process(synthesis.audio))
    if (tail := resampler.process(np.zeros(0, np.float32), last=True)).size:
        yield float_to_pcm16(tail)


def wav_header(rate: int) -> bytes:
    """A WAV header for a stream of unknown length (the sizes say "to the end"), as
    OpenAI's streamed WAV has."""
    unknown = 0xFFFFFFFF
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    return (
        b"RIFF"
        + struct.pack("<I", unknown)
        + b"WAVEfmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + b"data"
        + struct.pack("<I", unknown)
    )
