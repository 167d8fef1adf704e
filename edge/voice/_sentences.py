"""Split streamed reply text into sentences, and clean text for speaking.

:class:`SentenceSplitter` takes text deltas as they arrive and hands back each sentence
as soon as it is known to be complete: a ``.``, ``!``, ``?`` or ``…`` (with any closing
quotes or brackets) followed by whitespace, or a line break. A period after a common
abbreviation or a single initial does not end a sentence, nor does one inside a number
("3.5"). A sentence running past ``max_chars`` is cut at its last comma, semicolon or
space so long run-ons still start speaking early. A reply's *first* piece is its first
clause: it ends at the first comma, semicolon, colon or dash once it holds at least
``first_min_chars`` characters (the floor keeps "Sure," or "Well," from being spoken
alone), because the first audio of a reply waits for its first piece. A first sentence
that runs past ``first_max_chars`` with no such break is cut there, before its last
function word ("that", "is", "of", ...: a phrase boundary), or else at its last space.
:meth:`SentenceSplitter.flush` returns whatever is left when the stream ends.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterable

_ABBREVIATIONS = frozenset(
    """mr mrs ms dr prof sr jr st vs e.g i.e approx dept est fig vol ca cf al
    inc ltd co corp jan feb mar apr jun jul aug sep sept oct nov dec mt ft""".split()
)
_END = re.compile(r"""([.!?…]+)(["'”’)\]]*)(\s+)|(\n\s*)""")
_CLAUSE = re.compile(r"[,;:—](\s+)")
_MARKUP = re.compile(r"[*_#`~|<>\[\]{}^=\\]+")
_URL = re.compile(r"https?://\S+")
_WORDY = re.compile(r"[^\W_]", re.UNICODE)
_WORD_AFTER = re.compile(r"\s+([\w']+)(?=[\s,;:.!?])")
"""A space and the whole word after it (a word still being streamed does not match)."""


_DANGLING = frozenset(
    """a an the of to and or but nor so because if than that which who whose whom where
    when while with without for from in on at by about into onto over under between
    like as my your his her its our their this these those is are was were be been am
    do does did can could would should will shall may might must um uh er like""".split()
)


def sounds_complete(text: str) -> bool:
    """Whether a transcript reads as a whole question or sentence (so the speaker has
    probably finished): it ends with ``?`` or ``!``, or with a ``.`` after a word that
    can end a sentence. Text that trails off (no end mark, ``...``, a comma, or a last word
    such as "the", "and", "of") is mid-phrase."""
    stripped = text.strip().rstrip("\"'”’)]")
    if not stripped or stripped.endswith(("...", "…", ",", ";", ":", "-")):
        return False
    if stripped[-1] in "?!":
        return True
    if stripped[-1] != ".":
        return False
    words = re.findall(r"[\w']+", stripped.lower())
    return bool(words) and words[-1] not in _DANGLING


_STRANDABLE = frozenset("for with about from".split())
_WH = frozenset("what which who whom where".split())


def stranded_question(text: str) -> bool:
    """A question whose last word is a preposition left at its end ("what is it famous
    for", "who did you go with"), written without the question mark Whisper's smaller
    models sometimes drop: at least two words between the last question word and the
    preposition, the one before it not a word that needs more ("the", "of", ...)."""
    stripped = text.strip()
    if not stripped or stripped[-1] in ".?!,;:-…":
        return False
    words = re.findall(r"[\w']+", stripped.lower())
    wh = [i for i, w in enumerate(words) if w in _WH]
    if not wh or words[-1] not in _STRANDABLE:
        return False
    between = words[wh[-1] + 1 : -1]
    return len(between) >= 2 and between[-1] not in _DANGLING


_OPENERS = tuple(
    tuple(o.split())
    for o in (
        "can you tell me",
        "could you tell me",
        "would you tell me",
        "will you tell me",
        "tell me",
        "do you know",
        "can you explain",
        "could you explain",
        "i wonder",
        "i want to know",
        "i'd like to know",
        "i would like to know",
    )
)


_FILLERS = frozenset("so and but well hey okay ok um uh please now then".split())


def only_opens_a_question(text: str) -> bool:
    """Whether the last sentence is only what opens an indirect question ("Can you tell
    me?", "So do you know?"): whole as written, but a speaker who pauses there usually
    goes on with the question itself ("What do you know?" is a question of its own)."""
    sentences = [p for p in re.split(r"[.?!…]+", text.lower()) if p.strip()]
    words = re.findall(r"[\w']+", sentences[-1]) if sentences else []
    while words and words[0] in _FILLERS:
        words.pop(0)
    return tuple(words) in _OPENERS


def end_verdict(text: str) -> bool | None:
    """How a pause's transcript bears on the end of the utterance: True when it ends a
    question or exclamation (``?``/``!``: strong evidence, the shortest end silence),
    False when it stops mid-phrase (the longest), None for a statement ending in ``.``
    (Whisper also writes a period where a long sentence merely pauses at a comma, so the
    neutral end silence applies) and for a question ending in a stranded preposition
    without its question mark, or in an indirect question's opener ("Can you tell me?":
    it may be whole or may go on: neutral too)."""
    if stranded_question(text) or only_opens_a_question(text):
        return None
    if not sounds_complete(text):
        return False
    return True if text.strip().rstrip("\"'”’)]")[-1] in "?!" else None


def clearly_continues(text: str) -> bool:
    """Whether a transcript stops where more words must follow: a trailing comma, colon,
    dash or ellipsis, or a last word such as "the", "and", "of". Text with no end mark
    that does not trail off this way is undecided (False), and so is a question ending in
    a stranded preposition ("what is it famous for")."""
    if stranded_question(text):
        return False
    stripped = text.strip().rstrip("\"'”’)]")
    if not stripped or stripped.endswith(("...", "…", ",", ";", ":", "-")):
        return True
    words = re.findall(r"[\w']+", stripped.lower())
    return stripped[-1] not in ".?!" and bool(words) and words[-1] in _DANGLING


def speakable(text: str) -> str:
    """``text`` cleaned for a voice: markdown and markup symbols and URLs removed,
    whitespace collapsed. Empty when nothing in it can be spoken (no letter or digit)."""
    cleaned = _URL.sub(" link ", text)
    cleaned = _MARKUP.sub(" ", cleaned)
    cleaned = " ".join(cleaned.split())
    return cleaned if _WORDY.search(cleaned) else ""


class SentenceSplitter:
    """Incremental sentence boundary detection over streamed text; see the module doc."""

    def __init__(
        self,
        max_chars: int = 220,
        min_chars: int = 2,
        first_min_chars: int | None = 20,
        first_max_chars: int | None = None,
    ) -> None:
        if max_chars < 20:
            raise ValueError("max_chars must be at least 20")
        if first_min_chars is not None and not 1 <= first_min_chars <= max_chars:
            raise ValueError("first_min_chars must be between 1 and max_chars")
        if first_max_chars is not None and not (first_min_chars or 1) < first_max_chars:
            raise ValueError("first_max_chars must be above first_min_chars")
        self.max_chars = max_chars
        self.min_chars = min_chars
        self.first_min_chars = first_min_chars
        self.first_max_chars = first_max_chars
        self._buffer = ""
        self._emitted = 0

    def feed(self, delta: str) -> list[str]:
        """Add ``delta``; return the sentences it completed, in order."""
        self._buffer += delta
        out: list[str] = []
        search_from = 0
        while True:
            match = _END.search(self._buffer, search_from)
            if match is None:
                break
            if match.group(4) is None and not self._is_boundary(match):
                search_from = match.end()
                continue
            cut = match.end()
            sentence = self._buffer[:cut].strip()
            if len(sentence) < self.min_chars and match.group(4) is None:
                search_from = match.end()
                continue
            self._buffer = self._buffer[cut:]
            search_from = 0
            if sentence:
                out.append(sentence)
        while len(self._buffer) > self.max_chars:
            out.append(self._cut_long())
        if not out and not self._emitted and self.first_min_chars:
            clause = self._first_clause(self.first_min_chars) or self._first_phrase()
            if clause:
                out.append(clause)
        self._emitted += len(out)
        return out

    def flush(self) -> list[str]:
        """The rest of the text, at the end of the stream."""
        rest, self._buffer = self._buffer.strip(), ""
        return [rest] if rest else []

    @property
    def pending(self) -> str:
        return self._buffer

    def _is_boundary(self, match: re.Match[str]) -> bool:
        if match.group(1) != ".":
            return True
        before = self._buffer[: match.start()]
        word = re.search(r"([\w.]+)$", before)
        if word is None:
            return True
        token = word.group(1).lower().rstrip(".")
        if token in _ABBREVIATIONS:
            return False
        # A single initial ("J. Smith"), not a one-letter word like "I" at a sentence end.
        return not (len(token) == 1 and token.isalpha() and token not in ("i", "a"))

    def _first_clause(self, floor: int) -> str:
        """The reply's first clause, once complete and at least ``floor`` characters."""
        match = _CLAUSE.search(self._buffer, max(floor - 1, 0))
        if match is None:
            return ""
        piece, self._buffer = self._buffer[: match.start() + 1].strip(), self._buffer[match.end() :]
        return piece

    def _first_phrase(self) -> str:
        """The start of a first sentence longer than ``first_max_chars`` with no clause
        break: up to the last phrase boundary (before a function word) within the limit,
        or else its last whole word; "" while the sentence is shorter."""
        cap, floor = self.first_max_chars, self.first_min_chars or 1
        if cap is None or len(self._buffer) <= cap:
            return ""
        spaces = [m for m in _WORD_AFTER.finditer(self._buffer) if floor <= m.start() <= cap]
        if not spaces:
            return ""
        boundary = next(
            (m for m in reversed(spaces) if m.group(1).lower() in _DANGLING), spaces[-1]
        )
        piece = self._buffer[: boundary.start()].strip()
        self._buffer = self._buffer[boundary.start() :].lstrip()
        return piece

    def _cut_long(self) -> str:
        head = self._buffer[: self.max_chars]
        for sep in (", ", "; ", ": ", " "):
            at = head.rfind(sep)
            if at >= self.max_chars // 3:
                cut = at + len(sep)
                break
        else:
            cut = self.max_chars
        piece, self._buffer = self._buffer[:cut].strip(), self._buffer[cut:]
        return piece


async def first_piece(deltas: AsyncIterable[str], splitter: SentenceSplitter) -> str:
    """The first speakable piece ``splitter`` (a new one) makes of a reply streamed as
    ``deltas`` (what a speaker says first); "" when the reply has none."""
    async for delta in deltas:
        for piece in splitter.feed(delta):
            if spoken := speakable(piece):
                return spoken
    return next((spoken for p in splitter.flush() if (spoken := speakable(p))), "")
