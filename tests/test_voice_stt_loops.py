"""Whisper's loops on short clips are cut to one sentence; what a person said is kept."""

from __future__ import annotations

import pytest

from edge.voice._stt import without_loops


@pytest.mark.parametrize(
    ("heard", "kept"),
    [
        ("Done. Done. Done. Done. Done. Done. Done.", "Done."),
        ("Okay. Okay. Okay. Okay. Okay. Okay. Okay. Okay. Okay", "Okay."),
        ("Save it. Hi! hi. HI? Go on.", "Save it. Hi! Go on."),
        ("No? No?", "No? No?"),  # said twice: kept
        ("It is 3.5 m. It is 3.5 m.", "It is 3.5 m. It is 3.5 m."),
        ("What is 2 plus 2? What is it?", "What is 2 plus 2? What is it?"),
        ("no end mark", "no end mark"),
        ("", ""),
    ],
)
def test_a_run_of_the_same_sentence_is_said_once(heard: str, kept: str) -> None:
    assert without_loops(heard) == kept
