"""What of the model's output reaches the participant: no prompt scaffolding, a bounded
length.

Small models echo the request's own structure (see ``_render``): a ``Current time: …``
line, ``(No earlier conversation or context.)``, the ``Context:`` header, and the labels
of the lines they are shown (``User:``, ``Assistant:``, ``[14:02] notes:``, an extractive
summary's ``The user said:``), or made-up ones like them (``The user (earlier):``).
:class:`ReplyFilter` drops those lines, and removes the labels from the start of a line
(again and again: "User: User: ..."), keeping what follows: the small default model often
answers by quoting a context line. Nothing of it is published, spoken or recorded. The
reply also ends at the sentence boundary where the instructions' length is reached ("one
to three short sentences": three), so the rest is never generated.
:func:`has_scaffolding` says whether a text still shows any of it (the eval counts them).
"""

from __future__ import annotations

import re

_NUMBERS = {
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "a single": 1,
}
_COUNT = r"(\d+|one|two|three|four|five|six|seven|eight|nine|ten|a single)"
_SENTENCES = re.compile(
    rf"\b{_COUNT}(?:\s+(?:to|or)\s+{_COUNT})?\s+(?:[a-z]+\s+){{0,2}}sentences?\b", re.I
)

_DROPPED = ("Current time:", "(No earlier conversation or context.)")
"""Lines of the request's structure, dropped whole when a reply line starts with one."""
_HEADERS = ("Context:", "Earlier, newest first:")
"""The context message's header and the recalled block's: dropped when alone on a line."""
_LABEL = re.compile(
    r"(?:\[\d{1,2}:\d{2}\]\s*[\w.-]+(?:\s*\([^)\n]{0,40}\))?"
    r"|(?:the\s+)?(?:user|assistant)(?:\s+said)?(?:\s*\([^)\n]{0,40}\))?"
    r"|[a-z][\w.-]*\s+\((?:earlier|latest)[^)\n]{0,40}\)"
    r"|summary of [^:\n]{0,60}\([\d:]+ to [\d:]+\)|recorded"
    r")\s*:[ \t]*",
    re.IGNORECASE,
)
"""A label of the prompt's own (an entry's ``[14:20] User:`` or ``[14:02] notes:``,
``Assistant:``, a
recalled line's ``User (earlier):`` as older prompts had it and as the model rephrases it,
``The user (earlier):``, an extractive summary's ``The user said:``, a topic's
``notes (earlier):``, a summary's ``Summary of ... (14:13 to 14:43):``): removed from the
start of a reply line, again and again ("User: User: ..."), what follows kept."""
_ROLE_REST = re.compile(r"(?: (?:s|sa|sai|said)?)?(?:\s*\([^)\n]{0,40}\)?)?\s*", re.I)
"""What may follow a role word in a label that is not finished yet."""
_STAMPED_REST = re.compile(r"[\w.-]*(?:\s*\([^)\n]{0,40}\)?)?\s*")
"""What may follow an entry's time stamp in a label that is not finished yet."""
_STAMP = re.compile(r"\[\d{1,2}:\d{2}\]\s*")
_PARTIAL_STAMP = re.compile(r"\[\d{0,2}(?::\d{0,2})?")
_INLINE = re.compile(
    r"\b(?:user|assistant)(?:\s*\((?:earlier|latest)[^)\n]{0,40}\))?:"
    r"|\((?:earlier|latest)[^)\n]{0,40}\):|current time:|earlier, newest first:",
    re.IGNORECASE,
)
_ABBREVIATIONS = frozenset("mr mrs ms dr prof sr jr st vs e.g i.e approx etc no fig".split())
_END = re.compile(r"""[.!?…]+["'”’)\]]*(?=\s)""")


def sentence_bound(instructions: str) -> int | None:
    """The most sentences ``instructions`` allow a reply ("reply in one to three short
    sentences": 3), or None when they state no number."""
    found = _SENTENCES.search(instructions)
    if found is None:
        return None
    word = (found.group(2) or found.group(1)).lower()
    return int(word) if word.isdigit() else _NUMBERS[word]


def _undecided(line: str) -> bool:
    """Whether ``line`` (the start of a reply line) could still become scaffolding: a
    dropped line, a header, or a label (:data:`_LABEL`) not finished yet."""
    text = line.lstrip()
    if any(p.startswith(text) for p in (*_DROPPED, *_HEADERS)) or text.startswith(_HEADERS):
        return True  # a header waits for its end: dropped only when alone
    if text.startswith("["):
        stamp = _STAMP.match(text)
        if stamp is None:
            return _PARTIAL_STAMP.fullmatch(text) is not None
        return _STAMPED_REST.fullmatch(text[stamp.end() :]) is not None
    return _label_start(text)


def _label_start(text: str) -> bool:
    """Whether ``text`` is the start of a label that is not finished yet."""
    low = text.lower()
    for head in ("the user", "the assistant", "user", "assistant"):
        if head.startswith(low):
            return True
        if low.startswith(head) and _ROLE_REST.fullmatch(low[len(head) :]):
            return True
    if "summary of".startswith(low) or "recorded".startswith(low):
        return True
    return low.startswith("summary of") and "):" not in low and len(low) < 96


def has_scaffolding(text: str) -> bool:
    """Whether a reply shows the prompt's own structure anywhere: a line that starts with
    a label (:data:`_LABEL`), a dropped line or a header, or a role or recalled-line label
    inside a line (``... User: ...``, ``(earlier):``, ``Current time:``)."""
    for line in text.splitlines():
        start = line.lstrip()
        if _LABEL.match(start) or start.startswith(_DROPPED) or start.strip() in _HEADERS:
            return True
    return _INLINE.search(text) is not None


class ReplyFilter:
    """Feed the model's deltas in order; each call returns what may be published now.

    ``max_sentences`` None leaves the length alone. :attr:`done` turns True once the bound
    is reached: stop generating (nothing more will pass)."""

    def __init__(self, max_sentences: int | None = None) -> None:
        if max_sentences is not None and max_sentences < 1:
            raise ValueError("max_sentences must be at least 1 (or None)")
        self.max_sentences = max_sentences
        self.done = False
        self.dropped = 0  # scaffolding lines left out
        self._line = ""  # the current line, while it could still be scaffolding
        self._mode = "start"  # "start" (deciding), "pass" or "drop" until the newline
        self._out = ""  # everything passed so far
        self._after_role = False  # a role prefix was just dropped

    def feed(self, delta: str) -> str:
        if self.done:
            return ""
        passed: list[str] = []
        for piece in re.split(r"(\n)", delta):
            if piece:
                passed.append(self._piece(piece))
        return self._bounded("".join(passed))

    def flush(self) -> str:
        """The end of the reply: a held line that turned out not to be scaffolding."""
        if self.done:
            return ""
        line, self._line = self._line, ""
        text = "" if self._mode != "start" else self._decide(line, final=True)
        return self._bounded(text, final=True)

    # -- lines --------------------------------------------------------------------------

    def _piece(self, piece: str) -> str:
        if piece == "\n":
            out = self._decide(self._line, final=True) if self._mode == "start" else ""
            newline = "" if self._mode == "drop" else "\n"
            self._line, self._mode, self._after_role = "", "start", False
            return out + newline
        if self._mode == "pass":
            if self._after_role:  # the space after a role prefix
                piece = piece.lstrip()
                self._after_role = not piece
            return piece
        if self._mode == "drop":
            return ""
        self._line += piece
        return "" if _undecided(self._line) else self._decide(self._line, final=False)

    def _decide(self, line: str, *, final: bool) -> str:
        """Settle the current line's start: drop it, strip its labels, or pass it."""
        text = line.lstrip()
        if text.startswith(_DROPPED) or (final and text.strip() in _HEADERS):
            self._mode = "drop"
            self.dropped += 1
            return ""
        label = _LABEL.match(text)
        if label is not None:  # again: "User: User: ..."
            self.dropped += 1
            self._after_role = True
            self._line = rest = text[label.end() :]
            if not final and _undecided(rest):
                return ""
            return self._decide(rest, final=final)
        self._mode = "pass"
        self._line = ""
        if self._after_role:
            line = line.lstrip()
            self._after_role = not line
        return line if self._out or line.strip() else ""

    # -- length -------------------------------------------------------------------------

    def _bounded(self, text: str, *, final: bool = False) -> str:
        if not text and not final:
            return ""
        if not self._out:
            text = text.lstrip()
        if self.max_sentences is None:
            self._out += text
            return text
        combined = self._out + text + (" " if final else "")
        cut = self._nth_end(combined)
        if cut is None:
            self._out += text
            return text
        self.done = True
        allowed = combined[len(self._out) : max(cut, len(self._out))]
        self._out += allowed
        return allowed

    def _nth_end(self, text: str) -> int | None:
        if self.max_sentences is None:
            return None
        count = 0
        for match in _END.finditer(text):
            before = text[: match.start()].rsplit(None, 1)
            word = before[-1].lower().rstrip(".") if before else ""
            if match.group().startswith(".") and (word in _ABBREVIATIONS or len(word) == 1):
                continue  # "Dr. Okafor", "J. Smith"
            count += 1
            if count >= self.max_sentences:
                return match.end()
        return None
