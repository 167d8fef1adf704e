"""Command-line entry point (``edge``)."""

from ._main import build_parser, main

__all__ = ["build_parser", "main"]
