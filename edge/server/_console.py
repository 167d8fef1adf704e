"""The browser console: a single page served over plain HTTP on the WebSocket port.

``GET /`` answers ``index.html`` and ``GET /console/<file>`` the page's scripts and style,
all static files shipped in the package (``edge/server/console/``; no build step, nothing
fetched at run time). The page speaks the public WebSocket protocol back to the host that
served it; a WebSocket upgrade on ``/`` still goes to the session handshake.

The device token may arrive in the page's URL (``/?token=…``, as ``edge serve`` prints
it): responses carry ``Referrer-Policy: no-referrer``, the page moves the token out of its
address bar, and :class:`RedactTokens` keeps it out of the ``websockets`` debug log.
"""

from __future__ import annotations

import logging
import re
from http import HTTPStatus
from importlib import resources
from urllib.parse import urlsplit

from websockets.datastructures import Headers
from websockets.http11 import Request, Response

CONSOLE_PREFIX = "/console/"
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
_TOKEN_IN_TEXT = re.compile(r"(token=)[^&\s\"']+")


def redact(text: str) -> str:
    """``text`` with the value of every ``token=`` query parameter replaced."""
    return _TOKEN_IN_TEXT.sub(r"\1[redacted]", text)


class RedactTokens(logging.Filter):
    """Rewrites log records so a ``?token=`` in a request line never reaches a log."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and "token=" in record.msg:
            record.msg = redact(record.msg)
        if record.args and isinstance(record.args, tuple):
            record.args = tuple(
                redact(a) if isinstance(a, str) and "token=" in a else a for a in record.args
            )
        return True


_REDACTOR = RedactTokens()


def _load_files() -> dict[str, tuple[bytes, str]]:
    root = resources.files("edge.server") / "console"
    files: dict[str, tuple[bytes, str]] = {}
    for entry in root.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1] if "." in entry.name else ""
        if entry.is_file() and suffix in _TYPES:
            files[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    if "index.html" not in files:
        raise RuntimeError("the console's index.html is missing from the package")
    return files


class ConsolePages:
    """Answers the console's static files; ``respond`` returns None for anything else."""

    def __init__(self) -> None:
        self.files = _load_files()
        for name in ("websockets.server", "websockets"):
            logger = logging.getLogger(name)
            if _REDACTOR not in logger.filters:
                logger.addFilter(_REDACTOR)

    def respond(self, request: Request) -> Response | None:
        headers = request.headers
        if "websocket" in headers.get("Upgrade", "").lower():
            return None  # the session handshake, on any path
        path = urlsplit(request.path).path
        if path == "/":
            name = "index.html"
        elif path.startswith(CONSOLE_PREFIX):
            name = path[len(CONSOLE_PREFIX) :]
            if name not in self.files:
                return _response(HTTPStatus.NOT_FOUND, b"no such file\n", "text/plain")
        else:
            return None
        body, kind = self.files[name]
        return _response(HTTPStatus.OK, body, kind, _policy(headers.get("Host", "")))


def _policy(host: str) -> str:
    """The page may load only its own files and talk only to the host that served it."""
    sockets = f" ws://{host} wss://{host}" if host else ""
    return (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        f"connect-src 'self'{sockets}; media-src 'self' blob:; worker-src 'self'; "
        "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


def _response(status: HTTPStatus, body: bytes, kind: str, policy: str = "") -> Response:
    headers = Headers()
    headers["Content-Type"] = kind
    headers["Content-Length"] = str(len(body))
    headers["Connection"] = "close"
    headers["Cache-Control"] = "no-cache"
    headers["Referrer-Policy"] = "no-referrer"
    headers["X-Content-Type-Options"] = "nosniff"
    if policy:
        headers["Content-Security-Policy"] = policy
        headers["Permissions-Policy"] = "microphone=(self)"
    return Response(status.value, status.phrase, headers, body)
