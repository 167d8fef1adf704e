"""A deterministic decision service for tests of the components that use one."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ._types import ChoiceAnswer, ChoiceQuestion, answer_from_logits, validate_answer

ScriptedChoice = ChoiceAnswer | str | Mapping[str, float] | None | BaseException
"""What a script step may say: an answer as is; a label (probability 1); a mapping of
label to probability (normalized; the best is chosen unless below ``uncertain_below``);
``None`` or ``"clarify"`` for an uncertain answer without scores; an exception to raise."""


@dataclass
class ScriptedDecisions:
    """Answers from a script (a list consumed in order, then ``default``) or from a
    function of the question. Every question is recorded in ``questions``."""

    script: Iterable[ScriptedChoice] | Callable[[ChoiceQuestion], ScriptedChoice] = ()
    default: ScriptedChoice = None
    uncertain_below: float = 0.0
    questions: list[ChoiceQuestion] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._queue: list[ScriptedChoice] | None = (
            None if callable(self.script) else list(self.script)
        )

    def push(self, *choices: ScriptedChoice) -> None:
        if self._queue is None:
            raise TypeError("this ScriptedDecisions answers with a function")
        self._queue.extend(choices)

    async def decide(self, question: ChoiceQuestion) -> ChoiceAnswer:
        self.questions.append(question)
        if callable(self.script):
            step = self.script(question)
        elif self._queue:
            step = self._queue.pop(0)
        else:
            step = self.default
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, ChoiceAnswer):
            return step  # returned unvalidated on purpose: callers must validate
        if step is None or step == "clarify":
            return ChoiceAnswer(None, 0.0, {}, source="scripted")
        if isinstance(step, str):
            probs = {label: (1.0 if label == step else 0.0) for label in question.labels}
            return validate_answer(question, ChoiceAnswer(step, 1.0, probs, source="scripted"))
        total = sum(step.get(label, 0.0) for label in question.labels)
        if total <= 0:
            return ChoiceAnswer(None, 0.0, {}, source="scripted")
        logits = {
            label: math.log(step[label] / total) if step.get(label, 0.0) > 0 else -1e9
            for label in question.labels
        }
        return answer_from_logits(
            question, logits, uncertain_below=self.uncertain_below, source="scripted"
        )
