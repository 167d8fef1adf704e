"""Choice decisions on the local model: one prompt evaluation, calibrated, with lexical
evidence.

How a decision is made (see docs/routing.md for the measurements behind it):

1. The options (label letter, description, example phrases) form a system prompt that
   depends only on the criteria, so it is a stable prefix: ``cache_key`` keeps its KV state
   and repeated decisions evaluate only the request. A question with recent conversation
   and an ``asker`` has its own state (``cache_key:asker``, started from the shared one),
   which :meth:`LocalDecisionService.prepare` fills up to the request after each exchange.
2. The model scores the single-token letters ``A``, ``B``, ... from its next-token
   distribution after the formatted prompt (``llm.score``): one evaluation per decision.
3. Tiny models prefer some letters regardless of the request, so the log-probabilities are
   calibrated by dividing out the prior measured once per option set on the content-free
   request ``N/A``.
4. Word and phrase overlap with each option's description and examples is added as
   evidence; the sum is softmaxed into probabilities.
5. The model is weak evidence (alone it routes 70-78 % of the eval sets right): its
   calibrated scores move each label's log-odds by at most ``model_cap`` either way from
   their mean. So when the lexical evidence alone is strong enough that no model score
   could change the label or make it uncertain, the model is not asked: the decision
   costs no prompt evaluation and no switch of the model's state (most ordinary
   questions and note commands; docs/routing.md).

Backends without ``score``/``format_chat`` (remote, scripted) get lexical evidence only.
"""

from __future__ import annotations

import logging
import math
import string
from collections import OrderedDict
from importlib import resources
from typing import Any, cast

import anyio

from edge.llm import ForgetsCache, LLMService, Priority, QueueFullError, Scorer

from ._lexical import lexical_scores
from ._types import ChoiceAnswer, ChoiceQuestion, DecisionError, answer_from_logits

log = logging.getLogger(__name__)

_KEYS = string.ascii_uppercase
MODEL_CAP = 0.85
"""How far (log-odds) the model's evidence may move a label from the labels' mean. On both
routing eval sets (60 queries, SmolLM2-135M) it stayed within 0.56 of the mean but once
(1.1, on a query whose lexical lead was 6); at 0.85 a lexical lead of 2 (one content
word, or a question for the only destination that answers questions) decides alone."""
_CONTENT_FREE = "N/A"
_PRIOR_CACHE_SIZE = 32


def _template(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


class LocalDecisionService:
    """A :class:`~edge.decisions.DecisionService` on a local model with ``score()``.

    ``model_weight`` and ``lexical_weight`` scale the two kinds of evidence (log-odds
    units; the defaults were chosen on ``benchmarks/routing_eval_set.jsonl`` with
    SmolLM2-135M, whose calibrated scores are weak evidence: see docs/routing.md);
    ``uncertain_below`` is the probability under which the answer is "clarify"
    (label None, probabilities still given); ``max_context_bytes`` bounds the recent
    conversation lines put in the prompt (prompt evaluation is the slow part on CPU);
    ``model_cap`` bounds how far the model's evidence moves a label's log-odds from the
    labels' mean (None: unbounded, and the model is always asked).
    With a single criterion, or lexical evidence that the capped model cannot overturn,
    no model call is made.
    """

    def __init__(
        self,
        llm: LLMService | Any,
        *,
        cache_key: str = "decisions",
        model_weight: float = 0.5,
        lexical_weight: float = 2.0,
        uncertain_below: float = 0.55,
        max_context_bytes: int = 300,
        calibrate: bool = True,
        model_cap: float | None = MODEL_CAP,
    ) -> None:
        if not 0.0 <= uncertain_below <= 1.0:
            raise ValueError(f"uncertain_below must be within [0, 1], got {uncertain_below}")
        if max_context_bytes < 0:
            raise ValueError("max_context_bytes must be >= 0")
        self.llm = llm
        self.cache_key = cache_key
        self.model_weight = model_weight
        self.lexical_weight = lexical_weight
        self.uncertain_below = uncertain_below
        self.max_context_bytes = max_context_bytes
        self.calibrate = calibrate
        if model_cap is not None and model_cap < 0:
            raise ValueError(f"model_cap must be >= 0 or None, got {model_cap}")
        self.model_cap = model_cap
        self._system = _template("decide_system.txt")
        self._user = _template("decide_user.txt")
        self._priors: OrderedDict[tuple[Any, ...], list[float]] = OrderedDict()
        self._preparing: dict[str, set[anyio.CancelScope]] = {}  # running, by asker

    @property
    def uses_model(self) -> bool:
        return isinstance(self.llm, Scorer)

    @property
    def _model(self) -> Scorer:
        """The llm, asked only when :attr:`uses_model` (it is a :class:`Scorer` then)."""
        return cast(Scorer, self.llm)

    async def decide(self, question: ChoiceQuestion) -> ChoiceAnswer:
        labels = question.labels
        if len(labels) == 1:
            return ChoiceAnswer(labels[0], 1.0, {labels[0]: 1.0}, source="single")
        if len(labels) > len(_KEYS):
            raise DecisionError(f"at most {len(_KEYS)} criteria per question, got {len(labels)}")
        lexical = lexical_scores(question)
        logits = {label: self.lexical_weight * lexical[label] for label in labels}
        if not self.uses_model or self.settled(question, logits):
            return answer_from_logits(
                question, logits, uncertain_below=self.uncertain_below, source="lexical"
            )
        try:
            model, metrics = await self._model_logprobs(question)
        except QueueFullError as exc:  # a turn is never dropped for a queue: words decide
            log.warning("deciding %r on words alone: %s", question.asker or "a question", exc)
            return answer_from_logits(
                question, logits, uncertain_below=self.uncertain_below, source="lexical"
            )
        for label, value in zip(labels, self.model_evidence(model), strict=True):
            logits[label] += value
        return answer_from_logits(
            question,
            logits,
            uncertain_below=self.uncertain_below,
            source="model",
            metrics=metrics,
        )

    def model_evidence(self, scores: list[float]) -> list[float]:
        """The model's calibrated ``scores`` as log-odds evidence: ``model_weight`` times
        each score's distance from their mean, within ``model_cap`` either way."""
        mean = math.fsum(scores) / len(scores)
        evidence = [self.model_weight * (s - mean) for s in scores]
        cap = self.model_cap
        return evidence if cap is None else [max(-cap, min(cap, e)) for e in evidence]

    def settled(self, question: ChoiceQuestion, logits: dict[str, float]) -> bool:
        """Whether the lexical ``logits`` decide ``question`` whatever the model would say:
        their best label stays chosen, and certain, even with the model's evidence at its
        cap against it and for every other label."""
        if self.model_cap is None:
            return False
        best = max(logits, key=logits.__getitem__)
        worst = {
            label: value + (-self.model_cap if label == best else self.model_cap)
            for label, value in logits.items()
        }
        answer = answer_from_logits(
            question, worst, uncertain_below=self.uncertain_below, source="lexical"
        )
        return answer.label == best

    def prompt(self, question: ChoiceQuestion, text: str | None = None) -> str:
        """The raw prompt whose next token is scored (stable options prefix first)."""
        options = []
        for key, criterion in zip(_KEYS, question.criteria, strict=False):
            line = f"{key}) {criterion.label}: {criterion.description.strip()}"
            if criterion.examples:
                line += " Examples: " + "; ".join(f'"{e}"' for e in criterion.examples)
            options.append(line)
        system = self._system.format(
            instruction=question.instruction.strip(), options="\n".join(options)
        ).strip()
        context = self._context(question) if text is None else ""
        user = self._user.format(
            context=context, text=(question.text if text is None else text).strip()
        ).strip()
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return self._model.format_chat(messages, add_generation_prompt=True)

    def _context(self, question: ChoiceQuestion) -> str:
        kept: list[str] = []
        used = 0
        for line in reversed(question.context):
            size = len(line.encode("utf-8")) + 1
            if used + size > self.max_context_bytes:
                break
            kept.append(line)
            used += size
        if not kept:
            return ""
        return "Recent conversation:\n" + "\n".join(reversed(kept)) + "\n\n"

    async def _model_logprobs(self, question: ChoiceQuestion) -> tuple[list[float], Any]:
        keys = list(_KEYS[: len(question.criteria)])
        result = await self._model.score(
            self.prompt(question), keys, priority=Priority.INTERACTIVE, **self._keys(question)
        )
        scores = _normalized(result.logprobs, len(keys))
        if self.calibrate:
            prior = await self._prior(question, keys)
            scores = [s - p for s, p in zip(scores, prior, strict=True)]
        return scores, result.metrics

    async def prepare(self, question: ChoiceQuestion) -> None:
        """Evaluate ``question``'s option prefix and content-free prior ahead of time, at
        background priority, so the first real decision with these options is warm. Call it
        at start-up with the destinations' routing aids (the text is ignored).

        A question with recent conversation (``context``) also has its prompt up to the
        request (its text, normally empty, ends it) evaluated, into the asker's state:
        the next decision with that context (the same participant's next turn) then
        evaluates only the request's tokens.
        """
        if not self.uses_model or len(question.criteria) < 2:
            return
        with anyio.CancelScope() as scope:  # :meth:`forget` cancels it
            running = self._preparing.setdefault(question.asker, set())
            running.add(scope)
            try:
                await self._prepare(question)
            finally:
                running.discard(scope)
                if not running and self._preparing.get(question.asker) is running:
                    del self._preparing[question.asker]

    async def _prepare(self, question: ChoiceQuestion) -> None:
        keys = list(_KEYS[: len(question.criteria)])
        if self.calibrate:
            await self._prior(question, keys, priority=Priority.BACKGROUND)
        if self._context(question):
            await self._model.score(
                self.prompt(question), keys, priority=Priority.BACKGROUND, **self._keys(question)
            )

    async def forget(self, asker: str) -> None:
        """Drop the state prepared for ``asker``'s decisions (they were erased). A
        :meth:`prepare` for them still running (a background evaluation, perhaps preempted
        and waiting to resume) is cancelled first, so it cannot save that state again."""
        for scope in self._preparing.pop(asker, ()):
            scope.cancel()
        await self._drop(asker)

    async def _drop(self, asker: str) -> None:
        if asker and isinstance(self.llm, ForgetsCache):
            await self.llm.forget_cache(f"{self.cache_key}:{asker}")

    def _keys(self, question: ChoiceQuestion) -> dict[str, str]:
        """Where a question's prompt is evaluated: the asker's own state, started from the
        shared options prefix, so participants taking turns do not evict each other's
        prepared prefix and several participants' decisions run at once (the model serves
        one request per state at a time)."""
        if question.asker:
            return {"cache_key": f"{self.cache_key}:{question.asker}", "seed_key": self.cache_key}
        return {"cache_key": self.cache_key}

    async def _prior(
        self,
        question: ChoiceQuestion,
        keys: list[str],
        priority: Priority = Priority.INTERACTIVE,
    ) -> list[float]:
        signature = (question.instruction, question.criteria)
        cached = self._priors.get(signature)
        if cached is not None:
            self._priors.move_to_end(signature)
            return cached
        result = await self._model.score(
            self.prompt(question, text=_CONTENT_FREE),
            keys,
            cache_key=self.cache_key,
            priority=priority,
        )
        prior = _normalized(result.logprobs, len(keys))
        self._priors[signature] = prior
        while len(self._priors) > _PRIOR_CACHE_SIZE:
            self._priors.popitem(last=False)
        return prior


def _normalized(logprobs: Any, n: int) -> list[float]:
    """Log-softmax over the option letters only; validates what the model returned."""
    values = [float(v) for v in logprobs]
    if len(values) != n or not all(math.isfinite(v) or v == -math.inf for v in values):
        raise DecisionError(f"the model returned {values!r} for {n} options")
    top = max(values)
    if top == -math.inf:
        return [0.0] * n
    total = math.log(math.fsum(math.exp(v - top) for v in values)) + top
    return [max(v - total, -50.0) for v in values]
