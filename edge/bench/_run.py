"""One ``edge bench`` run: the sweep of settings, each stage at each point, repeated, with
a progress bar; ``--background-load N`` runs every stage idle and again while N other
processes keep a core busy each (the XR app beside the service)."""

from __future__ import annotations

import contextlib
import datetime as dt
import platform
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ._machine import machine_info
from ._records import Figure, Run
from ._stages import LLMCase, installed_whisper, llm_stage, stt_stage, tts_stage, vad_stage
from ._turns import Target, local_service, participant_turns, spoken_turns, typed_turns

Tick = Callable[[str], None]
STAGES = ("vad", "stt", "llm", "tts", "typed", "spoken", "participants")
URL_STAGES = ("typed", "spoken", "participants")
POLICIES = {"adaptive", "fixed"}


@dataclass
class Options:
    """What to measure (``None`` sweeps take the device profile's setting)."""

    profile: str | None = None
    stages: tuple[str, ...] = STAGES
    threads: list[int] | None = None
    ngl: list[int] | None = None
    models: list[str] | None = None
    stt_models: list[str] | None = None
    thread_policy: list[str] | None = None  # "adaptive", "fixed"
    participants: list[int] = field(default_factory=lambda: [2, 4])
    contexts: list[int] = field(default_factory=lambda: [1000, 4000, 8000])
    repetitions: int = 3
    background_load: int = 0
    quick: bool = False
    url: str | None = None
    token: str | None = None

    @classmethod
    def quick_defaults(cls, **kw: Any) -> Options:
        """``--quick``: two repetitions, two context sizes, the profile's own Whisper
        model, two participants at once; under 3 minutes on a 2-core machine."""
        base: dict[str, Any] = dict(participants=[2], contexts=[500, 2000], repetitions=2)
        return cls(quick=True, **{**base, **{k: v for k, v in kw.items() if v is not None}})


@contextlib.contextmanager
def busy_cores(n: int) -> Iterator[None]:
    """``n`` processes each keeping one core busy (a tight Python loop) until exit."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()


class Bench:
    """The stages of one run, in order, for each background load."""

    def __init__(self, opts: Options, console: Console | None = None) -> None:
        self.opts = opts
        self.console = console or Console(stderr=True)
        self.device: Any = None
        if opts.url is None:
            from edge.device import load_device_config

            self.device = load_device_config(opts.profile)
        unknown = set(opts.stages) - set(STAGES) | set(opts.thread_policy or ()) - POLICIES
        if unknown:
            raise ValueError(f"unknown stage or thread policy: {', '.join(sorted(unknown))}")
        self.stages = tuple(s for s in opts.stages if opts.url is None or s in URL_STAGES)
        self.whisper: list[Any] = []
        if "stt" in self.stages:
            names = opts.stt_models or ([self.device.models["stt"].id] if opts.quick else None)
            self.whisper = installed_whisper(names)

    @property
    def loads(self) -> list[int]:
        return [0, self.opts.background_load] if self.opts.background_load else [0]

    def llm_cases(self) -> list[LLMCase]:
        o, d = self.opts, self.device
        own = "adaptive" if d.profile.llm.adaptive_threads else "fixed"
        models: list[str | None] = [*o.models] if o.models else [None]
        return [
            LLMCase(m, t, n, policy == "adaptive")
            for m in models
            for t in (o.threads or [d.threads])
            for n in (o.ngl if o.ngl is not None else [d.gpu_layers])
            for policy in (o.thread_policy or [own])
        ]

    def steps(self) -> int:
        o, r = self.opts, self.opts.repetitions
        per = {
            "vad": r,
            "tts": r,
            "typed": r,
            "spoken": r,
            "stt": r * len(self.whisper) * len(o.threads or [0]),
            "llm": r * (1 + len(o.contexts)) * (len(self.llm_cases()) if self.device else 0),
            "participants": r * len(o.participants),
        }
        return sum(per[s] for s in self.stages) * len(self.loads)

    async def run(self) -> Run:
        started = dt.datetime.now(dt.UTC)
        profile = self.device.profile.name if self.device is not None else None
        machine = await _in_thread(machine_info, profile)
        run_id = f"{started:%Y%m%dT%H%M%S}-{platform.node()[:16]}-{secrets.token_hex(2)}"
        settings = {k: v for k, v in asdict(self.opts).items() if k != "token"}
        run = Run(run_id, started.isoformat(timespec="seconds"), machine, settings)
        with _progress(self.console) as progress:
            task = progress.add_task("edge bench", total=self.steps())

            def tick(what: str) -> None:
                progress.update(task, advance=1, description=what)

            for load in self.loads:
                with busy_cores(load):
                    run.figures += await self._stages(load, tick)
        return run

    async def _stages(self, load: int, tick: Callable[[str], None]) -> list[Figure]:
        o, figs = self.opts, []
        r = o.repetitions
        if "vad" in self.stages:
            figs += await _in_thread(vad_stage, r, tick, load)
        if "stt" in self.stages:
            compute = self.device.profile.audio.stt_compute_type
            for model in self.whisper:
                for t in o.threads or [self.device.stt_threads]:
                    figs += await _in_thread(stt_stage, model, t, compute, r, tick, load)
        if "llm" in self.stages:
            for case in self.llm_cases():
                figs += await llm_stage(case, self.device, r, o.contexts, tick, load)
        if "tts" in self.stages:
            figs += await _in_thread(tts_stage, r, tick, load)
        if any(s in self.stages for s in URL_STAGES):
            figs += await self._turns(load, tick)
        return figs

    async def _turns(self, load: int, tick: Callable[[str], None]) -> list[Figure]:
        if self.opts.url is not None:
            return await self._turns_at(Target(self.opts.url, self.opts.token), load, tick)
        async with local_service(self.opts.profile) as target:
            return await self._turns_at(target, load, tick)

    async def _turns_at(
        self, target: Target, load: int, tick: Callable[[str], None]
    ) -> list[Figure]:
        r, figs = self.opts.repetitions, []
        if "typed" in self.stages:
            figs += await typed_turns(target, r, tick, load)
        if "spoken" in self.stages:
            figs += await spoken_turns(target, r, tick, load)
        if "participants" in self.stages:
            for n in self.opts.participants:
                figs += await participant_turns(target, n, r, tick, load)
        return figs


async def _in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    import anyio

    return await anyio.to_thread.run_sync(lambda: fn(*args))


@contextlib.contextmanager
def _progress(console: Console) -> Iterator[Progress]:
    progress = Progress(
        TextColumn("[bold]{task.description:<28}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    with progress:
        yield progress
