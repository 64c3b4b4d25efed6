"""The broker order of one side (engine/brokers.py): rounds, random starts, the failed one last."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from pumpd.engine.brokers import BrokerRound


def test_one_broker_every_failure_ends_the_round() -> None:
    r = BrokerRound(["a"], random.Random(1))
    for _ in range(3):
        assert r.current == "a"
        assert r.failed() is False


def test_a_round_tries_every_broker_once_before_waiting() -> None:
    r = BrokerRound(["a", "b", "c"], random.Random(7))
    tried = [r.current]
    assert r.failed() is True
    tried.append(r.current)
    assert r.failed() is True
    tried.append(r.current)
    assert sorted(tried) == ["a", "b", "c"]
    assert r.failed() is False  # all three failed: wait now


def test_the_broker_that_failed_last_is_tried_last_in_the_next_round() -> None:
    for seed in range(50):
        r = BrokerRound(["a", "b", "c"], random.Random(seed))
        for _ in range(2):
            r.failed()
        last = r.current
        assert r.failed() is False
        nxt = [r.current]
        r.failed()
        nxt.append(r.current)
        r.failed()
        nxt.append(r.current)
        assert nxt[-1] == last, (seed, nxt, last)


def test_the_first_pick_is_spread_over_the_list() -> None:
    picks = Counter(BrokerRound(["a", "b", "c"], random.Random(s)).current for s in range(600))
    assert set(picks) == {"a", "b", "c"}
    assert min(picks.values()) > 120  # 200 each expected


def test_a_healthy_session_keeps_its_broker_and_starts_a_new_round() -> None:
    r = BrokerRound(["a", "b", "c"], random.Random(3))
    first = r.current
    r.failed()
    second = r.current
    r.healthy()
    assert r.current == second
    # the next failure may go to either other broker, the earlier failure forgotten
    assert r.failed() is True
    third = r.current
    assert third != second
    assert r.failed() is True
    assert {second, third, r.current} == {"a", "b", "c"}
    assert first in {third, r.current}


def test_a_round_with_a_dead_broker_first_reaches_a_live_one_at_once() -> None:
    """The issue's case: [dead, live, live]; wherever the dead one falls in the order, a live one
    comes within the round, never after a wait."""
    for seed in range(100):
        r = BrokerRound(["dead", "live1", "live2"], random.Random(seed))
        if r.current == "dead":
            assert r.failed() is True
        assert r.current.startswith("live")


def test_an_empty_list_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one broker"):
        BrokerRound([], random.Random())
