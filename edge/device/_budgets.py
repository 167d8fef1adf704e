"""Byte budgets sized to the device: the one function that derives them.

The conversation spec sets budgets in UTF-8 bytes of rendered text (8,000 dialogue, 4,000
per topic, 12,000 per compaction request), which suit a GPU server. On a device the right
figures follow from how many tokens the model may see (context window) and how fast it
reads them (prompt evaluation speed), converted to bytes with the measured bytes per
token, and from the memory left for per-participant KV caches. :func:`derive_budgets`
does that; see its docstring for the formula.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from edge.conversation import COMPACTION_RESERVE_BYTES, least_compaction_input

from ._profile import BudgetOverrides, ProfileError, Speed

# Text in a real conversation may tokenise worse than the calibration text (names,
# numbers, code): bytes are converted to tokens as if each token carried only this share
# of the measured bytes per token.
TOKEN_MARGIN = 0.85
# Steady state of a compacted section: its summary (at most a quarter of the budget) plus
# at most half a budget of uncompacted entries, since compaction starts beyond half.
# Latency targets are sized at this fill; the context window at full budgets (worst case,
# when compaction is pending the section is clipped to its budget).
STEADY_FILL = 0.75
# Shares of the context pool: dialogue gets two units, each topic one, router history one
# (the router needs the last few exchanges to resolve follow-ups, not the whole dialogue).
DIALOGUE_UNITS = 2.0
TOPIC_UNITS = 1.0
ROUTER_UNITS = 1.0
# The current time line that closes the context message.
TIME_LINE_TOKENS = 16
# Share of the memory left after models, runtime and the active context that cached
# participant KV states may use (the rest is headroom for allocator slack and audio).
KV_MEMORY_SHARE = 0.5
# Python, onnxruntime, CTranslate2 and llama.cpp compute buffers, beyond the weights.
DEFAULT_RUNTIME_OVERHEAD_BYTES = 512 * 2**20
# Sections smaller than this hold too little to be useful: reject instead.
MIN_DIALOGUE_BYTES = 1024
MIN_TOPIC_BYTES = 512
ROUND_BYTES = 64
# A batched sequence's window: the largest prompt the budgets make (with its output) times
# this, for a request longer than the profile's typical one and text that tokenises worse
# than estimated; rounded up to whole blocks of tokens.
SEQUENCE_WINDOW_HEADROOM = 1.5
SEQUENCE_WINDOW_ROUND = 256
# The recalled block (earlier statements brought back for a request): at most this many
# units, and none when what is left is smaller than the least useful block.
RECALL_UNITS = 0.5
MIN_RECALL_BYTES = 128


class BudgetError(ProfileError):
    """The figures cannot yield budgets that satisfy the rules; names the figure to change."""


class BudgetInputs(Speed):
    """Every figure the derivation uses (the model's :class:`Speed` among them);
    ``sources`` says where each came from."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    context_window: int = Field(gt=0)
    reserved_output_tokens: int = Field(gt=0)
    prompt_overhead_tokens: int = Field(ge=0)
    routing_overhead_tokens: int = Field(ge=0)
    compaction_overhead_tokens: int = Field(ge=0)
    request_tokens: int = Field(gt=0)
    typical_exchange_bytes: int = Field(gt=0)
    context_topics: int = Field(ge=0)
    max_participants: int = Field(ge=1)
    max_sequences: int = Field(default=1, ge=1)
    memory_bytes: int = Field(gt=0)
    model_bytes: int = Field(ge=0)
    runtime_overhead_bytes: int = Field(default=DEFAULT_RUNTIME_OVERHEAD_BYTES, ge=0)
    cold_ttft_s: float = Field(gt=0)
    warm_ttft_s: float = Field(gt=0)
    overrides: BudgetOverrides = BudgetOverrides()
    sources: dict[str, str] = Field(default_factory=dict)
    strict_latency: bool = Field(
        default=True,
        description="reject when the latency targets cannot be met; else warn and use the "
        "minimum section sizes (for measured speeds: a slow machine still starts)",
    )

    @property
    def bytes_per_token(self) -> float:
        """Bytes per token with the margin for text that tokenises worse."""
        return self.text_bytes_per_token * TOKEN_MARGIN

    @property
    def fixed_answer(self) -> int:
        return self.prompt_overhead_tokens + self.request_tokens

    @property
    def fixed_routing(self) -> int:
        return self.routing_overhead_tokens + self.request_tokens

    def tokens(self, nbytes: float) -> int:
        """Tokens of ``nbytes`` of text, with the margin."""
        return math.ceil(nbytes / self.bytes_per_token)

    def source(self, name: str) -> str:
        """`` [where the figure came from]`` for an explanation line."""
        return f" [{self.sources[name]}]" if name in self.sources else ""


class Budgets(BaseModel):
    """Derived budgets, the figures they imply, and how each was reached."""

    model_config = ConfigDict(frozen=True)

    dialogue_budget_bytes: int
    topic_budget_bytes: int
    compaction_input_budget_bytes: int
    router_context_budget_bytes: int
    recall_budget_bytes: int = 0
    per_participant_kv_bytes: int
    kv_cache_budget_bytes: int
    warm_participants: int
    llm_sequences: int = 1
    sequence_window_tokens: int
    context_window: int
    reserved_output_tokens: int
    # what the budgets imply
    answer_prompt_tokens_max: int
    routing_prompt_tokens_max: int
    compaction_prompt_tokens_max: int
    expected_cold_ttft_s: float
    expected_cold_ttft_full_s: float
    expected_warm_ttft_s: float
    expected_compaction_s: float
    memory_left_bytes: int
    bound_by: str  # "latency", "context window", "overrides" or "minimum sizes"
    explain: dict[str, str]
    warnings: list[str] = Field(default_factory=list)


def _down(value: float) -> int:
    return max(0, int(value // ROUND_BYTES) * ROUND_BYTES)


def _up(value: float) -> int:
    return int(math.ceil(value / ROUND_BYTES) * ROUND_BYTES)


# -- the steps: each returns a small frozen result with its own explanation lines -----------


@dataclass(frozen=True)
class Sections:
    """Steps 1-3: the section budgets and the unit they are cut from."""

    dialogue: int
    topic: int
    router: int
    bound_by: str
    unit_bytes: float
    explain: dict[str, str]
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Prompts:
    """The largest answer and routing prompts the section budgets allow (tokens)."""

    answer_tokens: int
    routing_tokens: int


@dataclass(frozen=True)
class Compaction:
    """Step 4: the compaction input budget and the prompt it makes."""

    budget: int
    prompt_tokens: int
    summary_tokens: int
    explain: dict[str, str]


@dataclass(frozen=True)
class Latency:
    """Step 5: the expected times the budgets imply."""

    cold_s: float
    cold_full_s: float
    warm_s: float
    compaction_s: float
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Recall:
    """Step 5b: the recalled block's budget."""

    budget: int
    explain: dict[str, str]


@dataclass(frozen=True)
class Memory:
    """Step 6: what the memory left holds of participants' cached KV states."""

    left: int
    per_participant: int
    warm: int
    kv_budget: int
    explain: dict[str, str] = field(default_factory=dict)
    sequences: int = 1
    window: int = 0


def _units(x: BudgetInputs) -> tuple[float, float]:
    """Steps 1-2: the unit (tokens) the context window and the cold target allow."""
    n = x.context_topics
    window_tokens = x.context_window - x.reserved_output_tokens - x.fixed_answer
    if window_tokens <= 0:
        raise BudgetError(
            f"llm.context_window ({x.context_window}) leaves no room for context after the "
            f"reserved output ({x.reserved_output_tokens}) and the fixed prompt "
            f"({x.fixed_answer} tokens): raise llm.context_window or lower "
            "llm.reserved_output_tokens"
        )
    # one token per section of slack for rounding bytes up to whole tokens
    unit_w = (window_tokens - (1 + n)) / (DIALOGUE_UNITS + n * TOPIC_UNITS)
    cold_eval_tokens = (x.cold_ttft_s - 1 / x.generation_tokens_per_s) * x.prompt_tokens_per_s
    latency_tokens = cold_eval_tokens - x.fixed_answer - x.fixed_routing
    unit_l = latency_tokens / (STEADY_FILL * (DIALOGUE_UNITS + n * TOPIC_UNITS + ROUTER_UNITS))
    return unit_w, unit_l


def _unit_explanation(
    x: BudgetInputs, unit_w: float, unit_l: float, unit_bytes: float, bound_by: str
) -> str:
    n, s = x.context_topics, x.source
    return (
        f"unit = min(window {unit_w:.0f}, latency {unit_l:.0f}) tokens x "
        f"{x.bytes_per_token:.2f} B/token = {unit_bytes:.0f} B (bound by {bound_by})"
        f"; window: ({x.context_window}{s('context_window')} - {x.reserved_output_tokens}"
        f" out - {x.fixed_answer} fixed) / (2 + {n}); latency: (({x.cold_ttft_s:g} s"
        f"{s('cold_ttft_s')} - 1/{x.generation_tokens_per_s:.0f}) x "
        f"{x.prompt_tokens_per_s:.0f} tok/s{s('prompt_tokens_per_s')} - {x.fixed_answer} - "
        f"{x.fixed_routing}) / (0.75 x (3 + {n})); b = {x.text_bytes_per_token:.2f}"
        f"{s('text_bytes_per_token')} x {TOKEN_MARGIN}"
    )


def _sections_too_small(x: BudgetInputs, dialogue: int, topic: int, bound_by: str) -> None:
    """Reject sections under the minimum sizes, naming the figure that binds them."""
    if bound_by == "latency":
        raise BudgetError(
            f"latency.cold_ttft_s ({x.cold_ttft_s:g} s) at {x.prompt_tokens_per_s:.0f} prompt "
            f"tokens/s allows only {dialogue} bytes of dialogue and {topic} per topic "
            f"(minimum {MIN_DIALOGUE_BYTES} / {MIN_TOPIC_BYTES}): raise latency.cold_ttft_s "
            f"to at least {_cold_target_for_minimum(x):.1f} s, lower llm.context_topics or "
            "llm.prompt_overhead_tokens, or choose a faster model"
        )
    which = "overrides" if bound_by == "overrides" else "llm.context_window"
    raise BudgetError(
        f"{which} leave only {dialogue} bytes of dialogue and {topic} per topic "
        f"(minimum {MIN_DIALOGUE_BYTES} / {MIN_TOPIC_BYTES}): raise llm.context_window "
        f"({x.context_window}) or lower llm.reserved_output_tokens "
        f"({x.reserved_output_tokens})"
    )


def _minimum_unit_bytes(x: BudgetInputs) -> float:
    """The smallest unit (bytes) that keeps every section at its minimum size."""
    return max(MIN_DIALOGUE_BYTES / DIALOGUE_UNITS, MIN_TOPIC_BYTES if x.context_topics else 0)


def _cold_target_for_minimum(x: BudgetInputs) -> float:
    """The cold target (s) that would allow the minimum section sizes."""
    n = x.context_topics
    need_tokens = (
        _minimum_unit_bytes(x)
        / x.bytes_per_token
        * STEADY_FILL
        * (DIALOGUE_UNITS + n * TOPIC_UNITS + ROUTER_UNITS)
        + x.fixed_answer
        + x.fixed_routing
    )
    return need_tokens / x.prompt_tokens_per_s + 1 / x.generation_tokens_per_s


def _sections(x: BudgetInputs) -> Sections:
    """Steps 1-3: dialogue 2 units, each topic 1, router history 1 (or the overrides)."""
    n, ov, b = x.context_topics, x.overrides, x.bytes_per_token
    unit_w, unit_l = _units(x)
    bound_by = "latency" if unit_l < unit_w else "context window"
    unit_bytes = min(unit_w, unit_l) * b
    dialogue = ov.dialogue_budget_bytes or _down(DIALOGUE_UNITS * unit_bytes)
    topic = ov.topic_budget_bytes or _down(TOPIC_UNITS * unit_bytes)
    router = (
        ov.router_context_budget_bytes
        if ov.router_context_budget_bytes is not None
        else _down(ROUTER_UNITS * unit_bytes)
    )
    if ov.dialogue_budget_bytes or ov.topic_budget_bytes or ov.router_context_budget_bytes:
        bound_by = "overrides"
    too_small = dialogue < MIN_DIALOGUE_BYTES or (n and topic < MIN_TOPIC_BYTES)
    floor_bytes = _minimum_unit_bytes(x)
    warnings: tuple[str, ...] = ()
    if too_small and bound_by == "latency" and not x.strict_latency and floor_bytes / b <= unit_w:
        warnings = (
            f"latency.cold_ttft_s ({x.cold_ttft_s:g} s) cannot be met at the measured "
            f"{x.prompt_tokens_per_s:.0f} prompt tokens/s: using the minimum section budgets; "
            f"raise latency.cold_ttft_s to at least {_cold_target_for_minimum(x):.1f} s or "
            "choose a faster model",
        )
        unit_bytes = floor_bytes
        dialogue = _up(DIALOGUE_UNITS * floor_bytes)
        topic = _up(TOPIC_UNITS * floor_bytes)
        router = _up(ROUTER_UNITS * floor_bytes)
        bound_by = "minimum sizes"
    elif too_small:
        _sections_too_small(x, dialogue, topic, bound_by)
    explain = {
        "unit": _unit_explanation(x, unit_w, unit_l, unit_bytes, bound_by),
        "dialogue_budget_bytes": "override" if ov.dialogue_budget_bytes else "2 units",
        "topic_budget_bytes": "override" if ov.topic_budget_bytes else "1 unit",
        "router_context_budget_bytes": "override"
        if ov.router_context_budget_bytes is not None
        else "1 unit",
    }
    return Sections(dialogue, topic, router, bound_by, unit_bytes, explain, warnings)


def _prompts(x: BudgetInputs, sec: Sections) -> Prompts:
    """The largest prompts the sections make; both must fit the context window."""
    n = x.context_topics
    answer_tokens = x.fixed_answer + x.tokens(sec.dialogue) + n * x.tokens(sec.topic)
    if answer_tokens + x.reserved_output_tokens > x.context_window:
        raise BudgetError(
            f"budgets.dialogue_budget_bytes ({sec.dialogue}) and budgets.topic_budget_bytes "
            f"({sec.topic}) x {n} topics need {answer_tokens} prompt tokens plus "
            f"{x.reserved_output_tokens} reserved output, more than llm.context_window "
            f"({x.context_window}): lower the overrides or raise llm.context_window"
        )
    routing_tokens = x.fixed_routing + x.tokens(sec.router)
    if routing_tokens + 8 > x.context_window:
        raise BudgetError(
            f"budgets.router_context_budget_bytes ({sec.router}) needs {routing_tokens} tokens, "
            f"more than llm.context_window ({x.context_window}): lower it"
        )
    return Prompts(answer_tokens, routing_tokens)


def _compaction(x: BudgetInputs, sec: Sections) -> Compaction:
    """Step 4: 3/4 of the largest section + 256, capped by the window, at least the
    spec's minimum of half the largest section + 256."""
    ov = x.overrides
    largest = max(sec.dialogue, sec.topic if x.context_topics else 0)
    minimum = least_compaction_input(largest)  # the spec's rule, the manager's check
    summary_tokens = x.tokens(largest / 4)
    cap = _down(
        (x.context_window - x.compaction_overhead_tokens - summary_tokens) * x.bytes_per_token
    )
    natural = _up(0.75 * largest + COMPACTION_RESERVE_BYTES)
    budget = ov.compaction_input_budget_bytes or min(natural, cap)
    if budget < minimum:
        figure = (
            "budgets.compaction_input_budget_bytes"
            if ov.compaction_input_budget_bytes
            else "llm.context_window"
        )
        raise BudgetError(
            f"{figure}: the compaction input budget ({budget} bytes) is below the spec's "
            f"minimum of half the largest section budget plus {COMPACTION_RESERVE_BYTES} "
            f"({minimum} bytes); "
            "raise it or lower the section budgets"
        )
    prompt_tokens = x.compaction_overhead_tokens + x.tokens(budget) + summary_tokens
    if prompt_tokens > x.context_window:
        raise BudgetError(
            f"budgets.compaction_input_budget_bytes ({budget}) needs {prompt_tokens} "
            f"tokens with its summary, more than llm.context_window ({x.context_window})"
        )
    line = (
        "override"
        if ov.compaction_input_budget_bytes
        else f"min(3/4 x {largest} + {COMPACTION_RESERVE_BYTES} = {natural}, window cap {cap}); "
        f"spec minimum {minimum}"
    )
    return Compaction(
        budget, prompt_tokens, summary_tokens, {"compaction_input_budget_bytes": line}
    )


def _latency(x: BudgetInputs, sec: Sections, prompts: Prompts, comp: Compaction) -> Latency:
    """Step 5: the expected cold and warm times; the warm target must be met."""
    n, tok, p = x.context_topics, x.tokens, x.prompt_tokens_per_s
    first_token_s = 1 / x.generation_tokens_per_s
    steady_tokens = (
        x.fixed_answer
        + x.fixed_routing
        + STEADY_FILL * (tok(sec.dialogue) + n * tok(sec.topic) + tok(sec.router))
    )
    cold_s = steady_tokens / p + first_token_s
    cold_full_s = (prompts.answer_tokens + prompts.routing_tokens) / p + first_token_s
    warm_tokens = 2 * tok(x.typical_exchange_bytes) + TIME_LINE_TOKENS
    warm_s = warm_tokens / p + first_token_s
    warnings: list[str] = []
    if warm_s > x.warm_ttft_s and not x.strict_latency:
        warnings.append(
            f"expected warm TTFT {warm_s:.2f} s exceeds the {x.warm_ttft_s:g} s target at "
            f"{p:.0f} prompt tokens/s"
        )
    elif warm_s > x.warm_ttft_s:
        raise BudgetError(
            f"latency.warm_ttft_s ({x.warm_ttft_s:g} s) is below the expected {warm_s:.2f} s "
            f"({warm_tokens} new tokens per turn at {p:.0f} tokens/s): raise "
            "latency.warm_ttft_s, lower llm.typical_exchange_bytes, or choose a faster model"
        )
    if cold_s > x.cold_ttft_s * 1.001:
        why = "budget overrides" if sec.bound_by == "overrides" else "the minimum section sizes"
        warnings.append(
            f"expected cold TTFT {cold_s:.2f} s exceeds the {x.cold_ttft_s:g} s target "
            f"because of {why}"
        )
    compaction_s = (
        x.compaction_overhead_tokens + tok(comp.budget)
    ) / p + comp.summary_tokens / x.generation_tokens_per_s
    return Latency(cold_s, cold_full_s, warm_s, compaction_s, tuple(warnings))


def recall_budget(
    x: BudgetInputs, unit_bytes: float, warm_s: float, window_room_bytes: float
) -> tuple[int, str]:
    """Step 5b: the recalled block's budget and how it was reached.

    The block follows the cached prompt prefix, so on a turn that recalls something its
    tokens are evaluated fresh: it gets what the warm-TTFT target leaves after a turn's
    new tokens, ``(warm_ttft - expected warm) * P * b`` bytes, at most half a unit and what
    the context window has left, rounded down to 64 bytes; none below 128 bytes.
    """
    b = x.bytes_per_token
    headroom = max(x.warm_ttft_s - warm_s, 0.0) * x.prompt_tokens_per_s * b
    value = _down(min(RECALL_UNITS * unit_bytes, headroom, window_room_bytes))
    why = (
        f"min({RECALL_UNITS} unit = {RECALL_UNITS * unit_bytes:.0f}, warm headroom "
        f"({x.warm_ttft_s:g} - {warm_s:.2f} s) x {x.prompt_tokens_per_s:.0f} tok/s x "
        f"{b:.2f} B/token = {headroom:.0f}, window room {window_room_bytes:.0f}) B"
    )
    if value < MIN_RECALL_BYTES:
        return 0, why + f"; under {MIN_RECALL_BYTES} B: recall off"
    return value, why


def _recall(x: BudgetInputs, sec: Sections, prompts: Prompts, lat: Latency) -> Recall:
    """Step 5b (:func:`recall_budget`): the recalled block, part of the answer prompt."""
    room = x.context_window - x.reserved_output_tokens - prompts.answer_tokens
    budget, why = recall_budget(x, sec.unit_bytes, lat.warm_s, room * x.bytes_per_token)
    return Recall(budget, {"recall_budget_bytes": why})


# the order ``Budgets.explain`` lists its lines in
_EXPLAIN_ORDER = (
    "unit",
    "dialogue_budget_bytes",
    "topic_budget_bytes",
    "recall_budget_bytes",
    "router_context_budget_bytes",
    "compaction_input_budget_bytes",
    "per_participant_kv_bytes",
    "warm_participants",
    "kv_cache_budget_bytes",
    "sequence_window_tokens",
    "llm_sequences",
)


def _memory(x: BudgetInputs, prompts: Prompts, comp: Compaction) -> Memory:
    """Step 6: the memory left after models, runtime and the active context; the share
    of it cached participants' KV states may use."""
    ov = x.overrides
    active_kv = x.context_window * x.kv_bytes_per_token
    left = x.memory_bytes - x.model_bytes - x.runtime_overhead_bytes - active_kv
    if left <= 0:
        raise BudgetError(
            f"device.service_memory_gib ({x.memory_bytes / 2**30:.2f} GiB) does not hold the "
            f"models ({x.model_bytes / 2**20:.0f} MiB), the runtime "
            f"({x.runtime_overhead_bytes / 2**20:.0f} MiB) and the KV cache of the context "
            f"window ({active_kv / 2**20:.0f} MiB): raise it, lower llm.context_window or "
            "choose smaller models"
        )
    per_participant = (
        prompts.answer_tokens + prompts.routing_tokens
    ) * x.kv_bytes_per_token + 2 * x.state_overhead_bytes
    fit = int(left * KV_MEMORY_SHARE // per_participant)
    warm = (
        ov.warm_participants if ov.warm_participants is not None else min(x.max_participants, fit)
    )
    kv_budget = (
        ov.kv_cache_budget_bytes
        if ov.kv_cache_budget_bytes is not None
        else (warm * per_participant)
    )
    if warm < 1 and ov.warm_participants is None:
        raise BudgetError(
            f"device.service_memory_gib leaves {left / 2**20:.0f} MiB after models, runtime and "
            f"context; one participant's cached KV needs {per_participant / 2**20:.0f} MiB at "
            f"{x.kv_bytes_per_token} bytes/token, over the {KV_MEMORY_SHARE:.0%} share: raise "
            "device.service_memory_gib or lower llm.context_window / the budgets"
        )
    if kv_budget > left:
        raise BudgetError(
            f"budgets.kv_cache_budget_bytes / warm_participants ({kv_budget / 2**20:.0f} MiB) "
            f"exceed the {left / 2**20:.0f} MiB left after models, runtime and context"
        )
    s = x.source
    explain = {
        "per_participant_kv_bytes": f"({prompts.answer_tokens} answer + "
        f"{prompts.routing_tokens} routing) tokens x {x.kv_bytes_per_token} "
        f"B/token{s('kv_bytes_per_token')} + 2 states x {x.state_overhead_bytes} B fixed",
        "warm_participants": "override"
        if ov.warm_participants is not None
        else f"min({x.max_participants} max, {fit} fit in {KV_MEMORY_SHARE:.0%} of "
        f"{left / 2**20:.0f} MiB left = {x.memory_bytes / 2**20:.0f}{s('memory_bytes')} - "
        f"{x.model_bytes / 2**20:.0f} models - {x.runtime_overhead_bytes / 2**20:.0f} runtime"
        f" - {active_kv / 2**20:.0f} active KV MiB)",
        "kv_cache_budget_bytes": "override"
        if ov.kv_cache_budget_bytes is not None
        else "warm_participants x per_participant_kv_bytes",
    }
    window, explain["sequence_window_tokens"] = _sequence_window(x, prompts, comp)
    sequences, explain["llm_sequences"] = _sequences(x, left - kv_budget, window)
    return Memory(left, per_participant, warm, kv_budget, explain, sequences, window)


def _sequence_window(x: BudgetInputs, prompts: Prompts, comp: Compaction) -> tuple[int, str]:
    """Step 7a: the window of one batched sequence: the largest prompt the budgets make,
    with its output, and headroom (a sequence's KV is resident from the start, so a
    whole context window per sequence would cost far more memory than the budgets use)."""
    largest = max(
        prompts.answer_tokens + x.reserved_output_tokens,
        prompts.routing_tokens + 8,
        comp.prompt_tokens,
    )
    block = SEQUENCE_WINDOW_ROUND
    window = min(x.context_window, math.ceil(largest * SEQUENCE_WINDOW_HEADROOM / block) * block)
    return window, (
        f"min({x.context_window} context window, {largest} tokens (largest prompt: answer "
        f"{prompts.answer_tokens} + {x.reserved_output_tokens} out, routing "
        f"{prompts.routing_tokens}, compaction {comp.prompt_tokens}) x "
        f"{SEQUENCE_WINDOW_HEADROOM:g}, rounded up to {block})"
    )


def _sequences(x: BudgetInputs, spare: int, window: int) -> tuple[int, str]:
    """Step 7b: concurrent sequences (continuous batching). Each sequence beyond the first
    holds the KV of another sequence window, paid from what the cached states left."""
    window_kv = window * x.kv_bytes_per_token
    fit = 1 + max(0, spare) // window_kv
    n = max(1, min(x.max_sequences, fit))
    return n, (
        f"min({x.max_sequences} max_sequences, 1 + floor({spare / 2**20:.0f} MiB left after "
        f"the KV cache budget / {window_kv / 2**20:.0f} MiB per sequence = "
        f"{window} tokens x {x.kv_bytes_per_token} B) = min({x.max_sequences}, {fit})"
    )


# How :func:`derive_budgets` derives them (the spec, step by step):
#
# Notation: ``b = text_bytes_per_token * TOKEN_MARGIN`` (bytes per token, with margin),
# ``P`` prompt tokens/s, ``G`` generated tokens/s, ``n`` context topics,
# ``fixed_answer = prompt_overhead + request`` and
# ``fixed_routing = routing_overhead + request`` tokens. Sections are sized in units:
# dialogue 2 units, each topic 1, router history 1.
#
# 1. Context window (worst case: every section at its full budget, reserved output):
#    ``unit_w = (context_window - reserved_output - fixed_answer) / (2 + n)`` tokens.
# 2. Cold latency (nothing cached: the routing prompt and the answer prompt are both
#    evaluated, sections at their steady fill of 3/4, then one token is generated):
#    ``unit_l = ((cold_ttft - 1/G) * P - fixed_answer - fixed_routing) / (0.75 * (3 + n))``.
# 3. ``unit = min(unit_w, unit_l) * b`` bytes; dialogue = 2 units, topic = 1 unit,
#    router history = 1 unit, each rounded down to 64 bytes (or the profile's override).
#    Dialogue under 1,024 or topics under 512 bytes: rejected, naming the binding figure
#    -- except with ``strict_latency=False`` (measured speeds), where a latency bound
#    that small yields the minimum sizes and a warning, so a slow machine still starts.
# 4. Compaction input = ``3/4 * largest section + 256`` (a summary of a quarter plus the
#    half that triggered compaction, plus one entry's slack), capped so that the
#    compaction prompt and its summary (a quarter of the largest budget) fit the window;
#    rejected when below the spec's minimum ``largest/2 + 256``.
# 5. Warm latency (prefix cached: the previous exchange and the new request, together
#    ``typical_exchange`` bytes, are new to both the answer and the routing prompt, plus
#    the time line): ``(2 * typical_exchange / b + 16) / P + 1/G <= warm_ttft``, else
#    rejected.
# 6. Memory: ``left = memory - models - runtime overhead - context_window * kv_per_token``
#    (llama.cpp holds the KV of the whole window); one participant keeps two saved
#    states, its full answer prompt and its routing prompt: their tokens times
#    ``kv_per_token`` plus twice the fixed part of a saved state;
#    ``warm_participants = min(max_participants, floor(left * 0.5 / per_participant))``,
#    at least 1; the LLM's KV cache budget is ``warm_participants * per_participant``.
# 7. Sequences (requests served at once, continuous batching): a sequence's window is the
#    largest prompt the budgets make, with its output, x 1.5, rounded up to 256 tokens
#    (at most the context window); each sequence beyond the first holds another such
#    window's KV, ``llm_sequences = min(max_sequences, 1 + floor((left -
#    kv_cache_budget) / (sequence_window * kv_per_token)))``.
#    (Step 5b runs before it: see :func:`recall_budget`.)
def derive_budgets(x: BudgetInputs) -> Budgets:
    """Derive every byte budget from the device's figures, or raise :class:`BudgetError`.
    (the derivation, step by step, is in the comment above)."""
    sec = _sections(x)
    prompts = _prompts(x, sec)
    comp = _compaction(x, sec)
    lat = _latency(x, sec, prompts, comp)
    rec = _recall(x, sec, prompts, lat)
    prompts = Prompts(prompts.answer_tokens + x.tokens(rec.budget), prompts.routing_tokens)
    mem = _memory(x, prompts, comp)
    lines = {**sec.explain, **rec.explain, **comp.explain, **mem.explain}
    return Budgets(
        dialogue_budget_bytes=sec.dialogue,
        topic_budget_bytes=sec.topic,
        compaction_input_budget_bytes=comp.budget,
        router_context_budget_bytes=sec.router,
        recall_budget_bytes=rec.budget,
        per_participant_kv_bytes=mem.per_participant,
        kv_cache_budget_bytes=mem.kv_budget,
        warm_participants=mem.warm,
        llm_sequences=mem.sequences,
        sequence_window_tokens=mem.window,
        context_window=x.context_window,
        reserved_output_tokens=x.reserved_output_tokens,
        answer_prompt_tokens_max=prompts.answer_tokens,
        routing_prompt_tokens_max=prompts.routing_tokens,
        compaction_prompt_tokens_max=comp.prompt_tokens,
        expected_cold_ttft_s=round(lat.cold_s, 3),
        expected_cold_ttft_full_s=round(lat.cold_full_s, 3),
        expected_warm_ttft_s=round(lat.warm_s, 3),
        expected_compaction_s=round(lat.compaction_s, 2),
        memory_left_bytes=mem.left,
        bound_by=sec.bound_by,
        explain={key: lines[key] for key in _EXPLAIN_ORDER},
        warnings=[*sec.warnings, *lat.warnings],
    )
