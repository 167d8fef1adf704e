"""The component stages: VAD, STT per Whisper model, the LLM (prompt and generation speed
through the calibration's own code, cold and warm time to first token at several context
sizes) and TTS. Each returns :class:`Figure`s."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._records import Figure
from ._speech import spoken_question

Tick = Callable[[str], None]
SYSTEM = "You are a concise assistant on a headset. Answer in one sentence."


@dataclass(frozen=True)
class LLMCase:
    """One point of the LLM sweep."""

    model: str | None  # a GGUF path or catalogue id; None: the profile's
    threads: int
    ngl: int
    adaptive: bool = True  # ThreadPolicy: fewer threads while other processes hold cores


def context_of(n_bytes: int, seed: int) -> str:
    """``n_bytes`` of lab notes, different for each ``seed`` (no prefix shared between
    seeds beyond the first characters)."""
    lines, size, i = [], 0, 0
    while size < n_bytes:
        line = f"[{i:03d}] Participant {seed} noted that rack {i % 9} holds sample {i * 7 + seed}."
        lines.append(line)
        size += len(line.encode()) + 1
        i += 1
    return "\n".join(lines)[:n_bytes]


async def ttft_pair(
    llm: Any, context_bytes: int, key: str, seed: int, tokens: tuple[int, int] = (8, 8)
) -> tuple[Any, Any]:
    """A new participant's first answer over ``context_bytes`` of context (cold: a new
    cache key) and the same participant's follow-up (warm: all but the new turn cached),
    generating up to ``tokens`` tokens each; returns both requests' metrics (and
    ``benchmarks/llm_latency.py`` uses it too)."""
    question = context_of(context_bytes, seed) + "\n\nWhich rack holds sample 7?"
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    first = await llm.chat(msgs, max_tokens=tokens[0], temperature=0.0, cache_key=key)
    follow = [
        *msgs,
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": "Thanks. And sample 14?"},
    ]
    second = await llm.chat(follow, max_tokens=tokens[1], temperature=0.0, cache_key=key)
    return first.metrics, second.metrics


def predicted_ttft(expected: Any, new_tokens: int) -> float:
    """The profile's prediction (its budgets' rule): the new tokens at its prompt speed,
    plus one generated token."""
    return new_tokens / expected.prompt_tokens_per_s + 1 / expected.generation_tokens_per_s


async def llm_stage(
    case: LLMCase, device: Any, reps: int, contexts: list[int], tick: Tick, load: int = 0
) -> list[Figure]:
    """One model at one threads / GPU-layers setting."""
    from edge.device import calibration_text, measure_run
    from edge.llm import LlamaCppLLM

    path = case.model or device.llm_model_path
    started = time.perf_counter()
    llm = LlamaCppLLM(
        path,
        n_ctx=4096,
        n_threads=case.threads,
        n_gpu_layers=case.ngl,
        temperature=0.0,
        adaptive_threads=case.adaptive,
    )
    async with llm:
        common = _llm_common(llm, case, load)
        own = Path(str(llm.model_path)) == Path(str(device.llm_model_path or ""))
        expected = device.profile.expected if own else None
        figs = [
            Figure("llm", "load", "s", "lower", values=[time.perf_counter() - started], **common)
        ]
        text = calibration_text()
        pp = Figure("llm", "prompt", "tokens/s", "higher", **common)
        tg = Figure("llm", "generation", "tokens/s", "higher", **common)
        if expected is not None:
            pp.expected, tg.expected = (
                expected.prompt_tokens_per_s,
                expected.generation_tokens_per_s,
            )
        for rep in range(reps):  # the same prompts idle and loaded (a new model each)
            run = await measure_run(llm, text, rep, 32)
            pp.values.append(run.prompt_tokens_per_s)
            tg.values.append(run.generation_tokens_per_s)
            tick(f"LLM speed {common['model']} t={case.threads}")
        figs += [pp, tg]
        for n in contexts:
            figs += await _ttft_figures(llm, n, reps, common, expected, tick)
    return figs


def _llm_common(llm: Any, case: LLMCase, load: int) -> dict[str, Any]:
    on_gpu, _total = llm.gpu_layers or (0, 0)
    return {
        "model": Path(str(llm.model_path)).stem,
        "backend": ("CUDA" if on_gpu else "CPU") + ("" if case.adaptive else ", fixed threads"),
        "threads": case.threads,
        "ngl": case.ngl,
        "load": load,
    }


async def _ttft_figures(
    llm: Any, n: int, reps: int, common: dict[str, Any], expected: Any, tick: Tick
) -> list[Figure]:
    cold = Figure("llm", f"TTFT cold, {n:,} B context", "s", "lower", **common)
    warm = Figure("llm", f"TTFT warm, {n:,} B context", "s", "lower", **common)
    for rep in range(reps):
        key = f"bench-{n}-{rep}-{common['load']}-{time.monotonic_ns()}"
        first, second = await ttft_pair(llm, n, key, rep)
        cold.values.append(first.ttft_s or float("nan"))
        warm.values.append(second.ttft_s or float("nan"))
        if expected is not None:
            cold.expected = predicted_ttft(expected, first.prompt_tokens)
            new = second.prompt_tokens - (second.reused_tokens or 0)
            warm.expected = predicted_ttft(expected, new)
        tick(f"LLM TTFT {n:,} B")
    return [cold, warm]


def installed_whisper(names: list[str] | None) -> list[tuple[str, Path]]:
    """(catalogue id, path) of each installed Whisper model (those named, if any)."""
    from edge.catalogue import Catalogue, ModelMissingError

    found = []
    for entry in Catalogue.load():
        if entry.role != "stt" or (names and entry.id not in names):
            continue
        try:
            found.append((entry.id, entry.locate()))
        except ModelMissingError:
            continue
    if names:
        missing = set(names) - {i for i, _ in found}
        if missing:
            raise ValueError(f"STT model(s) not installed or not in the catalogue: {missing}")
    return found


def stt_stage(
    model: tuple[str, Path], threads: int, compute: str, reps: int, tick: Tick, load: int = 0
) -> list[Figure]:
    """Whisper's real-time factor on the spoken question (after one pass to warm up)."""
    from edge.device import stt_device, whisper_cuda
    from edge.voice import WhisperSTT

    device, compute = stt_device(whisper_cuda(), compute)
    stt = WhisperSTT(model[1], compute_type=compute, cpu_threads=threads, device=device)
    clip = spoken_question()
    stt.transcribe(clip.audio_16k)
    fig = Figure(
        "stt",
        f"RTF, {clip.duration_s:.1f} s question",
        "x",
        "lower",
        model=model[0],
        backend=f"{device.upper()} {compute}",
        threads=threads,
        load=load,
    )
    for _ in range(reps):
        fig.values.append(stt.transcribe(clip.audio_16k).rtf)
        tick(f"STT {model[0]}")
    return [fig]


def tts_stage(reps: int, tick: Tick, load: int = 0) -> list[Figure]:
    """Piper's real-time factor and the time to speak the question's first sentence."""
    from edge.voice import PiperTTS

    tts = PiperTTS()
    tts.synthesize("Warming up.")
    name = tts.model_path.stem
    rtf = Figure("tts", "RTF, one sentence", "x", "lower", model=name, load=load)
    first = Figure("tts", "synthesis of one sentence", "s", "lower", model=name, load=load)
    for _ in range(reps):
        speech = tts.synthesize("The capital of France is Paris, about two hundred km inland.")
        rtf.values.append(speech.rtf)
        first.values.append(speech.elapsed_s)
        tick("TTS")
    return [rtf, first]


def vad_stage(reps: int, tick: Tick, load: int = 0) -> list[Figure]:
    """Silero VAD's cost per 32 ms window over the spoken question."""
    from edge.voice import SileroVAD

    clip = spoken_question()
    fig = Figure("vad", "per 32 ms window", "s", "lower", model="silero-vad", load=load)
    rtf = Figure("vad", "RTF", "x", "lower", model="silero-vad", load=load)
    for _ in range(reps):
        vad = SileroVAD()
        started = time.perf_counter()
        windows = len(vad.process(clip.audio_16k))
        elapsed = time.perf_counter() - started
        fig.values.append(elapsed / max(1, windows))
        rtf.values.append(elapsed / clip.duration_s)
        tick("VAD")
    return [fig, rtf]
