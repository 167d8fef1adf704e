"""Voice layer speed: STT and TTS real-time factors, VAD cost, and end of speech → first
reply audio through the whole pipeline.

    python benchmarks/voice_latency.py              # scripted instant LLM: the voice layer alone
    python benchmarks/voice_latency.py --llm        # also with the local LLM answering
    python benchmarks/voice_latency.py --repeat 5   # more runs per figure

The loop runs in real time: Piper speaks a question, a simulated client feeds it in
100 ms chunks at real-time pace, followed by silence; the pipeline detects the endpoint,
transcribes, publishes the query, an answerer streams a reply, and the pipeline speaks
it. "End of speech" and "first audio" are defined once for every benchmark in
``benchmarks/README.md`` (the last voiced sample of the input, found from the audio; the
first reply audio at the client). Prints tables, writes
``benchmarks/results/<machine class>/voice_latency.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import anyio
import numpy as np
from figures import private_data_dir, speech_end_at, write_results
from rich.console import Console
from rich.table import Table

from edge.llm import ScriptedLLM, ScriptedReply
from edge.server import EdgeService, ServiceSettings, SpeechParts
from edge.voice import (
    PiperTTS,
    SileroVAD,
    SimulatedSpeaker,
    VoiceConfig,
    WhisperSTT,
    resample,
)

SENTENCES = [
    "Turn on the lights.",
    "What is the capital of France?",
    "Please remind me to check the centrifuge rotor before the experiment starts tomorrow.",
]
QUESTION = "What is the capital of France?"
REPLY = "The capital of France is Paris. It is known for its museums and its food."


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def bench_tts(tts: PiperTTS, repeat: int) -> list[dict]:
    rows = []
    tts.synthesize("Warm up.")
    for text in SENTENCES:
        runs = [tts.synthesize(text) for _ in range(repeat)]
        rows.append(
            {
                "text": text,
                "audio_s": runs[0].duration_s,
                "elapsed_s": median([r.elapsed_s for r in runs]),
                "rtf": median([r.rtf for r in runs]),
            }
        )
    return rows


def bench_stt(stt: WhisperSTT, tts: PiperTTS, repeat: int) -> list[dict]:
    rows = []
    stt.transcribe(np.zeros(16_000, np.float32))
    for text in SENTENCES:
        spoken = tts.synthesize(text)
        audio = resample(spoken.audio, spoken.sample_rate, 16_000)
        runs = [stt.transcribe(audio) for _ in range(repeat)]
        rows.append(
            {
                "text": text,
                "heard": runs[0].text,
                "audio_s": runs[0].audio_s,
                "elapsed_s": median([r.elapsed_s for r in runs]),
                "rtf": median([r.rtf for r in runs]),
            }
        )
    return rows


def bench_vad(seconds: float = 10.0) -> dict:
    vad = SileroVAD()
    audio = np.random.default_rng(0).standard_normal(int(seconds * 16_000)).astype(np.float32)
    audio *= 0.05
    started = time.perf_counter()
    for i in range(0, len(audio), 1_600):
        vad.process(audio[i : i + 1_600])
    elapsed = time.perf_counter() - started
    return {"audio_s": seconds, "elapsed_s": elapsed, "rtf": elapsed / seconds}


async def loop_once(
    stt: WhisperSTT, tts: PiperTTS, question: np.ndarray, rate: int, config: VoiceConfig, llm
) -> dict:  # type: ignore[no-untyped-def]
    """One spoken turn through the whole service in process (router, conversation, voice)."""
    settings = ServiceSettings(host="127.0.0.1", wyoming_port=None, mdns=False, notes=False)
    service = EdgeService(settings, llm=llm, speech=SpeechParts(stt=stt, tts=tts, config=config))
    client = SimulatedSpeaker("bench")
    service.runtime.register("client", client)
    service.hub.attach(client.participant_id, client)
    await service.start(preload=False, listen=False)
    try:
        assert service.voice is not None
        await service.voice.load()  # models are loaded already: this times one warm-up pass
        feed_started = time.perf_counter()
        await client.speak(service.runtime, question, rate, realtime=True, trailing_silence_s=1.5)
        answer = await client.answer(limit_s=120)
        listener, _ = service.voice.session("bench")
        stats = listener.stats[-1]
    finally:
        await service.stop()
    speech_end = speech_end_at(feed_started, question, rate)
    assert answer.first_audio_at is not None
    return {
        "heard": stats.text,
        "final_pass_reused": stats.reused_pass,
        "stt_passes": stats.passes,
        "final_pass_s": stats.final_pass_s,
        "final_pass_head_start_s": stats.head_start_s,
        "endpoint_to_transcript_s": stats.final_ready_at - stats.speech_end_at,
        "endpoint_to_first_audio_s": answer.first_audio_at - stats.speech_end_at,
        "speech_end_to_first_audio_s": answer.first_audio_at - speech_end,
        "speech_end_to_endpoint_s": stats.speech_end_at - speech_end,
        "answer": " ".join(answer.texts),
    }


async def local_llm():  # type: ignore[no-untyped-def]
    """The default local model, loaded (not timed: the service is started before speaking)."""
    from edge.llm import LlamaCppLLM

    llm = LlamaCppLLM()
    await llm.load()
    return llm


async def bench_loop(stt: WhisperSTT, tts: PiperTTS, repeat: int, use_llm: bool) -> list[dict]:
    spoken = tts.synthesize(QUESTION)
    variants: list[tuple[str, VoiceConfig, object]] = []
    for speculative in (True, False):
        config = VoiceConfig(
            speculative_final=speculative, partial_interval_s=0.8 if speculative else 0.0
        )
        label = "speculative final + partials" if speculative else "final pass at endpoint"
        variants.append((f"scripted LLM, {label}", config, None))
    if use_llm:
        variants.append(("local LLM, speculative final + partials", VoiceConfig(), "local"))
    rows = []
    for label, config, kind in variants:
        runs = []
        for _ in range(repeat):
            answerer = await local_llm() if kind == "local" else None
            answerer = answerer or ScriptedLLM(default=ScriptedReply(REPLY))
            # the service owns its model and closes it when it stops: one per run
            runs.append(
                await loop_once(stt, tts, spoken.audio, spoken.sample_rate, config, answerer)
            )
        keys = (
            "final_pass_s",
            "final_pass_head_start_s",
            "endpoint_to_transcript_s",
            "endpoint_to_first_audio_s",
            "speech_end_to_first_audio_s",
            "speech_end_to_endpoint_s",
        )
        row = {"variant": label, "runs": runs}
        row.update({k: median([r[k] for r in runs]) for k in keys})
        row["reused"] = sum(r["final_pass_reused"] for r in runs)
        rows.append(row)
    return rows


def plot(loop_rows: list[dict]):  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.2))
    labels = [r["variant"] for r in loop_rows]
    silence = [r["speech_end_to_endpoint_s"] for r in loop_rows]
    stt = [r["endpoint_to_transcript_s"] for r in loop_rows]
    rest = [r["endpoint_to_first_audio_s"] - r["endpoint_to_transcript_s"] for r in loop_rows]
    y = range(len(labels))
    ax.barh(y, silence, label="end of speech → endpoint (silence detection)")
    ax.barh(y, stt, left=silence, label="final transcript")
    ax.barh(
        y,
        rest,
        left=[a + b for a, b in zip(silence, stt, strict=True)],
        label="query → LLM → first sentence → TTS",
    )
    ax.set_yticks(list(y), labels)
    ax.set_xlabel("seconds from end of speech to first reply audio (median)")
    ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    return fig


def main() -> None:
    private_data_dir("voice-latency")  # not the user's sessions
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--llm", action="store_true", help="also answer with the local LLM")
    args = parser.parse_args()
    console = Console(width=150)
    stt, tts = WhisperSTT(), PiperTTS()
    t0 = time.perf_counter()
    stt.load()
    stt_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    tts.load()
    tts_load = time.perf_counter() - t0

    tts_rows = bench_tts(tts, args.repeat)
    stt_rows = bench_stt(stt, tts, args.repeat)
    vad_row = bench_vad()
    loop_rows = anyio.run(bench_loop, stt, tts, args.repeat, args.llm)

    table = Table(title=f"TTS (Piper, loaded in {tts_load:.2f} s)")
    for col in ("sentence", "audio s", "synth s", "RTF"):
        table.add_column(col)
    for r in tts_rows:
        table.add_row(
            r["text"][:48], f"{r['audio_s']:.2f}", f"{r['elapsed_s']:.3f}", f"{r['rtf']:.3f}"
        )
    console.print(table)
    table = Table(title=f"STT (faster-whisper tiny.en int8, loaded in {stt_load:.2f} s)")
    for col in ("sentence", "heard", "audio s", "stt s", "RTF"):
        table.add_column(col)
    for r in stt_rows:
        table.add_row(
            r["text"][:40],
            r["heard"][:40],
            f"{r['audio_s']:.2f}",
            f"{r['elapsed_s']:.3f}",
            f"{r['rtf']:.3f}",
        )
    console.print(table)
    console.print(f"VAD (Silero ONNX, streaming 100 ms chunks): RTF {vad_row['rtf']:.4f}")
    table = Table(title="End of speech → first reply audio (median, real-time feeding)")
    for col in (
        "variant",
        "endpoint→transcript",
        "endpoint→audio",
        "speech end→audio",
        "final reused",
        "pass s",
        "head start",
    ):
        table.add_column(col)
    for r in loop_rows:
        table.add_row(
            r["variant"],
            f"{r['endpoint_to_transcript_s']:.3f}",
            f"{r['endpoint_to_first_audio_s']:.3f}",
            f"{r['speech_end_to_first_audio_s']:.3f}",
            f"{r['reused']}/{len(r['runs'])}",
            f"{r['final_pass_s']:.3f}",
            f"{r['final_pass_head_start_s']:.3f}",
        )
    console.print(table)

    result = {
        "repeat": args.repeat,
        "load_s": {"stt": stt_load, "tts": tts_load},
        "tts": tts_rows,
        "stt": stt_rows,
        "vad": vad_row,
        "loop": loop_rows,
    }
    path = write_results("voice_latency", result, plot(loop_rows))
    console.print(f"wrote {path} and .png")


if __name__ == "__main__":
    main()
