"""Which broker of a side's list to connect to next, and whether a failure must wait.

The plugin picks a broker at random for every connection attempt, the one that just failed
included, and waits ``reconnect_delay`` after every failure. With one broker of three down that
costs a shovel several delays, each backing off, while two healthy brokers sit there. Instead,
a *round* tries every broker of the list once: the first pick is random (so that many shovels
spread over the nodes), after a failure the next is a broker not yet tried in this round, at
once, and only when every broker of the round has failed does the shovel wait (and back off).
The broker that failed last starts the next round's list last, so that a node that just died is
not the first one tried again. A session that was healthy starts a new round.

Pure bookkeeping: no I/O, no clock; the random source is passed in.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class BrokerRound(Generic[T]):
    """The broker order of one side (source or destination) of a shovel.

    :param brokers: the side's broker list (at least one)
    :param rng: where the random start comes from
    """

    def __init__(self, brokers: Sequence[T], rng: random.Random) -> None:
        if not brokers:
            raise ValueError("a broker list needs at least one broker")
        self._brokers = list(brokers)
        self._rng = rng
        self._untried: list[int] = []
        self._current = self._new_round(last_failed=None)

    def _new_round(self, last_failed: int | None) -> int:
        """Shuffle the list (``last_failed`` last) and return its first broker; the rest are
        this round's untried ones."""
        order = list(range(len(self._brokers)))
        self._rng.shuffle(order)
        if last_failed is not None and len(order) > 1:
            order.remove(last_failed)
            order.append(last_failed)
        self._untried = order[1:]
        return order[0]

    @property
    def current(self) -> T:
        """The broker to connect to now."""
        return self._brokers[self._current]

    def failed(self) -> bool:
        """The current broker failed; move on. Returns True when another broker of this round
        is left to try at once, False when the round is over (every broker failed: wait)."""
        if self._untried:
            self._current = self._untried.pop(0)
            return True
        self._current = self._new_round(last_failed=self._current)
        return False

    def healthy(self) -> None:
        """The current broker served a healthy session: the next failure starts a new round
        (every other broker untried again)."""
        order = [i for i in range(len(self._brokers)) if i != self._current]
        self._rng.shuffle(order)
        self._untried = order
