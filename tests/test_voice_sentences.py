"""Sentence splitting over streamed text, and speakable-text cleaning."""

from __future__ import annotations

import pytest

from edge.voice import SentenceSplitter, speakable


def split_stream(deltas: list[str], **kw: int) -> list[str]:
    splitter = SentenceSplitter(**kw)
    out: list[str] = []
    for delta in deltas:
        out.extend(splitter.feed(delta))
    return [*out, *splitter.flush()]


def test_sentences_come_out_as_soon_as_complete() -> None:
    splitter = SentenceSplitter()
    assert splitter.feed("Hello there") == []
    assert splitter.feed(".") == []  # complete only once whitespace follows
    assert splitter.feed(" How are") == ["Hello there."]
    assert splitter.feed(" you?") == []
    assert splitter.flush() == ["How are you?"]


def test_word_deltas() -> None:
    text = "It is sunny today. Take a hat! Do you need more? Bye."
    deltas = [(" " if i else "") + w for i, w in enumerate(text.split())]
    assert split_stream(deltas) == [
        "It is sunny today.",
        "Take a hat!",
        "Do you need more?",
        "Bye.",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Dr. Smith is in. She waits.", ["Dr. Smith is in.", "She waits."]),
        ("Pi is 3.14 roughly. Yes.", ["Pi is 3.14 roughly.", "Yes."]),
        ("Use e.g. a hammer. Done.", ["Use e.g. a hammer.", "Done."]),
        ("J. R. Tolkien wrote it. True.", ["J. R. Tolkien wrote it.", "True."]),
        ('He said "stop." Then left.', ['He said "stop."', "Then left."]),
        ("Wait... what? Really!", ["Wait...", "what?", "Really!"]),
        ("First line\nSecond line", ["First line", "Second line"]),
        ("So am I. Good.", ["So am I.", "Good."]),
    ],
)
def test_boundaries(text: str, expected: list[str]) -> None:
    assert split_stream([text]) == expected
    assert split_stream(list(text)) == expected  # character by character


def test_long_run_on_is_cut_at_a_comma() -> None:
    text = "word " * 10 + "and then, " + "more words " * 20
    pieces = split_stream([text], max_chars=80)
    assert all(len(p) <= 80 for p in pieces)
    assert pieces[0].endswith(",")
    assert " ".join(pieces).split() == text.split()


def test_max_chars_validated() -> None:
    with pytest.raises(ValueError, match="max_chars"):
        SentenceSplitter(max_chars=5)


def test_speakable() -> None:
    assert speakable("**Bold** and `code`") == "Bold and code"
    assert speakable("See https://example.org now") == "See link now"
    assert speakable("...!?") == ""
    assert speakable("  \n ") == ""
    assert speakable("🙂🙂") == ""
    assert speakable("Room 42") == "Room 42"


def test_the_first_sentence_is_cut_after_its_first_clause() -> None:
    text = (
        "When you calibrate the centrifuge before a long run of samples, always check the "
        "rotor, the lid seal and the balance of the tubes. Then start."
    )
    deltas = [(" " if i else "") + w for i, w in enumerate(text.split())]
    pieces = split_stream(deltas)
    assert pieces[0] == "When you calibrate the centrifuge before a long run of samples,"
    assert pieces[1].startswith("always check the rotor") and pieces[1].endswith("tubes.")
    assert pieces[-1] == "Then start."
    assert " ".join(pieces).split() == text.split()
    # a clause shorter than the floor is not spoken alone
    assert split_stream(["Sure, the rotor is fine. Go."])[0] == "Sure, the rotor is fine."
    # only the first sentence is cut early
    later = split_stream(["Short one. " + text])
    assert later[1].startswith("When you calibrate") and later[1].endswith("tubes.")
