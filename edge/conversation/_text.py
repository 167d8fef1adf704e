"""UTF-8 byte measurement and clipping that keeps a text's start and end."""

from __future__ import annotations

OMISSION = " […] "


def nbytes(text: str) -> int:
    """Size of ``text`` in UTF-8 bytes (how every budget is measured)."""
    return len(text.encode("utf-8"))


def _head(data: bytes, size: int) -> str:
    return data[: max(size, 0)].decode("utf-8", "ignore")


def _tail(data: bytes, size: int) -> str:
    return data[len(data) - max(size, 0) :].decode("utf-8", "ignore") if size > 0 else ""


def clip_middle(text: str, max_bytes: int, marker: str = OMISSION) -> str:
    """``text`` itself when it fits ``max_bytes``; otherwise its start and end joined by
    ``marker``, at most ``max_bytes`` in all (never splitting a character)."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    room = max_bytes - nbytes(marker)
    if room <= 0:
        return _head(data, max_bytes)
    head = room - room // 2
    return _head(data, head) + marker + _tail(data, room // 2)
