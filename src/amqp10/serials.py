"""AMQP 1.0's 32-bit sequence numbers (RFC 1982 serial arithmetic, as §2.8.9 and §2.8.10 of
the specification use it) and their mapping onto 64-bit counters that never wrap.

Delivery-ids, transfer-ids and delivery counts wrap at 2^32; the caller counts deliveries with
a Python int that only grows, so that a delivery after the wrap is still "after". A wire number
maps onto the counter by its distance from a known 64-bit position (:func:`unwrap_before`), and
a range of counters maps back onto at most two wire ranges (:func:`wire_ranges`): one on each
side of the wrap.
"""

from __future__ import annotations

__all__ = ["HALF", "MASK", "serial_add", "serial_diff", "unwrap_before", "wire_ranges"]

MASK = 0xFFFF_FFFF
HALF = 0x8000_0000


def serial_add(a: int, n: int) -> int:
    """``a + n`` in 32-bit serial arithmetic (``n`` below 2^31)."""
    return (a + n) & MASK


def serial_diff(a: int, b: int) -> int:
    """``a - b`` for two 32-bit serial numbers: negative when ``a`` precedes ``b``, in
    -2^31 .. 2^31-1 (the distance 2^31 itself is undefined by RFC 1982; taken as negative)."""
    d = (a - b) & MASK
    return d - (1 << 32) if d >= HALF else d


def unwrap_before(wire: int, next64: int) -> int:
    """The 64-bit number that is below ``next64`` (the next one to be assigned), nearest to it,
    and ends in the 32 bits ``wire``: what a peer means by ``wire`` when it speaks of a number
    already assigned. May be negative when ``wire`` was never assigned; the caller checks the
    lower bound it knows."""
    back = ((next64 & MASK) - wire) & MASK
    if back == 0:
        back = 1 << 32
    return next64 - back


def wire_ranges(first: int, last: int) -> list[tuple[int, int]]:
    """The wire ranges (first, last, both inclusive) for the 64-bit range ``first..last``: one,
    or two when it crosses a multiple of 2^32 (a range on the wire never wraps: some peers
    compare the ends as plain integers). ``last - first`` must be below 2^32."""
    if first > last:
        raise ValueError(f"range {first}..{last}: first is after last")
    if last - first > MASK:
        raise ValueError(f"range {first}..{last} spans more than 2^32 numbers")
    if first >> 32 == last >> 32:
        return [(first & MASK, last & MASK)]
    return [(first & MASK, MASK), (0, last & MASK)]
