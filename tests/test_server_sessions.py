"""Durable sessions over the WebSocket protocol: resume, ownership, forget, the two views,
compact, last compaction, export/import, protocol 1 clients, a restart of the service."""

from __future__ import annotations

import json
import os
import stat

import anyio
import pytest
from server_helpers import answer_for, settings, slow_departures
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from edge.decisions import ScriptedDecisions
from edge.llm import ScriptedLLM
from edge.server import ClientRequestError, EdgeClient, EdgeService
from edge.server._client import local_token
from edge.store import STORE_FILE, SessionStore, dumps

pytestmark = pytest.mark.anyio


def service(**kw: object) -> EdgeService:
    return EdgeService(
        settings(**kw), llm=ScriptedLLM(answer_for), decisions=ScriptedDecisions("conversation")
    )


def users(page) -> list[str]:  # type: ignore[no-untyped-def]
    return [e["user"] for e in page.entries if e["kind"] == "exchange"]


async def test_a_reconnect_with_the_token_keeps_the_context() -> None:
    async with service() as svc:
        url = svc.websocket_url
        async with EdgeClient(url, participant_id="alice") as first:
            token = first.session_token
            assert token and first.welcome is not None and first.welcome.resumed is False
            await first.ask("my locker is number 42")
        async with EdgeClient(url, participant_id="alice", resume=token) as again:
            assert again.welcome is not None and again.welcome.resumed is True
            assert again.session_token == token
            await again.ask("and the bike is in the yard")
            assert users(await again.history()) == [
                "my locker is number 42",
                "and the bike is in the yard",
            ]
            view = await again.context_view()
            assert "locker is number 42" in "".join(b["text"] for b in view.blocks)
        prompt = svc.llm.requests[-1].messages[1].content  # type: ignore[attr-defined]
        assert "my locker is number 42" in prompt


async def test_the_router_reads_the_resumed_dialogue_from_the_context() -> None:
    """The context manager is the dialogue's one owner: a returning participant's routing
    history is their resumed dialogue, not only what they said since they came back."""
    async with service() as svc:
        url = svc.websocket_url
        async with EdgeClient(url, participant_id="alice") as first:
            token = first.session_token
            await first.ask("my locker is number 42")
        async with EdgeClient(url, participant_id="alice", resume=token) as again:
            await again.ask("and the bike is in the yard")
            history = [e.user for e in svc.router.history("alice")]
            assert history == ["my locker is number 42", "and the bike is in the yard"]
        assert [r.user for r in svc.store.history("alice")[0]] == history  # recorded once


async def test_a_wrong_or_missing_token_is_refused_and_the_connection_stays() -> None:
    async with service() as svc:
        url = svc.websocket_url
        async with EdgeClient(url, participant_id="alice") as owner:
            await owner.ask("secret plan")
        cases = ((None, "come back with the session token it was given"), ("x", "not it"))
        for n, (resume, words) in enumerate(cases):
            async with connect(url) as ws:
                hello = {"type": "hello", "participant_id": "alice", "token": local_token(url)}
                if resume:
                    hello["resume"] = resume
                await ws.send(json.dumps(hello))
                error = json.loads(await ws.recv())
                assert error["type"] == "error" and error["in_reply_to"] == "hello"
                assert (
                    "participant 'alice' already has a session" in error["message"]
                    and words in error["message"]
                )
                hello["participant_id"] = f"mallory-{n}"  # the connection may say hello again
                hello.pop("resume", None)
                await ws.send(json.dumps(hello))
                assert json.loads(await ws.recv())["type"] == "welcome", hello


async def test_forget_erases_the_participant_everywhere() -> None:
    async with service() as svc:
        url = svc.websocket_url
        async with EdgeClient(url, participant_id="alice") as client:
            await client.ask("remember the blue door")
            await client.forget()
        assert not svc.store.exists("alice")
        async with EdgeClient(url, participant_id="alice") as fresh:  # a new participant
            assert fresh.welcome is not None and fresh.welcome.resumed is False
            assert (await fresh.history()).total == 0


async def test_forget_on_the_device_erases_a_connected_participant_everywhere(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`edge sessions forget alice` while alice is connected: her open session ends with a
    goodbye saying why (it can no longer answer from her history), the service drops her
    context, and nothing of her reappears in the store after she has left."""
    from edge.cli._main import main
    from edge.server._protocol import Goodbye

    async with service(data_dir=tmp_path) as svc:
        url = svc.websocket_url
        async with EdgeClient(url, participant_id="alice", token=svc.token) as alice:
            await alice.ask("my locker is number 42", limit_s=30)
            forget = ["sessions", "--data-dir", str(tmp_path), "forget", "alice"]
            assert await anyio.to_thread.run_sync(main, forget) == 0
            with anyio.fail_after(30):  # a hang guard: the service looks twice a second
                while not isinstance((message := (await alice.receive())[0]), Goodbye):
                    pass
            assert message.reason == "forgotten"
            assert alice.ws is not None
            with pytest.raises(ConnectionClosed):
                await alice.ws.recv()
            assert alice.ws.close_code == 1000
        with anyio.fail_after(30):
            while svc.store.forgotten():  # noqa: ASYNC110 - handled once she is erased
                await anyio.sleep(0.01)
        assert "alice" not in svc.context.participants() and not svc.store.exists("alice")
        async with EdgeClient(url, participant_id="alice", token=svc.token) as fresh:
            assert fresh.welcome is not None and fresh.welcome.resumed is False
            turn = await fresh.ask("and the bike is in the yard", limit_s=30)
            assert turn.text == "You said: and the bike is in the yard. That is all."
            prompt = svc.llm.requests[-1].messages[1].content  # type: ignore[attr-defined]
            assert "locker is number 42" not in prompt
            told = await fresh.ask("which locker is mine?", limit_s=30)  # from her record
            assert "42" not in told.text, told.text
            assert users(await fresh.history())[0] == "and the bike is in the yard"
    store = SessionStore(tmp_path / STORE_FILE)
    try:
        records, _ = store.history("alice")
        exchanges = [r.user for r in records if r.kind == "exchange"]
        assert "my locker is number 42" not in exchanges and exchanges, exchanges
    finally:
        store.close()


async def test_the_data_dir_is_private_and_forget_leaves_no_words_on_disk(
    tmp_path, monkeypatch
) -> None:
    data = tmp_path / "edge"
    monkeypatch.setenv("EDGE_DATA_DIR", str(data))  # the service's and the client's
    data.mkdir(mode=0o755)
    (data / "sessions.sqlite3").touch()  # as an older version left them: world-readable
    for path in (data, data / "sessions.sqlite3"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    async with service() as svc:
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        async with EdgeClient(svc.websocket_url, participant_id="alice") as client:
            await client.ask("the vault code is marmalade octopus")
            files = [p for p in data.iterdir() if p.is_file()]
            assert {"token", "sessions.sqlite3", "sessions.sqlite3-wal"} <= {p.name for p in files}
            assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files), files
            assert b"marmalade" in b"".join(p.read_bytes() for p in files)
            await client.forget()
        on_disk = b"".join(p.read_bytes() for p in data.iterdir() if p.is_file())
        assert b"marmalade" not in on_disk and b"octopus" not in on_disk


async def test_compact_last_compaction_and_budgets_in_the_view() -> None:
    async with service() as svc:
        async with EdgeClient(svc.websocket_url, participant_id="alice") as client:
            for i in range(4):
                await client.ask(f"fact number {i}")
            assert await client.last_compaction() is None
            done = await client.compact(summary="Four facts were given.")
            assert done.reports and done.reports[0]["method"] == "custom"
            report = await client.last_compaction()
            assert report is not None and report["ok"] and report["entries_compacted"] == 3
            view = await client.context_view()
            dialogue = view.sections["dialogue"]
            assert dialogue["summary"] == "Four facts were given." and dialogue["entries"] == 1
            assert dialogue["used_bytes"] <= dialogue["budget_bytes"]
            assert len(users(await client.history())) == 4  # the whole conversation stays
            with pytest.raises(ClientRequestError, match="not a compacted section"):
                await client.compact(section="nope")


async def test_export_import_round_trips_byte_for_byte_across_services(tmp_path) -> None:
    async with service(data_dir=tmp_path / "a") as one:
        async with EdgeClient(one.websocket_url, participant_id="alice", token=one.token) as client:
            await client.send({"type": "context", "topic": "scene", "text": "A lab bench."})
            for i in range(3):
                await client.ask(f"question {i}")
            await client.compact(keep_last=1)
            exported = await client.export()
    text = dumps(exported)
    async with service(data_dir=tmp_path / "b", insecure=True) as two:  # another device
        url = two.websocket_url
        async with EdgeClient(url, participant_id="bob", token="") as client:
            await client.ask("something of my own")
            imported = await client.import_session(json.loads(text))
            assert imported.records == len(exported["records"])
            again = await client.export()
            assert dumps({**again, "participant_id": "alice"}) == text
            view = await client.context_view()
            assert "A lab bench." in "".join(b["text"] for b in view.blocks)
            with pytest.raises(ClientRequestError, match="not an exported session"):
                await client.import_session({"format": "nope"})


async def test_protocol_1_clients_never_see_the_session_fields() -> None:
    async with service() as svc:
        async with connect(svc.websocket_url) as ws:
            token = local_token(svc.websocket_url)
            await ws.send(json.dumps({"type": "hello", "protocol": 1, "token": token}))
            welcome = json.loads(await ws.recv())
            assert welcome["type"] == "welcome"
            assert "session_token" not in welcome and "resumed" not in welcome


async def test_sessions_survive_a_restart_and_health_reports_the_store(tmp_path) -> None:
    async with service(data_dir=tmp_path) as first:
        async with EdgeClient(
            first.websocket_url, participant_id="alice", token=first.token
        ) as client:
            token = client.session_token
            await client.ask("the freezer code is 5512")
        health = first.websocket.health()["store"]
        assert health["durable"] and health["store_bytes"] > 0
    async with service(data_dir=tmp_path) as second:
        url = second.websocket_url
        async with EdgeClient(
            url, participant_id="alice", resume=token, token=second.token
        ) as client:
            assert client.welcome is not None and client.welcome.resumed
            await client.ask("and the door code changes on Monday")
        prompt = second.llm.requests[-1].messages[1].content  # type: ignore[attr-defined]
        assert "the freezer code is 5512" in prompt


async def test_big_history_pages_shrink_and_a_too_big_export_says_where_to_get_it(
    monkeypatch,
) -> None:  # type: ignore[no-untyped-def]
    from edge.server import _sessions

    monkeypatch.setattr(_sessions, "MAX_REPLY_BYTES", 600)
    async with service() as svc:
        async with EdgeClient(svc.websocket_url, participant_id="alice") as client:
            for i in range(6):
                await client.ask(f"fact number {i} " + "x" * 100)
            pages = [await client.history(limit=500)]
            while (seen := sum(len(p.entries) for p in pages)) < pages[0].total:
                pages.append(await client.history(offset=seen, limit=500))
            assert len(pages) > 1 and pages[0].total == 6  # shrunk to fit, not refused
            said = [u for page in pages for u in users(page)]
            assert said == [f"fact number {i} " + "x" * 100 for i in range(6)]
            with pytest.raises(ClientRequestError, match="edge sessions export alice"):
                await client.export()
            await client.ask("still here")  # the connection carries on


async def test_a_history_page_of_cjk_text_stays_within_its_byte_limit(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The page limit counts encoded bytes: CJK text is three bytes a character, so a page
    counted in characters could pass the client's frame limit."""
    from edge.server import _sessions

    monkeypatch.setattr(_sessions, "MAX_REPLY_BYTES", 1200)
    said = [f"{i} 冷凍庫の扉のパッキンを交換しました" * 3 for i in range(8)]
    async with service() as svc:
        async with EdgeClient(svc.websocket_url, participant_id="alice") as client:
            for text in said:
                await client.ask(text)
            pages = [await client.history(limit=500)]
            while (seen := sum(len(p.entries) for p in pages)) < pages[0].total:
                pages.append(await client.history(offset=seen, limit=500))
    sizes = [
        sum(len(json.dumps(e, ensure_ascii=False).encode()) for e in page.entries) for page in pages
    ]
    assert all(size <= 1200 for size in sizes), sizes
    assert len(pages) > 1 and [u for page in pages for u in users(page)] == said


async def test_a_wrong_session_token_cannot_take_over_a_connected_participant() -> None:
    """Anyone with the device token may connect, but only the session token takes over a
    participant's live connection: a wrong one is refused and the owner stays connected."""
    async with service() as svc:
        url = svc.websocket_url
        async with EdgeClient(url, participant_id="alice") as owner:
            await owner.ask("my locker is number 42")
            for resume in ("guessed", "x" * 43):
                with pytest.raises(ConnectionError, match="that token is not it"):
                    async with EdgeClient(url, participant_id="alice", resume=resume):
                        pass
                assert svc.hub.connected() == ["alice"]
            turn = await owner.ask("and the bike is in the yard", limit_s=30)
            assert turn.text == "You said: and the bike is in the yard. That is all.", turn.errors
            assert owner.ws is not None and owner.ws.close_code is None


# -- reconnects: a resumed participant is served whatever the old link's state ----------


async def test_a_turn_right_after_a_quick_reconnect_is_answered(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    slow_departures(monkeypatch)
    async with service() as svc:
        url = svc.websocket_url
        async with EdgeClient(url, participant_id="alice") as first:
            token = first.session_token
            await first.ask("my locker is number 42")
        for n in range(3):  # each comes back while the previous link's departure runs
            async with EdgeClient(url, participant_id="alice", resume=token) as again:
                turn = await again.ask(f"fact {n}", limit_s=5)
                assert turn.text == f"You said: fact {n}. That is all.", turn.errors
        async with EdgeClient(url, participant_id="alice", resume=token) as last:
            assert users(await last.history()) == [
                "my locker is number 42",
                "fact 0",
                "fact 1",
                "fact 2",
            ]


async def test_a_departure_longer_than_the_hello_deadline_still_lets_the_hello_in(
    monkeypatch,
) -> None:  # type: ignore[no-untyped-def]
    """The hello deadline bounds saying hello, not the wait for the old link's departure
    (an answer being cancelled mid prompt evaluation can take seconds on a device)."""
    slow_departures(monkeypatch, 0.8)
    async with service(hello_timeout_s=0.3) as svc:
        url = svc.websocket_url
        async with EdgeClient(url, participant_id="alice") as first:
            token = first.session_token
            await first.ask("my locker is number 42")
        async with EdgeClient(url, participant_id="alice", resume=token) as again:
            turn = await again.ask("and the bike is in the yard", limit_s=5)
            assert turn.text == "You said: and the bike is in the yard. That is all."


async def test_a_resume_with_the_token_takes_over_a_link_gone_silent() -> None:
    async with service() as svc:
        url = svc.websocket_url
        stalled = EdgeClient(url, participant_id="alice")
        await stalled.__aenter__()
        try:
            token = stalled.session_token
            await stalled.ask("my locker is number 42")
            assert stalled.ws is not None
            stalled.ws.transport.pause_reading()  # the Wi-Fi stalls: nothing comes back
            with pytest.raises(ConnectionError, match="that token is not it"):
                async with EdgeClient(url, participant_id="alice", resume="wrong"):
                    pass
            with anyio.fail_after(3):  # served at once, not after keepalive gives up
                async with EdgeClient(url, participant_id="alice", resume=token) as again:
                    assert again.welcome is not None and again.welcome.resumed
                    turn = await again.ask("and the bike is in the yard", limit_s=3)
                    assert turn.text == "You said: and the bike is in the yard. That is all."
                    assert users(await again.history()) == [
                        "my locker is number 42",
                        "and the bike is in the yard",
                    ]
                    assert svc.hub.connected() == ["alice"]
        finally:
            assert stalled.ws is not None
            stalled.ws.transport.resume_reading()
            await stalled.__aexit__(None, None, None)
        assert stalled.ws.close_code == 1000
        assert "another connection resumed" in (stalled.ws.close_reason or "")


def notes_service(**kw: object) -> EdgeService:
    def choose(question):  # type: ignore[no-untyped-def]
        return "notes" if question.text.lower().startswith("take a note") else "conversation"

    return EdgeService(
        settings(notes=True, **kw),
        llm=ScriptedLLM(answer_for),
        decisions=ScriptedDecisions(choose),
    )


async def test_a_note_being_dictated_carries_across_a_dropped_link_and_a_restart(
    tmp_path,
) -> None:  # type: ignore[no-untyped-def]
    async with notes_service(data_dir=tmp_path) as svc:
        url = svc.websocket_url
        async with EdgeClient(url, participant_id="alice", token=svc.token) as first:
            token = first.session_token
            started = await first.ask("Take a note: the rotor is worn", limit_s=5)
            assert "taking a note" in started.text
        async with EdgeClient(url, participant_id="alice", resume=token, token=svc.token) as again:
            more = await again.ask("and the belt is loose", limit_s=5)
            assert (more.text, {r.source for r in more.replies}) == ("Got it.", {"notes"})
        # the tab closes mid-dictation and the service restarts: nothing is lost
    async with notes_service(data_dir=tmp_path) as svc:
        url = svc.websocket_url
        async with EdgeClient(url, participant_id="alice", resume=token, token=svc.token) as back:
            saved = await back.ask("done", limit_s=5)
            assert saved.text == "Note saved."
            entries = (await back.history()).entries
        assert not svc.llm.requests  # type: ignore[attr-defined]  # nothing went to the conversation
    notes = [e["text"] for e in entries if e["section"] == "notes"]
    assert notes == ["Note: the rotor is worn and the belt is loose"]


async def test_edge_client_resumes_50_times_in_a_row_and_no_turn_is_lost(
    monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    """The real `edge client --resume`, run back to back (each in its own event loop, as
    a process would), against a service whose departures take a moment."""
    from edge.cli import main

    slow_departures(monkeypatch, 0.05)
    async with service() as svc:
        url = svc.websocket_url
        async with EdgeClient(url, participant_id="alice", token=svc.token) as first:
            token = first.session_token
        assert token
        capsys.readouterr()
        for n in range(50):
            argv = ["client", "--url", url, "--participant", "alice", "--resume", token]
            argv += ["--token", svc.token or "", "--text", f"fact number {n}", "--timeout", "5"]
            status = await anyio.to_thread.run_sync(main, argv)
            printed = capsys.readouterr()
            assert status == 0, (n, printed.out, printed.err)
            assert f"You said: fact number {n}. That is all." in printed.out
        async with EdgeClient(url, participant_id="alice", resume=token) as last:
            page = await last.history(limit=100)
    assert users(page) == [f"fact number {n}" for n in range(50)]
