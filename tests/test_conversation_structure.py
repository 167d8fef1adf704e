"""The context manager's state has one owner (``edge/conversation/_state.py``) and its parts
are siblings given only what they use; the face is small (docs/conversation.md, "Where the
code is")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conversation_helpers import manager

from edge.llm import ScriptedLLM
from tools.structure import Classes, class_lines, constructor_params

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "edge" / "conversation"
SIBLINGS = ("_writing", "_compacting", "_schedule", "_prefixes")


def _tree(module: str) -> ast.Module:
    return ast.parse((PACKAGE / f"{module}.py").read_text("utf-8"))


def _imports(module: str) -> set[str]:
    """The package's modules ``module`` imports (at any depth: TYPE_CHECKING, lazily)."""
    found: set[str] = set()
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {node.module} if node.module else {a.name for a in node.names}
    return found


def test_the_writer_compaction_scheduler_and_prefixes_are_siblings() -> None:
    for module in SIBLINGS:
        assert _imports(module) & set(SIBLINGS) == set(), module


def test_the_state_owner_keeps_its_fields_to_itself() -> None:
    """Every field of ``ContextState`` is private: the other parts ask it (its methods),
    never read or write its fields; what a participant waits for is set nowhere else."""
    owner = next(
        n for n in _tree("_state").body if isinstance(n, ast.ClassDef) and n.name == "ContextState"
    )
    fields = {
        target.attr
        for node in ast.walk(owner)
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute) and getattr(target.value, "id", "") == "self"
    }
    assert fields and all(name.startswith("_") for name in fields), fields
    for path in PACKAGE.glob("*.py"):
        text = path.read_text("utf-8")
        assert "warm_pending" not in text and ".compacting =" not in text, path.name


def test_nothing_is_wired_after_the_parts_are_made() -> None:
    """The assembly sets no attribute of a part (the old ``compaction.wake =
    views.on_backlog = schedule.wake`` back edge)."""
    for node in ast.walk(_tree("_manager")):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                for item in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if isinstance(item, ast.Attribute):
                        assert getattr(item.value, "id", "") == "self", ast.unparse(node)


def test_the_faces_are_small_and_take_few_parameters() -> None:
    """Counting the spec's keywords (``**options: Unpack[...]``) as parameters."""
    edge = ROOT / "edge"
    trees = {p.relative_to(ROOT): ast.parse(p.read_text("utf-8")) for p in edge.rglob("*.py")}
    classes = Classes(trees)
    faces = {"_manager.py": "ContextManager", "_conversation.py": "Conversation"}
    for module, name in faces.items():
        path = Path("edge/conversation") / module
        node = classes.by_module[path][name]
        assert constructor_params(node, path, classes) <= 8, name
    path = Path("edge/conversation/_manager.py")
    assert class_lines(path, classes.by_module[path]["ContextManager"], classes) <= 150


@pytest.mark.anyio
async def test_what_a_participant_waits_for_goes_with_their_view() -> None:
    ctx = manager(ScriptedLLM())
    state = ctx._state
    ctx.messages("p", system="S", request="Hi")  # remembers the system prompt
    await ctx.record_exchange("p", "Hello", "Hi there.")
    part = state.peek("p")
    assert part is not None and state.wants_warm(part)  # the exchange changed the prefix
    assert state.take_warm(part) and not state.take_warm(part)
    state.mark_warm(part)
    state.begin_compaction(part)
    assert state.compacting(part)
    await ctx.suspend("p")  # dropped from memory: it waits for nothing any more
    assert not state.wants_warm(part) and not state.compacting(part)
    state.mark_warm(part)  # a view no longer the participant's is not marked
    assert not state.wants_warm(part)
    await ctx.close()
