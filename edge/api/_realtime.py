"""OpenAI's Realtime API over WebSocket at ``/v1/realtime``: one connection is one
participant, whose spoken turns run through the same listener, endpointing, speculation
and speaker as a WebSocket session's (the gateway and the hub; nothing of its own).

Client events served: ``session.update`` (``instructions``: added to the conversation's
system message for this session's turns; output modalities; ``turn_detection``
``server_vad`` or none: then the client's ``commit`` ends each utterance, however long its
pauses), ``input_audio_buffer.append`` (PCM16 at 24 kHz, resampled by the voice pipeline
with soxr) / ``commit`` / ``clear``, ``conversation.item.create`` (a user text message),
``response.create`` (answers the text items created since the last response) and
``response.cancel``. Server events: see :mod:`edge.api._realtime_out`.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import time
from typing import Any

import anyio
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from edge.server import (
    MAX_TEXT_CHARS,
    AudioPacer,
    ClientError,
    LogLimiter,
    ParticipantTaken,
    ServerMessage,
    bearer_token,
    token_matches,
)

from ._errors import ApiError
from ._faces import Faces
from ._realtime_out import RATE, RealtimeEvents, error_event, event, new_id
from ._turns import PREFIX, participant_id

log = logging.getLogger(__name__)
limited_log = LogLimiter(log)

SOURCE = "realtime"
POLICY_VIOLATION = 1008
OUTBOX = 2048
Outgoing = tuple[dict[str, Any] | None, ServerMessage | None, bytes | None]
SPEECH_STARTED: dict[str, Any] = {}  # queued when the participant's speech begins


MAX_INSTRUCTIONS_BYTES = 4096
"""A session's own instructions go into every answer's system message: bounded, so one
client cannot fill the model's context (or the device's memory) with them."""


class RealtimeSession:
    """One ``/v1/realtime`` connection; ``run`` returns when it ends."""

    def __init__(self, ws: ServerConnection, faces: Faces) -> None:
        self.ws = ws
        self.faces = faces
        self.gateway = faces.gateway
        self.pid = ""
        self.events = RealtimeEvents(voice=faces.gateway.models.get("tts", "default"))
        self.turn_detection: dict[str, Any] | None = {"type": "server_vad"}
        self.instructions = ""
        self._pending: list[str] = []  # user text items not yet answered
        self._appended = 0  # audio bytes since the last commit or clear
        self._holding = False
        self._pacer = AudioPacer(faces.access.audio_burst_s, faces.access.audio_rate)
        self._send, self._receive = anyio.create_memory_object_stream[Outgoing](OUTBOX)
        self._scope: anyio.CancelScope | None = None

    # -- hub sink ---------------------------------------------------------------------------

    @property
    def wants_audio(self) -> bool:
        return self.events.audio

    def deliver(self, message: ServerMessage, payload: bytes | None = None) -> None:
        self._queue((None, message, payload))

    def speech_started(self) -> None:
        """The voice activity detector heard speech begin (before any transcript)."""
        self._queue((SPEECH_STARTED, None, None))

    def _emit(self, *events: dict[str, Any]) -> None:
        for item in events:
            self._queue((item, None, None))

    def _queue(self, item: Outgoing) -> None:
        try:
            self._send.send_nowait(item)
        except anyio.WouldBlock:
            log.warning("Realtime client %s reads too slowly; disconnecting", self.pid)
            if self._scope is not None:
                self._scope.cancel()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    # -- lifecycle --------------------------------------------------------------------------

    async def run(self) -> None:
        refusal = self._refusal()
        if refusal is not None:
            await self._refuse(refusal)
            return
        await self.faces.participants.release(self.pid)  # an idle chat participant moves here
        try:
            await self.gateway.hub.arrive(self.pid, self)
        except ParticipantTaken as exc:
            await self._refuse(str(exc))
            return
        try:
            await self.gateway.join(self.pid, "Realtime client", SOURCE)
            self._emit(event("session.created", session=self.session()))
            with anyio.CancelScope() as self._scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._writer)
                    tg.start_soon(self._ticks)
                    await self._reader()
                    tg.cancel_scope.cancel()
        finally:
            self._send.close()
            self.gateway.instructions.pop(self.pid, None)
            async with self.gateway.hub.departure(self.pid, self):
                await self.gateway.leave(self.pid, "connection closed", SOURCE)

    def _refusal(self) -> str | None:
        """Why this connection is not served (checked before it joins)."""
        headers = self.ws.request.headers if self.ws.request is not None else {}
        expected = self.faces.access.current_token()
        if expected is not None and not token_matches(
            expected, bearer_token(headers.get("Authorization"))
        ):
            return "this service needs its device access token as 'Authorization: Bearer <token>'"
        if not self.gateway.voice:
            return "this server runs without voice: the Realtime API needs it"
        name = headers.get("X-Edge-Participant")
        try:
            self.pid = participant_id(name) if name else PREFIX + new_id("rt")
        except ApiError as exc:
            return exc.message
        return None

    async def _refuse(self, message: str) -> None:
        try:
            await self.ws.send(json.dumps(error_event(message, "refused")))
            await self.ws.close(POLICY_VIOLATION, message[:120])
        except ConnectionClosed:
            pass

    async def _ticks(self) -> None:
        while True:
            await anyio.sleep(1.0)
            self._queue((None, None, None))  # the writer checks for a response gone silent

    async def _writer(self) -> None:
        async with self._receive:
            async for item, message, payload in self._receive:
                if item is SPEECH_STARTED:
                    events = self.events.speech_started()
                elif item is not None:
                    events = [item]
                elif message is None:
                    events = self.events.expire(time.monotonic())
                else:
                    events = self.events.convert(message, payload)
                try:
                    for one in events:
                        await self.ws.send(json.dumps(one, separators=(",", ":")))
                except ConnectionClosed:
                    return

    async def _reader(self) -> None:
        try:
            async for raw in self.ws:
                await self._handle(raw)
        except ConnectionClosed:
            pass

    # -- client events ----------------------------------------------------------------------

    async def _handle(self, raw: str | bytes) -> None:
        try:
            message = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
            self._emit(error_event(f"not valid JSON: {exc}", "invalid_json"))
            return
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            self._emit(error_event("an event must be a JSON object with a type", "invalid_event"))
            return
        kind, event_id = message["type"], message.get("event_id")
        handler = HANDLERS.get(kind)
        try:
            if handler is None:
                known = ", ".join(sorted(HANDLERS))
                raise ClientError(f"unknown or unsupported event type {kind!r}; served: {known}")
            await handler(self, message)
        except (ClientError, ApiError) as exc:
            self._emit(error_event(str(exc), "invalid_event", event_id=event_id))
        except Exception as exc:  # a bug or a failing subscriber: report it, keep the session
            limited_log.log(logging.ERROR, kind, "Realtime %s failed", kind, exc_info=True)
            self._emit(
                error_event(
                    f"internal error handling {kind}: {exc}",
                    "server_error",
                    "server_error",
                    event_id=event_id,
                )
            )

    def session(self) -> dict[str, Any]:
        audio_format = {"type": "audio/pcm", "rate": RATE}
        return {
            "type": "realtime",
            "object": "realtime.session",
            "id": self.pid,
            "model": self.faces.llm_id(),
            "output_modalities": ["audio"] if self.events.audio else ["text"],
            "instructions": self.instructions,
            "audio": {
                "input": {
                    "format": audio_format,
                    "turn_detection": self.turn_detection,
                    "transcription": {"model": self.gateway.models.get("stt", "whisper")},
                },
                "output": {"format": audio_format, "voice": self.events.voice},
            },
        }

    async def _session_update(self, message: dict[str, Any]) -> None:
        session = message.get("session")
        if not isinstance(session, dict):
            raise ClientError("session.update needs a session object")
        audio_input = _object(_object(session.get("audio"), "session.audio").get("input"), "input")
        detection = audio_input.get("turn_detection", self.turn_detection)
        if detection is not None and (
            not isinstance(detection, dict)
            or detection.get("type") not in ("server_vad", "semantic_vad")
        ):
            raise ClientError("turn_detection must be server_vad, semantic_vad or null")
        instructions = session.get("instructions")
        if isinstance(instructions, str) and len(instructions.encode()) > MAX_INSTRUCTIONS_BYTES:
            raise ClientError(f"instructions are limited to {MAX_INSTRUCTIONS_BYTES} bytes")
        # checked: now applied, all of it
        modalities = session.get("output_modalities")
        if isinstance(modalities, list):
            self.events.audio = "audio" in modalities
        if isinstance(instructions, str):
            self.instructions = instructions
            if instructions.strip():  # after the service's own (docs/api.md)
                self.gateway.instructions[self.pid] = instructions
            else:
                self.gateway.instructions.pop(self.pid, None)
        self.turn_detection = detection
        self._emit(event("session.updated", session=self.session()))

    async def _append(self, message: dict[str, Any]) -> None:
        audio = message.get("audio") or ""
        wrong = ClientError("audio must be a string: base64 of PCM16 at 24 kHz")
        if not isinstance(audio, str):
            raise wrong
        try:
            pcm = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError):
            raise wrong from None
        if self.turn_detection is None and not self._holding:
            await self.gateway.hold(self.pid, SOURCE)  # only commit ends the utterance
            self._holding = True
        await self.gateway.audio(self.pid, pcm, RATE, 1, SOURCE)
        self._appended += len(pcm)
        self.events.audio_ms += len(pcm) * 1000 // (2 * RATE)
        await self._pacer.take(len(pcm) / (2 * RATE))

    async def _commit(self, message: dict[str, Any]) -> None:
        if self._appended < 2 * RATE // 10:
            raise ClientError(
                "input_audio_buffer.commit: under 100 ms of audio since the last commit"
            )
        self._appended, self._holding = 0, False
        await self.gateway.end_of_utterance(self.pid, SOURCE)

    async def _clear(self, message: dict[str, Any]) -> None:
        self._appended = 0
        self._emit(event("input_audio_buffer.cleared"))

    async def _item_create(self, message: dict[str, Any]) -> None:
        item = message.get("item")
        if not isinstance(item, dict) or item.get("type", "message") != "message":
            raise ClientError("conversation.item.create takes a message item")
        content = item.get("content")
        parts = content if isinstance(content, list) else []
        text = "".join(
            str(p.get("text", ""))
            for p in parts
            if isinstance(p, dict) and p.get("type") in ("input_text", "text")
        )
        if item.get("role") != "user" or not text.strip():
            raise ClientError("conversation.item.create: only user messages with input_text")
        if len(self._pending_text(text)) > MAX_TEXT_CHARS:  # the turn they will make
            raise ClientError(
                f"conversation.item.create: the messages waiting for response.create are over "
                f"{MAX_TEXT_CHARS:,} characters"
            )
        self._pending.append(text)
        self._emit(*self.events.user_item(item.get("id") or new_id("item"), text, audio=False))

    async def _response_create(self, message: dict[str, Any]) -> None:
        if not self._pending:
            if self.events.response is not None or self._holding:
                return  # a spoken turn's response is already on its way
            raise ClientError("response.create: no user message to respond to")
        await self.gateway.query(self.pid, self._pending_text(), SOURCE)
        self._pending = []  # asked: kept until then, so a refused turn loses no item

    def _pending_text(self, *more: str) -> str:
        """The turn the user items waiting for ``response.create`` make (with ``more``)."""
        return "\n".join([*self._pending, *more])

    async def _response_cancel(self, message: dict[str, Any]) -> None:
        response = self.events.response
        if response is None:
            raise ClientError("response.cancel: no response is in progress")
        await self.gateway.interrupt(self.pid, response.turn_id, SOURCE)


def _object(value: Any, where: str) -> dict[str, Any]:
    """An optional object field of an event: ``{}`` when absent, a client error when it
    is not an object."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ClientError(f"{where} must be an object")
    return value


HANDLERS = {
    "session.update": RealtimeSession._session_update,
    "input_audio_buffer.append": RealtimeSession._append,
    "input_audio_buffer.commit": RealtimeSession._commit,
    "input_audio_buffer.clear": RealtimeSession._clear,
    "conversation.item.create": RealtimeSession._item_create,
    "response.create": RealtimeSession._response_create,
    "response.cancel": RealtimeSession._response_cancel,
}
