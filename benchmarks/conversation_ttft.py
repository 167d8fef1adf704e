"""Time to first token of a conversation answer with and without a compaction backlog.

Scenarios (same participant context, real default model):

* ``warm``: a follow-up whose prompt prefix is cached, nothing in the background;
* ``backlog``: the same while another participant's compaction backlog runs at background
  priority (the scheduler preempts it at the next step);
* ``compacted+rewarm``: the first answer after the participant's own summary changed, with
  the manager's re-warm of the prompt prefix done while idle;
* ``compacted-cold``: the same with ``rewarm=False`` (the whole context is evaluated);
* ``own-compaction-during`` / ``own-compaction-after``: the participant's next turn
  arrives while the model writes the summary of their own dialogue (0.3 s into it), or the
  moment that summary is committed (the worst case: their whole context changed);
* ``recall-on`` / ``recall-off``: a long session (facts, ordinary turns, compaction) then
  ten questions, half about the earlier facts, with the CI profile's recall budget and
  with recall off: p50 TTFT of each, the time to select the recalled statements, and the
  p50 time to the first reply frame on the turns about a fact (told back from the
  record when recall is on) and on the others.

Usage: ``python benchmarks/conversation_ttft.py [--threads N] [--only-recall |
--only-own-compaction] [--model GGUF]``;
writes ``benchmarks/results/<machine class>/conversation_ttft.json`` and ``.png``.
Timings on a shared machine are noisy; run it on an idle device.
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC
from functools import partial

import anyio
from figures import write_results

from edge.conversation import ContextConfig, ContextManager, Conversation, ConversationConfig
from edge.llm import LlamaCppLLM
from edge.routing import AgentTurn

PAIRS = (
    ("Where did I leave sample {i}?", "Sample {i} is in rack {r}."),
    ("Start timer {i} for {r} minutes.", "Timer {i} set for {r} minutes."),
    ("Who booked microscope {r}?", "Alex booked microscope {r} for run {i}."),
    ("Is centrifuge {r} free?", "Yes, centrifuge {r} is free until run {i}."),
)
BUDGETS = {"dialogue_budget_bytes": 2_400, "compaction_input_budget_bytes": 1_500}
ANSWER = ConversationConfig(max_tokens=16, temperature=0.0)  # short, deterministic answers


async def nothing() -> None:
    return None


async def fill(ctx: ContextManager, pid: str, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        user, assistant = PAIRS[i % len(PAIRS)]
        await ctx.record_exchange(pid, user.format(i=i, r=i % 7), assistant.format(i=i, r=i % 7))


async def idle(ctx: ContextManager) -> None:
    while ctx.pending() or ctx._jobs._running:  # noqa: ASYNC110
        await anyio.sleep(0.05)


async def settled(ctx: ContextManager, pid: str) -> None:
    """Until nothing is queued and ``pid``'s prefix is re-warmed after their last exchange
    (as a few seconds between turns would leave it)."""
    await idle(ctx)
    while ctx._state.wants_warm(ctx._state.view(pid)) or ctx._jobs.running(pid):  # noqa: ASYNC110
        await anyio.sleep(0.05)


async def ask(conv: Conversation, pid: str, question: str) -> dict:
    started = time.perf_counter()
    first: list[float] = []

    async def first_reply() -> None:  # awaited right before the reply's first frame
        first.append(time.perf_counter() - started)

    result = await conv.answer(AgentTurn(pid, f"t{time.time_ns()}", question), started=first_reply)
    m = conv.last_metrics(pid)
    assert m is not None
    return {
        "answer": result.text,
        "first_reply_s": first[0] if first else None,
        "ttft_s": m.ttft_s,
        "queue_wait_s": m.queue_wait_s,
        "prompt_tokens": m.prompt_tokens,
        "reused_tokens": m.reused_tokens,
        "total_s": time.perf_counter() - started,
    }


async def scenario_warm_and_backlog(llm: LlamaCppLLM) -> dict[str, dict]:
    out = {}
    ctx = ContextManager(llm, ContextConfig(compaction_quiet_s=0, timezone=UTC, **BUDGETS))
    conv = Conversation(llm, context=ctx, config=ANSWER)
    await fill(ctx, "p", 12)  # under half the budget: p itself does not compact
    async with ctx:
        await ask(conv, "p", "Where is sample 3?")  # cold: fills p's cache
        await settled(ctx, "p")
        out["warm"] = await ask(conv, "p", "Where is sample 5?")
        await settled(ctx, "p")
        await fill(ctx, "other", 60)  # a backlog for someone else
        while not ctx._jobs.running("other"):  # noqa: ASYNC110
            await anyio.sleep(0.02)
        await anyio.sleep(0.3)
        out["backlog"] = await ask(conv, "p", "Where is sample 9?")
        out["backlog"]["compaction_running"] = ctx._jobs.running("other")
        await idle(ctx)
    return out


async def scenario_after_compaction(llm: LlamaCppLLM, rewarm: bool) -> dict:
    config = ContextConfig(compaction_quiet_s=0, rewarm=rewarm, timezone=UTC, **BUDGETS)
    ctx = ContextManager(llm, config)
    # The summary's content does not matter for latency, and the 135M model often fails to
    # write one (echo, cut off): a hook supplies it so both runs compact the same way.
    ctx.add_hook(
        "pre_compact",
        lambda request: (
            "The user asked where samples are, set timers, "
            "and asked about microscope and centrifuge bookings; most samples are in "
            "racks 0 to 6."
        ),
    )
    conv = Conversation(llm, context=ctx, config=ANSWER)
    await fill(ctx, "p", 20)
    async with ctx:
        await ask(conv, "p", "Where is sample 3?")
        await fill(ctx, "p", 40, start=20)  # p's own section now compacts
        await anyio.sleep(0.1)
        await (settled(ctx, "p") if rewarm else idle(ctx))  # with the re-warm, that too
        await anyio.sleep(0.2)
        result = await ask(conv, "p", "Where is sample 57?")
        result["summary_bytes"] = len(ctx.summary("p").encode())
        result["compacted"] = bool(ctx.summary("p"))
        result["method"] = ctx.last_compaction("p").method if ctx.last_compaction("p") else None
    return result


async def entries_under_threshold(llm: LlamaCppLLM) -> int:
    """How many ``fill`` entries a dialogue holds without compacting yet (a manager that is
    never started: it only measures)."""
    probe = ContextManager(llm, ContextConfig(timezone=UTC, **BUDGETS))
    n = 0
    while True:
        await fill(probe, "p", 1, start=n)
        if probe._state.peek("p").sections["dialogue"].needs_compaction():
            return n
        n += 1


async def scenario_own_compaction(llm: LlamaCppLLM, when: str) -> dict:
    """The participant asks again while their own dialogue compacts (``during``) or right
    when the compaction commits (``after``); the compaction is the model's own. Recall is
    off: this measures how warm the prompt prefix is (the recall scenarios measure recall)."""
    config = ContextConfig(compaction_quiet_s=0, timezone=UTC, recall_budget_bytes=0, **BUDGETS)
    ctx = ContextManager(llm, config)
    conv = Conversation(llm, context=ctx, config=ANSWER)
    fire = anyio.Event()
    ctx.add_hook("pre_compact" if when == "during" else "post_compact", lambda _: fire.set())
    await fill(ctx, "p", await entries_under_threshold(llm))
    async with ctx:
        await ask(conv, "p", "Where is sample 3?")  # its exchange starts the compaction
        if not ctx._state.peek("p").sections["dialogue"].needs_compaction():
            await ctx.record_exchange("p", "Where is sample 4?", "Sample 4 is in rack 4.")
        with anyio.fail_after(120):
            await fire.wait()
        if when == "during":
            await anyio.sleep(0.3)
        result = await ask(conv, "p", "Where is sample 5?")
        result["compaction_running"] = ctx._jobs.running("p")
        await idle(ctx)
        result["method"] = ctx.last_compaction("p").method if ctx.last_compaction("p") else None
    return result


FACTS = (
    "My locker code is 4711.",
    "Sample B7 goes to the incubator after lunch.",
    "The design review is in room 204.",
    "Correction: the design review moved to room 310.",
    "My flight home leaves at 18:45 tomorrow.",
)
QUESTIONS = (
    "What is my locker code?",
    "Tell me a fun fact.",
    "Where does sample B7 go?",
    "What rhymes with bench?",
    "Which room is the design review in?",
    "How do I spell centrifuge?",
    "When does my flight home leave?",
    "Say something encouraging.",
    "What's my locker code again?",
    "What does PPE stand for?",
)
FACT_QUESTIONS = QUESTIONS[::2]
"""The questions about the facts (the recall turns); the others are ordinary turns."""


async def scenario_recall(llm: LlamaCppLLM, recall_budget: int) -> dict:
    from edge.eval import FILLERS

    config = ContextConfig(
        compaction_quiet_s=0,
        timezone=UTC,
        dialogue_budget_bytes=2048,
        compaction_input_budget_bytes=1792,
        recall_budget_bytes=recall_budget,
    )
    ctx = ContextManager(llm, config)
    # the same summary in both runs, without the facts (the worst case for recall)
    ctx.add_hook("pre_compact", lambda request: "The user chatted about lab routines.")
    conv = Conversation(llm, context=ctx, config=ANSWER)
    pid = f"recall-{recall_budget}"
    for fact in FACTS:
        await ctx.record_exchange(pid, fact, "Okay, noted.")
    for user, assistant in FILLERS * 2:
        await ctx.record_exchange(pid, user, assistant)
    ttfts, selects, turns = [], [], []
    async with ctx:
        await idle(ctx)
        await ask(conv, pid, "Hello again.")  # fills the participant's cache
        for question in QUESTIONS:
            await settled(ctx, pid)
            started = time.perf_counter()
            block = ctx.recalled(pid, question)
            selects.append(time.perf_counter() - started)
            stated = ctx.stated(pid, question) is not None
            asked = await ask(conv, pid, question)
            ttfts.append(asked["ttft_s"])
            turns.append(
                {
                    "question": question,
                    "about_a_fact": question in FACT_QUESTIONS,
                    "stated": stated,
                    "recalled": block.text if block else "",
                    "recalled_bytes": len(block.text.encode()) if block else 0,
                    **{
                        k: asked[k]
                        for k in (
                            "answer",
                            "first_reply_s",
                            "ttft_s",
                            "prompt_tokens",
                            "reused_tokens",
                        )
                    },
                }
            )
    facts = sorted(t["first_reply_s"] for t in turns if t["about_a_fact"])
    others = sorted(t["first_reply_s"] for t in turns if not t["about_a_fact"])
    return {
        "ttft_s": sorted(ttfts)[len(ttfts) // 2],
        "ttfts_s": sorted(ttfts),
        "fact_turns_first_reply_p50_s": facts[len(facts) // 2],
        "other_turns_first_reply_p50_s": others[len(others) // 2],
        "fact_turns_told_from_record": sum(t["stated"] for t in turns if t["about_a_fact"]),
        "select_p50_s": sorted(selects)[len(selects) // 2],
        "turns_with_recall": sum(bool(t["recalled"]) for t in turns),
        "queue_wait_s": 0.0,
        "prompt_tokens": sorted(t["prompt_tokens"] for t in turns)[len(turns) // 2],
        "reused_tokens": sorted(t["reused_tokens"] for t in turns)[len(turns) // 2],
        "turns": turns,
    }


async def main(args: argparse.Namespace) -> dict:
    llm = LlamaCppLLM(args.model, n_ctx=4096, temperature=0.0, n_threads=args.threads)
    await llm.load()
    try:
        if args.only_own_compaction:
            return {
                f"own-compaction-{when}": await scenario_own_compaction(llm, when)
                for when in ("during", "after")
            }
        if args.only_recall:
            return paired(
                {
                    "recall-on": await scenario_recall(llm, 320),
                    "recall-off": await scenario_recall(llm, 0),
                }
            )
        results = await scenario_warm_and_backlog(llm)
        results["compacted+rewarm"] = await scenario_after_compaction(llm, True)
        results["compacted-cold"] = await scenario_after_compaction(llm, False)
        for when in ("during", "after"):
            results[f"own-compaction-{when}"] = await scenario_own_compaction(llm, when)
        results["recall-on"] = await scenario_recall(llm, 320)  # the CI profile's budget
        results["recall-off"] = await scenario_recall(llm, 0)
    finally:
        await llm.close()
    return paired(results)


def paired(results: dict) -> dict:
    """Add to ``recall-on`` what recall added on the turns that recalled something: the
    same question's TTFT with recall on minus off (mean and each), and the tokens added."""
    on, off = results["recall-on"]["turns"], results["recall-off"]["turns"]
    pairs = [(a, b) for a, b in zip(on, off, strict=True) if a["recalled"]]
    added = [a["ttft_s"] - b["ttft_s"] for a, b in pairs]
    results["recall-on"]["recalled_turns_added_s"] = added
    results["recall-on"]["recalled_turns_added_mean_s"] = sum(added) / len(added) if added else 0
    results["recall-on"]["recalled_turns_added_tokens"] = [
        (a["prompt_tokens"] - a["reused_tokens"]) - (b["prompt_tokens"] - b["reused_tokens"])
        for a, b in pairs
    ]
    return results


def report(results: dict, args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Conversation TTFT (SmolLM2-135M, CPU)")
    for col in ("scenario", "TTFT ms", "queue wait ms", "prompt tokens", "reused"):
        table.add_column(col)
    for name, r in results.items():
        table.add_row(
            name,
            f"{(r['ttft_s'] or 0) * 1000:.0f}",
            f"{(r['queue_wait_s'] or 0) * 1000:.0f}",
            str(r["prompt_tokens"]),
            str(r["reused_tokens"]),
        )
    Console().print(table)
    if "recall-on" in results and "recall-off" in results:
        on, off = results["recall-on"], results["recall-off"]
        print(
            f"recall: p50 TTFT {on['ttft_s'] * 1000:.0f} ms vs {off['ttft_s'] * 1000:.0f} ms off "
            f"(+{(on['ttft_s'] - off['ttft_s']) * 1000:.0f} ms); selection p50 "
            f"{on['select_p50_s'] * 1000:.2f} ms; {on['turns_with_recall']} of "
            f"{len(on['ttfts_s'])} turns recalled something, adding "
            f"{on['recalled_turns_added_mean_s'] * 1000:.0f} ms on average to those turns "
            f"({on['recalled_turns_added_tokens']} tokens evaluated more)"
        )
        print(
            f"first reply p50: {on['fact_turns_first_reply_p50_s'] * 1000:.0f} ms on the turns "
            f"about a fact ({on['fact_turns_told_from_record']} of 5 told from the record) vs "
            f"{on['other_turns_first_reply_p50_s'] * 1000:.0f} ms on the others"
        )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3))
    ax.bar(list(results), [(r["ttft_s"] or 0) * 1000 for r in results.values()])
    ax.set_ylabel("TTFT (ms)")
    ax.set_title("Conversation TTFT with and without a compaction backlog")
    fig.tight_layout()
    bench = "conversation_ttft"
    if args.only_recall or args.only_own_compaction:
        bench += "_recall" if args.only_recall else "_own_compaction"
    meta = {"threads": args.threads, "model": args.model, "scenarios": results}
    path = write_results(bench, meta, fig)
    Console().print(f"wrote {path} and .png")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--only-recall", action="store_true", help="only the recall scenarios")
    parser.add_argument(
        "--only-own-compaction", action="store_true", help="only the own-compaction scenarios"
    )
    parser.add_argument(
        "--model", help="a GGUF file or a catalogue id (default: the catalogue's default LLM)"
    )
    ns = parser.parse_args()
    report(anyio.run(partial(main, ns)), ns)
