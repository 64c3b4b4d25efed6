"""The one rule for the names of the queues pumpd declares for its own bookkeeping
(engine/queue_names.py): spelled out when they fit, a readable head and a stable hash when not."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pumpd.engine.queue_names import (
    LEASE_PREFIX,
    MAX_QUEUE_NAME,
    info_queue,
    lease_queue,
    member_queue,
    paused_queue,
    queue_name,
    stream_position_queue,
)


def test_names_that_fit_are_spelled_out() -> None:
    assert lease_queue("eu", "orders", 3) == f"{LEASE_PREFIX}.eu.orders.3"
    assert stream_position_queue("orders") == "pumpd.stream-position.orders"
    assert member_queue("g", 3) == "pumpd.member.g.3"
    assert info_queue("g", 3) == "pumpd.member-info.g.3"
    assert paused_queue("g", "orders") == "pumpd.paused.g.orders"


@pytest.mark.parametrize("name", [stream_position_queue, lambda s: paused_queue("g", s),
                                  lambda s: lease_queue("g", s, 12)])
def test_long_names_that_share_a_beginning_stay_distinct_and_readable(name: object) -> None:
    assert callable(name)
    a, b = name("s" * 300 + "a"), name("s" * 300 + "b")
    assert a != b
    assert len(a.encode()) <= MAX_QUEUE_NAME and len(b.encode()) <= MAX_QUEUE_NAME
    assert a.startswith("pumpd.") and "sss" in a and "~" in a
    assert a == name("s" * 300 + "a")  # every daemon computes the same name


def test_a_lease_keeps_its_index_at_the_end_when_cut() -> None:
    a = lease_queue("c", "é" * 200 + "a", 0)  # 401 bytes: cut inside a two-byte character
    assert a.startswith(f"{LEASE_PREFIX}.c.éé") and a.endswith(".0")
    a.encode().decode()


@given(st.text(min_size=0, max_size=600), st.text(min_size=0, max_size=600))
def test_two_shovel_names_never_share_a_record(x: str, y: str) -> None:
    if x != y:
        assert stream_position_queue(x) != stream_position_queue(y)
    n = stream_position_queue(x)
    assert len(n.encode()) <= MAX_QUEUE_NAME
    n.encode().decode()


def test_a_head_and_tail_that_leave_no_room_are_a_programming_error() -> None:
    with pytest.raises(ValueError, match="no room"):
        queue_name("h" * 250, "x" * 10, "t")
