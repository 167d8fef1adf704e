"""Who may use the service: the device access token, browser origins, client addresses.

The **device access token** lives in ``<data_dir>/token`` (mode 0600), generated on first
start; ``EDGE_TOKEN`` / ``ServiceSettings.token`` sets it instead. A WebSocket client
presents it in ``hello.token`` or as ``Authorization: Bearer <token>`` on the upgrade
request; it is compared in constant time (:func:`token_matches`). ``edge token`` shows it
(``--rotate`` makes a new one, which a running service takes at its next ``hello``:
:class:`TokenFile`), and ``edge client`` / :class:`EdgeClient` read it from the
same file on the same machine.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import socket
from pathlib import Path
from urllib.parse import urlsplit

from edge.store import new_token

TOKEN_FILE = "token"
TOKEN_BYTES = 24


def token_path(data_dir: Path) -> Path:
    return Path(data_dir).expanduser() / TOKEN_FILE


def _write_token(path: Path, token: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        os.replace(tmp, path)  # atomic: a reader sees the old token or the new one
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_token(data_dir: Path) -> str | None:
    """The token stored in ``data_dir``, or None when there is none (or it is unreadable)."""
    try:
        token = token_path(data_dir).read_text().strip()
    except OSError:
        return None
    return token or None


def load_or_create_token(data_dir: Path) -> str:
    """The stored token; a new random one is written (0600) on first use."""
    token = read_token(data_dir)
    if token is None:
        token = new_token(TOKEN_BYTES)
        _write_token(token_path(data_dir), token)
    return token


def rotate_token(data_dir: Path) -> str:
    """Replace the stored token with a new one (clients holding the old one are refused)."""
    token = new_token(TOKEN_BYTES)
    _write_token(token_path(data_dir), token)
    return token


class TokenFile:
    """The token in ``<data_dir>/token`` as a running service takes it: re-read whenever
    the file changes (``edge token --rotate`` takes effect at once, no restart); a file
    that went missing or empty keeps the token last read. Created (0600) if missing."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self._token = load_or_create_token(self.data_dir)
        self._stamp = self._stat()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(token_path(self.data_dir))
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def current(self) -> str:
        stamp = self._stat()
        if stamp != self._stamp:
            self._stamp = stamp
            self._token = read_token(self.data_dir) or self._token
        return self._token


def token_matches(expected: str | None, presented: str | None) -> bool:
    """Constant-time comparison; no expected token means none is needed."""
    if expected is None:
        return True
    if presented is None:
        return False
    return hmac.compare_digest(expected.encode(), presented.encode())


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header."""
    if not authorization:
        return None
    scheme, _, value = authorization.strip().partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def origin_allowed(origin: str | None, host: str | None, allowed: tuple[str, ...]) -> bool:
    """A request without ``Origin`` is not from a browser page (allowed; the token still
    guards it). A browser's ``Origin`` must be the service's own page (same host:port as
    the request's ``Host``) or one of ``allowed`` (exact ``scheme://host[:port]``)."""
    if origin is None:
        return True
    origin = origin.strip().rstrip("/")
    if origin in allowed or "*" in allowed:
        return True
    parts = urlsplit(origin)
    return bool(host) and parts.scheme in ("http", "https") and parts.netloc == host


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_this_machine(host: str) -> bool:
    """Whether ``host`` names this machine without asking anyone: loopback, this machine's
    host name (as ``edge serve`` prints it in its addresses, or with ``.local``), or an
    address of one of its interfaces (one a socket can be bound to; nothing is sent)."""
    if is_loopback(host):
        return True
    name = host.strip("[]").rstrip(".").lower()
    own = socket.gethostname().lower()
    if name in (own, f"{own.split('.')[0]}.local", own.split(".")[0]):
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((str(address), 0))
    except OSError:
        return False
    return True


def address_allowed(address: str, allowed: tuple[str, ...]) -> bool:
    """Loopback always; otherwise the address must fall in one of ``allowed`` (addresses
    or networks such as ``192.168.1.20`` or ``192.168.1.0/24``)."""
    if is_loopback(address):
        return True
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    for entry in allowed:
        try:
            if ip in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False
