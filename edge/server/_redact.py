"""Secrets never reach a log: the device token and session tokens are redacted from what
the WebSocket library logs (its ``-vv`` frame and handshake lines), at the source.

:func:`guard_library_logs` puts :data:`SECRETS_FILTER` on the library's loggers; the
filter rewrites a record before any handler formats it: a frame's JSON ``token``,
``resume`` and ``session_token`` values (a value the frame cuts short too), an
``Authorization`` header and a ``token=`` query parameter become ``[redacted]``. The
library logs each frame of a fragmented message apart, and a fragment may hold any part
of a token: fragments are logged by their size only.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Any

from websockets.frames import Frame, Opcode

REDACTED = "[redacted]"
_JSON_SECRET = re.compile(r'("(?:token|resume|session_token)"\s*:\s*")(?:[^"\\]|\\.)*\\?("|$)')
_QUERY_SECRET = re.compile(r"([?&]token=)[^&\s#]*")
_HEADER_LINES = ("> %s: %s", "< %s: %s")
LIBRARY_LOGGERS = ("websockets.client", "websockets.server")
_DATA = (Opcode.TEXT, Opcode.BINARY)


def redact(text: str) -> str:
    """``text`` with every secret value in it replaced by ``[redacted]``."""
    text = _JSON_SECRET.sub(rf"\g<1>{REDACTED}\g<2>", text)
    return _QUERY_SECRET.sub(rf"\g<1>{REDACTED}", text)


def _redact_frame(frame: Frame) -> Frame:
    if frame.opcode is Opcode.CONT or (frame.opcode in _DATA and not frame.fin):
        shown = f"[{len(frame.data)} bytes of a fragmented message, not logged]"
        return dataclasses.replace(frame, data=shown.encode())
    if frame.opcode not in _DATA:
        return frame
    try:  # a binary frame is logged as text too when it is UTF-8
        text = bytes(frame.data).decode("utf-8")
    except UnicodeDecodeError:
        if frame.opcode is Opcode.BINARY:
            return frame  # audio
        text = bytes(frame.data).decode("utf-8", "replace")
    safe = redact(text)
    return frame if safe == text else dataclasses.replace(frame, data=safe.encode())


def _redact_arg(arg: Any) -> Any:
    if isinstance(arg, Frame):
        return _redact_frame(arg)
    if isinstance(arg, str):
        return redact(arg)
    return arg


class SecretsFilter(logging.Filter):
    """Rewrites a record's arguments (never drops it); see the module docstring."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and args:
            if record.msg in _HEADER_LINES and str(args[0]).lower() == "authorization":
                record.args = (args[0], REDACTED)
            else:
                record.args = tuple(_redact_arg(a) for a in args)
        elif isinstance(record.msg, str):
            record.msg = redact(record.msg)
        return True


SECRETS_FILTER = SecretsFilter()


def guard_library_logs() -> None:
    """Put :data:`SECRETS_FILTER` on the WebSocket library's loggers (idempotent)."""
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).addFilter(SECRETS_FILTER)
