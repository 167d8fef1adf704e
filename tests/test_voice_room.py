"""Several people at once on one voice pipeline (fake models): everyone's first sentence
before anyone's sentences made ahead."""

from __future__ import annotations

import anyio
import pytest

from edge.interaction import USER_QUERY_TOPIC, UserQuery
from edge.voice import VoiceConfig
from tests.test_voice_pipeline import FAST_VAD, audio_of, feed, make, reply
from tests.voice_helpers import tone, wait_for

pytestmark = pytest.mark.anyio


async def test_a_waiting_first_sentence_goes_before_others_made_ahead(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """p1's long answer is playing (real time) while p2 asked and waits for theirs: p1's
    next sentences are not synthesized ahead until p2's first sentence has gone out."""
    import edge.voice._synthesis as synthesis

    monkeypatch.setattr(
        synthesis, "FIRST_AUDIO_WAIT_S", 60.0, raising=False
    )  # the bound: not reached here
    config = VoiceConfig(vad=FAST_VAD, partial_interval_s=0, playback_speed=1.0)
    runtime, voice, rec, tts = make(config)
    async with voice, runtime:
        for pid in ("p1", "p2"):
            await feed(runtime, tone(0.05), pid)  # both have a voice session
        await runtime.publish(USER_QUERY_TOPIC, UserQuery(text="hello"), participant_id="p2")
        await reply(runtime, "A one. A two. A three. A four.", "r1", participant="p1")
        await wait_for(lambda: audio_of(rec, "p1"))  # p1's first sentence plays
        await anyio.sleep(0.2)  # time enough to synthesize the next ones ahead
        assert tts.spoken == ["A one."]
        await reply(runtime, "B one. B two.", "r2", participant="p2")
        await wait_for(lambda: len(tts.spoken) >= 5, limit=20)
    assert tts.spoken[:2] == ["A one.", "B one."], tts.spoken  # then the ones made ahead
