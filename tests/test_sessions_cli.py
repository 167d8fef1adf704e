"""``edge sessions list | show | export | import | forget`` on a data directory's store."""

from __future__ import annotations

import json

from edge.cli._main import main
from edge.store import STORE_FILE, Record, SessionStore


def test_list_show_export_import_forget(tmp_path, capsys) -> None:
    store = SessionStore(tmp_path / STORE_FILE)
    for i in range(3):
        store.add_record("alice", Record("exchange", "dialogue", i, user=f"q{i}", assistant="a"))
    store.close()
    base = ["sessions", "--data-dir", str(tmp_path)]
    assert main([*base, "list"]) == 0
    assert "alice" in capsys.readouterr().out
    assert main([*base, "show", "alice"]) == 0
    assert "User: q2" in capsys.readouterr().out
    out = tmp_path / "alice.json"
    assert main([*base, "export", "alice", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["format"] == "edge.session/1"
    assert main([*base, "import", str(out)]) == 1  # alice exists
    assert "exists" in capsys.readouterr().err
    assert main([*base, "import", str(out), "--as", "alice-2"]) == 0
    assert "resume it with session token" in capsys.readouterr().out
    assert main([*base, "forget", "alice"]) == 0
    assert main([*base, "forget", "alice"]) == 1
    capsys.readouterr()
    assert main([*base, "list"]) == 0
    listed = capsys.readouterr().out
    assert "alice-2" in listed and "alice\t" not in listed
