"""List the functions in a tree longer than a limit (default 80 lines), longest first.

    python tools/long_functions.py [edge] [--max 80]

A function's length is from its ``def`` line (decorators excluded) to its last line,
docstring included; nested functions count in their parent too.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path


def long_functions(root: Path, limit: int) -> list[tuple[int, str]]:
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    found.append((length, f"{path}:{node.lineno} {node.name}"))
    return sorted(found, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default="edge")
    parser.add_argument("--max", type=int, default=80, help="longest allowed (lines)")
    args = parser.parse_args()
    for length, where in long_functions(Path(args.root), args.max):
        print(f"{length:4d}  {where}")


if __name__ == "__main__":
    main()
