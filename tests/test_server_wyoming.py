"""Wyoming ``describe`` / ``handle`` and bad input, and mDNS on loopback (scripted model)."""

from __future__ import annotations

import secrets

import anyio
import anyio.lowlevel
import pytest
from wyoming.asr import Transcribe, Transcript
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event
from wyoming.handle import Handled
from wyoming.info import Describe, Info
from zeroconf.asyncio import AsyncServiceBrowser, AsyncZeroconf

from edge import __version__
from edge.decisions import ScriptedDecisions
from edge.llm import ScriptedLLM
from edge.server import WEBSOCKET_SERVICE, WYOMING_SERVICE, EdgeService, ServiceSettings, discover
from tests.server_helpers import (
    Departures,
    answer_for,
    read_answer,
    settings,
    slow_departures,
    wait_for,
)

pytestmark = pytest.mark.anyio


async def test_wyoming_describe_and_handle_with_bad_input_in_between() -> None:
    service = EdgeService(
        settings(wyoming_port=0),
        llm=ScriptedLLM(answer_for),
        decisions=ScriptedDecisions(default="conversation"),
    )
    departures = Departures()
    service.runtime.register("departures", departures)
    async with service:
        assert service.wyoming is not None
        port = service.wyoming.bound_port
        async with AsyncTcpClient("127.0.0.1", port, read_timeout=10) as client:
            await client.write_event(Describe().event())
            event = await client.read_event()
            assert event is not None and Info.is_type(event.type)
            info = Info.from_event(event)
            assert [p.name for p in info.handle] == ["edge-agent"]
            assert info.asr == [] and info.tts == []  # this service runs without voice

            await client.write_event(Transcribe().event())
            event = await client.read_event()
            assert event is not None and Error.is_type(event.type)
            assert "without asr" in Error.from_event(event).text

            await client.write_event(Event(type="wake-word", data={}))
            event = await client.read_event()
            assert (
                event is not None
                and "unsupported event 'wake-word'" in Error.from_event(event).text
            )

            # the scripted answer has two sentences; a Wyoming reply stops after one
            # (wyoming_reply_sentences)
            for question in ("turn on the lights", "and the fan"):
                await client.write_event(Transcript(text=question).event())
                chunks, event = await read_answer(client)
                assert event is not None and Handled.is_type(event.type), event
                assert Handled.from_event(event).text == f"You said: {question}."
                assert "".join(chunks) == Handled.from_event(event).text
            (pid,) = service.hub.connected()  # a random id of its own, namespaced
            assert pid.startswith("wyoming:anon-") and len(pid) == len("wyoming:anon-") + 12
            assert "and the fan" in service.context.render(pid)
        await wait_for(lambda: departures.left)
        assert departures.left == [(pid, "connection closed")]
        assert pid not in service.context.participants()


@pytest.mark.mdns
async def test_mdns_advertises_both_services_on_loopback() -> None:
    # A name of its own: another service advertising on loopback (a parallel test run) must
    # neither rename this one through mDNS conflict resolution nor appear in its results.
    name = f"edge test {secrets.token_hex(3)}"
    s = settings(
        wyoming_port=0, mdns=True, mdns_interfaces=["127.0.0.1"], service_name=name, tls=True
    )
    service = EdgeService(
        s, llm=ScriptedLLM(answer_for), decisions=ScriptedDecisions(default="conversation")
    )
    async with service:
        assert service.wyoming is not None
        browser_zc = AsyncZeroconf(interfaces=["127.0.0.1"])
        seen: set[str] = set()

        def on_change(zeroconf, service_type, name, state_change):  # type: ignore[no-untyped-def]
            seen.add(name)

        browser = AsyncServiceBrowser(
            browser_zc.zeroconf, [WEBSOCKET_SERVICE, WYOMING_SERVICE], handlers=[on_change]
        )
        try:
            ws_name = f"{name}.{WEBSOCKET_SERVICE}"
            wy_name = f"{name}.{WYOMING_SERVICE}"
            await wait_for(lambda: {ws_name, wy_name} <= seen, limit=10)
            ws = await browser_zc.async_get_service_info(WEBSOCKET_SERVICE, ws_name, 3000)
            wy = await browser_zc.async_get_service_info(WYOMING_SERVICE, wy_name, 3000)
        finally:
            await browser.async_cancel()
            await browser_zc.async_close()
        assert ws is not None and wy is not None
        assert ws.port == service.websocket.bound_port
        assert wy.port == service.wyoming.bound_port
        assert ws.parsed_addresses() == ["127.0.0.1"]
        assert ws.properties[b"version"] == __version__.encode()
        assert b"model" in ws.properties and b"profile" in ws.properties
        assert ws.properties[b"auth"] == b"token" and ws.properties[b"protocol"] == b"2"
        assert wy.properties[b"auth"] == b"none"  # loopback only: no allow-list configured
        assert ws.properties[b"tls"].decode() == service.tls_fingerprint  # the key to expect
        assert wy.properties[b"tls"] == b"none"  # Wyoming stays plain TCP
        found = await discover(WYOMING_SERVICE, interfaces=["127.0.0.1"])
        ours = [(i.name, i.port) for i in found if i.name == wy_name]
        assert ours == [(wy_name, service.wyoming.bound_port)]
    await anyio.lowlevel.checkpoint()


async def test_wyoming_conversation_id_keeps_memory_across_connections() -> None:
    service = EdgeService(
        settings(wyoming_port=0),
        llm=ScriptedLLM(answer_for),
        decisions=ScriptedDecisions(default="conversation"),
    )
    departures = Departures()
    service.runtime.register("departures", departures)
    async with service:
        assert service.wyoming is not None
        port = service.wyoming.bound_port
        context = {"conversation_id": "01HACONV"}
        for question in ("where is the lab", "and the cafeteria"):
            async with AsyncTcpClient("127.0.0.1", port, read_timeout=10) as client:
                await client.write_event(Transcript(text=question, context=context).event())
                _, event = await read_answer(client)
                assert event is not None and Handled.is_type(event.type), event
                handled = Handled.from_event(event)
                assert handled.text == f"You said: {question}."
                assert handled.context == context
        pid = "wyoming:01HACONV"
        rendered = service.context.render(pid)
        assert "where is the lab" in rendered and "and the cafeteria" in rendered
        assert departures.left == []  # closing a connection does not end the conversation
        conversations = service.wyoming.backend.conversations
        assert await conversations.expire() == []  # not idle long enough
        conversations.idle_s = 0
        assert await conversations.expire() == [pid]
        await wait_for(lambda: departures.left)
        assert departures.left == [(pid, "conversation idle")]
        assert pid not in service.context.participants()
        async with AsyncTcpClient("127.0.0.1", port, read_timeout=10) as client:
            await client.write_event(
                Transcript(text="hi", context={"conversation_id": "second"}).event()
            )
            assert await client.read_event() is not None
    assert departures.left[-1] == ("wyoming:second", "server stopping")


async def test_wyoming_is_loopback_only_unless_addresses_are_allowed() -> None:
    # The service's default host (all interfaces); these two services are constructed only,
    # never started: tests listen on loopback alone.
    all_interfaces = ServiceSettings().host
    everywhere = EdgeService(
        settings(host=all_interfaces, wyoming_port=0),
        llm=ScriptedLLM(answer_for),
        decisions=ScriptedDecisions(default="conversation"),
    )
    assert everywhere.wyoming_host == "127.0.0.1"  # Home Assistant sends no token
    assert "loopback only" in everywhere.describe()["access"]["wyoming access"]
    service = EdgeService(
        settings(wyoming_port=0, max_sessions_per_address=2),
        llm=ScriptedLLM(answer_for),
        decisions=ScriptedDecisions(default="conversation"),
    )
    allowed = EdgeService(
        settings(host=all_interfaces, wyoming_port=0, wyoming_allow=("127.0.0.0/8",)),
        llm=ScriptedLLM(answer_for),
        decisions=ScriptedDecisions(default="conversation"),
    )
    assert allowed.wyoming_host == all_interfaces
    async with service:
        assert service.wyoming is not None
        port = service.wyoming.bound_port
        async with (
            AsyncTcpClient("127.0.0.1", port) as one,
            AsyncTcpClient("127.0.0.1", port) as two,
            AsyncTcpClient("127.0.0.1", port) as three,  # over the per-address cap
        ):
            event = await three.read_event()
            assert event is not None and "too many connections" in Error.from_event(event).text
            # a mistyped field and a lying length: errors naming them, then (lengths) a close
            await one.write_event(Event(type="transcript", data={"text": 5}))
            event = await one.read_event()
            assert event is not None and "text must be a string" in Error.from_event(event).text
            await one.write_event(Event(type="describe", payload=b"x" * 10))
            assert (await one.read_event()) is not None  # info: the payload was read and ignored
            assert two._writer is not None
            two._writer.write(b'{"type": "audio-chunk", "payload_length": 1073741824}\n')
            event = await two.read_event()
            assert event is not None and "over this server's limit" in Error.from_event(event).text
            assert await two.read_event() is None  # closed


async def test_a_wyoming_conversation_survives_a_restart(tmp_path) -> None:
    """Home Assistant's conversation is a durable participant: idle expiry and a restart
    of the service suspend it; its next request finds the earlier dialogue."""
    context = {"conversation_id": "01HAKEEP"}
    for question in ("the spare key is under the mat", "and the torch is in the drawer"):
        llm = ScriptedLLM(answer_for)
        service = EdgeService(
            settings(wyoming_port=0, data_dir=tmp_path),
            llm=llm,
            decisions=ScriptedDecisions(default="conversation"),
        )
        async with service:
            assert service.wyoming is not None
            async with AsyncTcpClient("127.0.0.1", service.wyoming.bound_port) as client:
                await client.write_event(Transcript(text=question, context=context).event())
                _, event = await read_answer(client)
                assert event is not None and Handled.is_type(event.type), event
    assert "the spare key is under the mat" in llm.requests[-1].messages[1].content


async def test_a_request_while_its_conversation_is_leaving_is_answered(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    slow_departures(monkeypatch)
    service = EdgeService(
        settings(wyoming_port=0),
        llm=ScriptedLLM(answer_for),
        decisions=ScriptedDecisions(default="conversation"),
    )
    async with service:
        assert service.wyoming is not None
        port = service.wyoming.bound_port
        backend = service.wyoming.backend
        backend.handle_timeout_s = 5
        context = {"conversation_id": "01HACONV"}

        async def ask(question: str) -> str:
            async with AsyncTcpClient("127.0.0.1", port, read_timeout=10) as client:
                await client.write_event(Transcript(text=question, context=context).event())
                _, event = await read_answer(client)
                assert event is not None and Handled.is_type(event.type), event
                return Handled.from_event(event).text

        assert await ask("where is the lab") == "You said: where is the lab."
        backend.conversations.idle_s = 0
        async with anyio.create_task_group() as tg:
            tg.start_soon(backend.conversations.expire)  # its departure takes 0.3 s
            await anyio.sleep(0.05)
            assert await ask("and the cafeteria") == "You said: and the cafeteria."


def test_the_wyoming_allow_list_admits_only_its_addresses() -> None:
    """An allow-list names addresses and networks; any other address is refused (an IPv4
    address is not admitted for being one), and without a list only loopback is."""
    from types import SimpleNamespace

    from edge.server._access import address_allowed
    from edge.server._wyoming import WyomingLimits, WyomingServer

    allow = ("192.168.1.20", "10.1.0.0/16")
    for address, allowed in (
        ("127.0.0.1", True),
        ("::1", True),
        ("192.168.1.20", True),
        ("10.1.200.3", True),
        ("192.168.1.21", False),
        ("10.2.0.1", False),
        ("8.8.8.8", False),
        ("fe80::1", False),
        ("not an address", False),
    ):
        assert address_allowed(address, allow) is allowed, address
    assert not address_allowed("192.168.1.20", ())
    assert not address_allowed("192.168.1.20", ("bad entry", "192.168.1.21/32"))

    class Peer:  # a connection's writer, as the Wyoming server sees it (never opened)
        def __init__(self, address: str) -> None:
            self.address = address

        def get_extra_info(self, name: str) -> object:
            return (self.address, 50000) if name == "peername" else None

    backend = SimpleNamespace(limits=WyomingLimits(), tts=None, prepared=None)
    server = WyomingServer(backend, "127.0.0.1", 0, allow=allow)  # type: ignore[arg-type]
    for address, allowed in (("192.168.1.20", True), ("192.168.7.9", False)):
        handler = server._factory(None, Peer(address))  # type: ignore[arg-type]
        assert (handler.refused is None) is allowed, (address, handler.refused)
        if not allowed:
            assert "wyoming_allow" in (handler.refused or "")
