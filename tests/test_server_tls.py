"""TLS on the WebSocket port: the certificate made at first start (reused, renewed, kept
0600), the operator's own one (checked at start), clients pinning the key on first use,
and hostile traffic on the TLS port (a stalled handshake, garbage, plain HTTP)."""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import os
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidStatus

from edge.cli import build_parser
from edge.server import CertificateChanged, EdgeClient, PinStore, ServerTrust, TLSError
from edge.server._tls import (
    CERT_FILE,
    KEY_FILE,
    TLS_DIR,
    CertificateKeeper,
    load_or_create_certificate,
    make_certificate,
)
from tests.hostile_helpers import free_port
from tests.server_helpers import make_service

pytestmark = pytest.mark.anyio

EDGE = [sys.executable, "-m", "edge"]


def https_base(url: str) -> str:
    return url.replace("wss://", "https://", 1)


def insecure_context() -> ssl.SSLContext:
    """For raw probes of the port (the tests check the key themselves)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def san_of(path: Path) -> list[str]:
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    ips = [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    return [*san.get_values_for_type(x509.DNSName), *ips]


async def test_certificate_is_made_once_reused_across_restarts_and_its_key_kept_0600(
    tmp_path: Path,
) -> None:
    tls_dir = tmp_path / TLS_DIR
    async with make_service(tls=True, data_dir=tmp_path, service_name="Lab Box") as service:
        assert service.websocket_url.startswith("wss://127.0.0.1:")
        assert service.console_url.startswith("https://127.0.0.1:")
        first = service.tls_fingerprint
        async with httpx.AsyncClient(verify=False) as http:
            health = (await http.get(https_base(service.websocket_url) + "/health")).json()
        async with EdgeClient(service.websocket_url, token=service.token) as client:
            turn = await client.ask("hello over tls")
    cert_pem = (tls_dir / CERT_FILE).read_bytes()
    assert (tls_dir / KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert health["tls"]["fingerprint"] == first and health["tls"]["source"] == "self-signed"
    assert turn.text.startswith("You said: hello over tls")
    assert client.tls_fingerprint == first
    host = socket.gethostname().lower()
    names = san_of(tls_dir / CERT_FILE)
    for name in (host, f"{host.split('.')[0]}.local", "lab-box.local", "127.0.0.1"):
        assert name in names, names
    async with make_service(tls=True, data_dir=tmp_path, service_name="Lab Box") as again:
        assert again.tls_fingerprint == first
    assert (tls_dir / CERT_FILE).read_bytes() == cert_pem  # reused, not made again


def test_renewed_before_expiry_for_a_new_name_or_when_damaged_keeping_the_key(
    tmp_path: Path,
) -> None:
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    first = load_or_create_certificate(tmp_path, ["box", "127.0.0.1"], now=start)
    same = load_or_create_certificate(tmp_path, ["box", "127.0.0.1"], now=start)
    late = load_or_create_certificate(
        tmp_path, ["box", "127.0.0.1"], now=first.not_after - dt.timedelta(days=10)
    )
    renamed = load_or_create_certificate(tmp_path, ["newbox", "127.0.0.1"], now=start)
    assert same == first
    assert late.not_after > first.not_after and late.certificate_sha256 != first.certificate_sha256
    assert "newbox" in renamed.names
    assert first.fingerprint == late.fingerprint == renamed.fingerprint  # pins stay valid
    (tmp_path / TLS_DIR / CERT_FILE).write_text("damaged\n")
    (tmp_path / TLS_DIR / KEY_FILE).chmod(0o644)
    remade = load_or_create_certificate(tmp_path, ["newbox", "127.0.0.1"], now=start)
    assert remade.fingerprint == first.fingerprint  # same key, new certificate
    assert (tmp_path / TLS_DIR / KEY_FILE).stat().st_mode & 0o777 == 0o600


def test_a_running_service_renews_its_certificate_for_new_handshakes(tmp_path: Path) -> None:
    keeper = CertificateKeeper(tmp_path, ["box", "127.0.0.1"])
    before = keeper.certificate
    assert not keeper.refresh()  # nothing due
    assert keeper.refresh(before.not_after - dt.timedelta(days=1))
    assert keeper.certificate.not_after > before.not_after
    assert keeper.certificate.fingerprint == before.fingerprint


def write_operator_files(
    directory: Path, *, now: dt.datetime, valid_for: dt.timedelta
) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert, key_file = directory / "op-cert.pem", directory / "op-key.pem"
    cert.write_bytes(make_certificate(key, ["lab.example"], now=now, valid_for=valid_for))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert, key_file


def test_expired_unreadable_or_mismatched_certificates_fail_at_start(tmp_path: Path) -> None:
    year_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=365)
    cert, key = write_operator_files(tmp_path, now=year_ago, valid_for=dt.timedelta(days=90))
    with pytest.raises(TLSError, match=r"op-cert\.pem expired on \d{4}-\d\d-\d\d"):
        make_service(tls=True, tls_cert=cert, tls_key=key)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(TLSError, match=r"cannot read the TLS certificate .*garbage\.pem"):
        make_service(tls=True, tls_cert=garbage, tls_key=key)
    (tmp_path / "good").mkdir()
    good, _ = write_operator_files(
        tmp_path / "good", now=dt.datetime.now(dt.UTC), valid_for=dt.timedelta(days=90)
    )
    with pytest.raises(TLSError, match="does not belong to the certificate"):
        make_service(tls=True, tls_cert=good, tls_key=key)  # another certificate's key
    own = tmp_path / "own"
    (own / TLS_DIR).mkdir(parents=True)
    (own / TLS_DIR / KEY_FILE).write_text("-----BEGIN PRIVATE KEY-----\nbroken\n")
    with pytest.raises(TLSError, match=r"cannot read the TLS key .*key\.pem.*Move it away"):
        make_service(tls=True, data_dir=own)


def test_edge_serve_reports_an_expired_certificate_and_exits(tmp_path: Path) -> None:
    year_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=365)
    cert, key = write_operator_files(tmp_path, now=year_ago, valid_for=dt.timedelta(days=90))
    result = subprocess.run(
        [*EDGE, "serve", "--host", "127.0.0.1", "--port", "0", "--no-wyoming", "--no-mdns"]
        + ["--no-voice", "--llm-url", "http://127.0.0.1:9/v1", "--profile", "ci-2core-24gb"]
        + ["--tls", "--tls-cert", str(cert), "--tls-key", str(key)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    said = " ".join(result.stderr.split())  # the console wraps long lines (a long tmp path)
    assert "expired on" in said and "Traceback" not in said


async def test_client_pins_on_first_use_and_refuses_another_key_naming_both(
    tmp_path: Path,
) -> None:
    port = free_port()
    pins = PinStore(tmp_path / "pins.json")
    common = {"tls": True, "port": port, "token": "shared-token"}
    async with make_service(data_dir=tmp_path / "a", **common) as first:
        trust = ServerTrust(pins=pins)
        async with EdgeClient(first.websocket_url, token="shared-token", trust=trust) as client:
            await client.ask("first visit")
        pinned = first.tls_fingerprint
    assert pins.get(f"127.0.0.1:{port}") == pinned
    async with make_service(data_dir=tmp_path / "b", **common) as other:
        with pytest.raises(CertificateChanged) as refused:
            async with EdgeClient(other.websocket_url, token="shared-token", trust=trust):
                pass
        await anyio.sleep(0.1)
        joined = other.gateway.hub.connected()
    message = str(refused.value)
    assert pinned is not None and other.tls_fingerprint is not None
    assert pinned in message and other.tls_fingerprint in message and str(pins.path) in message
    assert joined == []  # refused before the hello (and its token) went out
    assert pins.get(f"127.0.0.1:{port}") == pinned  # the pin is not overwritten


def run_client(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*EDGE, "client", "--url", url, "--token", "shared-token", "--text", "hi", *extra],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "EDGE_DATA_DIR": "/nonexistent-edge-data"},  # no local hint
    )


async def test_edge_client_over_wss_pins_then_refuses_a_changed_certificate(
    tmp_path: Path,
) -> None:
    port = free_port()
    common = {"tls": True, "port": port, "token": "shared-token"}
    async with make_service(data_dir=tmp_path / "a", **common) as first:
        pinned = first.tls_fingerprint
        ok = await anyio.to_thread.run_sync(run_client, first.websocket_url)
    async with make_service(data_dir=tmp_path / "b", **common) as other:
        changed = await anyio.to_thread.run_sync(run_client, other.websocket_url)
        shown = other.tls_fingerprint
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "You said: hi" in ok.stdout and pinned is not None and shown is not None
    assert pinned in "".join(ok.stderr.split())  # rich wraps long lines
    assert changed.returncode == 2
    flat = "".join(changed.stderr.split())
    assert pinned in flat and shown in flat and "changed" in flat, changed.stderr
    assert "Traceback" not in changed.stderr


def test_edge_client_offers_no_way_to_skip_verification() -> None:
    parser = build_parser()
    client_help = parser._subparsers._group_actions[0].choices["client"].format_help()
    assert "skip" not in client_help and "insecure" not in client_help
    with pytest.raises(SystemExit):
        parser.parse_args(["client", "--insecure-skip-verify"])


# -- hostile traffic on the TLS port ------------------------------------------------------


def client_hello_start() -> bytes:
    """The first bytes of a real ClientHello (then the client stalls)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = insecure_context().wrap_bio(incoming, outgoing, server_hostname="box")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()[:40]


async def closed_after(port: int, data: bytes, limit_s: float) -> tuple[float, bytes]:
    """Send ``data`` on a fresh connection; seconds until the server closes it, and what it
    said. Fails past ``limit_s``."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    said = b""
    with anyio.fail_after(limit_s):
        while chunk := await reader.read(65536):
            said += chunk
    writer.close()
    return time.monotonic() - started, said


async def health_s(port: int) -> float:
    started = time.monotonic()
    with anyio.fail_after(5):
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=insecure_context(), server_hostname="box"
        )
        writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        status = await reader.readline()
        await reader.read()
        writer.close()
    assert b" 200 " in status, status
    return time.monotonic() - started


async def test_stalled_handshakes_garbage_and_plain_http_are_bounded_and_closed() -> None:
    hello_timeout_s = 2.0  # a /health that waited behind a stalled handshake takes this long
    async with make_service(tls=True, hello_timeout_s=hello_timeout_s) as service:
        port = service.websocket.bound_port
        async with anyio.create_task_group() as tg:
            results: dict[str, tuple[float, bytes]] = {}

            async def probe(name: str, data: bytes) -> None:
                results[name] = await closed_after(port, data, limit_s=5.0)

            for n in range(20):
                tg.start_soon(probe, f"stalled-{n}", client_hello_start())
            tg.start_soon(probe, "garbage", os.urandom(2048))
            tg.start_soon(probe, "plain-http", b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            await anyio.sleep(0.2)
            during = [await health_s(port) for _ in range(3)]
        async with EdgeClient(service.websocket_url, token=service.token) as client:
            turn = await client.ask("still here")
    for name, (seconds, said) in results.items():
        assert seconds < hello_timeout_s + 2.0, (name, seconds)
        assert b"token" not in said and b" 200 " not in said, (name, said)
    assert results["plain-http"][1].startswith(b"HTTP/1.1 307 "), results["plain-http"]
    assert max(during) < hello_timeout_s, during
    assert turn.text.startswith("You said: still here")


def write_ca_signed(directory: Path) -> tuple[Path, Path, Path]:
    """A small CA (as an operator's own) and a server certificate it signed for
    127.0.0.1: (CA certificate, server certificate, server key)."""
    now = dt.datetime.now(dt.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lab CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    paths = directory / "ca.pem", directory / "server.pem", directory / "server-key.pem"
    paths[0].write_bytes(ca.public_bytes(pem))
    paths[1].write_bytes(leaf.public_bytes(pem))
    paths[2].write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


async def test_a_client_given_a_ca_verifies_the_operators_certificate_and_pins_nothing(
    tmp_path: Path,
) -> None:
    ca, cert, key = write_ca_signed(tmp_path)
    (tmp_path / "other").mkdir()
    other_ca, _, _ = write_ca_signed(tmp_path / "other")
    pins = PinStore(tmp_path / "pins.json")
    async with make_service(tls=True, tls_cert=cert, tls_key=key) as service:
        health = service.websocket.health()["tls"]
        trusted = ServerTrust(ca_file=ca, pins=pins)
        async with EdgeClient(service.websocket_url, trust=trusted) as client:
            turn = await client.ask("verified by a CA")
        with pytest.raises(ssl.SSLCertVerificationError):
            async with EdgeClient(service.websocket_url, trust=ServerTrust(ca_file=other_ca)):
                pass
        refused = await anyio.to_thread.run_sync(
            lambda: run_client(service.websocket_url, "--tls-ca", str(other_ca))
        )
    assert health["source"] == str(cert) and turn.text.startswith("You said: verified")
    assert not pins.path.exists()  # nothing pinned under a CA
    assert refused.returncode == 2 and "certificate verify failed" in refused.stderr


async def test_plain_http_and_ws_on_the_tls_port_are_told_to_use_https() -> None:
    """A browser's ``http://`` page load is redirected to ``https://``; an API client's
    ``http://`` base URL and a ``ws://`` client get a plain-text 400 naming the https://
    and wss:// addresses; the port still speaks TLS to everyone else."""
    async with make_service(tls=True) as service:
        port = service.websocket.bound_port
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient() as http:
            page = await http.get(base + "/?token=abc")
            api = await http.post(base + "/v1/chat/completions", json={"messages": []})
            head = await http.head(base + "/")
        with pytest.raises(InvalidStatus) as refused:
            async with ws_connect(f"ws://127.0.0.1:{port}/"):
                pass
        _, said = await closed_after(port, b"\x80" + os.urandom(64), limit_s=5.0)
        async with EdgeClient(service.websocket_url, token=service.token) as client:
            turn = await client.ask("still tls")
    https = f"https://127.0.0.1:{port}"
    assert page.status_code == 307 and page.headers["location"] == https + "/?token=abc"
    assert api.status_code == 400 and api.headers["content-type"].startswith("text/plain")
    assert f"{https}/v1 as an API base URL" in api.text and f"wss://127.0.0.1:{port}" in api.text
    assert head.status_code == 307 and head.content == b""
    assert refused.value.response.status_code == 400
    assert b"wss://" in refused.value.response.body
    assert said == b""  # neither TLS nor HTTP: dropped
    assert turn.text.startswith("You said: still tls")
