"""Check the code's shape: the limits `docs/architecture.md` promises, run by `make test`.

    python tools/structure.py --strict   # prints each breach, exits 1 if there is one
    python tools/structure.py            # the same without counting bases and Unpack keys

In `edge/`: no function over 60 lines (from its ``def`` line to its last, docstring
included; a nested function counts in its parent too), no class over 300 lines, no
constructor over 8 parameters (``self``, ``*args`` and ``**kwargs`` not counted). With
``--strict`` (what ``make test`` runs), a class counts with its `edge`-defined bases (a
class split into mixins is still one class), each key of a
``**options: Unpack[SomeTypedDict]`` is a parameter, and a class without ``__init__`` has
its first `edge`-defined base's. In
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


class Classes:
    """Every class defined in `edge/`, to find a class's `edge`-defined bases and the keys
    of a ``TypedDict`` a constructor unpacks. A plain name is looked up in the class's own
    module first, then, unless that module imports it from outside `edge`, among the
    classes of that name in `edge/` when there is only one."""

    def __init__(self, trees: dict[Path, ast.AST]) -> None:
        self.by_module: dict[Path, dict[str, ast.ClassDef]] = {}
        self.by_name: dict[str, list[ast.ClassDef]] = {}
        self.foreign: dict[Path, set[str]] = {}  # names a module imports from outside edge
        for path, tree in trees.items():
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    self.by_module.setdefault(path, {})[node.name] = node
                    self.by_name.setdefault(node.name, []).append(node)
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    if (node.module or "").split(".")[0] != "edge":
                        names = {a.asname or a.name for a in node.names}
                        self.foreign.setdefault(path, set()).update(names)
        self.module_of = {
            id(node): path for path, nodes in self.by_module.items() for node in nodes.values()
        }

    def find(self, path: Path, expr: ast.expr) -> ast.ClassDef | None:
        if not isinstance(expr, ast.Name):
            return None  # ``module.Class``, ``Generic[T]``: not followed
        name = expr.id
        if (own := self.by_module.get(path, {}).get(name)) is not None:
            return own
        if name in self.foreign.get(path, set()):
            return None
        found = self.by_name.get(name, [])
        return found[0] if len(found) == 1 else None

    def bases(self, path: Path, node: ast.ClassDef) -> list[tuple[Path, ast.ClassDef]]:
        """``node``'s `edge`-defined bases, theirs after them, each once, in order."""
        out: list[tuple[Path, ast.ClassDef]] = []
        for expr in node.bases:
            base = self.find(path, expr)
            if base is None or base is node or any(b is base for _, b in out):
                continue
            where = self.module_of[id(base)]
            out.append((where, base))
            out += [b for b in self.bases(where, base) if not any(b[1] is o for _, o in out)]
        return out


def lines(node: ast.stmt) -> int:
    return (node.end_lineno or node.lineno) - node.lineno + 1


def class_lines(path: Path, node: ast.ClassDef, classes: Classes | None) -> int:
    """``node``'s lines with those of its `edge`-defined bases."""
    bases = classes.bases(path, node) if classes is not None else []
    return lines(node) + sum(lines(base) for _, base in bases)


def _unpacked_keys(path: Path, kwarg: ast.arg | None, classes: Classes | None) -> int:
    """The keys of the ``TypedDict`` in ``**options: Unpack[TypedDict]`` (0 otherwise)."""
    note = kwarg.annotation if kwarg is not None else None
    if not isinstance(note, ast.Subscript) or classes is None:
        return 0
    if (getattr(note.value, "id", None) or getattr(note.value, "attr", None)) != "Unpack":
        return 0
    typed = classes.find(path, note.slice)
    if typed is None:
        return 0
    keys = [typed] + [base for _, base in classes.bases(path, typed)]
    return sum(isinstance(item, ast.AnnAssign) for cls in keys for item in cls.body)


def constructor_params(
    node: ast.ClassDef, path: Path | None = None, classes: Classes | None = None
) -> int:
    owners = [(path, node)]
    if classes is not None and path is not None:
        owners += classes.bases(path, node)
    for where, owner in owners:
        for item in owner.body:
            if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                args = item.args
                plain = len(args.posonlyargs) + len(args.args) - 1 + len(args.kwonlyargs)
                return plain + (_unpacked_keys(where, args.kwarg, classes) if where else 0)
    return 0


def size_breaches(path: Path, tree: ast.AST, classes: Classes | None = None) -> Iterator[str]:
    """Functions, classes and constructors in ``tree`` over the limits; with ``classes``
    (every class in `edge/`), a class counts with its bases and ``Unpack`` keys count."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if lines(node) > MAX_FUNCTION_LINES:
                yield f"{path}:{node.lineno} function {node.name}: {lines(node)} lines"
        elif isinstance(node, ast.ClassDef):
            if (size := class_lines(path, node, classes)) > MAX_CLASS_LINES:
                yield f"{path}:{node.lineno} class {node.name}: {size} lines"
            if (params := constructor_params(node, path, classes)) > MAX_CONSTRUCTOR_PARAMS:
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


def breaches(root: Path, *, strict: bool = False) -> list[str]:
    """Every breach under ``root``; ``strict`` counts a class with its `edge`-defined bases
    and each ``Unpack`` key as a constructor parameter (``--strict``, as ``make test``
    runs it)."""
    found: list[str] = []
    trees: dict[str, dict[Path, ast.AST]] = {}
    for top in sorted(set(SIZED) | set(NO_PRIVATE_IMPORTS)):
        for path in sorted((root / top).rglob("*.py")):
            relative = path.relative_to(root)
            tree = ast.parse(path.read_text(encoding="utf-8"), str(relative))
            trees.setdefault(top, {})[relative] = tree
    for top in SIZED:
        classes = Classes(trees.get(top, {})) if strict else None
        for relative, tree in trees.get(top, {}).items():
            found += size_breaches(relative, tree, classes)
    for top in NO_PRIVATE_IMPORTS:
        for relative, tree in trees.get(top, {}).items():
            found += private_imports(relative, tree)
    return found + list(package_loops(package_imports(root)))


def main() -> int:
    found = breaches(Path(__file__).resolve().parent.parent, strict="--strict" in sys.argv)
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
