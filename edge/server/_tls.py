"""TLS on the WebSocket port: ``https://`` for the console and ``/health``, ``wss://`` for
sessions.

At first start the service makes a key (ECDSA P-256, ``<data_dir>/tls/key.pem``, mode 0600)
and a self-signed certificate (``cert.pem``) for the names a client will use: the host
name, ``<hostname>.local``, the mDNS host name, ``localhost`` and the machine's addresses.
Both are reused across restarts. The certificate is made again with the **same key** when
it comes within :data:`RENEW_BEFORE` of its end or when a name it should carry is missing
(a new host name or address), so the fingerprint clients pinned stays valid.

The **fingerprint** is the SHA-256 of the certificate's public key (its SubjectPublicKeyInfo,
what Chromium's ``--ignore-certificate-errors-spki-list`` takes in base64), written as
colon-separated hex. Because it names the key, not one certificate, it survives renewals.

An operator's own certificate and key (``--tls-cert`` / ``--tls-key``, from their CA or
ACME) are used as given; they are read again when the files change.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import ipaddress
import logging
import os
import secrets
import socket
import ssl
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from edge.runtime import BackgroundTasks

log = logging.getLogger(__name__)

TLS_DIR = "tls"
CERT_FILE = "cert.pem"
KEY_FILE = "key.pem"
VALID_FOR = dt.timedelta(days=365)
RENEW_BEFORE = dt.timedelta(days=30)
CHECK_EVERY_S = 6 * 3600.0


class TLSError(RuntimeError):
    """The certificate or key cannot be used (the message names the file and the fix)."""


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _hex(digest: bytes) -> str:
    return ":".join(f"{b:02X}" for b in digest)


def _spki_sha256(public_key: Any) -> bytes:
    spki = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(spki).digest()


def fingerprint_of(der: bytes) -> str:
    """The fingerprint (SHA-256 of the public key) of a DER certificate, as a client sees
    it (``SSLSocket.getpeercert(binary_form=True)``)."""
    return _hex(_spki_sha256(x509.load_der_x509_certificate(der).public_key()))


def local_names(instance_host: str | None = None, addresses: Iterable[str] = ()) -> list[str]:
    """The names and addresses a client may use for this machine (DNS names first)."""
    host = socket.gethostname()
    names = [host, f"{host.split('.')[0]}.local", "localhost"]
    if instance_host:
        names.append(instance_host.rstrip("."))
    names += [*addresses, "127.0.0.1", "::1"]
    return list(dict.fromkeys(n.lower() for n in names if n))


def local_fingerprint(data_dir: Path, cert_file: Path | None = None) -> str | None:
    """The fingerprint of the certificate a service on this machine serves: ``cert_file``,
    else the one it made in ``data_dir`` (None: there is none yet, or it is unreadable)."""
    path = cert_file or Path(data_dir).expanduser() / TLS_DIR / CERT_FILE
    try:
        certificate = x509.load_pem_x509_certificate(Path(path).expanduser().read_bytes())
    except (OSError, ValueError):
        return None
    return _hex(_spki_sha256(certificate.public_key()))


@dataclass(frozen=True)
class ServerCertificate:
    """A certificate and key on disk, and what clients need to know about them."""

    cert_path: Path
    key_path: Path
    fingerprint: str  # SHA-256 of the public key, colon hex
    spki_base64: str  # the same digest in base64 (Chromium's spki-list)
    certificate_sha256: str  # SHA-256 of the certificate itself (what browsers show)
    not_after: dt.datetime
    names: tuple[str, ...]
    self_made: bool

    def describe(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "certificate_sha256": self.certificate_sha256,
            "expires": self.not_after.isoformat(),
            "names": list(self.names),
            "source": "self-signed" if self.self_made else str(self.cert_path),
        }


def _names_of(certificate: x509.Certificate) -> tuple[str, ...]:
    try:
        san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    dns = san.get_values_for_type(x509.DNSName)
    ips = [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    return tuple(n.lower() for n in [*dns, *ips])


def _describe(cert_path: Path, key_path: Path, pem: bytes, self_made: bool) -> ServerCertificate:
    certificate = x509.load_pem_x509_certificate(pem)
    digest = _spki_sha256(certificate.public_key())
    return ServerCertificate(
        cert_path=cert_path,
        key_path=key_path,
        fingerprint=_hex(digest),
        spki_base64=base64.b64encode(digest).decode(),
        certificate_sha256=_hex(certificate.fingerprint(hashes.SHA256())),
        not_after=certificate.not_valid_after_utc,
        names=_names_of(certificate),
        self_made=self_made,
    )


def _write_private(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` atomically with ``mode`` (a reader sees the old file or the new)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _san(names: Iterable[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def make_certificate(
    key: ec.EllipticCurvePrivateKey,
    names: list[str],
    *,
    now: dt.datetime | None = None,
    valid_for: dt.timedelta = VALID_FOR,
) -> bytes:
    """A self-signed server certificate (PEM) for ``names`` (DNS names and addresses)."""
    now = now or _utcnow()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0][:64])])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + valid_for)
        .add_extension(_san(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    )
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def _load_key(path: Path) -> ec.EllipticCurvePrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise TLSError(
            f"cannot read the TLS key {path}: {exc}. Move it away to have a new key made "
            "(clients that pinned the old one will refuse the new one until told)"
        ) from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TLSError(f"{path} is not the EC key this service makes; move it away")
    return key


def _read_certificate(path: Path) -> bytes:
    try:
        pem = path.read_bytes()
        x509.load_pem_x509_certificate(pem)
    except (OSError, ValueError) as exc:
        raise TLSError(f"cannot read the TLS certificate {path}: {exc}") from None
    return pem


def load_or_create_certificate(
    data_dir: Path, names: list[str], *, now: dt.datetime | None = None
) -> ServerCertificate:
    """The service's own certificate in ``<data_dir>/tls``: made on first use, made again
    (same key) when it nears its end or lacks one of ``names``."""
    now = now or _utcnow()
    directory = Path(data_dir).expanduser() / TLS_DIR
    cert_path, key_path = directory / CERT_FILE, directory / KEY_FILE
    if key_path.exists():
        if key_path.stat().st_mode & 0o077:
            log.warning("%s was readable by others; now 0600", key_path)
            key_path.chmod(0o600)
        key = _load_key(key_path)
    else:
        key = ec.generate_private_key(ec.SECP256R1())
        pem_key = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        _write_private(key_path, pem_key, 0o600)
        cert_path.unlink(missing_ok=True)  # a certificate for another key is useless
    current = _usable_certificate(cert_path, key_path, key)
    if current is None or _renewal_due(current, names, now):
        reason = "new" if current is None else "renewed"
        _write_private(cert_path, make_certificate(key, names, now=now), 0o644)
        current = _describe(cert_path, key_path, cert_path.read_bytes(), True)
        log.info("TLS certificate %s for %s", reason, ", ".join(names))
    return current


def _usable_certificate(
    cert_path: Path, key_path: Path, key: ec.EllipticCurvePrivateKey
) -> ServerCertificate | None:
    """The certificate made earlier, if it is readable and for ``key``; else None (the
    key is what clients pinned: a new certificate for it is made)."""
    if not cert_path.exists():
        return None
    try:
        current = _describe(cert_path, key_path, _read_certificate(cert_path), True)
    except TLSError as exc:
        log.warning("%s; making it again", exc)
        return None
    return current if current.fingerprint == _hex(_spki_sha256(key.public_key())) else None


def _renewal_due(cert: ServerCertificate, names: list[str], now: dt.datetime) -> bool:
    return cert.not_after - now < RENEW_BEFORE or not set(names) <= set(cert.names)


def load_operator_certificate(
    cert_path: Path, key_path: Path, *, now: dt.datetime | None = None
) -> ServerCertificate:
    """The operator's certificate (PEM, leaf first) and key, checked now: readable,
    matching, and not expired."""
    now = now or _utcnow()
    cert_path, key_path = Path(cert_path).expanduser(), Path(key_path).expanduser()
    cert = _describe(cert_path, key_path, _read_certificate(cert_path), False)
    if cert.not_after <= now:
        raise TLSError(
            f"the TLS certificate {cert_path} expired on {cert.not_after:%Y-%m-%d %H:%M} UTC; "
            "renew it (or leave out --tls-cert/--tls-key to use a certificate made here)"
        )
    server_context(cert)  # the key must be readable and match the certificate
    return cert


def server_context(cert: ServerCertificate) -> ssl.SSLContext:
    """A server-side context serving ``cert`` (TLS 1.2 or newer)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # no client certificates asked
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(context, cert)
    return context


def _load_chain(context: ssl.SSLContext, cert: ServerCertificate) -> None:
    try:
        context.load_cert_chain(cert.cert_path, cert.key_path)
    except (OSError, ssl.SSLError) as exc:
        raise TLSError(
            f"cannot use the TLS certificate {cert.cert_path} with the key {cert.key_path} "
            f"(unreadable, or the key does not belong to the certificate): {exc}"
        ) from None


class CertificateKeeper:
    """The certificate a running service serves, and the context that serves it.

    :meth:`refresh` renews a self-made certificate that nears its end, or reads an
    operator's files again when they changed; new handshakes then get the new one.
    ``renewing()`` runs it every :data:`CHECK_EVERY_S` seconds while open.
    """

    def __init__(
        self,
        data_dir: Path,
        names: list[str],
        *,
        cert_file: Path | None = None,
        key_file: Path | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.names = names
        self._operator = (cert_file, key_file) if cert_file and key_file else None
        self.certificate = self._load()
        self.context = server_context(self.certificate)
        self._stamp = self._file_stamp()

    def _load(self, now: dt.datetime | None = None) -> ServerCertificate:
        if self._operator is not None:
            return load_operator_certificate(*self._operator, now=now)
        return load_or_create_certificate(self.data_dir, self.names, now=now)

    def _file_stamp(self) -> tuple[float, float]:
        c = self.certificate
        return (c.cert_path.stat().st_mtime, c.key_path.stat().st_mtime)

    def refresh(self, now: dt.datetime | None = None) -> bool:
        """Serve a renewed or changed certificate; True when it changed. A failure keeps
        serving the current one (and is logged)."""
        try:
            if self._operator is not None and self._file_stamp() == self._stamp:
                return False
            certificate = self._load(now)
            if certificate == self.certificate:
                return False
            _load_chain(self.context, certificate)
        except (TLSError, OSError) as exc:
            log.error("TLS certificate not refreshed: %s", exc)
            return False
        self.certificate, self._stamp = certificate, self._file_stamp()
        log.info("TLS certificate now valid until %s", certificate.not_after.isoformat())
        return True

    @asynccontextmanager
    async def renewing(self, interval_s: float = CHECK_EVERY_S) -> AsyncIterator[None]:
        """While open, :meth:`refresh` every ``interval_s`` seconds."""
        tasks = BackgroundTasks("TLS certificate renewal")
        await tasks.open()
        try:
            tasks.start_soon(self._refresh_loop, interval_s)
            yield
        finally:
            await tasks.close()

    async def _refresh_loop(self, interval_s: float) -> None:
        while True:
            await anyio.sleep(interval_s)
            self.refresh()
