"""The ``edge`` command: one sub-command module per concern.

Each module named in ``COMMAND_MODULES`` lives beside this file as ``_<name>.py`` and
defines ``register(subparsers)``, which adds its sub-command(s) with ``set_defaults(func=...)``
where ``func(args) -> int`` is the exit status.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

COMMAND_MODULES = (
    "ask",
    "models",
    "device",
    "voice",
    "eval",
    "serve",
    "token",
    "sessions",
    "bench",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edge", description="Offline voice-agent service for XR edge hardware."
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"edge.cli._{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"edge.cli._{name}":
                continue  # that concern has no command yet
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
