"""The adaptive batching rule (engine/batching.py): its decisions on synthetic read timelines.
No timing is measured: every read carries the time the rule is told."""

from __future__ import annotations

import math

import pytest
from pumpd.engine.batching import (
    ACK_MIN_MESSAGES,
    HOLD_MIN_MESSAGES,
    READ_HOLD_BELOW,
    ArrivalRate,
    BatchingRule,
)

HOLD = 0.001
ACK_DELAY = 0.001


def steady(rule: BatchingRule, rate: float, seconds: float, per_read: int = 1,
           start: float = 100.0, nbytes: int = 200) -> list[float]:
    """Reads of ``per_read`` messages at ``rate`` msg/s for ``seconds``; the holds decided.
    A hold delays the next read, which then carries what arrived meanwhile, as on a socket."""
    holds = []
    now, t_end = start, start + seconds
    interval = per_read / rate
    while now < t_end:
        hold = rule.after_read(now, nbytes * per_read, per_read)
        holds.append(hold)
        if hold > 0:
            # the messages of the hold arrive in one read at its end
            carried = max(1, round(hold * rate))
            now += hold
            holds.append(rule.after_read(now, nbytes * carried, carried))
        now += interval
    return holds


def test_rate_counts_messages_per_second() -> None:
    rate = ArrivalRate(window=0.05)
    t = 0.0
    for _ in range(2000):  # 20,000 msg/s for 0.1 s
        t += 0.00005
        rate.add(t, 1)
    assert rate.per_second(t) == pytest.approx(20_000 * (1 - math.exp(-0.1 / 0.05)), rel=0.05)


def test_rate_decays_when_the_link_goes_quiet() -> None:
    rate = ArrivalRate(window=0.05)
    rate.add(0.0, 1000)
    assert rate.per_second(0.0) == pytest.approx(20_000)
    assert rate.per_second(0.25) == pytest.approx(20_000 * math.exp(-5))
    assert rate.per_second(0.5) < 1  # ten windows later


def test_rate_ignores_a_clock_that_goes_back() -> None:
    rate = ArrivalRate(window=0.05)
    rate.add(1.0, 10)
    rate.add(0.5, 10)  # out of order: counted, no negative decay
    assert rate.per_second(1.0) == pytest.approx(20 / 0.05)


@pytest.mark.parametrize("window", [0, -1.0])
def test_rate_window_must_be_positive(window: float) -> None:
    with pytest.raises(ValueError, match="window must be positive"):
        ArrivalRate(window)


@pytest.mark.parametrize("msg_rate", [100, 1_000, 10_000])
def test_a_quiet_or_middle_rate_never_holds(msg_rate: float) -> None:
    rule = BatchingRule(HOLD, ACK_DELAY)
    holds = steady(rule, msg_rate, 0.5)
    assert not any(holds)
    assert not rule.holding


@pytest.mark.parametrize("msg_rate", [30_000, 100_000])
def test_a_busy_link_holds_once_the_rate_is_known(msg_rate: float) -> None:
    rule = BatchingRule(HOLD, ACK_DELAY)
    holds = steady(rule, msg_rate, 0.5, per_read=4)
    assert holds[-1] == HOLD
    assert rule.holding
    # the first reads go on at once: the rate is not known yet
    assert holds[0] == 0
    # once holding it stays so at a steady rate
    first = holds.index(HOLD)
    assert all(h == HOLD for h in holds[first:])


def test_threshold_is_the_rate_at_which_a_hold_gathers_enough() -> None:
    threshold = HOLD_MIN_MESSAGES / HOLD
    below, above = BatchingRule(HOLD, ACK_DELAY), BatchingRule(HOLD, ACK_DELAY)
    assert not any(steady(below, threshold * 0.8, 0.5))
    assert any(steady(above, threshold * 1.5, 0.5))


def test_hysteresis_keeps_holding_a_little_below_the_threshold() -> None:
    threshold = HOLD_MIN_MESSAGES / HOLD
    rule = BatchingRule(HOLD, ACK_DELAY)
    steady(rule, threshold * 2, 0.3)
    assert rule.holding
    later = steady(rule, threshold * 0.7, 0.5, start=100.3)
    assert later[-1] == HOLD  # above the release point
    steady(rule, threshold * 0.3, 0.5, start=100.8)
    assert not rule.holding


def test_a_long_read_never_holds() -> None:
    rule = BatchingRule(HOLD, ACK_DELAY)
    steady(rule, 100_000, 0.3, per_read=4)
    assert rule.holding
    assert rule.after_read(100.31, READ_HOLD_BELOW, 300) == 0
    assert rule.holding  # still busy: the next short read holds again
    assert rule.after_read(100.3101, 2000, 10) == HOLD


def test_a_burst_that_stops_releases_the_hold() -> None:
    rule = BatchingRule(HOLD, ACK_DELAY)
    steady(rule, 50_000, 0.2, per_read=4)
    assert rule.holding
    # a single message 0.5 s later: the rate has decayed, it goes on at once
    assert rule.after_read(100.7, 200, 1) == 0
    assert not rule.holding


def test_hold_zero_turns_holding_off() -> None:
    rule = BatchingRule(0.0, ACK_DELAY)
    assert not any(steady(rule, 100_000, 0.2, per_read=4))


def test_acks_wait_only_when_more_messages_are_coming() -> None:
    rule = BatchingRule(HOLD, ACK_DELAY)
    assert rule.ack_wait(100.0) == 0  # nothing known: ack now
    steady(rule, 500, 0.5)
    assert rule.ack_wait(100.5) == 0  # 0.5 expected within the delay
    busy = BatchingRule(HOLD, ACK_DELAY)
    steady(busy, 20_000, 0.3)
    assert busy.ack_wait(100.3) == ACK_DELAY
    assert 20_000 * ACK_DELAY >= ACK_MIN_MESSAGES


def test_ack_delay_zero_acks_at_once() -> None:
    rule = BatchingRule(HOLD, 0.0)
    steady(rule, 100_000, 0.1, per_read=4)
    assert rule.ack_wait(100.1) == 0
