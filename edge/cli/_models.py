"""``edge models``: what the catalogue lists, what is installed, and whether it is intact."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from edge.catalogue import Catalogue, CatalogueError, ModelMissingError, Role, prepare_all
from edge.llm import ModelLoadError, quantize_gguf


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("models", help="list catalogued models and where they are installed")
    p.add_argument(
        "--verify", action="store_true", help="check SHA-256 digests of installed models"
    )
    p.add_argument(
        "--prepare",
        action="store_true",
        help="build the models the catalogue derives from others (a weight-format "
        "conversion, once; make run and make test do this)",
    )
    p.add_argument("--force", action="store_true", help="with --prepare: build them again")
    p.add_argument("--role", choices=["llm", "stt", "tts", "vad"], help="only this role")
    p.add_argument(
        "--path",
        action="store_true",
        help="with --role: print where its default model is installed (for another "
        "server's command line, e.g. docs/deploy.md's speech servers)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    console = Console()
    try:
        catalogue = Catalogue.load()
    except CatalogueError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    if args.prepare:
        return prepare_models(console, catalogue, force=args.force)
    if args.path:
        return _print_path(console, catalogue, args.role)
    table = Table(title="Model catalogue")
    for col in ("id", "role", "format", "size", "ctx", "licence", "status"):
        table.add_column(col, overflow="fold")
    missing_default = False
    bad = False
    notes: list[str] = []
    for entry in catalogue:
        if args.role and entry.role != args.role:
            continue
        try:
            where = entry.locate()
            status = "[green]installed[/]"
            notes.append(f"[green]{entry.id}[/]: {where}")
            if args.verify:
                results = entry.verify()
                if not results:
                    status += " [yellow]no digest[/]"
                elif all(results.values()):
                    status += " [green]sha256 ok[/]"
                else:
                    bad = True
                    failed = ", ".join(k for k, ok in results.items() if not ok)
                    status = "[red]CHECKSUM MISMATCH[/]"
                    notes.append(f"[red]{entry.id}[/]: digest mismatch for {failed}")
        except ModelMissingError as exc:
            status = "[red]missing[/]" if entry.default else "[dim]not installed[/]"
            if entry.default:
                missing_default = True
                notes.append(f"[red]{entry.id}[/]: {exc}")
            else:
                notes.append(f"[dim]{entry.id}: optional; {entry.install_hint()}[/]")
        size = f"{entry.size_bytes / 1e6:.0f} MB" if entry.size_bytes else "?"
        name = entry.id + (" *" if entry.default else "")
        table.add_row(
            name,
            entry.role,
            entry.format,
            size,
            str(entry.context_length or ""),
            entry.license,
            status,
        )
    console.print(table)
    console.print("[dim]* default for its role[/]")
    for note in notes:
        console.print(note, soft_wrap=True)
    return 1 if (bad or missing_default) else 0


def prepare_models(console: Console, catalogue: Catalogue, *, force: bool) -> int:
    try:
        done = prepare_all(catalogue, convert=quantize_gguf, force=force)
    except (CatalogueError, ModelMissingError, ModelLoadError) as exc:
        console.print(f"[red]error:[/] {exc}", soft_wrap=True)
        return 2
    for entry, where, built in done:
        what = "built" if built else "already built"
        console.print(f"{entry.id}: {what} ({entry.source}) at {where}", soft_wrap=True)
    return 0


def _print_path(console: Console, catalogue: Catalogue, role: Role | None) -> int:
    if role is None:
        console.print("[red]error:[/] --path needs --role (llm, stt, tts or vad)")
        return 2
    try:
        print(catalogue.default(role).locate())
    except (CatalogueError, ModelMissingError) as exc:
        console.print(f"[red]error:[/] {exc}", soft_wrap=True)
        return 1
    return 0
