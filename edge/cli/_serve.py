"""``edge serve`` (the service) and ``edge client`` (a small WebSocket client for it)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

import anyio
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ._flags import add_model_flags, model_from_flags
from ._target import TargetError, client_url, participant_id, unreachable

DEFAULT_URL = "wss://127.0.0.1:8765"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run the service: WebSocket sessions, Wyoming and mDNS",
        description="Run the voice-agent service. Flags override EDGE_* environment variables.",
    )
    from edge.server import ServiceSettings

    add_model_flags(p, ServiceSettings)
    p.set_defaults(func=run_serve)
    _register_client(subparsers)


def _register_client(subparsers: argparse._SubParsersAction) -> None:
    c = subparsers.add_parser(
        "client",
        help="talk to a running service over WebSocket",
        description="Send text turns to `edge serve` and print the streamed replies. "
        "Without --text, reads one turn per line from standard input.",
    )
    c.add_argument(
        "--url",
        help=f"service address (default {DEFAULT_URL}); the console's http:// address works too",
    )
    c.add_argument(
        "--discover", action="store_true", help="find the service over mDNS instead of --url"
    )
    c.add_argument(
        "--mdns-interface",
        action="append",
        dest="mdns_interfaces",
        metavar="ADDRESS",
        help="browse only on this interface (repeatable)",
    )
    c.add_argument("--text", action="append", help="a turn to send (repeatable)")
    c.add_argument(
        "--participant",
        type=participant_id,
        help="participant id (default: assigned by the server)",
    )
    c.add_argument(
        "--resume",
        metavar="SESSION_TOKEN",
        help="come back to an existing participant (the session token shown when it was new)",
    )
    c.add_argument(
        "--token",
        help="device access token (default: the ?token= of a console --url, else EDGE_TOKEN, "
        "or read from the data directory for a service on this machine)",
    )
    _add_trust_flags(c)
    c.add_argument("--name", default="", help="display name")
    c.add_argument(
        "--context",
        nargs=2,
        action="append",
        metavar=("TOPIC", "TEXT"),
        help="send a context update first (repeatable)",
    )
    c.add_argument("--audio", metavar="WAV", help="speak this PCM16 WAV recording as a turn")
    c.add_argument("--save-audio", metavar="WAV", help="write the spoken reply to this file")
    c.add_argument("--fast", action="store_true", help="send --audio faster than real time")
    c.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for a reply")
    c.set_defaults(func=run_client)


def _add_trust_flags(c: argparse.ArgumentParser) -> None:
    c.add_argument(
        "--tls-ca",
        metavar="FILE",
        help="verify a wss:// service's certificate against this CA (PEM) instead of pinning "
        "its key on first use",
    )
    c.add_argument(
        "--fingerprint",
        metavar="SHA256",
        help="the key fingerprint the service must show (as `edge serve` and `edge token` "
        "print it); checked besides the pin",
    )


# -- serve ---------------------------------------------------------------------------------


def settings_from_args(args: argparse.Namespace) -> Any:
    from edge.server import ServiceSettings

    return model_from_flags(ServiceSettings, args)


def _show(console: Console, info: dict[str, Any]) -> None:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row(
        "profile",
        f"{info['profile'] or '(none)'}"
        + (f"  [dim]{info['chosen_by']}[/]" if info["chosen_by"] else ""),
    )
    for role, name in info["models"].items():
        table.add_row(role, name)
    table.add_row("llm backend", info["llm"])
    for key, value in info["budgets"].items():
        table.add_row(key.replace("_", " "), f"{value:,}")
    table.add_row("context topics", ", ".join(info["context_topics"]) or "none")
    table.add_row("voice", "on" if info["voice"] else "off (text only)")
    for key, value in info.get("backends", {}).items():
        table.add_row(key, value)
    table.add_row("websocket", info["websocket"] or "-")
    table.add_row("wyoming", info["wyoming"] or "off")
    table.add_row("mdns", ", ".join(info["mdns"]) or "off")
    for key, value in info.get("access", {}).items():
        table.add_row(key, value)
    console.print(table)
    for note in info["notes"]:
        console.print(f"[yellow]note:[/] {note}")


SHUTDOWN_LIMIT_S = 9.0


def _exit_after(limit_s: float, console: Console) -> None:
    """Shutdown always ends: if the orderly stop (or a model call in a worker thread that
    cannot be cancelled) takes longer than ``limit_s``, the process exits anyway."""

    def force() -> None:
        console.print(f"[red]shutdown took over {limit_s:g} s; exiting now[/]")
        sys.stderr.flush()
        os._exit(1)

    timer = threading.Timer(limit_s, force)
    timer.daemon = True
    timer.start()


def _raise_open_files_limit(wanted: int = 65_536) -> None:
    """Many devices start services with 1,024 open files: raise the soft limit towards the
    hard one, so connections still in their handshake (before any per-address cap can
    see them) cannot use up the descriptors that accepting /health and clients needs."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


async def _serve(args: argparse.Namespace, console: Console) -> int:
    from edge.api import serve_api
    from edge.server import EdgeService

    settings = settings_from_args(args)
    _raise_open_files_limit()
    console.print("[dim]loading models…[/]")
    service = EdgeService(settings)
    serve_api(service)  # OpenAI's and Ollama's APIs on the same port (docs/api.md)
    async with service:
        _show(console, service.describe())
        print(f"serving on {service.websocket_url}", flush=True)
        print(f"console: {service.console_url}", flush=True)
        if service.local_console_url:  # a secure origin: the microphone works there
            print(f"console on this device: {service.local_console_url}", flush=True)
        if service.tls_fingerprint:  # what a browser or `edge client` should be shown
            print(f"certificate key SHA-256: {service.tls_fingerprint}", flush=True)
        web = service.websocket_url.replace("ws", "http", 1)
        print(f"OpenAI API: {web}/v1  Ollama API: {web}", flush=True)
        console.print("[dim]Ctrl-C stops the service[/]")
        async with anyio.create_task_group() as tg:

            async def stop_on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _ in signals:
                        console.print("[dim]shutting down…[/]")
                        _exit_after(SHUTDOWN_LIMIT_S, console)
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(stop_on_signal)
            await anyio.sleep_forever()
    console.print("[dim]stopped[/]")
    return 0


def run_serve(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from edge.catalogue import ModelMissingError
    from edge.device import ProfileError
    from edge.llm import LLMError
    from edge.server import TLSError
    from edge.voice import SpeechToTextError, TextToSpeechError

    console = Console(stderr=True, emoji=False)  # fingerprints hold ":AB:" (an emoji code)
    try:
        return anyio.run(_serve, args, console)
    except (
        ProfileError,
        ModelMissingError,
        ValidationError,
        OSError,
        TLSError,
        LLMError,
        SpeechToTextError,
        TextToSpeechError,
    ) as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        return 2


# -- client --------------------------------------------------------------------------------


async def _client(args: argparse.Namespace, console: Console) -> int:
    from edge.server import AudioFormat, EdgeClient, ErrorMessage, Reply

    def show(message: Any) -> None:
        if isinstance(message, Reply) and message.text:
            # the router's messages are whole sentences; a destination streams deltas
            sys.stdout.write(message.text + ("\n" if message.source == "router" else ""))
            sys.stdout.flush()
        elif isinstance(message, ErrorMessage):
            console.print(f"[red]server error:[/] {escape(message.message)}")

    if args.discover and not await _discover(args, console):
        return 2
    args.url, url_token = client_url(args.url or DEFAULT_URL)
    recording = None
    if args.audio:
        from edge.voice import AudioFormatError, float_to_pcm16, read_wav

        try:
            recording = read_wav(args.audio)
        except AudioFormatError as exc:
            console.print(f"[red]error:[/] {escape(str(exc))}")
            return 2
    fmt = AudioFormat(sample_rate=recording.sample_rate) if recording is not None else None
    async with EdgeClient(
        args.url,
        participant_id=args.participant,
        display_name=args.name,
        token=url_token if args.token is None else args.token,
        resume=args.resume,
        audio=fmt,
        want_audio=bool(args.save_audio),
        trust=_trust(args),
    ) as client:
        console.print(f"[dim]connected as {client.participant_id} to {args.url}[/]")
        if client.tls_fingerprint:
            console.print(f"[dim]certificate key SHA-256 {client.tls_fingerprint}[/]")
        if client.welcome is not None and client.welcome.session_token:
            state = "resumed" if client.welcome.resumed else "new"
            console.print(
                f"[dim]{state} session; resume with --participant {client.participant_id} "
                f"--resume {client.welcome.session_token}[/]"
            )
        for topic, text in args.context or ():
            await client.send({"type": "context", "topic": topic, "text": text})
        if recording is not None:
            return await _spoken_turn(args, console, client, float_to_pcm16(recording.audio), show)
        status = await _typed_turns(args, console, client, show)
        await client.send({"type": "bye"})
    return status


async def _discover(args: argparse.Namespace, console: Console) -> bool:
    """``--discover``: the first service answering over mDNS becomes ``args.url`` (its
    advertised key fingerprint is checked besides the pin)."""
    from edge.server import discover

    found = await discover(interfaces=args.mdns_interfaces)
    if not found:
        console.print("[red]error:[/] no edge service answered over mDNS")
        return False
    info = found[0]
    tls = ((info.properties or {}).get(b"tls") or b"none").decode()
    scheme = "ws" if tls == "none" else "wss"
    if tls != "none" and not args.fingerprint:
        args.fingerprint = tls
    args.url = f"{scheme}://{info.parsed_addresses()[0]}:{info.port}"
    console.print(f"[dim]found {info.name} at {args.url}[/]")
    return True


async def _typed_turns(args: argparse.Namespace, console: Console, client: Any, show: Any) -> int:
    """The ``--text`` turns, or one turn per line of standard input; 1 when one got no
    reply or an error."""
    pending = list(args.text or [])
    status = 0
    while True:
        if args.text:
            if not pending:
                break
            text = pending.pop(0)
        else:  # read in a thread, so the connection keeps answering pings meanwhile
            line = await anyio.to_thread.run_sync(sys.stdin.readline)
            if not line:
                break
            text = line.strip()
        if not text:
            continue
        try:
            turn = await client.ask(text, limit_s=args.timeout, on_message=show)
        except TimeoutError:
            console.print(f"[red]no reply within {args.timeout:.0f} s[/]")
            return 1
        sys.stdout.write("\n")
        if turn.errors or not turn.text:
            status = 1
    return status


def _trust(args: argparse.Namespace) -> Any:
    """How a wss:// service's certificate is checked (None: pinning on first use)."""
    from pathlib import Path

    from edge.server import ServerTrust

    if not args.tls_ca and not args.fingerprint:
        return None
    return ServerTrust(
        ca_file=Path(args.tls_ca) if args.tls_ca else None, fingerprint=args.fingerprint
    )


async def _spoken_turn(
    args: argparse.Namespace, console: Console, client: Any, pcm: bytes, show: Any
) -> int:
    from edge.voice import pcm16_to_float, write_wav

    async def say() -> None:  # then end the utterance: the service tells when none was heard
        await client.speak(pcm, realtime=not args.fast)
        await client.end_of_utterance()

    async with anyio.create_task_group() as tg:
        tg.start_soon(say)
        try:
            turn = await client.collect_turn(limit_s=args.timeout, on_message=show)
        except TimeoutError:
            console.print(f"[red]no reply within {args.timeout:.0f} s[/]")
            tg.cancel_scope.cancel()
            return 1
        if not turn.request_id:  # refused, or no speech heard: the error is shown already
            tg.cancel_scope.cancel()
    sys.stdout.write("\n")
    if not turn.request_id:
        await client.send({"type": "bye"})
        return 1
    console.print(f"[dim]heard: {turn.query}[/]")
    if args.save_audio:
        rate = client.welcome.audio_out_rate if client.welcome else None
        if not rate or not turn.pcm:
            console.print(f"[red]error:[/] {escape(_no_audio(rate, turn))}")
            return 1
        write_wav(args.save_audio, pcm16_to_float(turn.pcm), rate)
        console.print(
            f"[dim]{len(turn.pcm) / 2 / rate:.1f} s of reply audio → {args.save_audio}[/]"
        )
    await client.send({"type": "bye"})
    return 0 if turn.text else 1


def _no_audio(rate: int | None, turn: Any) -> str:
    """Why a spoken turn brought no reply audio: the speech server that failed, when one
    did (its error came with the turn), else whether the service speaks at all."""
    failed = [e.message for e in turn.errors if e.code == "backend_failed"]
    if failed:
        return f"no reply audio: {failed[-1]}"
    if not rate:
        return "no reply audio: the service runs without voice (started with --no-voice)"
    return "the service sent no reply audio"


def run_client(args: argparse.Namespace) -> int:
    from websockets.exceptions import WebSocketException

    from edge.server import HelloRefused

    console = Console(stderr=True, emoji=False)  # fingerprints hold ":AB:" (an emoji code)
    try:
        return anyio.run(_client, args, console)
    except HelloRefused as exc:  # reached, and it said no: not "unreachable"
        console.print(f"[red]error:[/] {escape(str(exc))}")
        return 3
    except TargetError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        return 2
    except (OSError, ConnectionError, WebSocketException) as exc:
        console.print(f"[red]error:[/] {escape(unreachable(args.url, exc))}")
        return 2
