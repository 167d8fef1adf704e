"""``edge serve`` against the chain a Home Assistant user would build, in one run.

    python benchmarks/versus_chain.py                  # the default question set, once
    python benchmarks/versus_chain.py --repeat 3       # more samples per path
    python benchmarks/versus_chain.py --paths a,b      # some paths only (and the chain)
    CHAIN_PYTHON=benchmarks/.chain-venv/bin/python python benchmarks/versus_chain.py

Starts, all at once on 127.0.0.1, the chain (``wyoming-faster-whisper`` with our Whisper
tiny.en, llama-cpp-python's OpenAI-compatible server with our SmolLM2 GGUF,
``wyoming-piper`` with our joe voice; run as Home Assistant's add-ons ship them, every
thread setting at the machine's cores: ``chain_services.chain_settings``) and ``edge serve``
(default models, detected profile). Piper speaks a fixed question set (short questions,
questions with a ≈350 ms pause mid-sentence, 6-7 s questions); each is streamed in real
time and the paths take turns, question by question, in a rotating order, so machine
noise hits them alike. Paths, each timed to the first byte of reply audio:

  (a) WebSocket hands-free, from the end of speech (the question audio's last voiced
      sample), our own endpointing;
  (b) WebSocket push-to-talk, from the client's ``end_of_utterance`` (when the server
      knows that message);
  (c) our Wyoming service driven as Home Assistant drives it, from ``audio-stop``: asr
      (the question, then Home Assistant's 0.7 s of end silence, then ``audio-stop``),
      handle (a ``transcript`` with conversation_id, device_id and satellite_id; only the
      events Home Assistant's Wyoming conversation entity reads: the whole answer in
      ``handled``), tts (the whole answer; streaming synthesize where advertised);
  (c2) the same with a handle client that does not exist yet: it reads the answer as
      ``handled-chunk`` events and feeds them to the TTS as they come;
  (d) the chain, from ``audio-stop``: the same asr and tts, its LLM agent's reply streamed
      into the TTS as Home Assistant streams an LLM conversation agent's (held until it is
      over 60 characters, a shorter one whole);
  (e) Home Assistant's Ollama integration as its conversation agent against our Ollama API
      (``POST /api/chat`` streamed, with the integration's prompt, options, keep_alive and
      history), our Wyoming asr and tts around it; only when ``edge serve`` answers
      ``/api/tags``.

A reply that starts before the speaker finished (or an utterance split in two) is a
premature endpoint: a failed turn, counted and left out of the timings. Prints the table
with every figure as a ratio to the chain's p50 from the same run; writes
``benchmarks/results/<machine class>/versus_chain.json`` (machine, profile, models,
versions, every sample) and ``.png`` (stacked stage medians, distributions).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import ssl
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import anyio
import chain_services as svc
import httpx
import numpy as np
from chain_paths import (
    CHUNK_S,
    HA_CONVERSATION_READS,
    HA_SILENCE_S,
    HA_STREAM_RESPONSE_CHARS,
    HANDS_FREE_TAIL_S,
    RATE,
    TURN_LIMIT_S,
    WS_FRAME_S,
    OllamaAgent,
    Utterance,
    WyomingPath,
    chat_reply,
    describe,
    ha_handle_reply,
    streaming_handle_reply,
    supports_end_of_utterance,
    ws_turn,
    wyoming_turn,
)
from figures import machine_info, results_dir, voiced_span
from rich.console import Console
from rich.table import Table

from edge.catalogue import default_model_path
from edge.server import AudioFormat, EdgeClient, ServiceSettings, read_token
from edge.voice import PiperTTS, float_to_pcm16, resample

# Where the chain's settings differ from our path's, and why (benchmarks/README.md).
DIFFERENCES = [
    "Whisper's encoder window: ours fits it to the utterance plus 1 s (at least 10 s), "
    "wyoming-faster-whisper pads every utterance to Whisper's 30 s: part of our design, "
    "measured by benchmarks/stt_window.py, not a setting a chain user can change",
    "Whisper's threads: ours are the profile's stt_threads (1 on the CI profile: the fitted "
    "window ran faster on one thread than on two there); the chain's are the cores (its "
    "30 s window ran faster on two than on one), both in benchmarks/stt_window.py",
    "LLM context: ours is the profile's (8192 tokens, per-participant KV kept between turns); "
    "llama-cpp-python's server keeps its default n_ctx 2048 (enough for these questions) "
    "and reuses the previous prompt's common prefix, the system prompt",
    "Our WebSocket paths run over TLS (wss://, edge serve's default); the chain's "
    "connections and our Wyoming path are plain TCP (Wyoming has no TLS)",
    "The chain answers each question with our system prompt alone (no earlier turns); ours "
    "answers with the participant's context, which is never smaller",
]
PAUSE_S = 0.35
LEAD_S = 0.3  # the microphone is open before the speaker starts
SETTLE_S = 1.0  # between turns, so one path's tail does not run into the next turn
PATHS = {
    "a": "edge WebSocket, hands-free",
    "b": "edge WebSocket, push-to-talk",
    "c": "edge Wyoming, read as Home Assistant reads it",
    "c2": "edge Wyoming, handled-chunk streamed (a client that does not exist yet)",
    "d": "the chain (whisper + llama.cpp server + piper)",
    "e": "Home Assistant's Ollama integration on our Ollama API (our Wyoming asr/tts)",
}
_HA_ASR = (
    f"transcribe, audio-start, audio-chunk every {CHUNK_S:g} s in real time, then "
    f"{HA_SILENCE_S:g} s of silence (Home Assistant's VAD end silence), audio-stop; "
    "reads transcript (skips transcript-start/-chunk/-stop)"
)
_HA_TTS = (
    "synthesize-start, synthesize-chunk per reply text piece, synthesize (the whole text), "
    "synthesize-stop when the service advertises streaming synthesize, else synthesize; "
    "reads audio-chunk (the first one is timed)"
)
# What each path's client sends and reads, recorded in the results beside the events each
# one actually read in the run (summary.<path>.events_read).
CLIENTS: dict[str, dict[str, str]] = {
    "a": {
        "connection": "WebSocket over TLS, one session per path",
        "sends": f"{WS_FRAME_S * 1000:g} ms audio frames in real time (the console's), then "
        f"{HANDS_FREE_TAIL_S:g} s of silence",
        "reads": "transcript (final), query, reply, audio, status (idle), error",
        "timed_from": "the end of speech (the question audio's last voiced sample)",
    },
    "b": {
        "connection": "WebSocket over TLS, one session per path",
        "sends": f"{WS_FRAME_S * 1000:g} ms audio frames in real time (the console's), then "
        "end_of_utterance",
        "reads": "transcript (final), query, reply, audio, status (idle), error",
        "timed_from": "end_of_utterance",
    },
    "c": {
        "asr": _HA_ASR,
        "handle": "transcript with context conversation_id, device_id, satellite_id; reads "
        f"only {', '.join(sorted(HA_CONVERSATION_READS))} (Home Assistant's Wyoming "
        "conversation entity), skipping every other event; the whole answer goes to the TTS",
        "tts": _HA_TTS,
        "timed_from": "audio-stop",
    },
    "c2": {
        "asr": _HA_ASR,
        "handle": "transcript with context conversation_id, device_id, satellite_id; reads "
        "handled-chunk (each piece to the TTS at once), handled-stop, handled, not-handled, "
        "error: no Home Assistant version reads handled-chunk",
        "tts": _HA_TTS,
        "timed_from": "audio-stop",
    },
    "d": {
        "asr": _HA_ASR,
        "conversation": "POST /v1/chat/completions, stream true, max_tokens 128, the system "
        "prompt and the question; reads the SSE deltas, streamed to the TTS as Home "
        f"Assistant streams an LLM agent's reply (once over {HA_STREAM_RESPONSE_CHARS} "
        "characters; a shorter reply whole)",
        "tts": _HA_TTS,
        "timed_from": "audio-stop",
    },
    "e": {
        "asr": _HA_ASR + ", from 127.0.0.2 (a Home Assistant that never asks our handle)",
        "conversation": "the ollama client as Home Assistant's Ollama integration calls it: "
        "POST /api/chat, stream true, keep_alive -1, options num_ctx 8192, no tools, the "
        "integration's default prompt ending in the time to the second, as Home "
        "Assistant's chat log renders it for each request of an agent with no date-time "
        "tool, up to 20 earlier rounds and the question, with the "
        "device token as Bearer key over TLS; reads the NDJSON chunks' message.content, "
        f"streamed to the TTS once over {HA_STREAM_RESPONSE_CHARS} characters (a shorter "
        "reply whole)",
        "tts": _HA_TTS,
        "timed_from": "audio-stop",
    },
}
STAGES = ("transcript", "reply_text", "audio")
SLOW_FACTOR = 2.0  # a turn slower than this × its path's p50 gets its stages in the summary
# (id, kind, parts): parts are joined by a PAUSE_S silence, as a speaker pausing mid-sentence.
QUESTIONS: list[tuple[str, str, tuple[str, ...]]] = [
    ("capital", "short", ("What is the capital of France?",)),
    ("spider", "short", ("How many legs does a spider have?",)),
    ("bees", "short", ("What do bees make?",)),
    ("italy-pause", "pause", ("What is the capital of Italy,", "and what is it famous for?")),
    ("tallest-pause", "pause", ("Can you tell me", "which mountain is the tallest in the world?")),
    (
        "trip-long",
        "long",
        (
            "I am going hiking in the mountains next weekend with two friends, and the nights "
            "are cold, so what warm clothes should we pack?",
        ),
    ),
    (
        "sky-long",
        "long",
        (
            "My daughter asked me why the sky is blue during the day but turns orange and red "
            "at sunset, so how should I explain that to a child?",
        ),
    ),
]


def speak_questions(tts: PiperTTS) -> list[Utterance]:
    """Piper speaks each question at 16 kHz; pauses are exactly PAUSE_S of silence."""
    out = []
    for qid, kind, parts in QUESTIONS:
        pieces = [np.zeros(int(RATE * LEAD_S), np.float32)]
        for i, part in enumerate(parts):
            spoken = tts.synthesize(part)
            audio = resample(spoken.audio, spoken.sample_rate, RATE)
            start, end = voiced_span(audio, RATE)
            pieces.append(audio[int(start * RATE) : int((end + 0.05) * RATE)])
            if i < len(parts) - 1:
                pieces.append(np.zeros(int(RATE * PAUSE_S), np.float32))
        audio = np.concatenate(pieces)
        out.append(
            Utterance(
                qid, kind, " ".join(parts), float_to_pcm16(audio), voiced_span(audio, RATE)[1]
            )
        )
    return out


def start_all(work: Path, args: argparse.Namespace) -> tuple[dict[str, svc.Service], int]:
    """Every service at once, then wait until each answers."""
    chain = svc.chain_services(work, svc.chain_python())
    edge, wyoming_port = svc.edge_service(work, sys.executable, args.profile)
    services = {**chain, "edge": edge}
    env = svc.service_env()
    try:
        for service in services.values():
            service.start(env)
        for name in ("whisper", "piper"):
            svc.wait_for_port(services[name], services[name].port, 300)
        svc.wait_for_llama(services["llama"], 300)
        svc.wait_for_port(edge, edge.port, 300)
        svc.wait_for_port(edge, wyoming_port, 300)
    except BaseException:
        for service in services.values():
            service.stop()
        raise
    return services, wyoming_port


class Bench:
    """The paths of one run, with their connections and what the services advertise."""

    def __init__(
        self, services: dict[str, svc.Service], wyoming_port: int, only: list[str] | None = None
    ) -> None:
        self.services = services
        self.only = only  # the paths asked for (None: all); the chain's always runs
        # edge serve's default: TLS (its certificate is in its data directory, which the
        # clients trust for a service on this machine)
        self.ws_url = f"wss://{svc.HOST}:{services['edge'].port}"
        self.wyoming_port = wyoming_port
        self.clients: dict[str, EdgeClient] = {}
        self.advertised: dict[str, dict[str, bool]] = {}
        self.paths: list[str] = []
        self.ollama: OllamaAgent | None = None

    async def prepare(self) -> None:
        edge_info = await describe(self.wyoming_port)
        piper_info = await describe(self.services["piper"].port)
        self.advertised = {
            "edge": streaming_flags(edge_info),
            "piper": streaming_flags(piper_info),
            "whisper": streaming_flags(await describe(self.services["whisper"].port)),
        }
        self.paths = ["a", "b", "c", "c2", "d"]
        if not await supports_end_of_utterance(self.ws_url):
            self.paths.remove("b")
        self.ollama = await self.ollama_agent()
        if self.ollama is not None:
            self.paths.append("e")
        if self.only is not None:
            self.paths = [p for p in self.paths if p in self.only or p == "d"]
        for path in ("a", "b"):
            if path in self.paths:
                client = EdgeClient(
                    self.ws_url,
                    participant_id=f"bench-{path}",
                    audio=AudioFormat(sample_rate=RATE),
                    want_audio=True,
                )
                self.clients[path] = await client.__aenter__()

    async def close(self) -> None:
        for client in self.clients.values():
            await client.__aexit__(None, None, None)

    async def ollama_agent(self) -> OllamaAgent | None:
        """Home Assistant's Ollama agent on our service, when it offers the Ollama API (the
        model is the first ``/api/tags`` lists, as the integration's setup offers it)."""
        import ollama

        client = ollama.AsyncClient(
            host=f"https://{svc.HOST}:{self.services['edge'].port}",
            headers={"Authorization": f"Bearer {edge_token()}"},
            verify=edge_trust(),
            timeout=TURN_LIMIT_S,
        )
        try:
            models = (await client.list()).models
        except (ollama.ResponseError, httpx.HTTPError, ConnectionError):
            return None
        return OllamaAgent(client, models[0].model) if models and models[0].model else None

    def wyoming(self, path: str) -> WyomingPath:
        if path == "e":
            assert self.ollama is not None
            port = self.wyoming_port
            streaming = self.advertised["edge"]["synthesize"]
            # a Home Assistant whose agent is Ollama never asks our handle: its asr comes
            # from another address than (c)'s Home Assistant, so no answer is guessed for it
            return WyomingPath(port, port, streaming, self.ollama.reply, asr_source="127.0.0.2")
        if path in ("c", "c2"):
            client = ha_handle_reply if path == "c" else streaming_handle_reply
            reply = functools.partial(client, self.wyoming_port, conversation_id="bench-ha")
            return WyomingPath(
                self.wyoming_port,
                self.wyoming_port,
                self.advertised["edge"]["synthesize"],
                lambda text, out, marks: reply(text=text, out=out, marks=marks),
            )
        instructions = ServiceSettings().instructions
        llama = self.services["llama"].port
        return WyomingPath(
            self.services["whisper"].port,
            self.services["piper"].port,
            self.advertised["piper"]["synthesize"],
            lambda text, out, marks: chat_reply(llama, text, instructions, out, marks),
        )

    async def turn(self, path: str, utt: Utterance) -> dict[str, Any]:
        if path == "d":
            return await wyoming_turn(self.wyoming(path), utt)
        before = await self.health()
        if path in ("a", "b"):
            sample = await ws_turn(self.clients[path], utt, push_to_talk=path == "b")
        else:
            sample = await wyoming_turn(self.wyoming(path), utt)
        await anyio.sleep(0.3)  # a discard may follow the first audio (the reply goes on)
        after = await self.health()
        sample["speculation"] = speculation_delta(
            before.get("speculation", {}), after.get("speculation", {}), sample["origin_unix"]
        )
        states = before.get("model_state", {}), after.get("model_state", {})
        sample["kv_evictions"] = states[1].get("evictions", 0) - states[0].get("evictions", 0)
        return sample

    async def health(self) -> dict[str, Any]:
        """edge serve's ``GET /health``: its speculation counters and model states."""
        async with httpx.AsyncClient(timeout=10, verify=edge_trust()) as http:
            response = await http.get(f"https://{svc.HOST}:{self.services['edge'].port}/health")
            return dict(response.json())


def edge_trust() -> ssl.SSLContext:
    """Trust for edge serve's certificate (in its data directory, on this machine)."""
    cert = Path(os.environ["EDGE_DATA_DIR"]) / "tls" / "cert.pem"
    return ssl.create_default_context(cafile=str(cert))


def edge_token() -> str:
    """edge serve's device token (in its data directory, on this machine)."""
    return read_token(Path(os.environ["EDGE_DATA_DIR"])) or ""


def speculation_delta(
    before: dict[str, float], after: dict[str, float], origin_unix: float
) -> dict[str, Any]:
    """What speculation did during one turn, and when the latest answer speculation
    started relative to the path's start mark (negative: before it)."""
    out: dict[str, Any] = {
        k: int(after.get(k, 0) - before.get(k, 0)) for k in ("started", "adopted", "discarded")
    }
    started = after.get("last_started_unix", 0.0)
    fresh = started > before.get("last_started_unix", 0.0)
    out["start_s"] = round(started - origin_unix, 4) if fresh else None
    return out


def streaming_flags(info: Any) -> dict[str, bool]:
    return {
        "transcript": any(p.supports_transcript_streaming for p in info.asr),
        "handled": any(p.supports_handled_streaming for p in info.handle),
        "synthesize": any(p.supports_synthesize_streaming for p in info.tts),
    }


async def run_turns(
    bench: Bench, utterances: list[Utterance], repeat: int, console: Console
) -> list[dict[str, Any]]:
    samples = []
    for path in bench.paths:  # warm-up turn on every path (not recorded)
        await bench.turn(path, utterances[0])
        await anyio.sleep(SETTLE_S)
    for r in range(repeat):
        for i, utt in enumerate(utterances):
            k = (i + r) % len(bench.paths)
            for path in bench.paths[k:] + bench.paths[:k]:
                try:
                    sample = await bench.turn(path, utt)
                except Exception as exc:  # a failed turn is reported, the run goes on
                    sample = {"total_s": None, "premature": False, "errors": [repr(exc)]}
                sample.update(path=path, qid=utt.qid, kind=utt.kind, round=r)
                sample["load_1m"] = os.getloadavg()[0]
                samples.append(sample)
                total = sample.get("total_s")
                flag = " PREMATURE" if sample.get("premature") else ""
                console.print(
                    f"[dim]{path} {utt.qid}: {total if total is None else round(total, 3)} s"
                    f"{flag} {sample.get('heard', '')} {sample.get('errors') or ''}[/]"
                )
                await anyio.sleep(SETTLE_S)
    return samples


def summarize(samples: list[dict[str, Any]], paths: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in paths:
        rows = [s for s in samples if s["path"] == path]
        good = [s for s in rows if s.get("total_s") is not None and not s.get("premature")]
        totals = np.array([s["total_s"] for s in good]) if good else np.array([np.nan])
        out[path] = {
            "n": len(rows),
            "ok": len(good),
            "premature": sum(bool(s.get("premature")) for s in rows),
            "failed": sum(s.get("total_s") is None for s in rows),
            "p50": float(np.percentile(totals, 50)),
            "p95": float(np.percentile(totals, 95)),
            "max": float(np.max(totals)),
            "stages_p50": {
                st: median([s["stages"].get(st) for s in good if s.get("stages")]) for st in STAGES
            },
            "speculation": speculation_summary(rows),
            "events_read": sorted({e for s in rows for e in s.get("events_read", [])}),
            "events_skipped": sorted({e for s in rows for e in s.get("events_skipped", [])}),
        }
        out[path]["slow_turns"] = slow_turns(good, out[path]["p50"])
    chain = out.get("d", {}).get("p50", np.nan)
    for path, figures in out.items():
        figures["ratio"] = {k: figures[k] / chain for k in ("p50", "p95", "max")}
        figures["ratio_p50_interval"] = p50_ratio_interval(samples, path)
    return out


BOOTSTRAP_RESAMPLES = 2_000


def p50_ratio_interval(samples: list[dict[str, Any]], path: str) -> list[float] | None:
    """A 95 % interval of ``path``'s p50 over the chain's, by the paired bootstrap over
    turn slots (question and round: both paths asked the same question in the same round,
    so a resample keeps the questions' mix). Seeded: the same turns give the same
    interval. With 21 turns a path, one or two fast chain turns move its p50 by a tenth
    of a second; the interval says how far a ratio can be read."""
    slots: dict[tuple[Any, Any], dict[str, float]] = {}
    for s in samples:
        if s["path"] in (path, "d") and s.get("total_s") is not None and not s.get("premature"):
            slots.setdefault((s.get("qid"), s.get("round")), {})[s["path"]] = s["total_s"]
    pairs = [(v[path], v["d"]) for v in slots.values() if path in v and "d" in v]
    if len(pairs) < 2:
        return None
    rng = np.random.default_rng(0)
    table = np.array(pairs)
    picks = rng.integers(0, len(pairs), size=(BOOTSTRAP_RESAMPLES, len(pairs)))
    ratios = np.median(table[picks, 0], axis=1) / np.median(table[picks, 1], axis=1)
    low, high = np.percentile(ratios, [2.5, 97.5])
    return [float(low), float(high)]


def slow_turns(good: list[dict[str, Any]], p50: float) -> list[dict[str, Any]]:
    """The turns slower than SLOW_FACTOR × the path's p50, each with its stages,
    speculation, the model states edge serve dropped meanwhile and (path (e)) the Ollama
    API's prompt evaluation, so the cause of a tail can be read from the results."""
    return [
        {
            "qid": s.get("qid"),
            "round": s.get("round"),
            "total_s": s["total_s"],
            "times_p50": round(s["total_s"] / p50, 2),
            "stages": s.get("stages"),
            "speculation": s.get("speculation"),
            "kv_evictions": s.get("kv_evictions"),
            "prompt_eval_s": s.get("prompt_eval_s"),
            "load_1m": s.get("load_1m"),
        }
        for s in good
        if p50 > 0 and s["total_s"] > SLOW_FACTOR * p50
    ]


def speculation_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Turns whose reply adopted a speculation, speculations discarded, and the median
    start of the latest answer speculation relative to the path's start mark."""
    spec = [s["speculation"] for s in rows if s.get("speculation")]
    return {
        "turns_adopted": sum(1 for x in spec if x["adopted"]),
        "started": sum(x["started"] for x in spec),
        "discarded": sum(x["discarded"] for x in spec),
        "start_s_p50": median([x["start_s"] for x in spec]),
    }


def median(values: list[float | None]) -> float:
    values = [v for v in values if v is not None]
    return float(np.median(values)) if values else float("nan")


def print_table(summary: dict[str, Any], console: Console) -> None:
    table = Table(title="first reply audio, seconds (× the chain's p50 in this run)")
    columns = ("path", "p50", "p50 × 95 %", "p95", "max", "transcript", "reply text", "audio")
    columns = (*columns, "ok/n", "early")
    for col in (*columns, "adopted", "discarded", "spec start"):
        table.add_column(col, justify="left" if col == "path" else "right")
    for path, f in summary.items():
        cells = [f"{f[k]:.2f} ({f['ratio'][k]:.2f}×)" for k in ("p50", "p95", "max")]
        low_high = f.get("ratio_p50_interval")
        cells.insert(1, f"{low_high[0]:.2f}–{low_high[1]:.2f}" if low_high else "-")
        stage = [f"{f['stages_p50'][st]:.2f}" for st in STAGES]
        spec = f.get("speculation", {})
        table.add_row(
            f"({path}) {PATHS[path]}",
            *cells,
            *stage,
            f"{f['ok']}/{f['n']}",
            str(f["premature"]),
            *(
                (f"{spec['turns_adopted']}/{f['n']}", str(spec["discarded"]))
                if spec.get("started")
                else ("-", "-")
            ),
            f"{spec['start_s_p50']:+.2f}" if spec.get("started") else "-",
        )
    console.print(table)
    for path, f in summary.items():
        for slow in f.get("slow_turns", []):
            console.print(
                f"slow ({path}) {slow['qid']} round {slow['round']}: {slow['total_s']:.2f} s "
                f"({slow['times_p50']:.1f}× p50), stages {slow['stages']}"
            )
    console.print(
        "p50 × 95 %: the paired bootstrap's interval of the p50's ratio to the chain's. "
        "stages (p50): transcript = start mark → final transcript; reply text → first "
        "reply text; audio → first reply audio. (a) from end of speech, (b) from "
        "end_of_utterance, (c)/(d) from audio-stop. adopted: turns whose reply was the "
        "answer speculated before the endpoint; discarded: speculations dropped; spec "
        "start: median start of the turn's (latest) answer speculation from the start mark."
    )


def versions() -> dict[str, str | None]:
    names = [
        "xr-edge",
        "wyoming",
        "wyoming-faster-whisper",
        "wyoming-piper",
        "llama-cpp-python",
        "faster-whisper",
        "piper-tts",
        "onnxruntime",
    ]
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = result["summary"]
    paths = list(summary)
    labels = [f"({p}) {PATHS[p]}" for p in paths]
    fig, (bars, dist) = plt.subplots(1, 2, figsize=(13, 4.5))
    left = np.zeros(len(paths))
    for stage, color in zip(STAGES, ("#8fb3d9", "#4a7ab0", "#1f3f66"), strict=True):
        widths = np.nan_to_num([summary[p]["stages_p50"][stage] for p in paths])
        bars.barh(labels, widths, left=left, color=color, label=stage)
        left += widths
    chain = summary.get("d", {}).get("p50")
    if chain:
        bars.axvline(chain, color="#b04a4a", ls="--", lw=1, label="chain p50")
    bars.invert_yaxis()
    bars.set_xlabel("seconds to first reply audio (stage medians)")
    bars.legend(fontsize=8)
    data = [
        [s["total_s"] for s in result["samples"] if s["path"] == p and s.get("total_s") is not None]
        or [np.nan]
        for p in paths
    ]
    dist.boxplot(
        data, orientation="horizontal", tick_labels=[f"({p})" for p in paths], showfliers=True
    )
    for i, values in enumerate(data, start=1):
        dist.scatter(values, np.full(len(values), i), s=12, alpha=0.6, color="#4a7ab0")
    dist.invert_yaxis()
    dist.set_xlabel("seconds to first reply audio (every sample)")
    fig.suptitle(f"edge serve vs the chain — {result['machine']['class']}, load {result['load']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


async def main(args: argparse.Namespace) -> None:
    console = Console(width=160)
    machine_info()  # refuses uncommitted code before the run, not after it
    utterances = speak_questions(PiperTTS())[: args.questions]
    console.print(
        "questions: "
        + ", ".join(
            f"{u.qid} ({u.duration_s:.1f} s, speech ends {u.speech_end_s:.2f})" for u in utterances
        )
    )
    with tempfile.TemporaryDirectory(prefix="versus-chain-") as tmp:
        work = Path(tmp)
        os.environ["EDGE_DATA_DIR"] = str(work / "edge")  # where the clients find the token
        services, wyoming_port = start_all(work, args)
        bench = Bench(services, wyoming_port, args.paths)
        try:
            await bench.prepare()
            console.print(f"paths {bench.paths}; streaming advertised: {bench.advertised}")
            t0 = time.perf_counter()
            samples = await run_turns(bench, utterances, args.repeat, console)
            elapsed = time.perf_counter() - t0
        finally:
            await bench.close()
            for service in services.values():
                service.stop()
    result = build_result(args, utterances, bench, samples, elapsed)
    print_table(result["summary"], console)
    if "b" not in bench.paths:
        console.print("(b) push-to-talk: not available (the server has no end_of_utterance)")
    write_result(result, console)


def build_result(
    args: argparse.Namespace,
    utterances: list[Utterance],
    bench: Bench,
    samples: list[dict[str, Any]],
    elapsed: float,
) -> dict[str, Any]:
    machine = {**machine_info(), "processor": platform.processor()}
    return {
        "machine": machine,
        "load": round(os.getloadavg()[0], 2),
        "profile": args.profile or machine["class"],
        "settings": {"chain": svc.chain_settings(), "ours": our_settings()},
        "differences": DIFFERENCES,
        "models": {role: str(default_model_path(role)) for role in ("llm", "stt", "tts")},
        "versions": versions(),
        "advertised_streaming": bench.advertised,
        "paths": {p: PATHS[p] for p in bench.paths},
        "clients": {p: CLIENTS[p] for p in bench.paths},
        "questions": [
            {
                "qid": u.qid,
                "kind": u.kind,
                "text": u.text,
                "duration_s": u.duration_s,
                "speech_end_s": u.speech_end_s,
            }
            for u in utterances
        ],
        "repeat": args.repeat,
        "run_s": round(elapsed, 1),
        "summary": summarize(samples, bench.paths),
        "samples": samples,
    }


def our_settings() -> dict[str, Any]:
    """What ``edge serve`` runs with on this machine's profile (the same figures the
    chain's settings are compared with in ``tests/test_versus_chain_fairness.py``)."""
    from edge.device import load_device_config

    config = load_device_config()
    audio = config.profile.audio
    return {
        "whisper": {
            "beam_size": audio.stt_beam_size,
            "compute_type": audio.stt_compute_type,
            "language": "en",
            "cpu_threads": config.stt_threads,
            "encoder_window_s": 10.0,
            "model": config.model_paths.get("stt"),
        },
        "llm": {"n_threads": config.threads, "model": config.model_paths.get("llm")},
        "piper": {"streaming": True, "voice": config.model_paths.get("tts")},
    }


def write_result(result: dict[str, Any], console: Console) -> None:
    folder = results_dir(result["machine"]["class"])
    json_path = folder / "versus_chain.json"
    json_path.write_text(json.dumps(result, indent=2, default=str))
    plot(result, folder / "versus_chain.png")
    console.print(f"wrote {json_path} and {folder / 'versus_chain.png'}")


def path_list(value: str) -> list[str]:
    """``--paths``: known path names, comma-separated."""
    paths = [p.strip() for p in value.split(",") if p.strip()]
    unknown = [p for p in paths if p not in PATHS]
    if unknown or not paths:
        raise argparse.ArgumentTypeError(f"paths are among {', '.join(PATHS)}; not {unknown}")
    return paths


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="rounds over the question set")
    parser.add_argument("--questions", type=int, default=len(QUESTIONS), help="first N questions")
    parser.add_argument("--profile", help="device profile for edge serve (default: detected)")
    parser.add_argument(
        "--paths",
        type=path_list,
        help=f"comma-separated paths to run, of {','.join(PATHS)} (default: all; the chain, "
        "(d), always runs: every figure is a ratio to it)",
    )
    anyio.run(main, parser.parse_args())
