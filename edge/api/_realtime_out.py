"""What the hub delivers for a Realtime participant, as the Realtime API's server events
(the GA names the pinned ``openai`` SDK reads: ``response.output_audio.delta``,
``response.output_audio_transcript.delta``, ``response.output_text.delta``,
``conversation.item.added``, ...).

* The participant's speech: ``input_audio_buffer.speech_started`` when the voice activity
  detector confirms speech (the hub's ``speech_started``; failing that, at the first
  partial transcript, a barge-in or the final transcript),
  then at the final one ``speech_stopped``, ``committed``, ``conversation.item.added`` and
  ``conversation.item.input_audio_transcription.completed``.
* A turn (``query``) opens a response: ``response.created``, ``response.output_item.added``,
  ``response.content_part.added``; its reply text streams as transcript (audio) or text
  deltas, its speech as ``response.output_audio.delta`` (PCM16 resampled to 24 kHz); it is
  ``response.done`` when the turn is idle and every source that replied has spoken its last
  chunk, or ``cancelled`` when it was interrupted (a barge-in, ``response.cancel``).
"""

from __future__ import annotations

import base64
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edge.server import (
    BACKEND_FAILED,
    TOO_LONG,
    AudioMessage,
    ErrorMessage,
    InterruptedMessage,
    QueryEcho,
    Reply,
    ServerMessage,
    Status,
    TranscriptMessage,
)
from edge.voice import StreamResampler, float_to_pcm16, pcm16_to_float

RATE = 24_000
SPEECH_WAIT_S = 15.0  # after a turn is idle, the longest its speech may stay silent


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


def event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "event_id": new_id("event"), **fields}


def error_event(
    message: str,
    code: str | None = None,
    kind: str = "invalid_request_error",
    param: str | None = None,
    event_id: str | None = None,
) -> dict[str, Any]:
    error = {"type": kind, "code": code, "message": message, "param": param, "event_id": event_id}
    return event("error", error=error)


@dataclass
class _Response:
    id: str
    turn_id: str
    item_id: str
    audio: bool
    text: str = ""
    sources: set[str] = field(default_factory=set)  # sources that replied
    spoken: set[str] = field(default_factory=set)  # sources whose last chunk was sent
    idle: bool = False
    resampler: StreamResampler | None = None
    last_seen: float = field(default_factory=time.monotonic)  # its latest frame

    def ids(self) -> dict[str, Any]:
        return {
            "response_id": self.id,
            "item_id": self.item_id,
            "output_index": 0,
            "content_index": 0,
        }

    @property
    def complete(self) -> bool:
        return self.idle and (not self.audio or self.sources <= self.spoken)


class RealtimeEvents:
    """Turns hub messages into Realtime server events; one per session."""

    def __init__(self, voice: str) -> None:
        self.voice = voice
        self.audio = True  # output_modalities has "audio"
        self.response: _Response | None = None
        self._speech_item: str | None = None  # the utterance being heard
        self._last_item: str | None = None
        self.audio_ms = 0  # input audio appended so far

    def status(self, response: _Response, status: str, reason: str | None = None) -> dict[str, Any]:
        kind = "output_audio" if response.audio else "output_text"
        content = {"type": kind, ("transcript" if response.audio else "text"): response.text}
        item = {
            "id": response.item_id,
            "object": "realtime.item",
            "type": "message",
            "role": "assistant",
            "status": "completed" if status == "completed" else "incomplete",
            "content": [content] if status != "in_progress" else [],
        }
        details = {"type": status, "reason": reason} if reason else None
        modalities = ["audio"] if response.audio else ["text"]
        return {
            "id": response.id,
            "object": "realtime.response",
            "status": status,
            "status_details": details,
            "output": [item],
            "conversation_id": None,
            "output_modalities": modalities,
            "audio": {
                "output": {"format": {"type": "audio/pcm", "rate": RATE}, "voice": self.voice}
            },
            "usage": None,
        }

    def expire(self, now: float) -> list[dict[str, Any]]:
        """A turn idle whose speech stopped coming (a voice that failed) is done anyway."""
        response = self.response
        if response is not None and response.idle and now - response.last_seen > SPEECH_WAIT_S:
            return self._finish("completed")
        return []

    def convert(self, message: ServerMessage, payload: bytes | None) -> list[dict[str, Any]]:
        if self.response is not None:
            self.response.last_seen = time.monotonic()
        if isinstance(message, TranscriptMessage):
            return self._transcript(message)
        if isinstance(message, QueryEcho):
            return self._open(message.request_id)
        if isinstance(message, Reply):
            return self._reply(message)
        if isinstance(message, AudioMessage):
            return self._audio(message, payload or b"")
        if isinstance(message, Status) and message.state == "idle":
            return self._idle()
        if isinstance(message, InterruptedMessage):
            return self._interrupted(message)
        if isinstance(message, ErrorMessage) and message.code in (BACKEND_FAILED, TOO_LONG):
            return [error_event(message.message, message.code, "server_error")]
        return []

    # -- the participant's speech ---------------------------------------------------------

    def speech_started(self) -> list[dict[str, Any]]:
        if self._speech_item is not None:
            return []
        self._speech_item = new_id("item")
        return [
            event(
                "input_audio_buffer.speech_started",
                audio_start_ms=self.audio_ms,
                item_id=self._speech_item,
            )
        ]

    def _transcript(self, message: TranscriptMessage) -> list[dict[str, Any]]:
        if not message.final:
            return self.speech_started() if message.text.strip() else []
        events = self.speech_started()
        item_id, self._speech_item = self._speech_item, None
        events.append(
            event("input_audio_buffer.speech_stopped", audio_end_ms=self.audio_ms, item_id=item_id)
        )
        text = message.text.strip()
        if not text:
            return events
        return events + self.user_item(item_id or new_id("item"), text, audio=True)

    def user_item(self, item_id: str, text: str, *, audio: bool) -> list[dict[str, Any]]:
        previous, self._last_item = self._last_item, item_id
        part = (
            {"type": "input_audio", "transcript": text}
            if audio
            else {"type": "input_text", "text": text}
        )
        item = {
            "id": item_id,
            "object": "realtime.item",
            "type": "message",
            "role": "user",
            "status": "completed",
            "content": [part],
        }
        events = []
        if audio:
            events.append(
                event("input_audio_buffer.committed", item_id=item_id, previous_item_id=previous)
            )
        events += [
            event("conversation.item.added", item=item, previous_item_id=previous),
            event("conversation.item.done", item=item, previous_item_id=previous),
        ]
        if audio:
            events.append(
                event(
                    "conversation.item.input_audio_transcription.completed",
                    item_id=item_id,
                    content_index=0,
                    transcript=text,
                    usage={"type": "duration", "seconds": self.audio_ms / 1000},
                )
            )
        return events

    # -- the response ---------------------------------------------------------------------

    def _open(self, turn_id: str) -> list[dict[str, Any]]:
        events = self._finish("cancelled", "turn_detected") if self.response else []
        response = self.response = _Response(new_id("resp"), turn_id, new_id("item"), self.audio)
        item = self.status(response, "in_progress")["output"][0]
        kind = "audio" if response.audio else "text"
        part = {"type": kind, ("transcript" if response.audio else "text"): ""}
        return events + [
            event("response.created", response=self.status(response, "in_progress")),
            event("response.output_item.added", response_id=response.id, output_index=0, item=item),
            event("conversation.item.added", item=item, previous_item_id=self._last_item),
            event("response.content_part.added", **response.ids(), part=part),
        ]

    def _current(self, turn_id: str | None) -> _Response | None:
        response = self.response
        return response if response is not None and response.turn_id == turn_id else None

    def _reply(self, frame: Reply) -> list[dict[str, Any]]:
        response = self._current(frame.request_id)
        if response is None:
            return []
        response.sources.add(frame.source)
        text = frame.text if frame.source != "router" else frame.text.strip() + " "
        if not frame.text:
            return []
        response.text += text
        kind = (
            "response.output_audio_transcript.delta"
            if response.audio
            else "response.output_text.delta"
        )
        return [event(kind, **response.ids(), delta=text)]

    def _audio(self, header: AudioMessage, pcm: bytes) -> list[dict[str, Any]]:
        response = self._current(header.request_id)
        if response is None or not response.audio:
            return []
        if response.resampler is None:
            response.resampler = StreamResampler(header.sample_rate, RATE)
        audio = response.resampler.process(pcm16_to_float(pcm), last=header.final)
        events = []
        if audio.size:
            delta = base64.b64encode(float_to_pcm16(np.asarray(audio))).decode()
            events.append(event("response.output_audio.delta", **response.ids(), delta=delta))
        if header.final:
            response.spoken.add(header.source)
            if response.complete:
                events += self._finish("completed")
        return events

    def _idle(self) -> list[dict[str, Any]]:
        response = self.response
        if response is None:
            return []
        response.idle = True
        return self._finish("completed") if response.complete else []

    def _interrupted(self, message: InterruptedMessage) -> list[dict[str, Any]]:
        response = self.response
        if response is None or message.request_id not in (None, response.turn_id):
            return []
        events = self.speech_started() if message.reason == "barge-in" else []
        reason = "turn_detected" if message.reason == "barge-in" else "client_cancelled"
        return events + self._finish("cancelled", reason)

    def _finish(self, status: str, reason: str | None = None) -> list[dict[str, Any]]:
        response, self.response = self.response, None
        if response is None:
            return []
        self._last_item = response.item_id
        done = self.status(response, status, reason)
        item = done["output"][0]
        events = []
        if status == "completed":
            kind = "output_audio_transcript" if response.audio else "output_text"
            field_name = "transcript" if response.audio else "text"
            if response.audio:
                events.append(event("response.output_audio.done", **response.ids()))
            events.append(
                event(f"response.{kind}.done", **response.ids(), **{field_name: response.text})
            )
            events.append(
                event("response.content_part.done", **response.ids(), part=item["content"][0])
            )
        events += [
            event("response.output_item.done", response_id=response.id, output_index=0, item=item),
            event("conversation.item.done", item=item, previous_item_id=None),
            event("response.done", response=done),
        ]
        return events
