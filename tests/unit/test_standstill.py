"""The coordinator's stand-still rule, on a clock of the test's own: a gap between two passes
well beyond the tick gives every worker a fresh window from the resumption; nothing else does."""

from __future__ import annotations

import time

from pumpd.engine.fence import gap_clock
from pumpd.supervisor.standstill import StandStill, stood_still_after


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_the_threshold_is_well_beyond_the_tick_and_a_quarter_of_the_heartbeat_timeout() -> None:
    assert stood_still_after(0.25, 10.0) == 2.5
    assert stood_still_after(0.25, 3.0) == 1.0  # four ticks: a slow pass is no stand-still
    assert stood_still_after(0.25, 0.0) == 1.0


def test_passes_a_tick_apart_excuse_nothing() -> None:
    clock = FakeClock()
    watch = StandStill(1.0, clock)
    for i in range(1, 100):
        clock.t += 0.25
        assert watch.passed(50.0 + i * 0.25) is None
    # a heartbeat 4 s old is 4 s of silence: the coordinator watched all along
    assert watch.silent_for(70.0, 74.0) == 4.0


def test_a_gap_beyond_the_threshold_is_a_stand_still_and_silences_count_from_the_resumption(
) -> None:
    clock = FakeClock()
    watch = StandStill(1.0, clock)
    clock.t += 0.25
    assert watch.passed(100.0) is None
    clock.t += 25.3  # the whole process group stopped
    gap = watch.passed(125.3)
    assert gap is not None and abs(gap - 25.3) < 1e-9
    heartbeat = 99.9  # written just before the freeze
    assert abs(watch.silent_for(heartbeat, 125.3)) < 1e-9
    # the window runs from the resumption: a worker that does not beat again is judged then
    clock.t += 0.25
    assert watch.passed(125.55) is None
    assert abs(watch.silent_for(heartbeat, 128.3) - 3.0) < 1e-9
    assert abs(watch.silent_for(heartbeat, 135.4) - 10.1) < 1e-9
    # a heartbeat written after the resumption counts from itself
    assert abs(watch.silent_for(126.0, 127.0) - 1.0) < 1e-9


def test_a_suspend_the_pass_times_do_not_show_is_seen_on_the_gap_clock() -> None:
    """CLOCK_MONOTONIC stands still during a suspend; the gap's clock does not: the window
    starts at the pass's own time all the same."""
    clock = FakeClock()
    watch = StandStill(2.5, clock)
    clock.t += 3600.0  # an hour's suspend, invisible to the monotonic pass times
    assert watch.passed(200.25) == 3600.0
    assert watch.silent_for(200.0, 200.25) == 0.0


def test_the_gap_clock_counts_like_the_monotonic_clock_while_awake() -> None:
    # each gap-clock read sandwiched between two monotonic reads: no tolerance, no speed
    m0, a0, m1 = time.monotonic(), gap_clock(), time.monotonic()
    time.sleep(0.2)
    m2, a1, m3 = time.monotonic(), gap_clock(), time.monotonic()
    assert m2 - m1 - 1e-6 <= a1 - a0 <= m3 - m0 + 1e-6
