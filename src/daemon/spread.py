"""Which member of a group of daemons should run each position: the even-spread rule, pure.

Every member computes the same answer from the same inputs (the live members' ids and the
positions of the shared configuration), with no message exchanged: the rule is a function, and
its hash is blake2b, never Python's ``hash()`` (salted per process for strings).

The rule is rendezvous hashing (highest random weight) under a load bound. Each (member,
position) pair has a weight, ``blake2b(member, shovel, index)``. Plain rendezvous hashing gives
each position to its heaviest member: stable (a member joining takes only the positions it now
outweighs everyone for, a member leaving hands only its own), but uneven: 30 positions over 3
members land anywhere from about 5 to 15 each (the binomial spread, measured in
``tests/test_spread.py``), and the issue's target is 10 ± 1. So the load is bounded: with P
positions and M members each member runs ``P // M`` positions, and ``P % M`` of them one more.
Pairs are taken in order of falling weight, and a pair's position goes to its member when the
position is still unplaced and the member has room (``P // M`` taken, or one of the extra places
still free). That is the greedy matching of the heaviest pairs: a position goes to its heaviest
member whenever that member's quota allows, and the answer depends only on the sets given,
never on their order.

What the bound costs in movement, measured over random member ids with ``bench``-free code in
the tests: a member joining 3 (30 positions) moves 8.75 positions on average (12 at worst in
2,000 trials), where 7.5 is the least any even rule can move; a member leaving moves 10.9 on
average (14 at worst) where 10 must move. Loads are always ``P // M`` or one more.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import NamedTuple

__all__ = ["PositionKey", "assign", "loads", "moved", "weight"]


class PositionKey(NamedTuple):
    """One worker position of a shovel: the unit the group spreads."""

    shovel: str
    worker: int


def weight(member: str, position: PositionKey) -> int:
    """The pair's rendezvous weight: 64 bits of blake2b over the member id and the position,
    each part length-prefixed so that no two different pairs hash the same bytes."""
    h = hashlib.blake2b(digest_size=8, person=b"pumpd-spread")
    for part in (member.encode(), position.shovel.encode(), str(position.worker).encode()):
        h.update(len(part).to_bytes(4, "big"))
        h.update(part)
    return int.from_bytes(h.digest(), "big")


def assign(members: Iterable[str], positions: Iterable[PositionKey]) -> dict[PositionKey, str]:
    """The preferred member of every position (see the module docstring).

    Duplicate members or positions count once. With no member, no position has one: the
    result is empty.
    """
    member_set = sorted(set(members))
    position_set = sorted(set(positions))
    if not member_set or not position_set:
        return {}
    quota, extra = divmod(len(position_set), len(member_set))
    # Ties of weight (2^-64 per pair) fall back on the names: a total order, so every process
    # sorts the same list.
    pairs = sorted(((weight(m, p), m, p) for m in member_set for p in position_set),
                   reverse=True)
    load = dict.fromkeys(member_set, 0)
    placed: dict[PositionKey, str] = {}
    for _w, member, position in pairs:
        if position in placed:
            continue
        n = load[member]
        if n < quota or (n == quota and extra > 0):
            if n == quota:
                extra -= 1
            load[member] = n + 1
            placed[position] = member
            if len(placed) == len(position_set):
                break
    return placed


def loads(assignment: Mapping[PositionKey, str], members: Iterable[str]) -> dict[str, int]:
    """How many positions each member is given (members given none included, at 0)."""
    out = dict.fromkeys(members, 0)
    for member in assignment.values():
        out[member] = out.get(member, 0) + 1
    return out


def moved(before: Mapping[PositionKey, str], after: Mapping[PositionKey, str]) -> set[PositionKey]:
    """The positions whose preferred member differs between two assignments (a position in
    one only counts as moved)."""
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
