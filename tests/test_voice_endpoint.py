"""Endpointing over scripted VAD probabilities (pure logic, no model)."""

from __future__ import annotations

import numpy as np
import pytest

from edge.voice import (
    Endpointer,
    SpeechPaused,
    SpeechResumed,
    SpeechStarted,
    UtteranceEnded,
    VadConfig,
)

W = 512  # samples per window (32 ms at 16 kHz)


def run(probs: list[float], config: VadConfig, chunk_windows: int = 3) -> list[object]:
    """Feed windows whose samples encode their index, in chunks of a few windows."""
    ep = Endpointer(config)
    events: list[object] = []
    for i in range(0, len(probs), chunk_windows):
        part = probs[i : i + chunk_windows]
        audio = np.concatenate([np.full(W, i + k, np.float32) for k in range(len(part))])
        events += ep.feed(audio, np.array(part, np.float32))
    return events


CFG = VadConfig(
    min_speech_ms=96, end_silence_ms=160, pre_roll_ms=64, pad_ms=32, max_utterance_s=2.0
)


def test_one_utterance_with_pre_roll_and_pad() -> None:
    probs = [0.0] * 5 + [0.9] * 10 + [0.0] * 8
    events = run(probs, CFG)
    kinds = [type(e) for e in events]
    assert kinds == [SpeechStarted, SpeechPaused, UtteranceEnded]
    start, paused, ended = events
    assert start.start_sample == 5 * W
    assert paused.speech_end_sample == 15 * W
    assert ended.speech_end_sample == 15 * W
    assert ended.audio_start_sample == 3 * W  # two windows of pre-roll
    # pre-roll windows 3 and 4, speech 5..14, 32 ms of pad = one window (15)
    assert np.unique(ended.audio).tolist() == list(range(3, 16))
    assert not ended.truncated


def test_short_blip_is_not_speech() -> None:
    probs = [0.0] * 3 + [0.9] * 2 + [0.0] * 10  # 64 ms < min_speech 96 ms
    assert run(probs, CFG) == []


def test_confirmation_needs_min_speech() -> None:
    probs = [0.9] * 3 + [0.0] * 10
    events = run(probs, CFG, chunk_windows=1)
    assert isinstance(events[0], SpeechStarted)


def test_a_short_word_that_ends_is_an_utterance_without_confirming_while_it_lasts() -> None:
    config = VadConfig(min_speech_ms=250, min_word_ms=128, end_silence_ms=160, pre_roll_ms=0)
    word = [0.0] * 3 + [0.9] * 7 + [0.0] * 8  # 224 ms: a quick "Done."
    kinds = [type(e) for e in run(word, config, chunk_windows=1)]
    assert kinds == [SpeechStarted, SpeechPaused, UtteranceEnded]
    assert run([0.0] * 3 + [0.9] * 3 + [0.0] * 8, config) == []  # 96 ms: a click
    # a run that goes on is confirmed at min_speech_ms, as before
    long = run([0.9] * 8 + [0.0] * 8, config, chunk_windows=1)
    assert [type(e) for e in long] == [SpeechStarted, SpeechPaused, UtteranceEnded]


def test_short_pause_does_not_end_the_utterance() -> None:
    probs = [0.9] * 5 + [0.0] * 3 + [0.9] * 5 + [0.0] * 8
    events = run(probs, CFG)
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "SpeechStarted",
        "SpeechPaused",
        "SpeechResumed",
        "SpeechPaused",
        "UtteranceEnded",
    ]
    assert isinstance(events[2], SpeechResumed)
    assert events[-1].speech_end_sample == 13 * W


def test_in_between_probabilities_hold_the_state() -> None:
    # 0.4 is above the silence threshold (0.35) but below the speech threshold (0.5)
    probs = [0.9] * 5 + [0.4] * 10 + [0.0] * 8
    events = run(probs, CFG)
    ended = events[-1]
    assert isinstance(ended, UtteranceEnded)
    assert ended.speech_end_sample == 15 * W


def test_cap_cuts_and_keeps_listening() -> None:
    probs = [0.9] * 100 + [0.0] * 8  # 3.2 s of speech, cap 2 s
    events = run(probs, CFG)
    ends = [e for e in events if isinstance(e, UtteranceEnded)]
    starts = [e for e in events if isinstance(e, SpeechStarted)]
    assert len(ends) == 2 and len(starts) == 2
    assert ends[0].truncated and not ends[1].truncated
    assert len(ends[0].audio) <= 2 * 16_000 + W
    covered = np.concatenate([e.audio for e in ends])
    assert set(range(100)) <= set(np.unique(covered).astype(int).tolist())


def test_silence_only() -> None:
    assert run([0.0] * 200, CFG) == []


def test_probability_count_is_checked() -> None:
    ep = Endpointer(CFG)
    with pytest.raises(ValueError, match="probabilities"):
        ep.feed(np.zeros(100, np.float32), np.array([0.5], np.float32))


def test_thresholds_validated() -> None:
    with pytest.raises(ValueError, match="neg_threshold"):
        VadConfig(threshold=0.3, neg_threshold=0.6)
    assert VadConfig(threshold=0.5).silence_threshold == pytest.approx(0.35)


def test_encoder_window_fits_the_utterance_with_a_floor() -> None:
    from edge.voice import WhisperSTT
    from edge.voice._stt import encoder_frames

    second = 16_000
    assert encoder_frames(2 * second, 10.0) == 1000  # 3 s rounds up to 5 s; the floor wins
    assert encoder_frames(12 * second, 10.0) == 1500  # 13 s, in 5 s steps
    assert encoder_frames(28 * second, 10.0) == 3000
    assert encoder_frames(30 * second, 10.0) is None  # longer than one window: all of it
    assert encoder_frames(2 * second, None) is None
    with pytest.raises(ValueError, match="between 5 and 30"):
        WhisperSTT(encoder_window_s=2.0)


def _feed(ep: Endpointer, probs: list[float]) -> list[object]:
    events: list[object] = []
    for p in probs:
        events += ep.feed(np.zeros(W, np.float32), np.array([p], np.float32))
    return events


def test_a_held_floor_ends_only_at_release_or_the_cap() -> None:
    ep = Endpointer(CFG)  # end silence 160 ms (5 windows), cap 2 s (62.5 windows)
    ep.hold()
    events = _feed(ep, [0.9] * 10 + [0.0] * 30 + [0.9] * 5 + [0.0] * 10)  # a 0.96 s pause
    assert [type(e) for e in events] == [SpeechStarted, SpeechPaused, SpeechResumed, SpeechPaused]
    assert ep.held and ep.adapt(complete=True) == []  # a complete sentence ends nothing
    ended = ep.finish()  # the release
    assert [type(e) for e in ended] == [UtteranceEnded] and not ep.held
    assert ended[0].speech_end_sample == 45 * W  # both runs of speech, the pause between
    assert [type(e) for e in _feed(ep, [0.9] * 10 + [0.0] * 6)][-1] is UtteranceEnded
    ep.hold()  # never released: the cap still ends it, and the hold lapses with it
    events = _feed(ep, [0.9] * 5 + [0.0] * 70)
    assert isinstance(events[-1], UtteranceEnded) and events[-1].truncated and not ep.held
