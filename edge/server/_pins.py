"""How a client trusts the service's ``wss://`` certificate without a CA: pinning on first use.

The first connection to a ``host:port`` records the fingerprint it was shown (SHA-256 of
the certificate's public key, as the service prints it) in the user's pin store,
``<config dir>/known_services.json`` (``EDGE_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/edge``,
else ``~/.config/edge``); later connections must show the same key, or fail with an error
naming both fingerprints, before anything (the device token included) is sent. With a CA
file (``ServerTrust(ca_file=...)``) the certificate is verified the ordinary way instead
(chain and host name), and nothing is pinned. There is no "skip verification" mode.
"""

from __future__ import annotations

import json
import os
import secrets
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._tls import fingerprint_of

PIN_FILE = "known_services.json"


def config_dir() -> Path:
    """The user's configuration directory for ``edge`` clients."""
    explicit = os.environ.get("EDGE_CONFIG_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join("~", ".config")
    return Path(base).expanduser() / "edge"


class CertificateChanged(ConnectionError):
    """The service showed another key than the one pinned (or expected) for its address."""


class PinStore:
    """``host:port`` → fingerprint, in a JSON file (``None``: the user's default file)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else config_dir() / PIN_FILE

    def pins(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise ConnectionError(f"cannot read the pin store {self.path}: {exc}") from None
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def get(self, address: str) -> str | None:
        return self.pins().get(address)

    def pin(self, address: str, fingerprint: str) -> None:
        pins = {**self.pins(), address: fingerprint}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}")
        tmp.write_text(json.dumps(pins, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, self.path)


@dataclass(frozen=True)
class ServerTrust:
    """What a ``wss://`` client accepts. ``ca_file``: verify against this CA (host name
    checked, nothing pinned). Otherwise the key must be ``fingerprint`` when given (for
    example copied from the service's banner), and the pin store's key for the address
    when one is pinned; a first connection pins what it is shown."""

    ca_file: Path | None = None
    fingerprint: str | None = None
    pins: PinStore = field(default_factory=PinStore)
    local: str | None = None  # the key of the service on this machine: accepted, not pinned

    def context(self) -> ssl.SSLContext:
        if self.ca_file is not None:
            return ssl.create_default_context(cafile=str(self.ca_file))
        # the key is checked against the pin after the handshake, before anything is sent;
        # no CA store is loaded (that costs ~70 ms a connection here, for nothing)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context

    def check(self, address: str, der: bytes | None) -> str | None:
        """Check the presented certificate (DER) for ``address``; returns its fingerprint
        (None under CA verification, which the handshake already did)."""
        if self.ca_file is not None:
            return None
        if der is None:
            raise CertificateChanged(f"{address} presented no certificate")
        shown = fingerprint_of(der)
        if self.local == shown and self.fingerprint is None:
            return shown
        if self.fingerprint is not None and _norm(self.fingerprint) != shown:
            raise CertificateChanged(
                f"{address} presented key SHA-256 {shown}, not the expected {self.fingerprint}"
            )
        pinned = self.pins.get(address)
        if pinned is None:
            self.pins.pin(address, shown)
        elif pinned != shown:
            raise CertificateChanged(
                f"the certificate of {address} changed: pinned key SHA-256 {pinned}, now "
                f"{shown}. If the service's key was replaced on purpose (check `edge token` "
                f"or /health on it), remove {address} from {self.pins.path}"
            )
        return shown


def _norm(fingerprint: str) -> str:
    digits = "".join(c for c in fingerprint.upper() if c in "0123456789ABCDEF")
    return ":".join(digits[i : i + 2] for i in range(0, len(digits), 2))


def peer_certificate(transport: Any) -> bytes | None:
    """The DER certificate a connected TLS transport was shown."""
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    return ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
