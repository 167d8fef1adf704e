"""``edge device``: which profile applies, the detected hardware, the calibration, and the
budgets derived from them with the figures each came from."""

from __future__ import annotations

import argparse
import json
from typing import Any

import anyio
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from edge.catalogue import CatalogueError, ModelMissingError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "device", help="show the device profile, detected hardware and derived budgets"
    )
    p.add_argument("--profile", metavar="NAME", help="profile name or TOML path (else detected)")
    p.add_argument(
        "--calibrate",
        action="store_true",
        help="measure the profile's LLM on this machine and store the result",
    )
    p.add_argument("--force", action="store_true", help="with --calibrate: measure again")
    p.add_argument(
        "--no-detect",
        action="store_true",
        help="use the profile's own figures (no hardware limits, no calibration)",
    )
    p.add_argument("--all", action="store_true", help="budgets of every profile, on its figures")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from edge.device import (
        CalibrationError,
        ProfileError,
        calibrate_device,
        derive_for_profile,
        load_device_config,
        load_profiles,
    )

    console = Console()
    try:
        if args.all:
            rows = {
                name: derive_for_profile(profile).model_dump(mode="json")
                for name, profile in load_profiles().items()
            }
            if args.json:
                print(json.dumps(rows, indent=2))
            else:
                Console(width=max(console.width, 150)).print(_all_table(rows))
            return 0
        config = load_device_config(args.profile, detect=not args.no_detect)
        if args.calibrate:
            if not args.json:
                console.print(f"calibrating {config.models['llm'].id} ...")
            calibration, reused = anyio.run(lambda: calibrate_device(config, force=args.force))
            if not args.json:
                how = (
                    "reused the stored calibration (--force measures again)"
                    if reused
                    else ("measured and stored")
                )
                console.print(
                    f"{how}: prompt {calibration.prompt_tokens_per_s:.0f} tokens/s, generation "
                    f"{calibration.generation_tokens_per_s:.1f} tokens/s, "
                    f"{calibration.text_bytes_per_token:.2f} bytes/token, KV "
                    f"{calibration.kv_bytes_per_token:,} bytes/token, load "
                    f"{calibration.load_s:.2f} s; best of {calibration.repeats} runs, slowest "
                    f"{calibration.slowest_prompt_tokens_per_s or 0:.0f} / "
                    f"{calibration.slowest_generation_tokens_per_s or 0:.1f} tokens/s "
                    f"(CPU share {calibration.cpu_share or 0:.0%}, load average before "
                    f"{calibration.load_average or 0:.1f})"
                )
            config = load_device_config(args.profile, calibration=calibration)
    except (ProfileError, CatalogueError, CalibrationError) as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        return 2
    except ModelMissingError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        return 1
    from edge.device import placement

    where = placement(config)
    if args.json:
        print(json.dumps({**config.summary(), "placement": where.model_dump()}, indent=2))
        return 0
    _print(console, config)
    _print_placement(console, where)
    return 0


def _print_placement(console: Console, where: Any) -> None:
    t = Table(title="Where each model runs", show_header=False)
    for role, text in where.rows().items():
        t.add_row(role, text)
    console.print(t)
    for warning in where.warnings:
        console.print(f"[bold red]warning:[/] {escape(warning)}")


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def _print(console: Console, config: Any) -> None:
    console.print(_profile_table(config))
    if config.hardware is not None:
        console.print(_hardware_table(config.hardware))
    console.print(_speed_table(config))
    console.print(_budget_table(config.budgets))
    console.print(_implied_table(config.budgets))
    for note in [*config.notes, *config.budgets.warnings]:
        console.print(f"[yellow]note:[/] {escape(note)}")


def _profile_table(config: Any) -> Table:
    prof = config.profile
    t = Table(title=f"Profile {prof.name}", show_header=False)
    t.add_column(no_wrap=True)
    t.add_column(overflow="fold")  # a long path folds whole, never cut off
    t.add_row("chosen by", f"{config.choice.how}: {config.choice.reason}")
    t.add_row("description", prof.description)
    d = prof.device
    t.add_row("device", f"{d.vendor} {d.model} ({d.arch}, {d.accelerator})")
    t.add_row("memory", f"{d.memory_gib:g} GiB, {d.service_memory_gib:g} GiB for the service")
    t.add_row(
        "cores / threads", f"{d.cpu_cores} / {config.threads} (gpu layers {config.gpu_layers})"
    )
    for role, entry in config.models.items():  # the id on a row of its own: never wrapped
        path = config.model_paths[role]
        t.add_row(f"{role} model", entry.id)
        t.add_row(f"{role} file", escape(path) if path else "[red]not installed[/]")
    t.add_row(
        "latency targets",
        f"cold {prof.latency.cold_ttft_s:g} s, warm {prof.latency.warm_ttft_s:g} s",
    )
    a = prof.audio
    t.add_row(
        "audio",
        f"{a.input_sample_rate} Hz in, {a.frame_ms} ms frames, endpoint after "
        f"{a.endpoint_silence_ms} ms ({a.endpoint_min_silence_ms}–{a.endpoint_max_silence_ms} "
        f"adaptive), STT {a.stt_compute_type} beam {a.stt_beam_size}"
        + (f" on {a.stt_threads} thread{'s' * (a.stt_threads > 1)}" if a.stt_threads else ""),
    )
    return t


def _hardware_table(hw: Any) -> Table:
    h = Table(title="Detected hardware", show_header=False)
    h.add_row("arch", hw.arch)
    h.add_row("memory", f"{hw.memory_bytes / 2**30:.2f} GiB — {escape(hw.memory_source)}")
    h.add_row("cores", f"{hw.cpus} — {escape(hw.cpus_source)}")
    h.add_row("CUDA", f"{'yes' if hw.cuda else 'no'} — {escape(hw.cuda_source)}")
    h.add_row("board / CPU", escape(f"{hw.board or '-'} / {hw.cpu_model or '-'}"))
    return h


def _speed_table(config: Any) -> Table:
    from edge.device import Speed

    prof = config.profile
    c = Table(title="Model speed and sizes")
    for col in ("figure", "profile expects", "calibration", "used"):
        c.add_column(col)
    cal, exp, inp = config.calibration, prof.expected, config.inputs
    for name, fmt in Speed.formats().items():
        c.add_row(
            name,
            fmt.format(getattr(exp, name)),
            fmt.format(getattr(cal, name)) if cal else "-",
            fmt.format(getattr(inp, name)),
        )
    c.caption = escape(
        f"calibration: {config.calibration_note}; profile figures: {exp.source or '-'}"
    )
    return c


def _budget_table(b: Any) -> Table:
    bt = Table(title=f"Derived budgets (bound by {b.bound_by})")
    for col in ("budget", "value", "from"):
        bt.add_column(col)
    bt.add_row("(unit)", "", escape(b.explain["unit"]))
    for name in (
        "dialogue_budget_bytes",
        "topic_budget_bytes",
        "compaction_input_budget_bytes",
        "router_context_budget_bytes",
    ):
        bt.add_row(name, f"{getattr(b, name):,} B", escape(b.explain[name]))
    bt.add_row(
        "per_participant_kv_bytes",
        _mib(b.per_participant_kv_bytes),
        escape(b.explain["per_participant_kv_bytes"]),
    )
    bt.add_row(
        "warm_participants", str(b.warm_participants), escape(b.explain["warm_participants"])
    )
    bt.add_row(
        "kv_cache_budget_bytes",
        _mib(b.kv_cache_budget_bytes),
        escape(b.explain["kv_cache_budget_bytes"]),
    )
    bt.add_row(
        "sequence_window_tokens",
        str(b.sequence_window_tokens),
        escape(b.explain["sequence_window_tokens"]),
    )
    bt.add_row("llm_sequences", str(b.llm_sequences), escape(b.explain["llm_sequences"]))
    return bt


def _implied_table(b: Any) -> Table:
    f = Table(title="What the budgets imply", show_header=False)
    f.add_row(
        "context window",
        f"{b.context_window} tokens, {b.reserved_output_tokens} reserved for output",
    )
    f.add_row(
        "largest prompts",
        f"answer {b.answer_prompt_tokens_max}, routing {b.routing_prompt_tokens_max}, "
        f"compaction {b.compaction_prompt_tokens_max} tokens",
    )
    f.add_row(
        "expected cold TTFT",
        f"{b.expected_cold_ttft_s:.2f} s steady, "
        f"{b.expected_cold_ttft_full_s:.2f} s all sections full",
    )
    f.add_row("expected warm TTFT", f"{b.expected_warm_ttft_s:.2f} s")
    f.add_row("one compaction", f"{b.expected_compaction_s:.1f} s (background, preemptible)")
    f.add_row("memory left after models", _mib(b.memory_left_bytes))
    return f


def _all_table(rows: dict[str, dict[str, Any]]) -> Table:
    t = Table(title="Budgets of every profile (profile figures, no calibration)")
    cols = (
        ("dialogue", "dialogue_budget_bytes"),
        ("topic", "topic_budget_bytes"),
        ("compaction in", "compaction_input_budget_bytes"),
        ("router", "router_context_budget_bytes"),
        ("KV/participant MiB", "per_participant_kv_bytes"),
        ("warm", "warm_participants"),
        ("sequences", "llm_sequences"),
        ("KV budget MiB", "kv_cache_budget_bytes"),
        ("cold s", "expected_cold_ttft_s"),
        ("warm s", "expected_warm_ttft_s"),
        ("bound by", "bound_by"),
    )
    t.add_column("profile")
    for label, _ in cols:
        t.add_column(label, justify="right")
    for name, b in rows.items():
        cells = []
        for _, key in cols:
            v = b[key]
            if key.endswith("kv_bytes") or key == "kv_cache_budget_bytes":
                v = f"{v / 2**20:,.0f}"
            cells.append(str(v))
        t.add_row(name, *cells)
    return t
