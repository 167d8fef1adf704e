"""Prompt and generation speed of the default LLM's weights in other formats, and how far
each format's next-token predictions move from the published file's.

For each format (the published q4_1, and conversions made here into a temporary
directory with llama.cpp's quantizer: q8_0 as ``edge models --prepare`` makes it, q4_0):

* time to evaluate 18 and 40 new prompt tokens after 300 cached ones (one llama.cpp
  context, median of 5), and the time per generated token (24 one-token steps);
* against the published file, over ~2,000 tokens of this project's docs: next-token
  agreement (same most likely token), mean KL divergence, and perplexity.

Usage: ``python benchmarks/weight_formats.py [--threads N]``; writes
``benchmarks/results/<machine class>/weight_formats.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from figures import write_results
from llama_cpp import Llama

from edge.catalogue import REPO_ROOT, Catalogue
from edge.llm import quantize_gguf

SOURCE = "smollm2-135m-instruct-q4_1"
TEXT_FILES = ("docs/conversation.md", "README.md")


def speed(path: Path, threads: int) -> dict[str, float]:
    llm = Llama(model_path=str(path), n_ctx=4096, n_threads=threads, verbose=False)
    base = llm.tokenize(b"The quick brown fox jumps over the lazy dog. " * 40)[:300]
    extra = llm.tokenize(b"My locker code is 4711 and the review is in room 310. " * 20, False)
    out: dict[str, float] = {}
    for n in (18, 40):
        times = []
        for _ in range(5):
            llm.reset()
            llm.eval(base)
            started = time.perf_counter()
            llm.eval(extra[:n])
            times.append(time.perf_counter() - started)
        out[f"prompt_{n}_tokens_s"] = sorted(times)[2]
    steps = []
    for _ in range(3):
        llm.reset()
        llm.eval(base)
        started = time.perf_counter()
        for token in extra[:24]:
            llm.eval([token])
        steps.append((time.perf_counter() - started) / 24)
    out["generated_token_s"] = min(steps)
    llm.close()
    return out


def log_probs(path: Path, threads: int) -> tuple[list[int], np.ndarray]:
    text = "\n".join((REPO_ROOT / f).read_text()[:6000] for f in TEXT_FILES)
    llm = Llama(model_path=str(path), n_ctx=4096, n_threads=threads, logits_all=True, verbose=False)
    tokens = llm.tokenize(text.encode())[:2000]
    llm.eval(tokens)
    logits = np.array(llm.scores[: len(tokens)], dtype=np.float64)
    llm.close()
    logits -= logits.max(axis=1, keepdims=True)
    return tokens, logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))


def closeness(tokens: list[int], ref: np.ndarray, other: np.ndarray) -> dict[str, float]:
    nll = -np.mean(other[np.arange(len(tokens) - 1), tokens[1:]])
    return {
        "top1_agreement": float(np.mean(ref.argmax(axis=1) == other.argmax(axis=1))),
        "kl_divergence": float(np.mean(np.sum(np.exp(ref) * (ref - other), axis=1))),
        "perplexity": float(np.exp(nll)),
    }


def main(threads: int) -> dict[str, dict[str, float]]:
    source = Catalogue.load().get(SOURCE).locate()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {"q4_1": source}
        for kind in ("q8_0", "q4_0"):
            paths[kind] = Path(tmp) / f"{kind}.gguf"
            quantize_gguf(source, paths[kind], kind, threads=threads)
        tokens, ref = log_probs(source, threads)
        for kind, path in paths.items():
            results[kind] = {"size_bytes": path.stat().st_size, **speed(path, threads)}
            results[kind] |= closeness(tokens, ref, log_probs(path, threads)[1])
    return results


def report(results: dict[str, dict[str, float]], threads: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{SOURCE} weights in other formats ({threads} threads)")
    for col in ("format", "18 prompt tok", "40 prompt tok", "per generated tok", "MB"):
        table.add_column(col)
    for col in ("top-1 agreement", "KL", "perplexity"):
        table.add_column(col)
    for kind, r in results.items():
        table.add_row(
            kind,
            *(f"{r[k] * 1000:.1f} ms" for k in ("prompt_18_tokens_s", "prompt_40_tokens_s")),
            f"{r['generated_token_s'] * 1000:.1f} ms",
            f"{r['size_bytes'] / 1e6:.0f}",
            f"{r['top1_agreement']:.1%}",
            f"{r['kl_divergence']:.3f}",
            f"{r['perplexity']:.1f}",
        )
    Console().print(table)
    fig, ax = plt.subplots(figsize=(6, 3))
    kinds = list(results)
    for i, key in enumerate(("prompt_40_tokens_s", "generated_token_s")):
        ax.bar(
            np.arange(len(kinds)) + i * 0.4,
            [results[k][key] * 1000 for k in kinds],
            width=0.4,
            label=key.replace("_s", "").replace("_", " "),
        )
    ax.set_xticks(np.arange(len(kinds)) + 0.2, kinds)
    ax.set_ylabel("ms")
    ax.legend()
    fig.tight_layout()
    path = write_results("weight_formats", {"threads": threads, "formats": results}, fig)
    Console().print(f"wrote {path} and .png")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    ns = parser.parse_args()
    report(main(ns.threads), ns.threads)
