"""Speculation: a spoken turn prepared during the pause that may end it, adopted by the
turn it guessed (same utterance, same words) or dropped unseen.

* :class:`TurnSpeculator` (``_turns.py``): the provisional turn, from the pause's guess to
  its confirmation by the utterance's final transcript (or the query's words, for inputs
  without transcripts); how speculation is adopted is decided there;
* :class:`SpeculativeAnswers` (``_answers.py``): the answer started ahead, held back, and
  handed to the turn's answer request once confirmed;
* :class:`PrefetchingDecisions` (``_decisions.py``): the routing decision asked ahead and
  given to the turn when it asks the same question.
"""

from ._answers import (
    CountingSpeculativeAnswers,
    Guess,
    SpeculationStats,
    SpeculativeAnswers,
    speculative_answers,
)
from ._decisions import PrefetchingDecisions, PreparingPrefetchingDecisions, prefetching
from ._turns import AnswerSource, LikelyRoute, PreparesSpeech, TurnSpeculator

__all__ = [
    "AnswerSource",
    "CountingSpeculativeAnswers",
    "Guess",
    "LikelyRoute",
    "PrefetchingDecisions",
    "PreparesSpeech",
    "PreparingPrefetchingDecisions",
    "SpeculationStats",
    "SpeculativeAnswers",
    "TurnSpeculator",
    "prefetching",
    "speculative_answers",
]
