"""Reading Wyoming events from an untrusted peer, within limits.

The ``wyoming`` package's own reader trusts the header: it reads whatever ``data_length``
and ``payload_length`` declare, waits forever for bytes that never come, and fails on a
length of the wrong type. :func:`read_event` checks each header field's type and size
*before* reading what it announces, and reads every part within a deadline.
:class:`EventError` is a problem with one event (its header line was consumed: the
connection can go on); :class:`FramingError` leaves the stream unusable (close it).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import anyio
from wyoming.event import Event

MAX_LINE_BYTES = 64 * 1024  # asyncio's default stream limit: a longer line cannot be read


@dataclass(frozen=True)
class ReadLimits:
    read_timeout_s: float = 30.0
    max_data_bytes: int = 64 * 1024
    max_payload_bytes: int = 1 << 20  # 100 ms of 192 kHz stereo PCM16 is 77 KB


class EventError(ValueError):
    """One event could not be used; the stream is still in step."""


class FramingError(ValueError):
    """The stream cannot be read on (a length over the limit or of the wrong type, a line
    too long, a peer silent past the read timeout): answer an error and close."""


def _length(header: dict[str, Any], key: str, limit: int) -> int:
    value = header.get(key)
    if value is None:
        return 0
    if type(value) is not int or value < 0:  # bool is an int subclass: refuse it too
        raise FramingError(f"{key} must be a non-negative integer, got {type(value).__name__}")
    if value > limit:
        raise FramingError(f"{key} {value} is over this server's limit of {limit} bytes")
    return value


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise EventError(f"{what} is not valid JSON: {str(exc)[:80]}") from None
    if not isinstance(value, dict):
        raise EventError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


async def _timed(awaitable: Any, limits: ReadLimits, what: str) -> Any:
    try:
        with anyio.fail_after(limits.read_timeout_s):
            return await awaitable
    except TimeoutError:
        raise FramingError(f"nothing received for {limits.read_timeout_s:g} s ({what})") from None


async def read_event(reader: asyncio.StreamReader, limits: ReadLimits) -> Event | None:
    """The next event, or None at the end of the stream."""
    try:
        line = await _timed(reader.readline(), limits, "waiting for an event")
    except (ValueError, asyncio.LimitOverrunError):  # the line is over the stream limit
        raise FramingError(f"event header longer than {MAX_LINE_BYTES} bytes") from None
    if not line:
        return None
    header = _json_object(line, "event header")
    data_length = _length(header, "data_length", limits.max_data_bytes)
    payload_length = _length(header, "payload_length", limits.max_payload_bytes)
    try:
        data_raw = await _timed(reader.readexactly(data_length), limits, "event data")
        payload = await _timed(reader.readexactly(payload_length), limits, "event payload")
    except asyncio.IncompleteReadError:
        return None  # the peer left mid-event
    kind = header.get("type")
    if not isinstance(kind, str) or not kind:
        raise EventError("event header needs a 'type' string")
    data = header.get("data") or {}
    if not isinstance(data, dict):
        raise EventError("event 'data' must be a JSON object")
    if data_raw:
        data = {**data, **_json_object(data_raw, "event data")}
    return Event(type=kind, data=data, payload=payload or None)
