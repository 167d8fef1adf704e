"""The browser console in a real headless Chromium against ``EdgeService`` on 127.0.0.1
with the real default models (SmolLM2, Whisper tiny.en, Piper, the local decision
service): a question spoken into a fake microphone (a Piper recording), a typed turn, and
a dictated note in the context panel.

``EDGE_CONSOLE_SCREENSHOT=docs/console.png`` also saves the page after the spoken turn
there (how the README's picture is made); otherwise screenshots stay in the test's
temporary directory.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from edge.server import EdgeService, SpeechParts
from edge.voice import PiperTTS, WhisperSTT, write_wav
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
from tests.server_helpers import settings, wait_for
from tests.voice_helpers import words

pytestmark = [pytest.mark.anyio, pytest.mark.model]

QUESTION = "What is the capital of France?"
NOTE = "Take a note: the centrifuge needs a new rotor."
SCENE = "A lab bench with a centrifuge and a pipette rack."
SPOKEN_STAGES = ["end of speech", "final transcript", "query", "routed", "first reply text"]


def spoken_wav(tts: PiperTTS, text: str, directory: Path) -> Path:
    """Piper speaks ``text`` between 0.7 s and 1.5 s of silence (the page's microphone
    starts, then the device's endpointing ends the utterance)."""
    speech = tts.synthesize(text)
    rate = speech.sample_rate
    audio = np.concatenate(
        [np.zeros(int(rate * 0.7), np.float32), speech.audio, np.zeros(int(rate * 1.5), np.float32)]
    )
    return write_wav(directory / "spoken.wav", audio, rate)


def real_service(models: tuple[WhisperSTT, PiperTTS], *, tls: bool = False) -> EdgeService:
    """As ``edge serve`` runs it: the detected profile sizes SmolLM2 and the decision
    service; voice (the module's loaded Whisper and Piper) and notes on."""
    stt, tts = models
    speech = SpeechParts(stt=stt, tts=tts)
    return EdgeService(settings(voice=True, notes=True, tls=tls), speech=speech)


async def turn_done(page, index: int, source: str, limit_ms: int = 90_000) -> dict:  # type: ignore[no-untyped-def,type-arg]
    """Wait until the page shows turn ``index`` answered by ``source`` (final frame)."""
    await page.wait_for_function(
        """([index, source]) => {
            const turns = window.edgeConsole.state().turns;
            return turns.length > index && turns[index].done && source in turns[index].reply;
        }""",
        arg=[index, source],
        timeout=limit_ms,
    )
    return (await page_state(page))["turns"][index]


async def test_spoken_question_shows_transcript_reply_audio_and_timeline(  # type: ignore[no-untyped-def]
    models, tmp_path
) -> None:
    wav = spoken_wav(models[1], QUESTION, tmp_path)
    async with real_service(models) as service:
        async with chromium_page(fake_microphone(wav)) as page:
            await connect(page, console_address(service.websocket_url, service.token))
            pid = await page.text_content("#st-participant")
            await wait_for(lambda: pid in service.warmer.warmed, limit=60)
            await page.fill("#scene-text", SCENE)
            await page.click("#scene-send")
            await page.click("#mic-toggle")  # hands-free: the fake microphone speaks
            turn = await turn_done(page, 0, "conversation")
            await page.wait_for_function(
                "() => window.edgeConsole.state().turns[0].stages.includes('first audio')",
                timeout=60_000,
            )
            await page.wait_for_function(
                "() => document.querySelector('.turn .audio-line').textContent.includes('Hz)')"
                " && !document.querySelector('.turn .audio-line').textContent.includes('…')",
                timeout=60_000,
            )
            before = (await page_state(page))["player"]
            await page.wait_for_timeout(300)
            state = await page_state(page)
            turn = state["turns"][0]
            heard = await page.text_content(".turn .heard")
            reply = await page.text_content(".turn .source-conversation .text")
            timeline = await page.locator(".turn .timeline .stage-name").all_text_contents()
            topics = await page.text_content("#topics")
            await page.click("#mic-toggle")
            shot = tmp_path / "console.png"
            await page.screenshot(path=str(shot), full_page=False)
    assert words(heard or "") == words(QUESTION) and turn["origin"] == "voice"
    assert reply and reply.strip() == turn["reply"]["conversation"].strip()
    for stage in [*SPOKEN_STAGES, "first audio"]:
        assert stage in turn["stages"], (stage, turn["stages"])
    assert any(name.startswith("routed → conversation") for name in timeline)
    # the reply audio reached the page's audio context, which is running and playing it
    player = state["player"]
    assert player["state"] == "running" and player["bytes"] > 22050  # over 0.5 s of PCM16
    assert player["bytes"] == turn["audioBytes"]
    assert player["seconds"] > 0.5 and player["currentTime"] > before["currentTime"]
    assert SCENE in (topics or "")
    target = os.environ.get("EDGE_CONSOLE_SCREENSHOT")
    if target:
        shutil.copyfile(shot, target)


async def test_spoken_turn_over_https_from_a_lan_name(models, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """As from a headset on the network: the console opened as https://<name>:PORT/ (not
    localhost), its certificate accepted by its key; the fake microphone speaks a Piper
    recording, and the turn comes back with its transcript, a reply and reply audio."""
    wav = spoken_wav(models[1], QUESTION, tmp_path)
    async with real_service(models, tls=True) as service:
        assert service.tls is not None
        flags = [
            *fake_microphone(wav),
            *lan_name(),
            *trust_key(service.tls.certificate.spki_base64),
        ]
        async with chromium_page(flags) as page:
            url = console_address(service.websocket_url, service.token, LAN_NAME)
            assert url.startswith(f"https://{LAN_NAME}:")
            await connect(page, url)
            secure = await page.evaluate("window.isSecureContext")
            pid = await page.text_content("#st-participant")
            await wait_for(lambda: pid in service.warmer.warmed, limit=60)
            await page.click("#mic-toggle")
            await turn_done(page, 0, "conversation")
            await page.wait_for_function(
                "() => window.edgeConsole.state().turns[0].audioBytes > 22050", timeout=60_000
            )
            turn = (await page_state(page))["turns"][0]
            await page.click("#mic-toggle")
    assert secure and turn["origin"] == "voice"
    assert words(turn["text"]) == words(QUESTION)
    assert turn["reply"]["conversation"].strip()


async def test_typed_turn_streams_text(models, tmp_path) -> None:  # type: ignore[no-untyped-def]
    async with real_service(models) as service:
        async with chromium_page() as page:
            await connect(page, console_address(service.websocket_url, service.token))
            await page.evaluate(
                """() => {
                    window.seen = [];
                    new MutationObserver(() => {
                        const node = document.querySelector('.source-conversation .text');
                        if (node && window.seen.at(-1) !== node.textContent) {
                            window.seen.push(node.textContent);
                        }
                    }).observe(document.getElementById('turns'),
                               {subtree: true, childList: true, characterData: true});
                }"""
            )
            await page.fill("#turn-text", "In one sentence, what is a centrifuge?")
            await page.click("#send")
            turn = await turn_done(page, 0, "conversation")
            seen = await page.evaluate("window.seen")
    assert turn["origin"] == "websocket" and turn["stages"][:2] == ["sent", "query"]
    text = turn["reply"]["conversation"]
    assert text.strip() and turn["frames"]["conversation"] > 2
    # the page showed the reply growing, frame by frame, before it was complete
    assert len(seen) > 2 and all(text.startswith(shown) for shown in seen)
    assert seen[-1] == text


async def test_dictated_note_shows_in_the_context_panel(models, tmp_path) -> None:  # type: ignore[no-untyped-def]
    wav = spoken_wav(models[1], NOTE, tmp_path)
    async with real_service(models) as service:
        async with chromium_page(fake_microphone(wav)) as page:
            await connect(page, console_address(service.websocket_url, service.token))
            pid = await page.text_content("#st-participant")
            await page.click("#mic-toggle")
            first = await turn_done(page, 0, "notes")
            await page.click("#mic-toggle")
            await page.fill("#turn-text", "done")
            await page.keyboard.press("Enter")
            saved = await turn_done(page, 1, "notes")
            notes = await page.text_content("#topics dd[data-topic='notes']")
            view_shown = await page.is_visible("#view-section")
            view = await page.text_content("#view") if view_shown else None
            await wait_for(lambda: "new rotor" in service.context.render(pid or ""), limit=30)
    assert first["origin"] == "voice" and "rotor" in words(first["text"])
    assert saved["reply"]["notes"] == "Note saved."
    assert "centrifuge needs a new rotor" in " ".join(words(notes or ""))
    if view_shown:  # the service offers the model's view: the note is in it
        assert "new rotor" in (view or "")
