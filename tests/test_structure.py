"""The code keeps the shape `docs/architecture.md` promises (`tools/structure.py`)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tools.structure import (
    Classes,
    breaches,
    package_imports,
    package_loops,
    private_imports,
    size_breaches,
)

ROOT = Path(__file__).resolve().parent.parent


def test_the_tree_has_no_long_function_big_class_long_constructor_or_private_reach() -> None:
    """The strict count, as ``make test`` runs it: a class with its `edge`-defined bases,
    each ``Unpack`` key a constructor parameter."""
    assert breaches(ROOT, strict=True) == []


def test_the_check_names_each_kind_of_breach() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    params = ", ".join(f"a{i}" for i in range(9))
    wide = f"class Wide:\n    def __init__(self, {params}):\n        pass\n"
    source = f"def long():\n{body}\n\n{wide}"
    found = list(size_breaches(Path("edge/x/_y.py"), ast.parse(source)))
    assert any("function long: 62 lines" in line for line in found), found
    assert any("constructor has 9 parameters" in line for line in found), found
    reach = ast.parse("from edge.voice._audio import x\nfrom edge.voice import y\n")
    assert [*private_imports(Path("benchmarks/b.py"), reach)] == [
        "benchmarks/b.py:1 imports private edge.voice._audio"
    ]
    assert [*private_imports(Path("edge/voice/_z.py"), reach)] == []
    loop = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert [*package_loops(loop)] == ["package loop: a -> b -> c -> a"]


def _methods(prefix: str, count: int) -> str:
    """``count`` methods of 10 lines each."""
    body = "\n".join(f"        x{i} = {i}" for i in range(8))
    return "".join(
        f"    def {prefix}{n}(self):\n{body}\n        return x0\n\n" for n in range(count)
    )


def _strict(files: dict[str, str]) -> list[str]:
    trees = {Path(path): ast.parse(text) for path, text in files.items()}
    classes = Classes(trees)
    return [line for path, tree in trees.items() for line in size_breaches(path, tree, classes)]


def test_the_strict_check_counts_a_class_with_its_mixins() -> None:
    """The old `SessionStore` shape: four classes sharing one ``self`` (a database class
    and three mixins over it, each under 300 lines) put together as one class of 398.
    The plain check passes it, the strict one not."""
    files = {
        "edge/store/_database.py": f"class StoreDatabase:\n{_methods('db', 12)}",
        "edge/store/_records.py": (
            "from ._database import StoreDatabase\n\n"
            f"class StoreRecords(StoreDatabase):\n{_methods('record', 12)}"
        ),
        "edge/store/_tokens.py": (
            "from ._database import StoreDatabase\n\n"
            f"class SessionTokens(StoreDatabase):\n{_methods('token', 6)}"
        ),
        "edge/store/_retention.py": (
            "from ._database import StoreDatabase\n\n"
            f"class StoreRetention(StoreDatabase):\n{_methods('retain', 6)}"
        ),
        "edge/store/_store.py": (
            "from ._records import StoreRecords\nfrom ._retention import StoreRetention\n"
            "from ._tokens import SessionTokens\n\n"
            "class SessionStore(SessionTokens, StoreRecords, StoreRetention):\n    pass\n"
        ),
        # a base of the same name from outside `edge` is not counted
        "edge/other/_z.py": (
            f"from elsewhere import StoreRecords\n\nclass Own(StoreRecords):\n{_methods('m', 25)}"
        ),
    }
    plain = [
        line for path, text in files.items() for line in size_breaches(Path(path), ast.parse(text))
    ]
    assert plain == []
    found = _strict(files)
    assert any("class SessionStore: 398 lines" in line for line in found), found
    assert not any("StoreDatabase" in line or "SessionTokens" in line for line in found), found
    assert not any("class Own" in line for line in found), found


_INJECTED = ("llm", "decisions", "device", "stt", "tts", "voice_config", "vad_factory")


def test_the_strict_check_fails_the_old_service_shape() -> None:
    """The old `EdgeService` shape: ``EdgeService(ServiceParts, ServiceAddresses)``, the
    construction steps and the addresses as two mixins over one ``self`` (each under 300
    lines), and a constructor of ``settings``, ``clock``, ``timezone`` and
    ``**injected: Unpack[Injected]`` with seven injectable parts. The plain check passes
    it; the strict one counts 63 + 275 + 176 lines and 10 parameters."""
    injected = "\n".join(f"    {name}: object" for name in _INJECTED)
    init = (
        "    def __init__(self, settings=None, *, clock=None, timezone=None,\n"
        "                 **injected: Unpack[Injected]):\n"
        + "\n".join(f"        self.x{i} = {i}" for i in range(17))
        + "\n"
    )
    files = {
        "edge/server/_service_parts.py": f"class ServiceParts:\n{_methods('build', 25)}",
        "edge/server/_service_addresses.py": f"class ServiceAddresses:\n{_methods('url', 16)}",
        "edge/server/_service.py": (
            "from typing import TypedDict, Unpack\n\n"
            "from ._service_addresses import ServiceAddresses\n"
            "from ._service_parts import ServiceParts\n\n"
            f"class Injected(TypedDict, total=False):\n{injected}\n\n"
            f"class EdgeService(ServiceParts, ServiceAddresses):\n{init}{_methods('run', 4)}"
        ),
    }
    plain = [
        line for path, text in files.items() for line in size_breaches(Path(path), ast.parse(text))
    ]
    assert plain == []
    found = [line.split(" ", 1)[1] for line in _strict(files)]
    assert found == [
        "class EdgeService: 514 lines",
        "class EdgeService: constructor has 10 parameters",
    ], found


def test_the_strict_check_counts_unpacked_keywords_as_parameters() -> None:
    keys = "\n".join(f"    k{i}: int" for i in range(7))
    source = (
        "from typing import TypedDict, Unpack\n\n"
        f"class Options(TypedDict, total=False):\n{keys}\n\n"
        "class Wide:\n    def __init__(self, a, *, b, **options: Unpack[Options]):\n"
        "        pass\n\n"
        "class Inherits(Wide):\n    pass\n"
    )
    assert _strict({"edge/x/_y.py": "def f(): pass\n"}) == []
    found = _strict({"edge/x/_y.py": source})
    assert [line.split(" ", 1)[1] for line in found] == [
        "class Wide: constructor has 9 parameters",
        "class Inherits: constructor has 9 parameters",
    ]
    assert list(size_breaches(Path("edge/x/_y.py"), ast.parse(source))) == []


def test_the_store_service_router_and_llamacpp_pass_the_strict_check() -> None:
    """`SessionStore` is one database held by its parts, `EdgeService` holds its frozen
    parts (not mixins over one ``self``; injected speech models come as one
    ``SpeechParts``), `AgentRouter` takes one config and hooks (the spec's keywords go
    through ``from_spec``) and `LlamaCppLLM` leaves requests and detokenizing to parts."""
    found = breaches(ROOT, strict=True)
    for where in ("edge/store/", "edge/server/", "edge/routing/", "edge/llm/"):
        assert not [line for line in found if line.startswith(where)], found


def test_the_command_exits_nonzero_only_on_a_breach() -> None:
    done = subprocess.run(
        [sys.executable, "tools/structure.py", "--strict"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == (1 if done.stdout else 0), done.stdout


def _table_imports() -> dict[str, str]:
    """``docs/architecture.md``'s package table: package -> its "imports" cell."""
    rows = {}
    text = (ROOT / "docs/architecture.md").read_text(encoding="utf-8")
    for line in text.split("## Packages", 1)[1].split("\n## ", 1)[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[2]
    return rows


def test_the_architecture_table_says_what_each_package_imports() -> None:
    graph = package_imports(ROOT)
    table = _table_imports()
    assert set(table) == set(graph), set(table) ^ set(graph)
    above: set[str] = set()
    for package, cell in table.items():
        actual = graph[package]
        if cell.startswith("everything above"):
            assert actual <= above - {"eval"}, (package, actual - above)
        elif "…" in cell:
            listed = {name.strip() for name in cell.split(",") if name.strip() != "…"}
            assert listed <= actual, (package, listed - actual)
        else:
            listed = set() if cell == "—" else {name.strip() for name in cell.split(",")}
            assert listed == actual, (package, "table", listed, "code", actual)
        above.add(package)


def _defined_topics() -> set[str]:
    """The name of every ``Topic("name", Payload)`` made in `edge/`."""
    names = set()
    for path in (ROOT / "edge").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Topic":
                first = node.args[0] if node.args else None
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    names.add(first.value)
    return names


def test_the_architecture_topic_table_names_every_topic() -> None:
    """Each topic a module of `edge/` defines has its row (or, for a context topic, its
    mention) in ``docs/architecture.md``'s topic table."""
    text = (ROOT / "docs/architecture.md").read_text(encoding="utf-8")
    table = text.split("## Topics", 1)[1].split("\n## ", 1)[0]
    first_cells = {line.split("|")[1].strip() for line in table.splitlines() if "|" in line}
    named = {name for cell in first_cells for name in cell.split("`")[1::2]}
    defined = _defined_topics()
    assert {"voice.audio.hold", "user.query", "notes"} <= defined, defined
    assert defined <= named, defined - named
