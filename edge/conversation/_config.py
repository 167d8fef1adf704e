"""The context manager's configuration (:class:`ContextConfig`) and its validation: topic
names, budgets, the compaction input rule, participant ids."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import tzinfo
from types import MappingProxyType
from typing import Any, TypedDict

from ._compaction import CompactionPrompts
from ._render import DIALOGUE

COMPACTION_RESERVE_BYTES = 256
"""The spec's rule: ``compaction_input_budget_bytes`` is at least half the largest
compacted section's budget plus this many bytes (room for the previous summary)."""


def least_compaction_input(largest_section_bytes: int) -> int:
    """The smallest compaction input budget sections of at most ``largest_section_bytes``
    allow (the device's derivation and the manager's check both use it)."""
    return largest_section_bytes // 2 + COMPACTION_RESERVE_BYTES


class ContextOptions(TypedDict, total=False):
    """The spec's keywords of ``ContextManager(llm, **options)``: the topic lists, applied
    over its :class:`ContextConfig` (every other field is set in the configuration)."""

    summary_context_topics: Iterable[str]
    incremental_context_topics: Iterable[str]


@dataclass(frozen=True)
class ContextConfig:
    """What a :class:`~edge.conversation.ContextManager` is configured with (its
    dependencies, the model, the store, the recall index and the clock, are passed
    beside it). Checked when made: a bad value raises ``ValueError`` (``TypeError`` for
    one topic name given as a string). ``edge.device.DeviceConfig.context_config()``
    derives the budgets from the device profile; :meth:`with_options` changes fields.

    ``compaction_prompts`` None means the default prompts; ``timezone`` None the
    device's local zone; ``recall_budget_bytes`` 0 turns recall off."""

    summary_context_topics: tuple[str, ...] = ()
    incremental_context_topics: tuple[str, ...] = ()
    dialogue_budget_bytes: int = 8_000
    topic_budget_bytes: int | Mapping[str, int] = 4_000
    compaction_input_budget_bytes: int = 12_000
    compaction_prompts: CompactionPrompts = field(default_factory=CompactionPrompts)
    compaction_quiet_s: float = 1.5
    compaction_failure_limit: int = 3
    rewarm: bool = True
    rewarm_quiet_s: float = 0.25
    keep_transcript: bool = False
    timezone: tzinfo | None = None
    recall_budget_bytes: int = 1_000

    def __post_init__(self) -> None:
        summary = topic_names(self.summary_context_topics, "summary_context_topics")
        incremental = topic_names(self.incremental_context_topics, "incremental_context_topics")
        both = set(summary) & set(incremental)
        if both:
            raise ValueError(f"topics cannot be both summary and incremental: {sorted(both)}")
        object.__setattr__(self, "summary_context_topics", summary)
        object.__setattr__(self, "incremental_context_topics", incremental)
        if isinstance(self.topic_budget_bytes, Mapping):
            frozen = MappingProxyType(dict(self.topic_budget_bytes))
            object.__setattr__(self, "topic_budget_bytes", frozen)
        if self.compaction_prompts is None:  # the keyword's documented "default prompts"
            object.__setattr__(self, "compaction_prompts", CompactionPrompts())
        self._check_compaction_input()
        _check_positive(self.compaction_failure_limit, "compaction_failure_limit")
        if self.compaction_quiet_s < 0:
            raise ValueError("compaction_quiet_s must be >= 0")
        if not self.rewarm_quiet_s >= 0:
            raise ValueError(f"rewarm_quiet_s must be >= 0, got {self.rewarm_quiet_s!r}")
        value = self.recall_budget_bytes
        if not (value == 0 or positive_int(value)):
            raise ValueError(f"recall_budget_bytes must be a non-negative int, got {value!r}")

    def _check_compaction_input(self) -> None:
        budgets = self.budgets
        compacted = [budgets[DIALOGUE]] + [budgets[t] for t in self.incremental_context_topics]
        least = least_compaction_input(max(compacted))
        value = self.compaction_input_budget_bytes
        if not positive_int(value) or value < least:
            raise ValueError(
                f"compaction_input_budget_bytes must be at least half the largest section "
                f"budget plus {COMPACTION_RESERVE_BYTES} bytes ({least}); got {value!r}"
            )

    @property
    def topics(self) -> tuple[str, ...]:
        return self.summary_context_topics + self.incremental_context_topics

    @property
    def budgets(self) -> dict[str, int]:
        """Budget in bytes of each section (``"dialogue"`` and every topic)."""
        return section_budgets(self.dialogue_budget_bytes, self.topic_budget_bytes, self.topics)

    @property
    def rewarm_after_s(self) -> float:
        """The quiet a re-warm waits for: ``rewarm_quiet_s``, at most the compaction's."""
        return min(self.rewarm_quiet_s, self.compaction_quiet_s)

    def with_options(self, **options: Any) -> ContextConfig:
        """This configuration with ``options`` (:class:`ContextOptions`) changed."""
        if not options:
            return self
        names = {f.name for f in fields(self)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise TypeError(f"unknown context manager option(s): {', '.join(unknown)}")
        return replace(self, **options)


def configured(config: ContextConfig | None, options: ContextOptions) -> ContextConfig:
    """``config`` (default: the defaults) with the spec's keywords ``options`` over it."""
    unknown = sorted(set(options) - set(ContextOptions.__annotations__))
    if unknown:
        raise TypeError(
            f"unknown context manager option(s): {', '.join(unknown)} (the spec's keywords "
            "are the topic lists; set the other fields in its ContextConfig)"
        )
    return (config or ContextConfig()).with_options(**options)


def check_participant(participant_id: object) -> None:
    if not isinstance(participant_id, str) or not participant_id:
        raise ValueError(f"participant_id must be a non-empty string, got {participant_id!r}")


def positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _check_positive(value: object, option: str) -> None:
    if not positive_int(value):
        raise ValueError(f"{option} must be a positive int, got {value!r}")


def topic_names(topics: Iterable[str], option: str) -> tuple[str, ...]:
    if isinstance(topics, str):
        raise TypeError(f"{option} takes a sequence of topic names, not one string")
    names = tuple(topics)
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{option}: topic names must be non-empty strings, got {name!r}")
        if name == DIALOGUE:
            raise ValueError(f"{option}: {DIALOGUE!r} is reserved for the dialogue section")
    if len(set(names)) != len(names):
        raise ValueError(f"{option} names a topic twice")
    return names


def section_budgets(
    dialogue: int, topics: int | Mapping[str, int], names: tuple[str, ...]
) -> dict[str, int]:
    if not positive_int(dialogue):
        raise ValueError(f"dialogue_budget_bytes must be a positive int, got {dialogue!r}")
    out = {DIALOGUE: dialogue}
    if isinstance(topics, Mapping):
        missing = [n for n in names if n not in topics]
        extra = [n for n in topics if n not in names]
        if missing or extra:
            raise ValueError(
                "topic_budget_bytes must name every configured topic and no other"
                + (f"; missing {missing}" if missing else "")
                + (f"; not configured {extra}" if extra else "")
            )
        for name in names:
            out[name] = topics[name]
    else:
        out.update({n: topics for n in names})
    for name, value in out.items():
        if name != DIALOGUE and not positive_int(value):
            raise ValueError(
                f"topic_budget_bytes for {name!r} must be a positive int, got {value!r}"
            )
    return out
