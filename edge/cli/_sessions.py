"""``edge sessions``: list, show, export, import, re-token and forget stored participants.

Works on the sessions store in the service's data directory (``<data dir>/sessions.sqlite3``)
directly; SQLite's WAL lets it run beside ``edge serve``. Import under an id nobody is
connected as (a connected participant's cached view would not see it until they leave).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sessions",
        help="list, show, export, import, re-token or forget stored participants' sessions",
        description="Participants' durable sessions in <data dir>/sessions.sqlite3.",
    )
    p.add_argument("--data-dir", help="the service's data directory (default: EDGE_DATA_DIR)")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    sub.add_parser("list", help="stored participants, most recently seen first")
    show = sub.add_parser("show", help="a participant's model view and recent history")
    show.add_argument("participant")
    show.add_argument("--last", type=int, default=10, help="history entries to show")
    export = sub.add_parser("export", help="write a participant as versioned JSON")
    export.add_argument("participant")
    export.add_argument("-o", "--output", help="file to write (default: standard output)")
    imp = sub.add_parser("import", help="store an exported participant (prints its token)")
    imp.add_argument("file", help="an export (edge sessions export, or the protocol's)")
    imp.add_argument("--as", dest="as_id", help="participant id to import under")
    token = sub.add_parser(
        "token",
        help="issue a new session token for a participant who lost theirs (history kept)",
    )
    token.add_argument("participant")
    forget = sub.add_parser("forget", help="erase a participant everywhere")
    forget.add_argument("participant")
    p.set_defaults(func=run_sessions)


def _time(us: int) -> str:
    return datetime.fromtimestamp(us / 1e6, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def run_sessions(args: argparse.Namespace) -> int:
    from edge.server import ServiceSettings
    from edge.store import STORE_FILE, SessionStore, StoreError

    data_dir = Path(args.data_dir) if args.data_dir else ServiceSettings().data_dir
    try:
        store = SessionStore(data_dir / STORE_FILE)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        return ACTIONS[args.action](store, args)
    except (KeyError, ValueError) as exc:
        print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 1
    finally:
        store.close()


def _list(store: Any, args: argparse.Namespace) -> int:
    rows = store.participants()
    if not rows:
        print("no stored participants")
    for r in rows:
        print(
            f"{r.participant_id}\tlast seen {_time(r.last_seen_us)}\t{r.records} records "
            f"({r.in_view} in the model's view, {r.history_bytes} bytes)"
        )
    return 0


def _show(store: Any, args: argparse.Namespace) -> int:
    stored = store.load(args.participant)
    if stored is None:
        raise KeyError(f"no stored participant {args.participant!r}")
    _, total = store.history(args.participant, limit=0)
    print(f"participant {args.participant}: {total} records")
    for name, section in sorted(stored.sections.items()):
        if section.summary:
            print(f"summary of {name}: {section.summary}")
    print(f"in the model's view: {len(stored.view)} entries")
    page, _ = store.history(args.participant, offset=max(total - args.last, 0), limit=args.last)
    for r in page:
        mark = "*" if r.in_view else " "
        text = f"User: {r.user} / Assistant: {r.assistant}" if r.kind == "exchange" else r.text
        print(f"{mark} {_time(r.timestamp_us)} [{r.section}] {text}")
    report = stored.last_compaction
    if report is not None:
        print(f"last compaction: {json.dumps(report, sort_keys=True)}")
    return 0


def _export(store: Any, args: argparse.Namespace) -> int:
    from edge.store import dumps, export_participant

    text = dumps(export_participant(store, args.participant))
    if args.output:
        Path(args.output).write_text(text, "utf-8")
    else:
        sys.stdout.write(text)
    return 0


def _import(store: Any, args: argparse.Namespace) -> int:
    from edge.store import import_participant

    try:
        document = json.loads(Path(args.file).read_text("utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {args.file}: {exc}") from exc
    pid = import_participant(store, document, args.as_id)
    token, _ = store.claim(pid, None)
    print(f"imported {pid}; resume it with session token {token}")
    return 0


def _token(store: Any, args: argparse.Namespace) -> int:
    token = store.reissue(args.participant)
    print(
        f"new session token for {args.participant} (the old one no longer works): {token}\n"
        f"resume with: edge client --participant {args.participant} --resume {token}"
    )
    return 0


def _forget(store: Any, args: argparse.Namespace) -> int:
    if not store.forget(args.participant, notify=True):  # a running service erases them too
        raise KeyError(f"no stored participant {args.participant!r}")
    print(f"forgot {args.participant}")
    return 0


ACTIONS = {
    "list": _list,
    "show": _show,
    "export": _export,
    "import": _import,
    "token": _token,
    "forget": _forget,
}
