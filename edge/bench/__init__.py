"""``edge bench``: how fast each stage and a whole turn are on this machine, in the style of
llama-bench (sweeps, mean ± sd over repetitions, markdown / csv / json / jsonl / sqlite),
with the machine recorded so runs from many devices can be compared (``compare``) and
plotted (``--report``). Shipped in the package: it needs no checkout.
"""

from ._compare import compare, pick
from ._machine import host_speed, machine_info, package_versions
from ._output import FORMATS, markdown, read_runs, render, write_sqlite
from ._records import Figure, Run, fmt_mean_sd, fmt_value
from ._report import figures_png, write_report
from ._run import STAGES, Bench, Options, busy_cores
from ._speech import (
    FRAME_S,
    QUESTION,
    VOICED_DB,
    last_voiced_sample,
    speech_end_at,
    speech_end_offset_s,
    spoken_question,
    voiced_span,
)
from ._stages import LLMCase, context_of, llm_stage, predicted_ttft, ttft_pair

__all__ = [
    "FORMATS",
    "FRAME_S",
    "QUESTION",
    "STAGES",
    "VOICED_DB",
    "Bench",
    "Figure",
    "LLMCase",
    "Options",
    "Run",
    "busy_cores",
    "compare",
    "context_of",
    "figures_png",
    "fmt_mean_sd",
    "fmt_value",
    "host_speed",
    "last_voiced_sample",
    "llm_stage",
    "machine_info",
    "markdown",
    "package_versions",
    "pick",
    "predicted_ttft",
    "read_runs",
    "render",
    "speech_end_at",
    "speech_end_offset_s",
    "spoken_question",
    "ttft_pair",
    "voiced_span",
    "write_report",
    "write_sqlite",
]
