"""Several participants asking at once through ``edge serve``: batching on against off.

    python benchmarks/concurrency.py                      # typed 1, 2, 4, 8; spoken 1, 2, 4
    python benchmarks/concurrency.py --at-once 1 4 --spoken 1 4 --repeat 2
    python benchmarks/concurrency.py --spoken             # typed turns only

Two services run side by side, with the detected profile's budgets and the default
models, rounds alternating between them: ``on``, the model as the profile runs it
(``edge serve``: continuous batching, ``llm_sequences`` sequences of
``sequence_window_tokens`` each); ``off``, one request at a time in one whole context
window (``sequences=1``, the path of a profile with ``max_sequences = 1``). N participants
join (the service warms each one's prompt prefix), then each sends a different typed
question at the same instant; ``--repeat`` rounds per N (four times as many for one alone,
the baseline of every ratio), each with fresh participants.
Per turn: first reply text and whole reply (seconds from sending it, as a client sees
them over WebSocket) and the answer's generated tokens; per round, aggregate tokens/s
(all answers' tokens over the round's wall time). Each reply is checked for the word
its question expects (no turn lost, no other participant's words).

Spoken turns (``--spoken``, services with the voice pipeline): each participant streams a
Piper recording of a different question (synthesized without Piper's random variation, so
every run hears the same audio) in real time over WebSocket, hands-free (our
endpointing; silence after the speech), all starting at the same instant. Per turn, from
the end of speech: the final transcript, first reply text, first audio and whole reply
(the reply's last audio chunk); the transcript must be the participant's own question and
the reply carry its word. Per round, where the compute gate (``edge.runtime.COMPUTE_GATE``)
made each kind of step wait (``stt urgent`` a Whisper pass that may end a turn, ``stt`` a
partial one, ``tts first`` a sentence its listener waits for, ``tts`` one synthesized
ahead, ``llm`` a model step): count, total and worst wait, longest hold; the answers'
LLM queue wait and prompt evaluation; and the stage trace of the slowest turn to its first
audio (``edge.runtime.TRACES``, as ``mixed_protocols.py`` reports it: Whisper passes,
first token, first sentence, synthesis, first audio out, and whose work held the compute
gate meanwhile).

Prints a table, writes ``benchmarks/results/<machine class>/concurrency.json`` and
``.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import re
import statistics
import time
from typing import Any

import anyio
import numpy as np
from chain_paths import (
    HANDS_FREE_TAIL_S,
    RATE,
    Marks,
    Utterance,
    silence,
    stream_microphone,
    trace_of,
)
from figures import voiced_span, write_results
from rich.console import Console
from rich.table import Table
from server_latency import base_settings

from edge.device import DeviceConfig, load_device_config
from edge.llm import LlamaConfig, LlamaCppLLM
from edge.runtime import COMPUTE_GATE, TRACES
from edge.server import AudioFormat, EdgeClient, EdgeService, Reply
from edge.voice import PiperTTS, float_to_pcm16, resample

QUESTIONS = [
    ("What is the capital of France?", "paris"),
    ("What do bees make?", "honey"),
    ("How many legs does a spider have?", "eight|8"),
    ("What color is the sky on a clear day?", "blue"),
    ("What is frozen water called?", "ice"),
    ("Which planet do we live on?", "earth"),
    ("What animal says moo?", "cow"),
    ("What is the opposite of hot?", "cold"),
]
MODES = ("off", "on")
ALONE_ROUNDS = 4
"""One alone is every ratio's baseline: ``--repeat`` times this many rounds of it (as many
turns as four at once), so its median is not three samples'."""
JOIN_SETTLE_S = 2.0  # the join warm-up of every participant finishes before they ask
LEAD_S = 0.3  # the microphone is open before the speaker starts
SPOKEN_LIMIT_S = 120.0
SPOKEN_MARKS = ("transcript", "reply_text", "audio", "done")


def stats(values: list[float]) -> dict[str, float]:
    values = sorted(v for v in values if v == v)
    if not values:
        return {"p50": float("nan"), "p95": float("nan"), "max": float("nan")}
    p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
    return {"p50": statistics.median(values), "p95": p95, "max": values[-1]}


def llm_detail(metrics: Any) -> dict[str, Any]:
    """Where the answer request spent its time before its first token."""
    if metrics is None:
        return {}
    names = ("queue_wait_s", "prompt_tokens", "reused_tokens", "prompt_eval_s")
    return {f"llm_{name}": getattr(metrics, name, None) for name in names}


async def turn(service: EdgeService, client: EdgeClient, k: int) -> dict[str, Any]:
    question, expected = QUESTIONS[k % len(QUESTIONS)]
    t0 = time.perf_counter()
    first: list[float] = []

    def seen(message: Any) -> None:
        if isinstance(message, Reply) and message.text and not first:
            first.append(time.perf_counter() - t0)

    reply = await client.ask(question, limit_s=300, on_message=seen)
    metrics = service.conversation.last_metrics(client.participant_id)
    return {
        "first_reply_s": first[0] if first else float("nan"),
        "done_s": time.perf_counter() - t0,
        "tokens": metrics.generated_tokens if metrics is not None else 0,
        **llm_detail(metrics),
        "question": question,
        "answered": bool(reply.text.strip()),
        "on_topic": any(word in reply.text.lower() for word in expected.split("|")),
        "text": reply.text,
    }


def speak_questions(n: int) -> list[Utterance]:
    """Piper speaks the first ``n`` questions at 16 kHz, after LEAD_S of silence."""
    tts = PiperTTS(noise_scale=0.0, noise_w_scale=0.0)  # the same audio every run
    out = []
    for k in range(n):
        question, _ = QUESTIONS[k % len(QUESTIONS)]
        spoken = tts.synthesize(question)
        audio = resample(spoken.audio, spoken.sample_rate, RATE)
        start = voiced_span(audio, RATE)[0]
        audio = np.concatenate(
            [np.zeros(int(RATE * LEAD_S), np.float32), audio[int(start * RATE) :]]
        )
        end_s = voiced_span(audio, RATE)[1]
        out.append(Utterance(str(k), "short", question, float_to_pcm16(audio), end_s))
    return out


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


async def spoken_turn(
    service: EdgeService, client: EdgeClient, utt: Utterance, k: int
) -> dict[str, Any]:
    """Stream ``utt`` in real time, hands-free, and time the turn from the end of speech."""
    _, expected = QUESTIONS[k % len(QUESTIONS)]
    marks = Marks()

    def seen(message: Any) -> None:
        kind = message.type
        if kind == "transcript" and message.final:
            marks.first("transcript")
        elif kind == "reply" and message.text.strip():
            marks.first("reply_text")
        elif kind == "audio" and message.bytes:
            marks.first("audio")

    async def talk() -> None:
        t0 = time.perf_counter()
        marks.times["speech_end"] = t0 + utt.speech_end_s
        await stream_microphone(client.send_audio, utt.pcm + silence(HANDS_FREE_TAIL_S), t0)

    result = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(talk)
        with contextlib.suppress(TimeoutError):
            result = await client.collect_turn(limit_s=SPOKEN_LIMIT_S, on_message=seen)
        marks.first("done")
        tg.cancel_scope.cancel()
    rel = marks.relative("speech_end")
    metrics = service.conversation.last_metrics(client.participant_id)
    text, heard = (result.text, result.query) if result is not None else ("", "")
    return {
        "participant": client.participant_id,
        **{f"{m}_s": rel.get(m, float("nan")) for m in SPOKEN_MARKS},
        "first_reply_s": rel.get("reply_text", float("nan")),
        "tokens": metrics.generated_tokens if metrics is not None else 0,
        **llm_detail(metrics),
        "question": utt.text,
        "heard": heard,
        "heard_own": len(words(heard) & words(utt.text)) >= 0.6 * len(words(utt.text)),
        "answered": bool(text.strip()),
        "on_topic": any(word in text.lower() for word in expected.split("|")),
        "text": text,
        "trace": trace_of(client.participant_id, marks.times["speech_end"]),
    }


def slowest_trace_only(rows: list[dict[str, Any]]) -> None:
    """Keep the stage trace of the round's slowest turn to its first audio alone."""
    slowest = max(rows, key=lambda x: x["audio_s"] if x["audio_s"] == x["audio_s"] else 1e9)
    for row in rows:
        if row is not slowest:
            row.pop("trace", None)


async def round_once(
    service: EdgeService, mode: str, n: int, r: int, spoken: list[Utterance] | None = None
) -> dict[str, Any]:
    """N fresh participants join, then all ask at once (typed, or ``spoken``)."""
    audio = AudioFormat(sample_rate=RATE) if spoken else None
    clients = [
        EdgeClient(
            service.websocket_url,
            participant_id=f"{mode}-{'s' if spoken else 't'}{n}-{r}-{k}",
            audio=audio,
            want_audio=bool(spoken),
        )
        for k in range(n)
    ]
    rows: list[dict[str, Any]] = [{} for _ in range(n)]
    for c in clients:
        await c.__aenter__()
    try:
        await anyio.sleep(JOIN_SETTLE_S)
        COMPUTE_GATE.take_stats()
        TRACES.clear()
        t0 = time.perf_counter()

        async def one(k: int) -> None:
            if spoken:
                rows[k] = await spoken_turn(service, clients[k], spoken[k], k)
            else:
                rows[k] = await turn(service, clients[k], k)

        async with anyio.create_task_group() as tg:
            for k in range(n):
                tg.start_soon(one, k)
        wall = time.perf_counter() - t0
        gate = dataclasses.asdict(COMPUTE_GATE.take_stats())
        if spoken:
            slowest_trace_only(rows)
    finally:
        for c in clients:
            await c.__aexit__(None, None, None)
    tokens_per_s = sum(x["tokens"] for x in rows) / wall
    return {"rows": rows, "wall_s": wall, "tokens_per_s": tokens_per_s, "gate": gate}


def llm_config(device: DeviceConfig, mode: str) -> LlamaConfig:
    """``on``: the profile's own model settings; ``off``: one sequence, the whole window."""
    cfg = device.llm_config()
    if cfg.sequences < 2:
        raise SystemExit(f"profile {device.profile.name} does not batch (max_sequences = 1)")
    if mode == "on":
        return cfg
    return cfg.model_copy(update={"sequences": 1, "n_ctx": device.budgets.context_window})


def make_service(mode: str, voice: bool) -> EdgeService:
    device = load_device_config()
    llm = LlamaCppLLM(device.llm_model_path, llm_config(device, mode))
    settings = base_settings(voice=voice, durable_sessions=False)  # fresh participants
    return EdgeService(settings, device=device, llm=llm)


TYPED_KEYS = ("first_reply_s", "done_s")
SPOKEN_KEYS = ("transcript_s", "first_reply_s", "audio_s", "done_s")


def gate_waits(rounds: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per kind of gated step over ``rounds``: steps, total and worst wait for the gate."""
    out: dict[str, dict[str, float]] = {}
    for rnd in rounds:
        g = rnd["gate"]
        for kind, count in g["count"].items():
            row = out.setdefault(kind, dict.fromkeys(g, 0.0))
            row["count"] += count
            row["waited_s"] += g["waited_s"][kind]
            for most in ("max_wait_s", "max_held_s"):
                row[most] = max(row[most], g[most][kind])
    return out


def summary(rounds: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, Any]:
    rows = [x for rnd in rounds for x in rnd["rows"]]
    out: dict[str, Any] = {key: stats([x[key] for x in rows]) for key in keys}
    if "heard_own" in rows[0]:
        out["heard_own"] = sum(x["heard_own"] for x in rows)
    for key in ("llm_queue_wait_s", "llm_prompt_eval_s"):
        out[key] = stats([x.get(key) or 0.0 for x in rows])
    if "audio_s" in rows[0]:  # spoken: the slowest turn, with its stage trace
        out["slowest"] = max((x for x in rows if "trace" in x), key=lambda x: x["audio_s"])
    return {
        **out,
        "tokens_per_s": statistics.median(rnd["tokens_per_s"] for rnd in rounds),
        "answered": sum(x["answered"] for x in rows),
        "on_topic": sum(x["on_topic"] for x in rows),
        "turns": len(rows),
        "gate": gate_waits(rounds),
        "rounds": rounds,
    }


async def run_kind(
    services: dict[str, EdgeService],
    at_once: list[int],
    repeat: int,
    spoken: list[Utterance] | None,
    console: Console,
) -> dict[str, Any]:
    """Each round on one service then the other, alternating which goes first, so a change
    in the machine's load weighs on both alike."""
    keys, first = (SPOKEN_KEYS, "audio_s") if spoken else (TYPED_KEYS, "first_reply_s")
    rounds: dict[str, dict[int, list[dict[str, Any]]]] = {m: {} for m in MODES}
    for mode, service in services.items():
        await round_once(service, mode, 1, -1, spoken)  # warm-up, not recorded
    for n in at_once:
        for r in range(repeat * (ALONE_ROUNDS if n == 1 else 1)):
            order = list(MODES) if r % 2 == 0 else list(reversed(MODES))
            for mode in order:
                rnd = await round_once(services[mode], mode, n, r, spoken)
                rounds[mode].setdefault(n, []).append(rnd)
        for mode in MODES:
            f = summary(rounds[mode][n], keys)[first]
            console.print(
                f"[dim]{'spoken' if spoken else 'typed'}, {mode}, {n} at once: {first} "
                f"p50 {f['p50']:.2f} s, max {f['max']:.2f} s[/]"
            )
    result = {m: {str(n): summary(rs, keys) for n, rs in rounds[m].items()} for m in MODES}
    return {**result, "ratios": ratios(result, first)}


async def bench(
    typed: list[int], spoken: list[int], repeat: int, console: Console
) -> dict[str, Any]:
    services = {mode: make_service(mode, voice=bool(spoken)) for mode in MODES}
    TRACES.enabled = bool(spoken)  # the stage trace of each round's slowest spoken turn
    utterances = speak_questions(max(spoken)) if spoken else None
    result: dict[str, Any] = {}
    async with services["off"], services["on"]:
        if typed:
            result.update(await run_kind(services, typed, repeat, None, console))
        if spoken:
            result["spoken"] = await run_kind(services, spoken, repeat, utterances, console)
    return result


def ratios(result: dict[str, Any], key: str) -> dict[str, Any]:
    """Each N against one alone with batching on, and on against off."""
    on, off = result["on"], result["off"]
    if "1" not in on:
        return {}
    alone = on["1"][key]["p50"]
    out: dict[str, Any] = {"one_alone_on_vs_off": alone / off["1"][key]["p50"]}
    for n in on:
        out[n] = {
            "first_p50_vs_alone": on[n][key]["p50"] / alone,
            "first_max_vs_alone": on[n][key]["max"] / alone,
            "first_p50_on_vs_off": on[n][key]["p50"] / off[n][key]["p50"],
            "tokens_per_s_on_vs_off": on[n]["tokens_per_s"] / off[n]["tokens_per_s"],
        }
    return out


def plot_kind(ax: Any, result: dict[str, Any], key: str, ylabel: str) -> None:
    for mode, style in (("off", "--"), ("on", "-")):
        ns = sorted(int(n) for n in result[mode])
        for stat, marker in (("p50", "o"), ("max", "^")):
            ys = [result[mode][str(n)][key][stat] for n in ns]
            ax.plot(ns, ys, style, marker=marker, label=f"batching {mode}, {stat}")
    ax.set(xlabel="participants at once", ylabel=ylabel, xticks=ns)
    ax.legend(fontsize=8)


def plot(result: dict[str, Any]):  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(result, "first_reply_s", "typed: first reply text (s)")] if "on" in result else []
    if "spoken" in result:
        panels.append((result["spoken"], "audio_s", "spoken: end of speech → first audio (s)"))
    fig, axes = plt.subplots(1, len(panels) + 1, figsize=(5 * len(panels) + 5, 4))
    for ax, (data, key, label) in zip(axes, panels, strict=False):
        plot_kind(ax, data, key, label)
    bx, data = axes[-1], panels[0][0]
    for mode, style in (("off", "--"), ("on", "-")):
        ns = sorted(int(n) for n in data[mode])
        bx.plot(ns, [data[mode][str(n)]["tokens_per_s"] for n in ns], style, marker="o")
    bx.set(xlabel="participants at once", ylabel="tokens/s, all answers", xticks=ns)
    bx.legend(["batching off", "batching on"], fontsize=8)
    fig.suptitle("Turns at the same instant through edge serve")
    fig.tight_layout()
    return fig


def print_table(
    result: dict[str, Any], keys: tuple[str, ...], title: str, console: Console
) -> None:
    table = Table(title=f"N {title} at once: p50 / p95 / max (s), tokens/s")
    for col in ("N", "mode", *keys, "tok/s", "on topic"):
        table.add_column(col, justify="right")
    for n in result["on"]:
        for mode in ("off", "on"):
            row = result[mode][n]
            cells = ["/".join(f"{row[k][q]:.2f}" for q in ("p50", "p95", "max")) for k in keys]
            topic = f"{row['on_topic']}/{row['turns']}"
            if "heard_own" in row:
                topic += f", heard {row['heard_own']}"
            table.add_row(n, mode, *cells, f"{row['tokens_per_s']:.0f}", topic)
    console.print(table)
    for n in result["on"]:
        for mode in ("off", "on"):
            waits = ", ".join(
                f"{kind} {g['count']:.0f}× waited {g['waited_s']:.2f} s (max "
                f"{g['max_wait_s']:.2f}), longest hold {g['max_held_s']:.2f} s"
                for kind, g in result[mode][n]["gate"].items()
            )
            console.print(f"[dim]{title} {n} {mode} gate waits: {waits}[/]")
    for n in result["on"]:
        slow = result["on"][n].get("slowest")
        if slow is not None:
            console.print(f"[bold]{title}, on, {n} at once, slowest turn[/] {slow['participant']}")
            console.print(slow["trace"])
    console.print(result["ratios"])


async def main(args: argparse.Namespace) -> None:
    console = Console(width=180)
    result = await bench(args.at_once, args.spoken, args.repeat, console)
    if "on" in result:
        print_table(result, TYPED_KEYS, "typed", console)
    if "spoken" in result:
        print_table(result["spoken"], SPOKEN_KEYS, "spoken", console)
    device = load_device_config()
    modes = {m: llm_config(device, m).model_dump(include={"sequences", "n_ctx"}) for m in MODES}
    path = write_results("concurrency", {"modes": modes, **result}, plot(result))
    console.print(f"wrote {path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--at-once", type=int, nargs="*", default=[1, 2, 4, 8])
    parser.add_argument("--spoken", type=int, nargs="*", default=[1, 2, 4])
    parser.add_argument("--repeat", type=int, default=3)
    anyio.run(main, parser.parse_args())
