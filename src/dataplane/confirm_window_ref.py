"""Confirm bookkeeping, pure Python reference: the delivery-tag sliding window, the
outstanding-confirm bitmap and multiple-ack coalescing.

``pumpd._fastpath.ConfirmWindow`` implements the same API in C; the same tests run against both.

Publishes are numbered by the destination's confirm sequence (1, 2, ...). Each carries the source
delivery tag it came from; because a shovel publishes in delivery order, sequence order is tag
order, which is what makes one ``basic.ack(multiple=true)`` on the source safe for a whole settled
prefix. A publish is *settled* once the destination acked or nacked it. ``base`` is the oldest
unsettled sequence number; everything below it is settled. Finding how far ``base`` moves after
a confirm is a count of trailing ones in 64-bit words, never a walk over every outstanding entry.
"""

from __future__ import annotations

_WORD = 64
_ALL = (1 << _WORD) - 1


class ConfirmWindow:
    """Outstanding publishes: sequence number → source delivery tag, and which are settled.

    The ring grows (doubling) when more publishes are outstanding than it holds, so a prefetch of
    0 (unlimited) works; with a prefetch it never grows past the first power of two above it.
    """

    def __init__(self, capacity: int = 64) -> None:
        cap = _WORD
        while cap < capacity:
            cap *= 2
        self._cap = cap
        self._tags = [0] * cap
        self._settled = [0] * (cap // _WORD)
        self._nacked: set[int] = set()
        self._base = 1
        self._next = 1
        self._unsettled = 0
        self._pending_tag = 0
        self._pending_count = 0
        self.confirmed = 0  # destination acks, per message
        self.nacked = 0  # destination nacks, per message
        self.acked = 0  # source messages covered by the acks handed out by take_ack()

    @property
    def outstanding(self) -> int:
        """Published and not yet settled by the destination."""
        return self._unsettled

    @property
    def pending_acks(self) -> int:
        """Settled publishes the next take_ack() will cover."""
        return self._pending_count

    @property
    def next_seq(self) -> int:
        return self._next

    @property
    def capacity(self) -> int:
        return self._cap

    def add(self, delivery_tag: int) -> int:
        """Record the next publish; returns its confirm sequence number."""
        if self._next - self._base >= self._cap:
            self._grow()
        seq = self._next
        self._tags[seq & (self._cap - 1)] = delivery_tag
        self._next = seq + 1
        self._unsettled += 1
        return seq

    def ack(self, seq: int, multiple: bool) -> None:
        """The destination confirmed ``seq`` (and, with ``multiple``, everything before it)."""
        if multiple:
            self._settle_range(self._base, min(seq, self._next - 1))
        elif self._base <= seq < self._next:
            self._settle_range(seq, seq)
        self._advance()

    def nack(self, seq: int, multiple: bool) -> list[int]:
        """The destination refused ``seq`` (and, with ``multiple``, everything unsettled before
        it). Returns the source delivery tags to reject with requeue, oldest first."""
        first = self._base if multiple else seq
        last = min(seq, self._next - 1)
        rejected: list[int] = []
        mask = self._cap - 1
        for s in range(max(first, self._base), last + 1):
            if not self._is_settled(s):
                self._set_bit(s)
                self._unsettled -= 1
                self._nacked.add(s)
                rejected.append(self._tags[s & mask])
        self.nacked += len(rejected)
        self._advance()
        return rejected

    def unsettled(self) -> list[int]:
        """Sequence numbers published and not yet settled, oldest first."""
        return [s for s in range(self._base, self._next) if not self._is_settled(s)]

    def take_ack(self) -> int:
        """The delivery tag for one source ``basic.ack(multiple=true)`` covering every publish
        acked since the last call, or 0 when there is none. The tag is always one the source
        still holds unacknowledged (never a nacked one)."""
        tag = self._pending_tag
        if tag:
            self.acked += self._pending_count
            self._pending_tag = 0
            self._pending_count = 0
        return tag

    # -- internals -------------------------------------------------------------------------

    def _word_index(self, seq: int) -> int:
        return (seq // _WORD) & (len(self._settled) - 1)

    def _is_settled(self, seq: int) -> bool:
        return bool(self._settled[self._word_index(seq)] >> (seq % _WORD) & 1)

    def _set_bit(self, seq: int) -> None:
        self._settled[self._word_index(seq)] |= 1 << (seq % _WORD)

    def _settle_range(self, first: int, last: int) -> None:
        """Mark [first, last] settled by ack, whole words at a time."""
        s = first
        while s <= last:
            offset = s % _WORD
            n = min(_WORD - offset, last - s + 1)
            bits = ((1 << n) - 1) << offset
            w = self._word_index(s)
            newly = n - bin(self._settled[w] & bits).count("1")
            self.confirmed += newly
            self._unsettled -= newly
            self._settled[w] |= bits
            s += n

    def _advance(self) -> None:
        mask = self._cap - 1
        while self._base < self._next:
            offset = self._base % _WORD
            w = self._word_index(self._base)
            run_bits = (~self._settled[w] & _ALL) >> offset
            # count of trailing ones from base within this word
            run = (run_bits & -run_bits).bit_length() - 1 if run_bits else _WORD - offset
            run = min(run, self._next - self._base)
            if run == 0:
                return
            self._settled[w] &= ~(((1 << run) - 1) << offset) & _ALL
            first, last = self._base, self._base + run - 1
            self._base += run
            if not self._nacked:
                self._pending_tag = self._tags[last & mask]
                self._pending_count += run
                continue
            for s in range(first, last + 1):
                if s in self._nacked:
                    self._nacked.discard(s)
                else:
                    self._pending_tag = self._tags[s & mask]
                    self._pending_count += 1

    def _grow(self) -> None:
        old_cap, old_tags, old_bits = self._cap, self._tags, self._settled
        self._cap = old_cap * 2
        self._tags = [0] * self._cap
        self._settled = [0] * (self._cap // _WORD)
        for s in range(self._base, self._next):
            self._tags[s & (self._cap - 1)] = old_tags[s & (old_cap - 1)]
            if old_bits[(s // _WORD) & (len(old_bits) - 1)] >> (s % _WORD) & 1:
                self._set_bit(s)


class ConfirmCounts:
    """``confirmed`` and ``nacked`` of a reference data plane: its confirm window's counts."""

    _window: ConfirmWindow

    @property
    def confirmed(self) -> int:
        """Destination acks, per message."""
        return self._window.confirmed

    @property
    def nacked(self) -> int:
        """Destination nacks, per message."""
        return self._window.nacked
