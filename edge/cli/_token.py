"""``edge token``: show (or ``--rotate``) the service's device access token."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "token",
        help="show the device access token clients need (created if missing)",
        description="Print the device access token that WebSocket clients present in hello "
        "(or as a bearer header). It lives in <data dir>/token, mode 0600. A running service "
        "takes a --rotate'd token at the next connection (open sessions keep going).",
    )
    p.add_argument("--data-dir", help="the service's data directory (default: EDGE_DATA_DIR)")
    p.add_argument("--rotate", action="store_true", help="replace it with a new random token")
    p.set_defaults(func=run_token)


def run_token(args: argparse.Namespace) -> int:
    from edge.server import ServiceSettings, load_or_create_token, rotate_token, token_path

    data_dir = Path(args.data_dir) if args.data_dir else ServiceSettings().data_dir
    try:
        token = rotate_token(data_dir) if args.rotate else load_or_create_token(data_dir)
    except OSError as exc:
        print(f"error: cannot write {token_path(data_dir)}: {exc}")
        return 2
    print(token)
    _show_console(data_dir, token)
    return 0


def _show_console(data_dir: Path, token: str) -> None:
    """The console's address and the certificate's fingerprint, on stderr (stdout stays
    the token alone, for scripts)."""
    import socket
    import sys
    from urllib.parse import quote

    from edge.server import ServiceSettings, local_fingerprint

    settings = ServiceSettings()
    scheme = "https" if settings.tls else "http"
    url = f"{scheme}://{socket.gethostname()}:{settings.port}/?token={quote(token, safe='')}"
    print(f"console: {url}", file=sys.stderr)
    if settings.tls:
        fingerprint = local_fingerprint(data_dir, settings.tls_cert)
        shown = fingerprint or "made at the service's first start"
        print(f"certificate key SHA-256: {shown}", file=sys.stderr)
