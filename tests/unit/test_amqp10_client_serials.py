"""32-bit serial numbers (RFC 1982) and their mapping onto 64-bit counters: a number before
the wrap maps below one after it, and a range crossing the wrap goes out as two wire ranges."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pumpd.amqp10.serials import MASK, serial_add, serial_diff, unwrap_before, wire_ranges

counters = st.integers(min_value=0, max_value=2**63)


def test_serial_arithmetic_wraps_at_2_32() -> None:
    assert serial_add(MASK, 1) == 0
    assert serial_add(MASK - 1, 5) == 3
    assert serial_diff(3, MASK - 1) == 5
    assert serial_diff(MASK - 1, 3) == -5
    assert serial_diff(7, 7) == 0


@given(a=st.integers(0, MASK), d=st.integers(-(2**31) + 1, 2**31 - 1))
def test_serial_diff_undoes_serial_add(a: int, d: int) -> None:
    assert serial_diff(serial_add(a, d), a) == d


@given(next64=counters, back=st.integers(1, 2**32))
def test_unwrap_before_finds_the_number_behind_next(next64: int, back: int) -> None:
    number = next64 - back
    assert unwrap_before(number & MASK, next64) == number


@pytest.mark.parametrize("boundary", [2**16, 2**32, 2 * 2**32])
def test_numbers_on_both_sides_of_a_wrap_map_in_order(boundary: int) -> None:
    next64 = boundary + 3
    mapped = [unwrap_before((boundary + k) & MASK, next64) for k in range(-3, 3)]
    assert mapped == [boundary + k for k in range(-3, 3)]


def test_a_range_crossing_the_wrap_is_split() -> None:
    assert wire_ranges(2**32 - 3, 2**32 + 2) == [(MASK - 2, MASK), (0, 2)]
    assert wire_ranges(2**32, 2**32 + 2) == [(0, 2)]
    assert wire_ranges(5, 5) == [(5, 5)]
    assert wire_ranges(2**16 - 1, 2**16) == [(2**16 - 1, 2**16)]


@given(first=counters, length=st.integers(0, 2**33))
def test_wire_ranges_cover_the_range_exactly(first: int, length: int) -> None:
    last = first + length
    if length > MASK:
        with pytest.raises(ValueError, match="more than 2"):
            wire_ranges(first, last)
        return
    ranges = wire_ranges(first, last)
    assert sum(b - a + 1 for a, b in ranges) == length + 1
    assert all(a <= b for a, b in ranges)
    assert ranges[0][0] == first & MASK and ranges[-1][1] == last & MASK


def test_a_backward_range_is_refused() -> None:
    with pytest.raises(ValueError, match="first is after last"):
        wire_ranges(9, 8)
