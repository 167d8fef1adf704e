"""The thread policy: every thread while the cores are free, fewer while other processes
keep cores busy, back when they stop (fake /proc/stat figures and clock)."""

from __future__ import annotations

from pathlib import Path

from edge.llm._threads import ThreadPolicy, cpu_busy_s


class Machine:
    """CPU seconds used by everything (``busy``) and by this process (``own``) over time."""

    def __init__(self) -> None:
        self.t = 0.0
        self.busy = 0.0
        self.own = 0.0

    def run(self, seconds: float, *, own_cores: float, other_cores: float) -> None:
        self.t += seconds
        self.own += own_cores * seconds
        self.busy += (own_cores + other_cores) * seconds


def policy(m: Machine, threads: int = 2, cores: int = 2, adaptive: bool = True) -> ThreadPolicy:
    p = ThreadPolicy(
        threads,
        adaptive=adaptive,
        busy=lambda: m.busy,
        own=lambda: m.own,
        clock=lambda: m.t,
    )
    p.cores = cores
    return p


def test_all_threads_while_idle_fewer_while_a_core_is_busy_and_back() -> None:
    m = Machine()
    p = policy(m)
    assert p.update() == 2
    m.run(1.0, own_cores=2.0, other_cores=0.0)
    assert p.update() == 2
    m.run(1.0, own_cores=1.1, other_cores=0.9)  # another process holds a core
    assert p.update() == 1 and 0.8 < p.others_busy < 1.0
    m.run(1.0, own_cores=1.0, other_cores=1.0)
    assert p.update() == 1
    m.run(1.0, own_cores=1.0, other_cores=0.05)  # it stopped
    assert p.update() == 2


def test_a_little_other_work_keeps_every_thread_and_a_big_machine_keeps_its_threads() -> None:
    m = Machine()
    p = policy(m)
    p.update()
    m.run(1.0, own_cores=2.0, other_cores=0.1)
    assert p.update() == 2
    big = Machine()
    p8 = policy(big, threads=4, cores=8)
    p8.update()
    big.run(1.0, own_cores=4.0, other_cores=2.0)  # two of eight cores busy: four still free
    assert p8.update() == 4
    big.run(1.0, own_cores=2.0, other_cores=6.0)  # six busy: the two left
    assert p8.update() == 2


def test_measures_at_most_every_interval_and_never_below_one() -> None:
    m = Machine()
    p = policy(m)
    p.update()
    m.run(0.05, own_cores=0.0, other_cores=2.0)
    assert p.update() == 2  # too soon to measure again
    m.run(0.5, own_cores=0.0, other_cores=2.0)
    assert p.update() == 1


def test_the_first_evaluation_sees_what_ran_since_the_policy_was_made() -> None:
    m = Machine()
    p = policy(m)  # made as the model loads
    m.run(0.5, own_cores=1.0, other_cores=1.0)
    assert p.update() == 1  # not the configured two for a first, long prompt


def test_a_prompt_right_after_a_quick_load_already_sees_a_busy_core() -> None:
    """The bench's first prompt came 0.13 s after the policy was made (a small model loads
    in 0.12 s), before an interval's history: it took both threads beside a busy core and
    ran 20 % slower than the next one."""
    m = Machine()
    p = policy(m)
    m.run(0.13, own_cores=1.0, other_cores=1.0)
    assert p.update() == 1
    m.run(0.05, own_cores=1.0, other_cores=1.0)
    assert p.update() == 1  # and the next evaluations keep it
    m.run(0.3, own_cores=1.0, other_cores=1.0)
    assert p.update() == 1


def test_a_prompt_right_after_a_quick_load_keeps_every_thread_when_idle() -> None:
    m = Machine()
    p = policy(m)
    m.run(0.13, own_cores=2.0, other_cores=0.0)  # loading, then the prompt
    assert p.update() == 2


def test_fixed_policy_always_uses_its_threads() -> None:
    m = Machine()
    p = policy(m, adaptive=False)
    m.run(1.0, own_cores=1.0, other_cores=1.0)
    assert p.update() == 2


def test_reads_busy_time_of_the_allowed_cores(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text(
        "cpu  300 0 100 900 0 0 0 0 0 0\n"
        "cpu0 100 0 50 400 7 1 1 0 0 0\n"
        "cpu1 200 0 50 500 0 0 0 0 0 0\n"
        "intr 1 2 3\n"
    )
    import os

    tick = os.sysconf("SC_CLK_TCK")
    assert cpu_busy_s({0}, stat) == (100 + 50 + 1 + 1) / tick
    assert cpu_busy_s({0, 1}, stat) == (152 + 250) / tick
    assert cpu_busy_s({0}, tmp_path / "missing") is None


def test_a_burst_that_ended_before_the_last_interval_keeps_every_thread() -> None:
    """Another server answered a second ago; the sampler saw it end: the next prompt, after
    the idle spell, gets both threads (before, the whole spell was one window, 1 thread)."""
    m = Machine()
    p = policy(m)
    m.run(0.5, own_cores=0.0, other_cores=2.0)  # the other server's answer
    p.sample()
    for _ in range(4):  # a second of quiet, sampled every interval
        m.run(0.25, own_cores=0.0, other_cores=0.0)
        p.sample()
    m.run(0.05, own_cores=0.0, other_cores=0.3)  # the client building its request
    assert p.update() == 2


def test_a_core_held_through_the_idle_spell_still_takes_a_thread() -> None:
    m = Machine()
    p = policy(m)
    for _ in range(4):
        m.run(0.25, own_cores=0.0, other_cores=1.0)  # a renderer
        p.sample()
    m.run(0.05, own_cores=0.0, other_cores=1.0)
    assert p.update() == 1


def test_the_sampler_thread_records_in_the_background() -> None:
    import time

    p = ThreadPolicy(2, interval_s=0.01)
    p.start()
    try:
        deadline = time.monotonic() + 5
        while len(p._samples) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(p._samples) >= 4
    finally:
        p.stop()


def test_a_sampler_that_found_no_counters_is_not_started_again() -> None:
    """Every evaluation asks for the sampler (``apply`` starts it): where there are no
    ``/proc/stat`` counters it ends at once, and must not come back once per prompt."""
    p = ThreadPolicy(2, busy=lambda: None, interval_s=0.01)
    p.start()
    first = p._sampler
    assert first is not None
    first.join(1)
    p.start()
    assert p._sampler is first


def test_one_token_steps_take_the_thread_count_that_decodes_faster_now() -> None:
    """Four spoken turns at once: work in this process the counters cannot tell from the
    model's (no other process is busy) held a core, and a token took 30 ms on two threads,
    15-18 ms on one. One-token steps use the faster count, try the other every
    PROBE_EVERY steps, and go back to every thread once that is faster again."""
    from edge.llm._threads import PROBE_EVERY

    m = Machine()
    p = policy(m)
    speed = {2: 0.030, 1: 0.016}  # a core held in this process

    def steps(n: int) -> list[int]:
        used = []
        for _ in range(n):
            threads = p.one_token_threads()
            p.one_token_took(threads, speed[threads])
            used.append(threads)
        return used

    used = steps(PROBE_EVERY * 2)
    assert used[:2] == [2, 1]  # each count tried once
    assert used.count(2) == 3  # then one thread, and two again once every PROBE_EVERY
    speed = {2: 0.007, 1: 0.014}  # the core is free again
    used = steps(PROBE_EVERY * 2)
    # back on every thread from the next try of two on, one thread tried once again
    assert used[-PROBE_EVERY:] == [2] * (PROBE_EVERY - 1) + [1]
    assert p.update() == 2  # prompts were never limited


def test_one_token_steps_use_the_configured_threads_when_not_adaptive() -> None:
    p = policy(Machine(), adaptive=False)
    p.one_token_took(2, 0.03)
    p.one_token_took(1, 0.01)
    assert p.one_token_threads() == 2
