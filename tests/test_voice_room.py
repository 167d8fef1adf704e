"""Several people at once on one voice pipeline (fake models): everyone's first sentence
before anyone's sentences made ahead."""

from __future__ import annotations

import threading
import time

import anyio
import numpy as np
import pytest

from edge.interaction import USER_QUERY_TOPIC, UserQuery
from edge.runtime import COMPUTE_GATE, URGENT, current_urgency, urgency
from edge.voice import VoiceConfig
from tests.test_voice_pipeline import FAST_VAD, audio_of, feed, make, reply
from tests.voice_helpers import ToneSTT, ToneTTS, silence, tone, wait_for

pytestmark = pytest.mark.anyio


def held_gate() -> tuple[threading.Event, threading.Event, threading.Thread]:
    """A model step (a thread, not started) that holds the compute gate: ``held`` is set
    once it has the gate, and it lets go when ``release`` is set."""
    held, release = threading.Event(), threading.Event()

    def step() -> None:
        with COMPUTE_GATE.hold("llm"):
            held.set()
            release.wait(10)

    return held, release, threading.Thread(target=step)


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


class GatedSTT(ToneSTT):
    """The tone recognizer, taking the compute gate as Whisper does, recording each pass
    it ran with whether it was urgent."""

    concurrent_callers = 16

    def __init__(self) -> None:
        super().__init__()
        self.ran: list[tuple[str, bool]] = []

    def transcribe(self, audio):  # type: ignore[no-untyped-def]
        urgent = current_urgency() == URGENT
        with COMPUTE_GATE.hold("stt urgent" if urgent else "stt"):
            result = super().transcribe(audio)
        self.ran.append((result.text, urgent))
        return result


async def test_a_turns_pass_never_waits_behind_anothers_partial_waiting_at_the_gate(
    monkeypatch,
) -> None:  # type: ignore[no-untyped-def]
    """A model step holds the gate; p1's partial pass waits there; p2 ends an utterance:
    p2's pass reaches the gate too (not held back by the partial's turn in the pipeline),
    the partial gives way, and p2's pass runs first when the step ends."""
    monkeypatch.setattr(COMPUTE_GATE, "enabled", True)
    stt = GatedSTT()
    runtime, voice, rec, _ = make(
        VoiceConfig(vad=FAST_VAD, partial_interval_s=0.3, playback_speed=0), stt=stt
    )
    gate = COMPUTE_GATE._lock
    held, release, worker = held_gate()

    async with voice, runtime:
        worker.start()
        try:
            assert held.wait(5)
            await feed(runtime, tone(1.0), "p1")  # speaking on: a partial pass is due
            await wait_for(lambda: gate._waiting)  # ... and waits at the gate
            await feed(runtime, np.concatenate([tone(0.8, 880), silence(0.6)]), "p2")
            await wait_for(lambda: any(level == URGENT for level, _ in gate._waiting))
        finally:
            release.set()
            worker.join(10)
        await wait_for(lambda: rec.messages(USER_QUERY_TOPIC))
    assert stt.ran[0] == ("tone 880", True), stt.ran


async def test_others_wait_for_the_first_sentence_of_a_turn_answered_from_its_pause(
    monkeypatch,
) -> None:  # type: ignore[no-untyped-def]
    """p2's pause gave a guess, so its answer is being made before its query: p1's next
    sentences are not synthesized ahead until p2's first sentence has gone out (their
    synthesis would hold up p2's answer steps at the compute gate); a guess withdrawn
    (p2 spoke on) lets them go."""
    import edge.voice._synthesis as synthesis

    monkeypatch.setattr(synthesis, "FIRST_AUDIO_WAIT_S", 60.0)  # the bound: not reached here
    config = VoiceConfig(vad=FAST_VAD, partial_interval_s=0, playback_speed=1.0)
    runtime, voice, rec, tts = make(config)
    async with voice, runtime:
        for pid in ("p1", "p2", "p3"):
            await feed(runtime, tone(0.05), pid)  # each has a voice session
        await voice.speculate("p2", "what is the capital of france", 0)
        await reply(runtime, "A one. A two. A three.", "r1", participant="p1")
        await wait_for(lambda: audio_of(rec, "p1"))  # p1's first sentence plays
        await anyio.sleep(0.2)  # time enough to synthesize the next ones ahead
        assert tts.spoken == ["A one."]
        await reply(runtime, "B one. B two.", "r2", participant="p2")
        await wait_for(lambda: len(tts.spoken) >= 3, limit=20)
        assert tts.spoken[:2] == ["A one.", "B one."], tts.spoken
        await voice.speculate("p3", "and what about", 1)
        await voice.speculate("p3", "", 1)  # speech resumed: no turn of p3's waits
        await reply(runtime, "C one. C two. C three.", "r3", participant="p1")
        await wait_for(lambda: "C two." in tts.spoken, limit=20)


class GatedTTS(ToneTTS):
    """The tone voice, taking the compute gate as Piper does; holds it ``hold_s``."""

    concurrent_callers = 16

    def __init__(self, order: list[str], hold_s: float) -> None:
        super().__init__()
        self.order, self.hold_s = order, hold_s

    def synthesize(self, text: str):  # type: ignore[no-untyped-def]
        urgent = current_urgency() == URGENT
        with COMPUTE_GATE.hold("tts first" if urgent else "tts"):
            self.order.append(text)
            time.sleep(self.hold_s)
            return super().synthesize(text)


def _urgent_step(name: str, order: list[str], hold_s: float = 0.05) -> threading.Thread:
    def step() -> None:
        with urgency(URGENT), COMPUTE_GATE.hold("llm"):
            order.append(name)
            time.sleep(hold_s)

    thread = threading.Thread(target=step)
    thread.start()
    return thread


async def test_a_sentence_made_ahead_never_takes_the_gate_between_an_answers_first_steps(
    monkeypatch,
) -> None:  # type: ignore[no-untyped-def]
    """p1's sentence made ahead waits at the compute gate behind a model step; p2's pause
    pass (urgent) comes, then, past the gate's urgent grace, p2's answer's first step. The
    sentence gives way instead of taking the gate in that gap (it would hold p2's answer
    up for its whole synthesis), and goes once p2's first sentence is out."""
    import edge.voice._synthesis as synthesis
    from edge.voice._synthesis import FirstAudio, Synthesis

    monkeypatch.setattr(COMPUTE_GATE, "enabled", True)
    monkeypatch.setattr(synthesis, "FIRST_AUDIO_WAIT_S", 60.0)  # the bound: not reached here
    order: list[str] = []
    first_audio = FirstAudio()
    speak = Synthesis("p1", GatedTTS(order, hold_s=0.3), anyio.CapacityLimiter(4))
    speak.first_audio = first_audio
    gate = COMPUTE_GATE._lock
    held, release, busy = held_gate()  # another answer's step past its first words
    busy.start()
    threads = [busy]
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(speak, "A two.", "r1")
            assert held.wait(5)
            await wait_for(lambda: gate._waiting)  # the sentence waits at the gate
            threads.append(_urgent_step("p2 pause pass", order))
            await wait_for(lambda: any(level == URGENT for level, _ in gate._waiting))
            release.set()
            await wait_for(lambda: order)
            threads[-1].join(5)
            first_audio.expect("p2")  # the pass gave a guess: p2's answer starts
            await anyio.sleep(4 * COMPUTE_GATE.URGENT_GRACE_S)  # past the urgent grace
            threads.append(_urgent_step("p2 answer step", order))
            await wait_for(lambda: len(order) >= 2)
            first_audio.heard("p2")
    for thread in threads:
        thread.join(5)
    assert order == ["p2 pause pass", "p2 answer step", "A two."], order


async def test_the_first_sentence_of_the_listener_waiting_longest_goes_first(
    monkeypatch,
) -> None:  # type: ignore[no-untyped-def]
    """Two first sentences wait at the compute gate: the one whose listener's turn began
    first is synthesized first, whichever asked first."""
    from edge.voice._synthesis import FirstAudio, Synthesis

    monkeypatch.setattr(COMPUTE_GATE, "enabled", True)
    order: list[str] = []
    first_audio = FirstAudio()
    first_audio.wait_for("early")
    await anyio.sleep(0.01)
    first_audio.wait_for("late")
    tts, limiter = GatedTTS(order, hold_s=0.0), anyio.CapacityLimiter(4)
    speakers = {pid: Synthesis(pid, tts, limiter) for pid in ("early", "late")}
    for speak in speakers.values():
        speak.first_audio = first_audio
    gate = COMPUTE_GATE._lock
    held, release, worker = held_gate()
    worker.start()
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            assert held.wait(5)
            for pid in ("late", "early"):  # the later turn's sentence asks first
                tg.start_soon(speakers[pid], f"{pid} one.", f"r-{pid}", True)
                await wait_for(lambda n=len(gate._waiting): len(gate._waiting) > n)
            release.set()
    worker.join(5)
    assert order == ["early one.", "late one."], order
