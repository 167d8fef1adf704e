"""``edge models``: what the catalogue lists, what is installed, and whether it is intact."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from edge.catalogue import Catalogue, CatalogueError, ModelMissingError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("models", help="list catalogued models and where they are installed")
    p.add_argument(
        "--verify", action="store_true", help="check SHA-256 digests of installed models"
    )
    p.add_argument("--role", choices=["llm", "stt", "tts", "vad"], help="only this role")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    console = Console()
    try:
        catalogue = Catalogue.load()
    except CatalogueError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    table = Table(title="Model catalogue")
    for col in ("id", "role", "format", "size", "ctx", "licence", "source", "status"):
        table.add_column(col)
    missing_default = False
    bad = False
    for entry in catalogue:
        if args.role and entry.role != args.role:
            continue
        try:
            where = entry.locate()
            status = f"[green]installed[/] {where}"
            if args.verify:
                results = entry.verify()
                if not results:
                    status += " [yellow](no digest to check)[/]"
                elif all(results.values()):
                    status += " [green]sha256 ok[/]"
                else:
                    bad = True
                    failed = ", ".join(k for k, ok in results.items() if not ok)
                    status += f" [red]CHECKSUM MISMATCH: {failed}[/]"
        except ModelMissingError as exc:
            status = f"[red]missing[/]: {exc}"
            missing_default |= entry.default
        size = f"{entry.size_bytes / 1e6:.0f} MB" if entry.size_bytes else "?"
        name = entry.id + (" (default)" if entry.default else "")
        table.add_row(
            name,
            entry.role,
            entry.format,
            size,
            str(entry.context_length or ""),
            entry.license,
            entry.source,
            status,
        )
    console.print(table)
    return 1 if (bad or missing_default) else 0
