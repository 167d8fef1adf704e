"""Whisper's encoder window: all 30 s (faster-whisper's default) against the utterance plus
1 s with a floor of 10 s (``WhisperSTT``'s default), 15 s or 20 s, on the same clips in
one run, each on two CTranslate2 threads (the cores of the 2-core reference machine); and
the whole window and the default one on one thread, which sets a profile's ``stt_threads``
(the CI profile's 1), and backs the chain's Whisper keeping two in ``versus_chain.py``.

Clips: Piper speaks this project's benchmark questions and the memory eval's questions and
statements, each whole and cut at 60 % (what a partial pass hears while the speaker is
still talking). Reports per window the word error rate of the whole clips against the
text spoken, how many transcripts differ from the 30 s window's, and the time per pass.

Usage: ``python benchmarks/stt_window.py``; writes
``benchmarks/results/<machine class>/stt_window.json`` and ``.png``.
"""

from __future__ import annotations

import re
import time
import tomllib
from pathlib import Path

import numpy as np
from figures import write_results
from versus_chain import QUESTIONS

from edge.voice import PiperTTS, WhisperSTT, resample

EVALS = Path(__file__).resolve().parent.parent / "edge" / "eval" / "evals"
VARIANTS = {  # name: (encoder window floor, CTranslate2 threads)
    "30 s (faster-whisper)": (None, 2),
    "fitted, 10 s floor (default)": (10.0, 2),
    "fitted, 15 s floor": (15.0, 2),
    "fitted, 20 s floor": (20.0, 2),
    "fitted, 10 s floor, 1 thread": (10.0, 1),
    "30 s (faster-whisper), 1 thread": (None, 1),
}


def texts() -> list[str]:
    out = [" ".join(parts) for _, _, parts in QUESTIONS]
    cases = sorted(EVALS.glob("recall_cases*.toml"))
    if not cases:
        raise SystemExit(f"no recall_cases*.toml in {EVALS}: the clips would be the questions only")
    for path in cases:
        for case in tomllib.loads(path.read_text())["case"]:
            out += [v for k, v in case.items() if k in ("question", "fact") and isinstance(v, str)]
    return list(dict.fromkeys(out))


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9 ]", " ", text.lower()).split()


def errors(ref: str, hyp: str) -> int:
    """Word-level edit distance."""
    r, h = words(ref), words(hyp)
    row = list(range(len(h) + 1))
    for i in range(1, len(r) + 1):
        prev, row[0] = row[0], i
        for j in range(1, len(h) + 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r[i - 1] != h[j - 1]))
    return row[len(h)]


def main() -> dict:
    tts = PiperTTS(noise_scale=0, noise_w_scale=0)
    models = {
        name: WhisperSTT(encoder_window_s=w, cpu_threads=threads)
        for name, (w, threads) in VARIANTS.items()
    }
    for stt in models.values():
        stt.load()
    rows = []
    for text in texts():
        spoken = tts.synthesize(text)
        audio = resample(spoken.audio, spoken.sample_rate, 16_000)
        for part, clip in (("whole", audio), ("60 %", audio[: int(len(audio) * 0.6)])):
            row = {"text": text, "part": part, "seconds": len(clip) / 16_000}
            for name, stt in models.items():
                started = time.perf_counter()
                row[name] = {"heard": stt.transcribe(clip).text}
                row[name]["pass_s"] = time.perf_counter() - started
            rows.append(row)
    summary = {}
    base = next(iter(VARIANTS))
    whole = [r for r in rows if r["part"] == "whole"]
    n_words = sum(len(words(r["text"])) for r in whole)
    for name in VARIANTS:
        summary[name] = {
            "wer_whole": sum(errors(r["text"], r[name]["heard"]) for r in whole) / n_words,
            "differ_from_30s": sum(
                words(r[name]["heard"]) != words(r[base]["heard"]) for r in rows
            ),
            "pass_p50_s": float(np.median([r[name]["pass_s"] for r in rows])),
            "pass_p90_s": float(np.percentile([r[name]["pass_s"] for r in rows], 90)),
        }
    return {"clips": len(rows), "words_whole": n_words, "summary": summary, "rows": rows}


def report(results: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Whisper tiny.en encoder window and threads ({results['clips']} clips)")
    for col in ("window", "WER, whole clips", "transcripts unlike 30 s", "pass p50", "pass p90"):
        table.add_column(col)
    for name, s in results["summary"].items():
        table.add_row(
            name,
            f"{s['wer_whole']:.1%} of {results['words_whole']} words",
            str(s["differ_from_30s"]),
            f"{s['pass_p50_s'] * 1000:.0f} ms",
            f"{s['pass_p90_s'] * 1000:.0f} ms",
        )
    Console().print(table)
    fig, ax = plt.subplots(figsize=(6, 3))
    for name in VARIANTS:
        ax.scatter(
            [r["seconds"] for r in results["rows"]],
            [r[name]["pass_s"] * 1000 for r in results["rows"]],
            label=name,
            s=10,
        )
    ax.set_xlabel("clip (s)")
    ax.set_ylabel("pass (ms)")
    ax.legend()
    fig.tight_layout()
    Console().print(f"wrote {write_results('stt_window', results, fig)} and .png")


if __name__ == "__main__":
    report(main())
