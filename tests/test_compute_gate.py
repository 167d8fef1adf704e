"""The compute gate hands itself over in order: a final Whisper pass (someone waits)
before others' steps, then first come first served; a thread stepping in a loop never
keeps a waiter out for more than one step."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from edge.runtime import (
    COMPUTE_GATE,
    FIRST_SENTENCE,
    NORMAL,
    URGENT,
    ComputeGate,
    OrderedLock,
    turn_started,
    urgency,
)


def _queue_behind(gate: ComputeGate, names: list[tuple[str, int]]) -> list[str]:
    """Hold the gate, queue ``names`` (in this order, each at its urgency), release: the
    order in which they got it."""
    order: list[str] = []
    holding, release = threading.Event(), threading.Event()

    def holder() -> None:
        with gate.hold("llm"):
            holding.set()
            release.wait(5)

    def waiter(name: str, level: int) -> None:
        with urgency(level), gate.hold(name):
            order.append(name)

    threads = [threading.Thread(target=holder)]
    threads[0].start()
    assert holding.wait(5)
    for name, level in names:
        t = threading.Thread(target=waiter, args=(name, level))
        t.start()
        threads.append(t)
        deadline = time.monotonic() + 5
        while len(gate._lock._waiting) < len(threads) - 1 and time.monotonic() < deadline:
            time.sleep(0.005)
    release.set()
    for t in threads:
        t.join(5)
    return order


def test_an_urgent_step_goes_before_earlier_waiters_then_first_come_first_served() -> None:
    gate = ComputeGate(enabled=True)
    order = _queue_behind(gate, [("a", 1), ("b", 1), ("final", URGENT), ("c", 1)])
    assert order == ["final", "a", "b", "c"]
    assert gate.stats.count == {"llm": 1, "a": 1, "b": 1, "final": 1, "c": 1}
    assert gate.stats.max_wait_s["c"] > 0


def test_a_thread_stepping_in_a_loop_lets_a_waiter_in_after_one_step() -> None:
    """A model streaming tokens releases and retakes the gate at once: a Whisper pass
    queued when a step ends gets the gate next, not when the model pauses."""
    gate = ComputeGate(enabled=True)
    owed: list[int] = []  # steps that ended with a pass waiting
    got: list[int] = []  # the step count when each pass got the gate
    steps = 0
    started, stop = threading.Event(), threading.Event()

    def model() -> None:
        nonlocal steps
        while not stop.is_set() and steps < 5000:
            with gate.hold("llm"):
                steps += 1
                started.set()
                time.sleep(0.002)
                if gate._lock._waiting:
                    owed.append(steps)

    def whisper() -> None:
        with gate.hold("stt"):
            got.append(steps)

    m = threading.Thread(target=model)
    m.start()
    assert started.wait(5)
    for _ in range(5):
        p = threading.Thread(target=whisper)
        p.start()
        p.join(5)
    stop.set()
    m.join(5)
    assert len(got) == 5 and owed
    assert set(owed) <= set(got), (owed, got)


def test_a_disabled_gate_does_not_wait_or_count() -> None:
    gate = ComputeGate(enabled=False)
    with gate.hold("llm"), gate.hold("stt"):  # not re-entrant when enabled: no lock here
        pass
    assert gate.stats.count == {}


def _lock_order(lock, monkeypatch, work, queued) -> list[str]:  # type: ignore[no-untyped-def]
    """Hold the gate and ``lock`` (a step in progress); start ``work(name)`` in a thread
    for each (name, urgency) of ``queued``, one after another once the previous waits
    (for the gate or the lock); release them. The names in the order they took the lock
    ("first": the holder), not as threads returned."""
    order: list[str] = []
    acquire = lock._acquire

    def recording(level: int, *rest: object) -> float:
        waited = acquire(level, *rest)
        order.append(threading.current_thread().name)
        return waited

    monkeypatch.setattr(lock, "_acquire", recording)
    busy, release = threading.Event(), threading.Event()

    def first() -> None:
        with COMPUTE_GATE.hold("stt"), lock.hold():  # a pass or synthesis in progress
            busy.set()
            release.wait(10)

    def waiting() -> int:  # at the model's lock, or at the gate a step takes before it
        return len(lock._waiting) + len(COMPUTE_GATE._lock._waiting)

    def run(name: str, level: int) -> None:
        with urgency(level):
            work(name)

    threads = [threading.Thread(target=first, name="first")]
    threads[0].start()
    assert busy.wait(10)
    for name, level in queued:
        threads.append(threading.Thread(target=run, args=(name, level), name=name))
        threads[-1].start()
        deadline = time.monotonic() + 5
        while waiting() < len(threads) - 1 and time.monotonic() < deadline:
            time.sleep(0.005)
    release.set()
    for t in threads:
        t.join(60)
    return order


@pytest.mark.model
def test_whisper_takes_a_final_pass_before_partial_passes_queued_earlier(
    models, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """Three participants' partial passes wait for the recognizer; one participant ends
    their utterance: its final pass runs next."""
    stt, tts = models
    from edge.voice import resample

    spoken = tts.synthesize("What is the capital of France?")
    audio = resample(spoken.audio, spoken.sample_rate, stt.sample_rate).astype(np.float32)
    heard: list[str] = []
    queued = [("p1", 1), ("p2", 1), ("final", URGENT), ("p3", 1)]
    order = _lock_order(
        stt._lock, monkeypatch, lambda _: heard.append(stt.transcribe(audio).text), queued
    )
    assert order == ["first", "final", "p1", "p2", "p3"]
    assert len(heard) == 4 and all("france" in text.lower() for text in heard), heard


class _UrgencyTTS:
    """Tone per word; records each text with the urgency it was synthesized at."""

    sample_rate = 16_000

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def synthesize(self, text: str):  # type: ignore[no-untyped-def]
        from edge.runtime import current_urgency
        from edge.voice import Synthesis

        self.calls.append((text, current_urgency()))
        return Synthesis(np.full(1600 * len(text.split()), 0.1, np.float32), 16_000, 0.0)


@pytest.mark.anyio
async def test_the_sentence_a_listener_waits_for_is_synthesized_first_in_line() -> None:
    """First-sentence-first: the head of a participant's speech (nothing plays before it)
    is urgent; the sentences synthesized ahead while it plays are not."""
    import anyio
    from voice_helpers import wait_for

    from edge.interaction import ResponseOutput
    from edge.runtime import NORMAL
    from edge.voice import Speaker, VoiceConfig

    tts, sent = _UrgencyTTS(), []

    async def publish(chunk, correlation_id) -> None:  # type: ignore[no-untyped-def]
        sent.append(chunk)

    speaker = Speaker("p1", VoiceConfig(), tts, anyio.CapacityLimiter(1), publish)
    reply = "The first sentence is here. The second one follows it. A third ends it."
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await tg.start(speaker.run)
            speaker.on_output(ResponseOutput(text=reply, request_id="r1", source="conversation"))
            speaker.on_output(
                ResponseOutput(text="", request_id="r1", source="conversation", final=True)
            )
            await wait_for(lambda: len(tts.calls) >= 3)
            tg.cancel_scope.cancel()
    assert [level for _, level in tts.calls] == [URGENT, NORMAL, NORMAL], tts.calls


@pytest.mark.model
def test_piper_speaks_a_waited_for_sentence_before_later_ones_queued_earlier(
    models, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    _, tts = models
    sizes: list[int] = []
    queued = [("two", 1), ("three", 1), ("one", URGENT)]

    def speak(name: str) -> None:
        sizes.append(len(tts.synthesize(f"This is sentence {name}.").audio))

    order = _lock_order(tts._lock, monkeypatch, speak, queued)
    assert order == ["first", "one", "two", "three"]
    assert len(sizes) == 3 and all(sizes), sizes


class _OrderedToneTTS(_UrgencyTTS):
    """Synthesizes one text at a time, in the order of its lock, slowly."""

    concurrent_callers = 8

    def __init__(self) -> None:
        super().__init__()
        from edge.runtime import OrderedLock

        self._lock = OrderedLock()

    def synthesize(self, text: str):  # type: ignore[no-untyped-def]
        with self._lock.hold():
            time.sleep(0.05)
            return super().synthesize(text)


@pytest.mark.anyio
async def test_one_participants_first_sentence_is_not_queued_behind_anothers_later_ones() -> None:
    """Four participants share the pipeline's voice: while three long replies play and
    their next sentences are synthesized ahead, a fourth reply starts; its first sentence
    goes right after the synthesis in progress, before the others' waiting sentences."""
    import anyio

    from edge.interaction import ResponseOutput
    from edge.voice import Speaker, VoiceConfig, VoicePipeline

    tts = _OrderedToneTTS()
    pipeline = VoicePipeline(stt=object(), tts=tts)  # type: ignore[arg-type]

    async def publish(chunk, correlation_id) -> None:  # type: ignore[no-untyped-def]
        pass

    config = VoiceConfig(tts_lookahead=4)
    speakers = [Speaker(p, config, tts, pipeline._tts_limiter, publish) for p in "acdb"]
    words_ = "one two three four five six".split()
    long = " ".join(f"Sentence {w} of a long answer." for w in words_)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for speaker in speakers:
                await tg.start(speaker.run)
            for k, speaker in enumerate(speakers[:3]):
                speaker.on_output(ResponseOutput(text=long, request_id=f"r{k}", source="x"))
            await wait_for_calls(tts, 6)  # every first sentence done, the next ones queued
            done = len(tts.calls)
            first = ResponseOutput(text="B speaks now.", request_id="rb", source="x")
            speakers[3].on_output(first)
            await wait_for_calls(tts, done + 4)
            tg.cancel_scope.cancel()
    texts = [t for t, _ in tts.calls]
    assert texts.index("B speaks now.") <= done + 1, (done, texts)


async def wait_for_calls(tts: _UrgencyTTS, n: int) -> None:
    from voice_helpers import wait_for

    await wait_for(lambda: len(tts.calls) >= n)


def test_a_run_of_urgent_steps_is_not_broken_by_a_waiting_ordinary_one() -> None:
    """Between two of an answer's first tokens nobody urgent waits yet: an ordinary step
    waiting meanwhile (a long sentence synthesized ahead) must not take the lock then."""
    lock = OrderedLock(urgent_grace_s=0.2)
    order: list[str] = []

    def take(lock: OrderedLock, level: int, name: str, order: list[str]) -> None:
        with lock.hold(level):
            order.append(name)

    with lock.hold(URGENT):
        ordinary = threading.Thread(target=take, args=(lock, NORMAL, "ahead", order))
        ordinary.start()
        time.sleep(0.05)  # the ordinary step now waits
    time.sleep(0.02)  # the urgent run's next step comes a moment after the last one
    take(lock, URGENT, "next token", order)
    ordinary.join(2)
    assert order == ["next token", "ahead"]
    assert not OrderedLock().locked()


def test_work_that_gives_way_waits_for_ordinary_work_but_never_for_urgent() -> None:
    """A yielding waiter (a partial pass) queues behind ordinary steps, but gives up at
    once when urgent work holds the gate, and while waiting when urgent work arrives."""
    from edge.runtime import YieldedToUrgentError, yielding

    gate = ComputeGate(enabled=True)
    outcome: list[str] = []
    holding, release = threading.Event(), threading.Event()

    def holder(level: int) -> None:
        with urgency(level), gate.hold("llm"):
            holding.set()
            release.wait(5)

    def partial() -> None:
        try:
            with yielding(), gate.hold("stt"):
                outcome.append("ran")
        except YieldedToUrgentError:
            outcome.append("gave way")

    for level, arrives in ((NORMAL, None), (URGENT, None), (NORMAL, URGENT)):
        holding.clear()
        release.clear()
        outcome.clear()
        gate._lock._urgent_until = 0.0  # no grace left from the round before
        h = threading.Thread(target=holder, args=(level,))
        h.start()
        assert holding.wait(5)
        p = threading.Thread(target=partial)
        p.start()
        time.sleep(0.05)
        if arrives is not None:
            threading.Thread(target=holder, args=(arrives,)).start()
            p.join(5)
            assert outcome == ["gave way"]  # before the holder let go
        release.set()
        p.join(5)
        h.join(5)
        assert outcome == (["ran"] if level == NORMAL and arrives is None else ["gave way"])


@pytest.mark.model
def test_a_partial_pass_gives_way_to_urgent_work_and_a_final_pass_waits(
    models, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """While someone's answer takes its first words the recognizer is not held by a
    partial pass queued for the gate (a pass that may end a turn would wait behind it)."""
    from edge.runtime import COMPUTE_GATE, YieldedToUrgentError
    from edge.voice import resample
    from edge.voice._pause import recognize as _recognize

    stt, tts = models
    monkeypatch.setattr(COMPUTE_GATE, "enabled", True)
    spoken = tts.synthesize("What is the capital of France?")
    audio = resample(spoken.audio, spoken.sample_rate, stt.sample_rate).astype(np.float32)
    holding, release = threading.Event(), threading.Event()

    def first_words() -> None:
        with urgency(URGENT), COMPUTE_GATE.hold("llm"):
            holding.set()
            release.wait(5)

    heard: list[str] = []
    h = threading.Thread(target=first_words)
    h.start()
    assert holding.wait(5)
    with pytest.raises(YieldedToUrgentError):
        _recognize(stt, audio, full_window=False, urgent=False)
    final = threading.Thread(
        target=lambda: heard.append(_recognize(stt, audio, full_window=False, urgent=True).text)
    )
    final.start()
    time.sleep(0.05)
    assert heard == []  # it waits for the step
    release.set()
    final.join(30)
    h.join(5)
    assert "france" in heard[0].lower()


@pytest.mark.model
def test_a_pass_waiting_for_the_gate_does_not_hold_the_recognizer(models, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A model step holds the gate; another's ordinary pass (a Wyoming recording, say),
    then a pass that ends someone's turn ask for the recognizer: the turn's pass runs
    first. The ordinary pass waits at the gate, not inside the recognizer (where the
    urgent one would wait for it and for every model step ahead of it)."""
    stt, tts = models
    from edge.voice import resample

    monkeypatch.setattr(COMPUTE_GATE, "enabled", True)
    spoken = tts.synthesize("What is the capital of France?")
    audio = resample(spoken.audio, spoken.sample_rate, stt.sample_rate).astype(np.float32)
    order: list[str] = []
    acquire = stt._lock._acquire

    def recording(level: int, *rest: object) -> float:
        waited = acquire(level, *rest)
        order.append(threading.current_thread().name)
        return waited

    monkeypatch.setattr(stt._lock, "_acquire", recording)
    busy, release = threading.Event(), threading.Event()

    def step() -> None:
        with COMPUTE_GATE.hold("llm"):
            busy.set()
            release.wait(10)

    def transcribe(level: int) -> None:
        with urgency(level):
            stt.transcribe(audio)

    threads = [threading.Thread(target=step)]
    threads[0].start()
    assert busy.wait(10)
    for name, level in (("ordinary", NORMAL), ("urgent", URGENT)):
        threads.append(threading.Thread(target=transcribe, args=(level,), name=name))
        threads[-1].start()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (
            len(COMPUTE_GATE._lock._waiting) + len(stt._lock._waiting) < len(threads) - 1
        ):
            time.sleep(0.005)
    release.set()
    for t in threads:
        t.join(60)
    assert order == ["urgent", "ordinary"]


def test_urgent_work_of_the_turn_that_began_first_goes_first() -> None:
    """Among urgent waiters, the work of the earlier turn (its place in line) before a
    later turn's that asked first."""
    gate = ComputeGate(enabled=True)
    order: list[str] = []
    holding, release = threading.Event(), threading.Event()
    base = time.perf_counter()

    def holder() -> None:
        with gate.hold("llm"):
            holding.set()
            release.wait(5)

    def waiter(name: str, began: float) -> None:
        with urgency(URGENT), turn_started(base + began), gate.hold(name):
            order.append(name)

    threads = [threading.Thread(target=holder)]
    threads[0].start()
    assert holding.wait(5)
    for name, began in (("later turn", 2.0), ("earlier turn", 1.0)):
        threads.append(threading.Thread(target=waiter, args=(name, began)))
        threads[-1].start()
        while len(gate._lock._waiting) < len(threads) - 1:
            time.sleep(0.002)
    release.set()
    for t in threads:
        t.join(5)
    assert order == ["earlier turn", "later turn"]


def test_a_first_sentence_never_waits_for_the_rest_of_an_answers_run() -> None:
    """A first sentence ends a turn (its listener's own answer may be the run going on):
    it goes right after the step in progress, however late its turn began (it never waits
    out a run of urgent model steps)."""
    gate = ComputeGate(enabled=True)
    order: list[str] = []
    stepping = threading.Event()
    began = time.perf_counter()

    def answer() -> None:
        for k in range(6):
            with urgency(URGENT), turn_started(began), gate.hold("llm"):
                order.append(f"step {k}")
                stepping.set()
                time.sleep(0.01)
            time.sleep(0.002)  # the scheduler asks for the next step

    def first_sentence() -> None:
        with urgency(URGENT), gate.hold(FIRST_SENTENCE):
            order.append("first sentence")

    run = threading.Thread(target=answer)
    run.start()
    assert stepping.wait(5)
    other = threading.Thread(target=first_sentence)
    other.start()
    run.join(5)
    other.join(5)
    assert order.index("first sentence") <= 2, order


def test_model_steps_one_after_another_never_wait_for_a_runs_grace(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A model step outside any turn (one request at a time, a speculative answer) stands
    in line at the moment it asks, later than the step before it: it never waits out a
    grace after that step."""
    monkeypatch.setattr(ComputeGate, "URGENT_GRACE_S", 1.0)
    gate = ComputeGate(enabled=True)
    for _ in range(3):
        with urgency(URGENT), gate.hold("llm"):
            pass
    assert gate.stats.max_wait_s["llm"] < ComputeGate.URGENT_GRACE_S / 2, gate.stats


def test_an_urgent_run_keeps_the_lock_from_a_later_turns_urgent_work() -> None:
    """Four speaking at once: an answer's first tokens (a turn that began first) came one
    after another, and another speaker's pass at a pause (urgent too, but of a turn begun
    later) took the lock in the gap between two tokens. In the run's grace only urgent
    work of the same turn or an earlier one may take it; a later turn's goes next."""
    lock = OrderedLock(urgent_grace_s=0.2, turn_grace_s=0.2)
    order: list[str] = []

    def take(level: int, place: float, name: str) -> None:
        with lock.hold(level, place=place):
            order.append(name)

    with lock.hold(URGENT, place=1.0):  # the answer of the turn that began at 1.0
        later = threading.Thread(target=take, args=(URGENT, 2.0, "later turn's pass"))
        earlier = threading.Thread(target=take, args=(URGENT, 0.5, "earlier turn's pass"))
        later.start()
        time.sleep(0.05)  # the later turn's pass now waits
    time.sleep(0.02)  # the answer's next token comes a moment after the last one
    take(URGENT, 1.0, "next token")
    earlier.start()  # an earlier turn's urgent work may go in the grace
    earlier.join(2)
    later.join(2)
    assert order == ["next token", "earlier turn's pass", "later turn's pass"]


def test_a_later_turns_urgent_waiter_kept_out_waits_out_the_runs_grace() -> None:
    """A later turn's urgent work that the turn grace kept out sleeps until the run's
    whole grace lapses when the run has no next step (measured: waking it at the end of
    the turn grace made four people speaking at once slower at worst)."""
    lock = OrderedLock(urgent_grace_s=0.3, turn_grace_s=0.05)
    waited: list[float] = []

    def later_pass() -> None:
        started = time.perf_counter()
        with lock.hold(URGENT, place=2.0):
            waited.append(time.perf_counter() - started)

    with lock.hold(URGENT, place=1.0):  # the answer of the turn that began at 1.0
        later = threading.Thread(target=later_pass)
        later.start()
        time.sleep(0.05)  # the later turn's pass now waits
    later.join(2)
    assert waited and 0.25 < waited[0] < 1.5


def test_urgent_waiting_and_giving_way_while_still_partial() -> None:
    """What a step under way reads to give way between its parts: whether urgent work
    waits for the gate (ordinary waiters do not count; an off gate has none), and whether
    its own work still gives way (a partial someone came to wait for does not)."""
    from edge.runtime import gives_way, yielding

    gate = ComputeGate(enabled=True)
    holding, release = threading.Event(), threading.Event()

    def holder() -> None:
        with gate.hold("llm"):
            holding.set()
            release.wait(5)

    def waiter(level: int) -> None:
        with urgency(level), gate.hold("stt"):
            pass

    h = threading.Thread(target=holder)
    h.start()
    assert holding.wait(5)
    ordinary = threading.Thread(target=waiter, args=(NORMAL,))
    ordinary.start()
    time.sleep(0.05)
    assert not gate.urgent_waiting()
    urgent = threading.Thread(target=waiter, args=(URGENT,))
    urgent.start()
    time.sleep(0.05)
    assert gate.urgent_waiting() and not ComputeGate(enabled=False).urgent_waiting()
    release.set()
    for t in (h, ordinary, urgent):
        t.join(5)
    assert not gate.urgent_waiting()

    assert not gives_way()
    partial = [True]
    with yielding(lambda: partial[0]):
        assert gives_way()
        partial[0] = False
        assert not gives_way()
    with yielding():
        assert gives_way()
