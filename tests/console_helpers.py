"""The browser console's tests drive Debian's Chromium (``make browser`` installs it) with
Playwright for Python; no browser is ever downloaded."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.required import require

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
)


def fake_microphone(wav: Path) -> list[str]:
    """Flags that make ``getUserMedia`` capture ``wav`` once (then silence), unprompted."""
    return [
        "--use-fake-device-for-media-stream",
        "--use-fake-ui-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}%noloop",
    ]


@contextlib.asynccontextmanager
async def chromium_page(extra_flags: Sequence[str] = ()) -> AsyncIterator[Any]:
    """A fresh page in the system Chromium; fails (never skips) when it is missing."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: `make browser` installs Debian's chromium")
    playwright = require("playwright.async_api")
    async with playwright.async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=[*FLAGS, *extra_flags]
        )
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 900})
            await context.grant_permissions(["microphone"])
            page = await context.new_page()
            page.set_default_timeout(30_000)
            yield page
        finally:
            await browser.close()


def console_address(websocket_url: str, token: str | None, host: str | None = None) -> str:
    """The console's URL for a service on 127.0.0.1 (as ``edge serve`` prints it), over
    ``https://`` for a ``wss://`` service; ``host`` replaces 127.0.0.1 (a LAN name, see
    :func:`lan_name`)."""
    base = websocket_url.replace("ws", "http", 1) + "/"
    if host is not None:
        base = base.replace("127.0.0.1", host, 1)
    return base + (f"?token={token}" if token else "")


LAN_NAME = "edge-box.test"


def lan_name(name: str = LAN_NAME) -> list[str]:
    """Flags that make Chromium reach 127.0.0.1 by ``name``: a machine on the network, not
    the browser's own (so not a secure origin over plain HTTP)."""
    return [f"--host-resolver-rules=MAP {name} 127.0.0.1"]


def trust_key(spki_base64: str) -> list[str]:
    """Flags that make Chromium accept a certificate for this key (SHA-256 of its
    SubjectPublicKeyInfo, base64), as a user accepting the service's certificate does."""
    return [f"--ignore-certificate-errors-spki-list={spki_base64}"]


async def connect(page: Any, url: str, *, participant: str | None = None) -> None:
    """Open the console and join; returns when the page says it is connected."""
    await page.goto(url)
    if participant:
        await page.fill("#participant", participant)
    await page.click("#connect")
    await page.wait_for_function(
        "() => document.getElementById('st-connection').dataset.state === 'open'"
    )


async def page_state(page: Any) -> dict[str, Any]:
    return await page.evaluate("window.edgeConsole.state()")
