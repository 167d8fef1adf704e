"""What ``edge client`` is told to talk to, checked before it connects: the service's
address (the console's ``http://`` address works too), the participant id, and a plain
sentence for a service that cannot be reached."""

from __future__ import annotations

import argparse
from urllib.parse import parse_qs, urlsplit, urlunsplit

SCHEMES = {"ws": "ws", "wss": "wss", "http": "ws", "https": "wss"}


class TargetError(ValueError):
    """An address ``edge client`` cannot use; the text says why."""


def client_url(url: str) -> tuple[str, str | None]:
    """``(websocket URL, token)`` for ``url``: a ``ws://`` address as it is; the console's
    ``http://host:port/?token=…`` (the same port serves both) as its ``ws://`` address and
    the token in it."""
    parts = urlsplit(url.strip())
    scheme = SCHEMES.get(parts.scheme.lower())
    if scheme is None or not parts.hostname:
        raise TargetError(
            f"{url!r} is not the service's address: give ws://HOST:PORT (as `edge serve` "
            "prints it) or the console's http://HOST:PORT/ address"
        )
    try:
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError as exc:
        raise TargetError(f"{url!r}: {exc}") from None
    token = parse_qs(parts.query).get("token", [None])[0]
    if scheme == parts.scheme and not token:
        return urlunsplit(parts), None
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/"), "", "")), token


def participant_id(value: str) -> str:
    """``--participant``: an id the protocol takes, else a usage error naming the rule."""
    from edge.server import check_participant_id

    try:
        return check_participant_id(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def unreachable(url: str, exc: BaseException) -> str:
    """Why ``url`` could not be reached (or dropped us), in words, with what to check."""
    from websockets.exceptions import ConnectionClosed

    if isinstance(exc, ConnectionClosed):
        return f"the service at {url} closed the connection: {exc}"
    if isinstance(exc, ConnectionRefusedError):
        reason = "nothing listens there (connection refused)"
    elif isinstance(exc, TimeoutError):
        reason = "no answer in time"
    else:
        reason = str(exc) or type(exc).__name__
    return f"cannot talk to {url}: {reason}. Is `edge serve` running at that address?"
