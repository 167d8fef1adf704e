"""The context side stays in small parts: no function over 60 lines, no class over 300, no
constructor over 8 parameters in ``conversation`` (its manager and parts), ``recall``,
``eval`` and ``catalogue``; no private import across packages of theirs anywhere."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKED = [
    *sorted((ROOT / "edge/conversation").glob("*.py")),
    *sorted((ROOT / "edge/recall").glob("*.py")),
    *sorted((ROOT / "edge/eval").glob("*.py")),
    *sorted((ROOT / "edge/catalogue").glob("*.py")),
]
NOT_YET = {ROOT / "edge/conversation/_conversation.py"}  # Conversation: routing's work
PACKAGES = ("conversation", "recall", "eval", "catalogue")
MAX_FUNCTION, MAX_CLASS, MAX_PARAMETERS = 60, 300, 8


def _length(node: ast.AST) -> int:
    return (node.end_lineno or node.lineno) - node.lineno + 1  # type: ignore[attr-defined]


def _parameters(init: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = init.args
    return len(a.posonlyargs) + len(a.args) - 1 + len(a.kwonlyargs)  # less self


def _too_big(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if _length(node) > MAX_FUNCTION:
                found.append(f"{where} {node.name}: {_length(node)} lines")
        elif isinstance(node, ast.ClassDef):
            if _length(node) > MAX_CLASS:
                found.append(f"{where} {node.name}: {_length(node)} lines")
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    if item.name == "__init__" and _parameters(item) > MAX_PARAMETERS:
                        found.append(f"{where} {node.name}: {_parameters(item)} parameters")
    return found


def test_the_context_side_has_no_long_function_big_class_or_long_constructor() -> None:
    found = [f for path in CHECKED if path not in NOT_YET for f in _too_big(path)]
    assert not found, found


def test_nothing_imports_a_private_module_of_the_context_side_from_outside() -> None:
    found = []
    for root in ("edge", "benchmarks", "tools"):
        for path in sorted((ROOT / root).rglob("*.py")):
            rel = path.relative_to(ROOT)
            own = rel.parts[1] if root == "edge" and len(rel.parts) > 2 else None
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.ImportFrom) or not node.module:
                    continue
                parts = node.module.split(".")
                private = any(p.startswith("_") for p in parts[1:])
                if parts[0] == "edge" and len(parts) > 2 and parts[1] in PACKAGES:
                    if private and parts[1] != own:
                        found.append(f"{rel}: {node.module}")
    assert not found, found


def test_no_package_loop_among_the_context_side() -> None:
    """catalogue imports no other package; recall only the store; conversation neither
    eval nor device; nothing below conversation imports it but device, eval, server, cli."""
    imports: dict[str, set[str]] = {}
    for path in sorted((ROOT / "edge").rglob("*.py")):
        rel = path.relative_to(ROOT)
        if len(rel.parts) < 3:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            for module in modules:
                parts = module.split(".")
                if parts[0] == "edge" and len(parts) > 1 and parts[1] != rel.parts[1]:
                    imports.setdefault(rel.parts[1], set()).add(parts[1])
    assert imports.get("catalogue", set()) == set()
    assert imports["recall"] == {"store"}
    assert not imports["conversation"] & {"eval", "device", "server", "cli"}
    users = {pkg for pkg, used in imports.items() if "conversation" in used}
    assert users <= {"device", "eval", "server", "cli"}, users
