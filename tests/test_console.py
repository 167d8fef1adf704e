"""The browser console: static files on the WebSocket port, and the page in a real
headless Chromium against a service with the scripted model (the real-model spoken
turns are in ``test_console_models.py``)."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import numpy as np
import pytest

from edge.llm import ScriptedLLM
from edge.server import EdgeClient, EdgeService
from edge.voice import VoiceConfig, write_wav
from tests.console_helpers import (
    LAN_NAME,
    chromium_page,
    connect,
    console_address,
    fake_microphone,
    lan_name,
    page_state,
    trust_key,
)
from tests.server_helpers import (
    answer_for,
    make_service,
    settings,
    slow_departures,
    tone_service,
)
from tests.voice_helpers import silence, tone

pytestmark = pytest.mark.anyio


def http_base(service: EdgeService) -> str:
    return service.websocket_url.replace("ws://", "http://", 1)


async def test_page_and_files_are_served_beside_health_and_sessions() -> None:
    async with make_service() as service:
        base = http_base(service)
        async with httpx.AsyncClient() as http:
            page = await http.get(f"{base}/?token=abc")
            script = await http.get(f"{base}/console/app.js")
            worklet = await http.get(f"{base}/console/mic-worklet.js")
            style = await http.get(f"{base}/console/console.css")
            missing = await http.get(f"{base}/console/../_service.py")
            unknown = await http.get(f"{base}/console/nothing.js")
            health = await http.get(f"{base}/health")
        # the page still leaves the WebSocket handshake on "/" to the sessions
        async with EdgeClient(service.websocket_url, token=service.token) as client:
            turn = await client.ask("hello there")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="/console/app.js">' in page.text
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "http" not in policy.replace("http-equiv", "")
    assert page.headers["referrer-policy"] == "no-referrer"
    assert script.headers["content-type"].startswith("text/javascript")
    assert "registerProcessor" in worklet.text
    assert style.headers["content-type"].startswith("text/css")
    assert missing.status_code != 200 and unknown.status_code == 404
    assert health.json()["status"] == "ok"
    assert turn.text.startswith("You said: hello there")


def test_every_file_the_page_loads_ships_in_the_package() -> None:
    """No build step, no CDN: every script, style and module the page names is one of the
    package's console files, and none of them reaches another host."""
    from importlib import resources

    root = resources.files("edge.server") / "console"
    names = {entry.name for entry in root.iterdir()}
    assert {"index.html", "app.js", "session.js", "audio.js", "view.js", "mic-worklet.js"} <= names
    text = "\n".join((root / name).read_text() for name in names)
    for imported in ("./audio.js", "./session.js", "./view.js", "/console/mic-worklet.js"):
        assert imported in text
    own = text.replace("https://${location.host}", "")  # the page's own host, over HTTPS
    assert "https://" not in own and "http://" not in own.replace("http://localhost", "")


async def test_typed_turn_streams_text_shows_the_models_view_and_keeps_the_token_private(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with make_service(voice=False) as service:
        assert service.token
        url = console_address(service.websocket_url, service.token)
        assert service.console_url.endswith(f"/?token={service.token}")
        async with chromium_page() as page:
            await connect(page, url, participant="typist")
            assert "token" not in page.url  # moved out of the address bar
            notice = await page.text_content("#notice")
            assert "without voice" in (notice or "")
            assert await page.is_disabled("#ptt")
            await page.fill("#turn-text", "what is a rotor")
            await page.keyboard.press("Enter")
            reply = page.locator("#turns .turn .source-conversation .text")
            await reply.filter(has_text="That is all.").wait_for()
            state = await page_state(page)
            # the service offers the model's view and the whole conversation: both show it
            await page.locator("#history li").filter(has_text="what is a rotor").wait_for()
            await page.locator("#view .blocks li").filter(has_text="what is a rotor").wait_for()
            sections = await page.locator("#view .sections th[scope=row]").all_text_contents()
    assert "dialogue" in sections
    turn = state["turns"][0]
    assert turn["text"] == "what is a rotor" and turn["origin"] == "websocket"
    assert turn["reply"]["conversation"] == "You said: what is a rotor. That is all."
    assert turn["stages"][:3] == ["sent", "query", "processing"]
    assert "first reply text" in turn["stages"]
    assert service.token not in caplog.text


async def test_a_reload_resumes_the_same_participant_on_connect() -> None:
    async with make_service(voice=False) as service:
        url = console_address(service.websocket_url, service.token)
        async with chromium_page() as page:
            await connect(page, url)  # no id typed: the service assigns one
            assigned = await page.text_content("#st-participant")
            await page.fill("#turn-text", "remember the red door")
            await page.keyboard.press("Enter")
            await page.locator("#turns .turn .text").filter(has_text="That is all.").wait_for()
            await page.reload()  # the token left the address bar: the tab keeps it
            assert await page.input_value("#participant") == assigned
            assert "resume" in (await page.text_content("#notice") or "")
            await page.click("#connect")
            await page.locator("#history li").filter(has_text="remember the red door").wait_for()
            log = await page.text_content("#events")
    assert assigned and assigned.startswith("p-")
    assert f"joined as {assigned} (resumed)" in (log or "")


async def test_a_reload_then_typing_at_once_is_answered_and_the_page_refilled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Connect right after a reload and type within 100 ms while the old tab's departure
    is still running: the turn is answered, and the earlier turns and the scene the
    service holds come back into the page."""
    slow_departures(monkeypatch)
    async with make_service(voice=False) as service:
        url = console_address(service.websocket_url, service.token)
        async with chromium_page() as page:
            await connect(page, url, participant="reloader")
            await page.fill("#scene-text", "A lab bench with a centrifuge.")
            await page.click("#scene-send")
            await page.fill("#turn-text", "remember the red door")
            await page.keyboard.press("Enter")
            await page.locator("#turns .turn .text").filter(has_text="That is all.").wait_for()
            await page.reload()
            await page.click("#connect")
            await page.wait_for_function(
                "() => document.getElementById('st-connection').dataset.state === 'open'",
                polling=10,
            )
            await page.fill("#turn-text", "and the green door too")
            await page.keyboard.press("Enter")
            reply = page.locator("#turns .turn .text").filter(has_text="and the green door too")
            await reply.wait_for(timeout=5_000)
            earlier = page.locator("#turns .turn").filter(has_text="remember the red door")
            await earlier.locator(".origin-earlier").wait_for(timeout=5_000)
            scene = await page.input_value("#scene-text")
            heard = await page.locator("#turns .turn .heard").all_text_contents()
            await page.click("#disconnect")  # a reconnect in the same page adds no copies
            await page.click("#connect")
            await page.wait_for_function(
                "() => document.getElementById('st-connection').dataset.state === 'open'"
            )
            await page.fill("#turn-text", "and the blue one")
            await page.keyboard.press("Enter")
            await page.locator("#turns .turn .text").filter(has_text="the blue one").wait_for()
            again = await page.locator("#turns .turn .heard").all_text_contents()
    assert scene == "A lab bench with a centrifuge."
    assert heard == ["remember the red door", "and the green door too"]
    assert again == [*heard, "and the blue one"]


async def test_a_note_dictated_before_the_tab_closed_is_finished_after_it_reopens() -> None:
    from edge.decisions import ScriptedDecisions

    def choose(question):  # type: ignore[no-untyped-def]
        return "notes" if question.text.lower().startswith("take a note") else "conversation"

    service = EdgeService(
        settings(voice=False, notes=True),
        llm=ScriptedLLM(answer_for),
        decisions=ScriptedDecisions(choose),
    )
    async with service:
        url = console_address(service.websocket_url, service.token)
        async with chromium_page() as page:
            await connect(page, url, participant="dictator")
            await page.fill("#turn-text", "Take a note: the rotor is worn")
            await page.keyboard.press("Enter")
            await page.locator("#turns .turn .text").filter(has_text="taking a note").wait_for()
            await page.reload()
            await page.click("#connect")
            await page.wait_for_function(
                "() => document.getElementById('st-connection').dataset.state === 'open'"
            )
            await page.fill("#turn-text", "done")
            await page.keyboard.press("Enter")
            await page.locator("#turns .turn .text").filter(has_text="Note saved.").wait_for()
            saved = page.locator("#history li").filter(has_text="notes update")
            await saved.filter(has_text="Note: the rotor is worn").wait_for()
            # the dictation's own exchanges are in the dialogue too (the context owns it)
            said = page.locator("#history li").filter(has_text="Take a note: the rotor is worn")
            await said.wait_for()
    assert not service.llm.requests  # type: ignore[attr-defined]  # "done" went to the notes


async def test_a_wrong_token_is_refused_with_a_clear_message() -> None:
    async with make_service() as service:
        url = console_address(service.websocket_url, "not-the-token")
        async with chromium_page() as page:
            await page.goto(url)
            await page.click("#connect")
            await page.wait_for_selector("#notice:not([hidden])")
            notice = await page.text_content("#notice")
            state = await page_state(page)
    assert "Could not join" in (notice or "") and "token" in (notice or "")
    assert not state["connected"]


async def test_the_page_says_how_to_allow_the_microphone() -> None:
    """An insecure origin (a LAN address over plain HTTP) and a refused permission each
    get a sentence that says what to do; typed turns still work."""
    async with make_service() as service:
        async with chromium_page() as page:
            await page.goto(console_address(service.websocket_url, None))
            messages = await page.evaluate(
                """async () => {
                    const audio = await import('/console/audio.js');
                    const refused = audio.refusalMessage({name: 'NotAllowedError'});
                    const missing = audio.refusalMessage({name: 'NotFoundError'});
                    const secure = audio.microphoneProblem();
                    Object.defineProperty(window, 'isSecureContext', {value: false});
                    return {secure, insecure: audio.microphoneProblem(), refused, missing};
                }"""
            )
    assert messages["secure"] is None  # 127.0.0.1 is a secure origin
    assert "secure origin" in messages["insecure"] and "HTTPS" in messages["insecure"]
    assert "Typed turns work" in messages["insecure"]
    assert "Allow it for this page" in messages["refused"]
    assert "No microphone was found" in messages["missing"]


async def test_from_a_lan_name_plain_http_has_no_microphone_and_names_the_https_url(
    tmp_path: Path,
) -> None:
    """Reached by a name that is not localhost over plain HTTP (``--no-tls``), the page is
    not a secure origin: it says the microphone is unavailable and which https:// URL to
    open; typed turns still work."""
    wav = write_wav(tmp_path / "tone.wav", tone(1.0, 440.0, level=0.3), 16_000)
    service = tone_service(ScriptedLLM(answer_for), VoiceConfig(partial_interval_s=0))
    async with service, chromium_page([*fake_microphone(wav), *lan_name()]) as page:
        url = console_address(service.websocket_url, service.token, LAN_NAME)
        port = service.websocket.bound_port
        assert url.startswith(f"http://{LAN_NAME}:")
        await connect(page, url)
        notice = await page.text_content("#notice")
        secure = await page.evaluate("window.isSecureContext")
        mic_disabled = await page.is_disabled("#mic-toggle")
        await page.fill("#turn-text", "typed instead")
        await page.keyboard.press("Enter")
        await page.wait_for_function("() => window.edgeConsole.state().turns.some((t) => t.done)")
    assert not secure and mic_disabled
    assert "secure origin" in (notice or "") and f"https://{LAN_NAME}:{port}/" in (notice or "")


async def test_from_a_lan_name_over_https_the_microphone_gives_a_spoken_turn(
    tmp_path: Path,
) -> None:
    """The same name over HTTPS, the certificate accepted by its key (as a user accepts
    it): a secure origin, so the fake microphone speaks a turn that is answered aloud."""
    wav = write_wav(tmp_path / "tone.wav", tone(6.0, 440.0, level=0.3), 16_000)
    service = tone_service(
        ScriptedLLM(answer_for), VoiceConfig(playback_speed=0, partial_interval_s=0), tls=True
    )
    assert service.tls is not None
    flags = [*fake_microphone(wav), *lan_name(), *trust_key(service.tls.certificate.spki_base64)]
    async with service, chromium_page(flags) as page:
        url = console_address(service.websocket_url, service.token, LAN_NAME)
        assert url.startswith(f"https://{LAN_NAME}:")
        await connect(page, url)
        secure = await page.evaluate("window.isSecureContext")
        await page.focus("#ptt")
        await page.keyboard.down("Space")
        await page.wait_for_timeout(1500)
        await page.keyboard.up("Space")
        await page.wait_for_function(
            "() => window.edgeConsole.state().turns.some((t) => t.done && t.audioBytes > 0)",
            timeout=15_000,
        )
        turn = (await page_state(page))["turns"][0]
    assert secure and turn["origin"] == "voice" and turn["text"] == "tone 440"
    assert turn["reply"]["conversation"] == "You said: tone 440. That is all."


async def test_push_to_talk_on_the_space_bar_sends_resampled_speech_and_end_of_utterance(
    tmp_path: Path,
) -> None:
    """Holding the space bar streams the fake microphone (a 440 Hz tone, resampled by the
    page's AudioWorklet from the browser's rate to 16 kHz: the tone "recognizer" hears the
    same pitch) in binary frames of one VAD window each (512 samples, the size the
    benchmarks' clients send as the console's); releasing it sends ``end_of_utterance``,
    which alone ends the utterance here (the tone never pauses). The reply is spoken back
    to the page."""
    wav = write_wav(tmp_path / "tone.wav", tone(6.0, 440.0, level=0.3), 16_000)
    service = tone_service(
        ScriptedLLM(answer_for), VoiceConfig(playback_speed=0, partial_interval_s=0)
    )
    frames: list[int] = []
    async with service, chromium_page(fake_microphone(wav)) as page:
        page.on(
            "websocket",
            lambda ws: ws.on(
                "framesent",
                lambda data: frames.append(len(data)) if isinstance(data, bytes) else None,
            ),
        )
        await connect(page, console_address(service.websocket_url, service.token))
        await page.focus("#ptt")
        await page.keyboard.down("Space")
        await page.wait_for_function("() => window.edgeConsole.state().mode === 'push-to-talk'")
        await page.wait_for_timeout(1500)
        await page.keyboard.up("Space")
        await page.wait_for_function(
            "() => window.edgeConsole.state().turns.some((t) => t.done && t.audioBytes > 0)",
            timeout=15_000,
        )
        turn = (await page_state(page))["turns"][0]
    assert turn["origin"] == "voice" and turn["text"] == "tone 440"
    assert turn["reply"]["conversation"] == "You said: tone 440. That is all."
    assert turn["stages"][:3] == ["end of speech", "final transcript", "query"]
    window_bytes = 512 * 2  # 16-bit PCM at 16 kHz: FRAME_MS (32 ms) of audio
    assert len(frames) >= 30 and set(frames) == {window_bytes}


async def test_a_pause_while_hold_to_talk_is_held_does_not_end_the_turn(
    tmp_path: Path,
) -> None:
    """Issue 23: with Hold to talk held, a pause inside the sentence ended the utterance
    and the turn was answered while the button was down. The page says it holds the floor
    (``hold``); only the release ends the turn."""
    speech = np.concatenate([tone(0.8, 440.0), silence(2.0), tone(0.8, 440.0), silence(4.0)])
    wav = write_wav(tmp_path / "paused.wav", speech, 16_000)
    service = tone_service(
        ScriptedLLM(answer_for), VoiceConfig(playback_speed=0, partial_interval_s=0)
    )
    async with service, chromium_page(fake_microphone(wav)) as page:
        await connect(page, console_address(service.websocket_url, service.token))
        await page.focus("#ptt")
        await page.keyboard.down("Space")
        await page.wait_for_function("() => window.edgeConsole.state().mode === 'push-to-talk'")
        await page.wait_for_timeout(4000)  # the tone, a 2 s pause, the tone again
        held = (await page_state(page))["turns"]
        await page.keyboard.up("Space")
        await page.wait_for_function(
            "() => window.edgeConsole.state().turns.some((t) => t.done)", timeout=15_000
        )
        turns = (await page_state(page))["turns"]
    assert not [t for t in held if t.get("text")], held  # nothing ended while held
    assert [t["text"] for t in turns] == ["tone 440"]
    assert turns[0]["reply"]["conversation"] == "You said: tone 440. That is all."


@pytest.mark.parametrize(
    ("how", "reason"), [("push-to-talk", "client"), ("hands-free", "barge-in")]
)
async def test_speaking_over_a_reply_stops_it_in_the_page(
    tmp_path: Path, how: str, reason: str
) -> None:
    """Barge-in: a typed turn's long spoken reply (paced in real time) is playing when the
    participant speaks. Holding push-to-talk stops it from the page (an ``interrupt``);
    hands-free, the service hears the speech and interrupts it. Either way the page
    flushes what it had queued and marks the turn interrupted, and the spoken turn is
    answered."""
    speech = np.concatenate([tone(1.5, 440.0, level=0.3), np.zeros(64_000, np.float32)])
    wav = write_wav(tmp_path / "tone.wav", speech, 16_000)  # the fake microphone loops it
    long_reply = " ".join(["Here is a long story about the lab."] * 20)  # 16 s of speech
    service = tone_service(
        ScriptedLLM([long_reply], default="Short answer."),
        VoiceConfig(playback_speed=1, partial_interval_s=0),
    )
    async with service, chromium_page(fake_microphone(wav)) as page:
        await connect(page, console_address(service.websocket_url, service.token))
        await page.fill("#turn-text", "tell me a story")
        await page.keyboard.press("Enter")
        await page.wait_for_function("() => window.edgeConsole.state().player.bytes > 0")
        if how == "hands-free":
            await page.click("#mic-toggle")
        else:
            await page.focus("#ptt")
            await page.keyboard.down("Space")
        await page.locator("#turns .turn.interrupted").wait_for(timeout=15_000)
        if how == "push-to-talk":
            await page.wait_for_timeout(1500)  # the question goes on after the barge-in
            await page.keyboard.up("Space")
        await page.wait_for_function(
            "() => window.edgeConsole.state().turns.some((t) => t.origin === 'voice' && t.done)",
            timeout=15_000,
        )
        state = await page_state(page)
        log = await page.text_content("#events")
    story, spoken = state["turns"][0], state["turns"][-1]
    assert story["origin"] == "websocket" and story["interrupted"]
    assert f"reply interrupted ({reason})" in (log or "")
    assert state["player"]["seconds"] < 16  # the rest of the story never played
    assert spoken["text"] == "tone 440" and spoken["reply"]["conversation"] == "Short answer."


async def test_a_reload_mid_dictation_shows_the_kept_draft_and_no_internal_text() -> None:
    """Reload while dictating a note: the notes panel shows the draft the service kept
    (not "(nothing dictated yet)"), and the restored cards show what the device said
    ("Got it."), never the "(dictating a note) …" text recorded for the model."""
    from edge.decisions import ScriptedDecisions

    def choose(question):  # type: ignore[no-untyped-def]
        return "notes" if question.text.lower().startswith("take a note") else "conversation"

    service = EdgeService(
        settings(notes=True), llm=ScriptedLLM(answer_for), decisions=ScriptedDecisions(choose)
    )
    async with service:
        url = console_address(service.websocket_url, service.token)
        async with chromium_page() as page:
            await connect(page, url, participant="dictator")
            for line, answer in (
                ("Take a note: the rotor is worn", "taking a note"),
                ("and the belt is loose", "Got it."),
            ):
                await page.fill("#turn-text", line)
                await page.keyboard.press("Enter")
                said = page.locator("#turns .turn").filter(has_text=line).locator(".text")
                await said.filter(has_text=answer).wait_for()
            await page.reload()
            await page.click("#connect")
            notes = page.locator('#topics dd[data-topic="notes"]')
            await notes.filter(has_text="being dictated").wait_for()
            panel = await notes.text_content()
            earlier = page.locator("#turns .turn").filter(has_text="and the belt is loose")
            await earlier.locator(".origin-earlier").wait_for()
            cards = await page.locator("#turns").text_content()
    assert "the rotor is worn and the belt is loose" in (panel or ""), panel
    assert "nothing dictated yet" not in (panel or "")
    assert "(dictating a note)" not in (cards or "") and "Got it." in (cards or ""), cards
