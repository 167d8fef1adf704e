"""``edge serve`` and ``edge client`` as a user runs them: processes, Ctrl-C included."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from edge.cli._main import build_parser
from edge.server import local_fingerprint

EDGE = [sys.executable, "-m", "edge"]


def test_serve_flags_become_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from edge.cli._serve import settings_from_args
    from edge.server import ServiceSettings

    monkeypatch.setenv("EDGE_PORT", "9100")
    monkeypatch.setenv("EDGE_WYOMING_PORT", "9101")
    args = build_parser().parse_args(["serve", "--host", "127.0.0.1", "--no-mdns", "--no-voice"])
    s = settings_from_args(args)
    assert (s.host, s.port, s.wyoming_port, s.mdns, s.voice) == (
        "127.0.0.1",
        9100,
        9101,
        False,
        False,
    )
    args = build_parser().parse_args(["serve", "--port", "0", "--no-wyoming"])
    s = settings_from_args(args)
    # The service's own default host (all interfaces) is kept; nothing here binds to it.
    assert (s.port, s.wyoming_port, s.host) == (0, None, ServiceSettings().host)
    monkeypatch.delenv("EDGE_TLS")  # the tests' default; `edge serve`'s is TLS
    assert settings_from_args(build_parser().parse_args(["serve"])).tls is True
    assert settings_from_args(build_parser().parse_args(["serve", "--no-tls"])).tls is False


def test_every_setting_is_a_flag() -> None:
    from edge.cli._serve import settings_from_args
    from edge.server import ServiceSettings

    args = build_parser().parse_args(
        [
            "serve",
            "--mdns-interface",
            "127.0.0.1",
            "--mdns-interface",
            "::1",
            "--name",
            "lab",
            "--summary-context-topic",
            "a",
            "--summary-context-topic",
            "b",
            "--no-notes",
            "--voice",
            "--handle-timeout-s",
            "2.5",
        ]
    )
    s = settings_from_args(args)
    assert s.mdns_interfaces == ["127.0.0.1", "::1"]
    assert (s.service_name, s.summary_context_topics) == ("lab", ("a", "b"))
    assert (s.notes, s.voice, s.handle_timeout_s) == (False, True, 2.5)
    assert s.wyoming_port == ServiceSettings().wyoming_port
    help_text = build_parser()._subparsers._group_actions[0].choices["serve"].format_help()
    for name, field in ServiceSettings.model_fields.items():
        secret = field.json_schema_extra == {"cli": False}  # the token: environment only
        assert (f"EDGE_{name.upper()}" in help_text) is not secret, name


def test_serve_answers_a_client_and_stops_on_ctrl_c(monkeypatch: pytest.MonkeyPatch) -> None:
    # An unreachable remote model: the service still starts, and the router answers with
    # its failure message, which is enough to see the whole path work. TLS as by default.
    monkeypatch.delenv("EDGE_TLS")
    serve = subprocess.Popen(
        [
            *EDGE,
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--no-wyoming",
            "--no-mdns",
            "--no-voice",
            "--profile",
            "ci-2core-24gb",
            "--llm-url",
            "http://127.0.0.1:9/v1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert serve.stdout is not None
        deadline = time.monotonic() + 60
        url = ""
        while not url and time.monotonic() < deadline:
            line = serve.stdout.readline()
            if not line:
                break
            if line.startswith("serving on "):
                url = line.split()[-1]
        assert url.startswith("wss://127.0.0.1:"), serve.stderr.read() if serve.stderr else ""
        console = serve.stdout.readline().split()  # the browser console, with the token
        assert console[0] == "console:" and console[1].startswith(
            url.replace("wss://", "https://") + "/?token="
        )
        fingerprint = local_fingerprint(Path(os.environ["EDGE_DATA_DIR"]))
        assert serve.stdout.readline() == f"certificate key SHA-256: {fingerprint}\n"
        page = httpx.get(console[1], timeout=10, verify=False)  # the key is checked below
        assert page.status_code == 200 and "xr-edge console" in page.text
        health = httpx.get(url.replace("wss://", "https://") + "/health", verify=False)
        assert fingerprint and health.json()["tls"]["fingerprint"] == fingerprint
        token = subprocess.run([*EDGE, "token"], capture_output=True, text=True, timeout=60)
        assert token.stdout.strip() in console[1]  # stdout: the token alone
        assert "console: https://" in token.stderr and fingerprint in token.stderr
        client = subprocess.run(  # turns from standard input, one per line
            [*EDGE, "client", "--url", url, "--participant", "cli"],
            input="hello there\n\nand again\n",
            capture_output=True,
            text=True,
            timeout=60,
        )
        # no LLM answers at that URL: each turn gets the router's apology and an error naming
        # the server, and the client exits 1 (a turn failed)
        assert client.returncode == 1, client.stderr
        assert client.stdout.count("Sorry, something went wrong") == 2
        assert client.stderr.count("language model failed") == 2, client.stderr
        assert "http://127.0.0.1:9/v1" in client.stderr
        assert "connected as cli" in client.stderr
        serve.send_signal(signal.SIGINT)
        _, err = serve.communicate(timeout=30)
        assert serve.returncode == 0, err
        assert "ci-2core-24gb" in err and "shutting down" in err and "stopped" in err
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()


def test_client_reports_an_unreachable_service() -> None:
    result = subprocess.run(
        [*EDGE, "client", "--url", "ws://127.0.0.1:9", "--text", "hi"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "cannot talk to ws://127.0.0.1:9" in result.stderr


def test_a_profile_whose_model_is_missing_is_refused_by_name() -> None:
    from edge.catalogue import Catalogue, ModelMissingError
    from edge.server import EdgeService, ServiceSettings

    entry = Catalogue.load().get("qwen2.5-1.5b-instruct-q4_k_m")
    try:
        entry.locate()
        pytest.skip("the Jetson profile's model is installed here")
    except ModelMissingError:
        pass
    settings = ServiceSettings(profile="jetson-orin-nano-8gb", mdns=False, wyoming_port=None)
    with pytest.raises(ModelMissingError, match="qwen2.5-1.5b-instruct-q4_k_m"):
        EdgeService(settings)  # rather than SmolLM2 on the Jetson's budgets
