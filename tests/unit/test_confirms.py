"""The confirm window: sliding tag window, outstanding-confirm bitmap, ack coalescing."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.support.impls import IMPLEMENTATIONS, confirm_window_class


@pytest.fixture(params=IMPLEMENTATIONS)
def Window(request: pytest.FixtureRequest) -> Any:
    return confirm_window_class(request.param)


def test_in_order_single_acks_coalesce_into_one_multiple_ack(Window: Any) -> None:
    w = Window(16)
    seqs = [w.add(100 + i) for i in range(10)]
    assert seqs == list(range(1, 11))
    for s in seqs:
        w.ack(s, False)
    assert w.take_ack() == 109
    assert w.take_ack() == 0
    assert (w.acked, w.confirmed, w.outstanding) == (10, 10, 0)


def test_prefix_waits_for_the_oldest_confirm(Window: Any) -> None:
    w = Window(8)
    for i in range(1, 6):
        w.add(i)
    w.ack(2, False)
    w.ack(3, False)
    assert w.take_ack() == 0  # 1 still outstanding: acking 3 with multiple would ack 1 too
    w.ack(1, False)
    assert w.take_ack() == 3
    assert w.outstanding == 2


def test_multiple_confirm_settles_everything_up_to_it(Window: Any) -> None:
    w = Window(8)
    for i in range(1, 301):
        w.add(1000 + i)
    w.ack(250, True)
    assert w.take_ack() == 1250
    assert w.outstanding == 50
    assert w.confirmed == 250


@pytest.mark.parametrize(
    ("tags", "acks", "nack", "refused", "ack_tag", "outstanding", "acked", "nacked"),
    [
        # the prefix ends at 5 once 1 is nacked; the ack is for tag 50 and counts only acked ones
        pytest.param([10, 20, 30, 40, 50], [2, 3, 4, 5], (1, False), [10], 50, 0, 4, 1,
                     id="nacked-head"),
        pytest.param([1, 2, 3], [1, 2], (3, False), [3], 2, 0, 2, 1, id="nacked-tail"),
        pytest.param([1, 2, 3, 4, 5, 6], [2, 4], (5, True), [1, 3, 5], 4, 1, 2, 3,
                     id="multiple-nack-rejects-only-unsettled"),
    ],
)
def test_nack_returns_the_source_tags_and_is_never_covered_by_an_ack(
        Window: Any, tags: list[int], acks: list[int], nack: tuple[int, bool], refused: list[int],
        ack_tag: int, outstanding: int, acked: int, nacked: int) -> None:
    w = Window(8)
    for tag in tags:
        w.add(tag)
    for seq in acks:
        w.ack(seq, False)
    assert w.nack(*nack) == refused
    assert w.take_ack() == ack_tag
    assert (w.outstanding, w.acked, w.nacked) == (outstanding, acked, nacked)


def test_duplicate_and_unknown_confirms_are_ignored(Window: Any) -> None:
    w = Window(8)
    w.add(7)
    w.ack(1, False)
    w.ack(1, False)
    w.ack(1, True)
    w.ack(99, False)
    assert w.take_ack() == 7
    assert (w.confirmed, w.acked, w.outstanding) == (1, 1, 0)
    assert w.nack(1, False) == []


def test_unlimited_window_grows_and_keeps_every_tag(Window: Any) -> None:
    w = Window(0)
    n = 20_000
    for i in range(n):
        w.add(5 + i)
    assert w.capacity >= n
    for s in range(n, 0, -2):  # every second one, newest first
        w.ack(s, False)
    assert w.take_ack() == 0
    w.ack(1, False)
    assert w.take_ack() == 5 + 1  # seqs 1 and 2 settled (3 is not); seq 2 is tag 6
    w.ack(n, True)
    assert w.take_ack() == 5 + n - 1
    assert w.outstanding == 0


def test_ring_wraps_many_times_at_a_small_capacity(Window: Any) -> None:
    w = Window(64)
    tag = 0
    for _ in range(1000):
        for _ in range(60):
            tag += 1
            w.add(tag)
        w.ack(w.next_seq - 1, True)
        assert w.take_ack() == tag
    assert w.capacity == 64
    assert w.acked == 60_000


@pytest.mark.parametrize("seed", range(25))
def test_random_confirms_never_ack_an_unsettled_message(Window: Any, seed: int) -> None:
    """Against a plain model of the source: an ack(multiple, T) must only cover tags the
    destination acked; nacked tags leave at once; at the end every acked tag was acked."""
    rng = random.Random(seed)
    w = Window(rng.choice([0, 64, 128, 1000]))
    at_source: set[int] = set()  # delivered and not yet acked/nacked at the source
    dest_acked: set[int] = set()
    unsettled: dict[int, int] = {}  # seq -> tag
    tag = 0
    for _ in range(3000):
        op = rng.random()
        if op < 0.45 or not unsettled:
            tag += rng.choice([1, 1, 1, 2])  # tags may skip (held deliveries)
            seq = w.add(tag)
            unsettled[seq] = tag
            at_source.add(tag)
        elif op < 0.9:
            seq = rng.choice(list(unsettled))
            multiple = rng.random() < 0.3
            w.ack(seq, multiple)
            for s in [s for s in unsettled if s == seq or (multiple and s <= seq)]:
                dest_acked.add(unsettled.pop(s))
        else:
            seq = rng.choice(list(unsettled))
            multiple = rng.random() < 0.2
            rejected = w.nack(seq, multiple)
            expected = sorted(t for s, t in unsettled.items() if s == seq or (multiple and s <= seq))
            assert rejected == expected
            for s in [s for s in unsettled if s == seq or (multiple and s <= seq)]:
                at_source.discard(unsettled.pop(s))
        t = w.take_ack()
        if t:
            covered = {x for x in at_source if x <= t}
            assert t in at_source
            assert covered <= dest_acked, "an ack covered a message the destination never acked"
            at_source -= covered
        assert w.outstanding == len(unsettled)
    for seq in list(unsettled):
        w.ack(seq, False)
        dest_acked.add(unsettled.pop(seq))
    t = w.take_ack()
    at_source -= {x for x in at_source if x <= t}
    assert not at_source, "every message the destination acked is acked at the source"
