"""Check the code's shape: the limits `docs/architecture.md` promises, run by `make test`.

    python tools/structure.py            # prints each breach, exits 1 if there is one

In `edge/`: no function over 60 lines (from its ``def`` line to its last, docstring
included; a nested function counts in its parent too), no class over 300 lines, no
constructor over 8 parameters (``self``, ``*args`` and ``**kwargs`` not counted). In
`edge/`, `benchmarks/` and `tools/`: no import of a private module (``edge.x._y``) from
outside its package ``edge.x`` (tests may reach into internals). Between the packages of
`edge/`: no loop (no package imports one that imports it back, directly or not).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

MAX_FUNCTION_LINES = 60
MAX_CLASS_LINES = 300
MAX_CONSTRUCTOR_PARAMS = 8
SIZED = ("edge",)
NO_PRIVATE_IMPORTS = ("edge", "benchmarks", "tools")


def lines(node: ast.stmt) -> int:
    return (node.end_lineno or node.lineno) - node.lineno + 1


def constructor_params(node: ast.ClassDef) -> int:
    for item in node.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            args = item.args
            return len(args.posonlyargs) + len(args.args) - 1 + len(args.kwonlyargs)
    return 0


def size_breaches(path: Path, tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if lines(node) > MAX_FUNCTION_LINES:
                yield f"{path}:{node.lineno} function {node.name}: {lines(node)} lines"
        elif isinstance(node, ast.ClassDef):
            if lines(node) > MAX_CLASS_LINES:
                yield f"{path}:{node.lineno} class {node.name}: {lines(node)} lines"
            if (params := constructor_params(node)) > MAX_CONSTRUCTOR_PARAMS:
                yield f"{path}:{node.lineno} class {node.name}: constructor has {params} parameters"


def owning_package(path: Path) -> str | None:
    """``edge.x`` for a file under ``edge/x/``; None elsewhere."""
    parts = path.parts
    return f"edge.{parts[1]}" if parts[0] == "edge" and len(parts) > 2 else None


def private_imports(path: Path, tree: ast.AST) -> Iterator[str]:
    own = owning_package(path)
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            private = next((i for i, p in enumerate(parts) if p.startswith("_")), None)
            if parts[0] != "edge" or private is None or private < 2:
                continue
            if ".".join(parts[:2]) != own:
                yield f"{path}:{node.lineno} imports private {name}"
                break


def package_imports(root: Path) -> dict[str, set[str]]:
    """``edge`` package name -> the other ``edge`` packages its modules import."""
    graph: dict[str, set[str]] = {}
    for path in sorted((root / "edge").rglob("*.py")):
        own = owning_package(path.relative_to(root))
        if own is None:
            continue
        uses = graph.setdefault(own.split(".")[1], set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == "edge" and len(parts) > 1 and f"edge.{parts[1]}" != own:
                    uses.add(parts[1])
    return graph


def package_loops(graph: dict[str, set[str]]) -> Iterator[str]:
    """One line per loop found: ``a -> b -> a``."""
    seen: set[tuple[str, ...]] = set()

    def walk(package: str, path: list[str]) -> Iterator[str]:
        for used in sorted(graph.get(package, ())):
            if used == path[0]:
                loop = path + [used]
                key = tuple(sorted(set(loop)))
                if key not in seen:
                    seen.add(key)
                    yield "package loop: " + " -> ".join(loop)
            elif used not in path and used > path[0]:
                yield from walk(used, path + [used])

    for start in sorted(graph):
        yield from walk(start, [start])


def breaches(root: Path) -> list[str]:
    found: list[str] = []
    for top in sorted(set(SIZED) | set(NO_PRIVATE_IMPORTS)):
        for path in sorted((root / top).rglob("*.py")):
            relative = path.relative_to(root)
            tree = ast.parse(path.read_text(encoding="utf-8"), str(relative))
            if top in SIZED:
                found += size_breaches(relative, tree)
            if top in NO_PRIVATE_IMPORTS:
                found += private_imports(relative, tree)
    return found + list(package_loops(package_imports(root)))


def main() -> int:
    found = breaches(Path(__file__).resolve().parent.parent)
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
