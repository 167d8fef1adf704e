"""``edge ask "question"``: stream an answer from the local model, then its timing."""

from __future__ import annotations

import argparse
import sys

import anyio
from rich.console import Console

from edge.llm import LLMError, LLMService, Priority


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("ask", help="stream an answer from the LLM and show its speed")
    p.add_argument("question", help="what to ask")
    p.add_argument("--model", help="a GGUF file (default: the catalogue's default LLM)")
    p.add_argument(
        "--base-url", help="use an OpenAI-compatible server instead, e.g. http://127.0.0.1:8080/v1"
    )
    p.add_argument(
        "--system", default="You are a helpful, concise assistant.", help="system prompt"
    )
    p.add_argument("--max-tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.2)
    p.add_argument("--n-ctx", type=int, default=4096, help="context window for a local model")
    p.set_defaults(func=run)


def make_llm(args: argparse.Namespace) -> LLMService:
    if args.base_url:
        from edge.llm import OpenAICompatLLM

        return OpenAICompatLLM(args.base_url)
    from edge.llm import LlamaCppLLM

    return LlamaCppLLM(args.model, n_ctx=args.n_ctx)


async def _ask(args: argparse.Namespace, console: Console) -> int:
    llm = make_llm(args)
    messages = [
        {"role": "system", "content": args.system},
        {"role": "user", "content": args.question},
    ]
    try:
        stream = llm.stream(
            messages,
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            priority=Priority.INTERACTIVE,
            cache_key="cli",
        )
        async with stream:
            async for delta in stream:
                sys.stdout.write(delta)
                sys.stdout.flush()
        sys.stdout.write("\n")
    except LLMError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 1
    finally:
        await llm.close()
    m = stream.metrics
    ttft = f"{m.ttft_s * 1000:.0f} ms" if m.ttft_s is not None else "n/a"
    tps = f"{m.tokens_per_s:.1f} tokens/s" if m.tokens_per_s else "n/a"
    console.print(
        f"[dim]time to first token {ttft} · {tps} · {m.generated_tokens} tokens · "
        f"prompt {m.prompt_tokens} tokens ({m.reused_tokens} reused) · "
        f"finish {stream.finish_reason}[/]"
    )
    return 0


def run(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    return anyio.run(_ask, args, console)
