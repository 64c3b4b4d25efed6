"""The generic path: messages through Python objects, between any
:class:`~pumpd.engine.endpoint.MessageSource` and any
:class:`~pumpd.engine.endpoint.MessageDestination` (a pair of two wires, or of a wire with no
native path of its own).

It does what the native relay does (``amqp091/relay_path.py``), one Python object per message:

* It keeps what the source delivered and was not forwarded yet (``buffered``): the source's
  prefetch window bounds it, and where none does (``no_ack`` ignores it; prefetch 0) the
  source is not read while more than the window (or :data:`BUFFER_BOUND`) wait, so that a
  destination out of credit cannot make it grow.
* It forwards in delivery order, as far as the destination's credit goes, and numbers each
  forward in a confirm window (:class:`~pumpd.dataplane.implementation.ConfirmWindow`, the
  relay's own): destination sequence number → source tag, which of them are settled, and the
  source tag one ``multiple`` ack may cover.
* It settles the source in ranges, the relay's way: ``on_confirm`` after the destination
  accepted (the settled prefix of the window, coalesced), ``on_publish`` once forwarded,
  ``no_ack`` never. A message the destination hands back to be requeued (AMQP 1.0 released or
  modified) is requeued at the source, alone and before any range that covers its tag: the
  source delivers it again and it is forwarded again, never lost.
* A message that cannot be delivered goes to the undeliverable policy (``undeliverable.py``):
  one the destination cannot send (:class:`~pumpd.engine.endpoint.Unforwardable`) pauses the
  path before it, as the relay pauses on it; one the destination refused (REJECT: AMQP 0-9-1
  basic.nack, AMQP 1.0 rejected) pauses it too, and so does a returned message with
  ``hold_returns``. Later messages may have been forwarded and accepted already, and no range
  may cover the refused tag before the policy settled it (for good, when the policy stops the
  shovel): a refused message stays unsettled in the confirm window until then, so the window's
  settled prefix, which a range acks, ends before it. A returned message carries no sequence
  number; the acks due when it came are written first, and the window's later ones wait for
  the policy, as the relay leaves the confirms after a return unread until then.

:class:`PathLedger` is that bookkeeping, with no I/O (the unit tests drive it);
:class:`MessagePath` connects it to the two endpoints and to the session (``PathHooks``).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Mapping

from ..amqp10.message import Message
from ..dataplane.api import ConfirmWindow as ConfirmWindowApi
from ..dataplane.api import Delivered, Returned
from ..dataplane.frames import ACK_MODE_NO_ACK, ACK_MODE_ON_CONFIRM, ACK_MODE_ON_PUBLISH
from ..dataplane.implementation import ConfirmWindow
from ..dataplane.properties import UnparseableProperties, table_entries
from .batching import BatchingRule
from .endpoint import (
    REJECTED,
    Edits,
    Incoming,
    MessageDestination,
    MessageSource,
    PathHooks,
    Settlement,
    Unforwardable,
)
from .message_forms import delivered_view

__all__ = ["BUFFER_BOUND", "MessagePath", "PathLedger", "Range", "hop_fields", "message_size"]

# With no prefetch window: messages received and not forwarded above which the source is not
# read (until half of them went).
BUFFER_BOUND = 4096
_BUFFER_HOLD = "message-path-buffer"  # the source's pause reason for it

#: a settlement to write at the source: Source.settle(first, last, how)
Range = tuple[int, int, Settlement]


def message_size(message: Delivered | Message) -> int:
    """The body bytes a message counts for (``bytes``): a 0-9-1 body; a 1.0 message's data
    sections, or its encoded size when its body is not data."""
    if not isinstance(message, Message):
        return len(message.body)
    if message.body and all(isinstance(section, bytes) for section in message.body):
        return sum(len(section) for section in message.body)
    return len(message.raw or b"")


def hop_fields(forward_hop: bytes | None) -> tuple[tuple[str, str], ...]:
    """The hop table ``forwarding.py`` encoded (string values only), as text pairs in order.

    :raises ValueError: for a table with another type of value, or one that cannot be parsed
    """
    if forward_hop is None:
        return ()
    out = []
    try:
        entries = table_entries(forward_hop)
    except UnparseableProperties as exc:
        raise ValueError(f"forward hop table: {exc}") from None
    for key, _start, vpos, end in entries:
        if forward_hop[vpos] != ord("S"):
            raise ValueError(f"forward hop table: {key!r} is not a string "
                             f"(type {chr(forward_hop[vpos])!r})")
        out.append((key.decode(), forward_hop[vpos + 5:end].decode()))
    return tuple(out)


class _Held:
    """A message with the undeliverable policy; ``wseq``: its window sequence number when it
    was forwarded (refused), left unsettled there until the policy settled it."""

    __slots__ = ("incoming", "reason", "view", "wseq")

    def __init__(self, incoming: Incoming, reason: str, wseq: int | None) -> None:
        self.incoming, self.reason, self.wseq = incoming, reason, wseq
        self.view: Delivered | None = None


class PathLedger:
    """The generic path's bookkeeping (see the module docstring): what is buffered, in flight,
    due at the source and held by the policy, and the relay's counters. No I/O: its caller
    forwards what :meth:`take_next` gives, reports the outcome, and writes :meth:`take_ranges`.

    :param ack_mode: ``frames.ACK_MODE_*``
    :param window: the prefetch window (sizes the confirm window; 0: it grows)
    :param limit: forward this many deliveries, hold the rest (0: no limit)
    :param keep_last: keep the last message forwarded (:attr:`last_message`)
    :param hold_returns: a returned message pauses the destination side for the policy
    """

    def __init__(self, *, ack_mode: int, window: int = 0, limit: int = 0,
                 keep_last: bool = False, hold_returns: bool = False,
                 window_class: Callable[[int], ConfirmWindowApi] = ConfirmWindow) -> None:
        if ack_mode not in (ACK_MODE_NO_ACK, ACK_MODE_ON_PUBLISH, ACK_MODE_ON_CONFIRM):
            raise ValueError(f"unknown ack mode {ack_mode}")
        self._ack_mode = ack_mode
        self._confirming = ack_mode == ACK_MODE_ON_CONFIRM
        self._limit = limit
        self._keep_last = keep_last
        self._hold_returns = hold_returns
        self._window = window_class(window or 64)
        self._offset: int | None = None  # destination sequence number - window sequence number
        self._in_flight: dict[int, Incoming] = {}  # window sequence number → message
        self._low = 1  # no window sequence number below this is in flight
        self._buffer: deque[Incoming] = deque()
        # Source tags taken to forward and not yet covered by a settlement written (in
        # delivery order), and those among them settled on their own: a range starts at the
        # oldest of the first that is not among the second.
        self._unsettled: deque[int] = deque()
        self._apart: set[int] = set()
        # settlements to write, in order: (first or None for "the oldest unsettled", last, how,
        # messages it acks)
        self._due: deque[tuple[int | None, int, Settlement, int]] = deque()
        self._due_acks = 0
        self._pub_tag = 0  # on_publish: the newest tag forwarded and not yet acked
        self._pub_count = 0
        self._held: deque[_Held] = deque()
        self._returned: deque[tuple[Returned, bool]] = deque()
        self._blocks = 0  # returned messages with the policy: the window's acks wait
        # refused messages left unsettled in the window for the policy: the destination has
        # settled them, so they are not in flight
        self._refused = 0
        self._hold_rest = False
        self._last: Incoming | None = None
        self._last_view: Delivered | None = None
        self.consumed = self.published = self.redelivered = self.returned = self.bytes = 0
        self.acked = 0

    # -- levels and counters ----------------------------------------------------------------

    @property
    def confirmed(self) -> int:
        return self._window.confirmed

    @property
    def nacked(self) -> int:
        return self._window.nacked

    @property
    def in_flight(self) -> int:
        """Forwarded, not yet settled by the destination (``on_confirm`` only)."""
        return self._window.outstanding - self._refused

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    @property
    def limit_reached(self) -> bool:
        return bool(self._limit) and self.consumed >= self._limit

    @property
    def pending_acks(self) -> int:
        """Source messages the next :meth:`take_ranges` acknowledges."""
        n = self._due_acks + self._pub_count
        if self._confirming and not self._blocks:
            n += self._window.pending_acks
        return n

    def has_settlements(self) -> bool:
        return bool(self._due or self._pub_tag
                    or (self._confirming and not self._blocks and self._window.pending_acks))

    @property
    def paused(self) -> bool:
        """A message waits for the undeliverable policy (:meth:`take_undeliverable`)."""
        return bool(self._held)

    @property
    def destination_paused(self) -> bool:
        return bool(self._returned)

    @property
    def blocked(self) -> bool:
        """The window's acks wait for the policy to settle a returned message."""
        return bool(self._blocks)

    @property
    def last_message(self) -> Delivered | None:
        last = self._last
        if last is None:
            return None
        if self._last_view is None or self._last_view.delivery_tag != last.tag:
            self._last_view = delivered_view(last.tag, last.redelivered, last.message, "")
        return self._last_view

    # -- the source's side ------------------------------------------------------------------

    def received(self, incoming: Incoming) -> bool:
        """A delivery; False when it is held (the limit reached, or the policy stopped the
        shovel): never forwarded nor settled, the source requeues it at the close."""
        if self._hold_rest or (self._limit and self.consumed >= self._limit):
            return False
        self.consumed += 1
        if incoming.redelivered:
            self.redelivered += 1
        self.bytes += message_size(incoming.message)
        self._buffer.append(incoming)
        if self._ack_mode != ACK_MODE_NO_ACK:
            self._unsettled.append(incoming.tag)
        return True

    def _uncount(self, incoming: Incoming) -> None:
        """A delivery taken back from the counters: the relay counts neither one it cannot
        forward nor one it holds."""
        self.consumed -= 1
        if incoming.redelivered:
            self.redelivered -= 1
        self.bytes -= message_size(incoming.message)

    @property
    def forwardable(self) -> bool:
        """Whether :meth:`take_next` has a message to forward now."""
        return bool(self._buffer) and not self._held and not self._hold_rest

    def take_next(self) -> Incoming:
        """The next message to forward (the caller reports :meth:`forwarded` or
        :meth:`unforwardable`)."""
        return self._buffer.popleft()

    def forwarded(self, incoming: Incoming, seq: int) -> None:
        """``incoming`` went to the destination as its sequence number ``seq``.

        :raises RuntimeError: when the destination did not number its forwards consecutively
        """
        self.published += 1
        if self._keep_last:
            self._last = incoming
        if self._confirming:
            wseq = self._window.add(incoming.tag)
            if self._offset is None:
                self._offset = seq - wseq
                self._low = wseq
            elif seq - wseq != self._offset:
                raise RuntimeError(f"the destination numbered a forward {seq}, not "
                                   f"{wseq + self._offset}: its numbers must be consecutive")
            self._in_flight[wseq] = incoming
        elif self._ack_mode == ACK_MODE_ON_PUBLISH:
            self._pub_tag = incoming.tag
            self._pub_count += 1

    def unforwardable(self, incoming: Incoming, reason: str) -> None:
        """The destination could not send ``incoming``: the path pauses on it (nothing after
        it is forwarded until the policy settled it)."""
        self._uncount(incoming)
        self._held.append(_Held(incoming, reason, None))

    # -- the destination's side ---------------------------------------------------------------

    def settled(self, first: int, last: int, how: Settlement) -> bool:
        """The destination settled its sequence numbers ``first``..``last``; True when that
        paused the path (a refused message for the policy). Ignored unless ``on_confirm``."""
        if not self._confirming or self._offset is None:
            return False
        held_before = len(self._held)
        flight, window = self._in_flight, self._window
        while self._low < window.next_seq and self._low not in flight:
            self._low += 1
        for wseq in range(max(first - self._offset, self._low),
                          min(last - self._offset, window.next_seq - 1) + 1):
            incoming = flight.pop(wseq, None)
            if incoming is None:
                continue  # settled before
            if how == Settlement.ACCEPT:
                window.ack(wseq, False)
            elif how == Settlement.REQUEUE:
                for tag in window.nack(wseq, False):
                    self._due.append((tag, tag, Settlement.REQUEUE, 0))
            else:  # unsettled in the window until the policy settled it (see :meth:`resume`)
                self._refused += 1
                self._held.append(_Held(incoming, REJECTED, wseq))
        return len(self._held) > held_before

    def _block(self) -> None:
        """Hold the window's acks back until :meth:`resume_destination`; those due now cover
        only messages before the returned one (its confirm follows the return), and are
        written first."""
        if not self._blocks:
            n = self._window.pending_acks
            tag = self._window.take_ack()
            if tag:
                self._due.append((None, tag, Settlement.ACCEPT, n))
                self._due_acks += n
        self._blocks += 1

    def returned_message(self, returned: Returned) -> bool:
        """The destination returned a message; True when that paused the destination side
        (``hold_returns``: it goes to the policy before its settlement counts)."""
        self.returned += 1
        if not self._hold_returns:
            return False
        blocks = self._confirming
        if blocks:
            self._block()
        self._returned.append((returned, blocks))
        return True

    # -- settling at the source -----------------------------------------------------------------

    def take_ranges(self) -> list[Range]:
        """The settlements to write at the source now, in order: requeues and acks due before
        a held message, then one range for what was forwarded (``on_publish``) or accepted
        (``on_confirm``, unless held back)."""
        out: list[Range] = []
        for first, last, how, n in self._due:
            out.append(self._range(first, last, how, n))
        self._due.clear()
        self._due_acks = 0
        if self._pub_tag:
            out.append(self._range(None, self._pub_tag, Settlement.ACCEPT, self._pub_count))
            self._pub_tag = self._pub_count = 0
        if self._confirming and not self._blocks:
            n = self._window.pending_acks
            tag = self._window.take_ack()
            if tag:
                out.append(self._range(None, tag, Settlement.ACCEPT, n))
        return out

    def _range(self, first: int | None, last: int, how: Settlement, acks: int) -> Range:
        """One settlement, recorded as written: a range from the oldest tag not yet settled
        (``first`` None), or one tag on its own."""
        self.acked += acks
        unsettled, apart = self._unsettled, self._apart
        if first is not None:  # one tag
            if unsettled and unsettled[0] == first:
                unsettled.popleft()
            else:
                apart.add(first)
            return first, last, how
        while unsettled and unsettled[0] in apart:
            apart.discard(unsettled.popleft())
        first = unsettled[0] if unsettled else last
        while unsettled and unsettled[0] <= last:
            tag = unsettled.popleft()
            if apart:
                apart.discard(tag)
        return first, last, how

    # -- the undeliverable policy -------------------------------------------------------------

    def take_undeliverable(self) -> Delivered | None:
        """The message the path paused on, in 0-9-1 form with its reason; None when not
        paused."""
        if not self._held:
            return None
        held = self._held[0]
        if held.view is None:
            inc = held.incoming
            held.view = delivered_view(inc.tag, inc.redelivered, inc.message, held.reason)
        return held.view

    def resume(self) -> None:
        """The policy settled the message the path paused on (unless it stopped the shovel:
        :meth:`hold_rest` came first, and what it held back stays held)."""
        if not self._held:
            return
        held = self._held.popleft()
        if self._hold_rest:
            return
        tag = held.incoming.tag
        if self._ack_mode != ACK_MODE_NO_ACK:
            if self._unsettled and self._unsettled[0] == tag:
                self._unsettled.popleft()
            else:
                self._apart.add(tag)
        if held.wseq is not None:
            # settled at the source now: the window's settled prefix may pass it (its nack
            # keeps it out of the acks counted)
            self._window.nack(held.wseq, False)
            self._refused -= 1

    def hold_rest(self) -> None:
        """Forward nothing more: what is buffered and what comes is held unsettled, so the
        source requeues it at the close."""
        self._hold_rest = True
        for incoming in self._buffer:
            self._uncount(incoming)
        self._buffer.clear()

    def take_returned(self) -> Returned | None:
        return self._returned[0][0] if self._returned else None

    def resume_destination(self) -> None:
        """The policy settled the returned message the destination side paused on."""
        if self._returned:
            _, blocks = self._returned.popleft()
            if blocks:
                self._blocks -= 1


class MessagePath:
    """One session's generic path between ``source`` and ``destination`` (see the module
    docstring); ``relay_options`` are the relay's own (``ack_mode``, ``window``, ``limit``,
    ``keep_last``, ``hold_returns`` and the edits of ``forwarding.py``)."""

    def __init__(self, source: MessageSource, destination: MessageDestination, *,
                 ack_mode: int, window: int = 0, limit: int = 0, keep_last: bool = False,
                 hold_returns: bool = False, exchange: bytes | None = None,
                 routing_key: bytes | None = None,
                 property_overrides: Mapping[int, bytes] | None = None,
                 forward_hop: bytes | None = None, timestamp_header: bool = False,
                 mandatory: bool = True) -> None:
        self.source, self.destination = source, destination
        self.ledger = PathLedger(ack_mode=ack_mode, window=window, limit=limit,
                                 keep_last=keep_last, hold_returns=hold_returns)
        self.edits = Edits(exchange=exchange, routing_key=routing_key,
                           property_overrides=dict(property_overrides or {}),
                           forward_hop=forward_hop, hop=hop_fields(forward_hop),
                           timestamp_header=timestamp_header, mandatory=mandatory)
        # A prefetch window bounds the buffer already (the source sends no more than it),
        # except with no_ack, where the source ignores it: then this bound does.
        self._bound = window or BUFFER_BOUND
        self._buffer_held = False  # the source is not read while the buffer is full
        self.flush_scheduled = False
        self._hooks: PathHooks | None = None
        self._rule: BatchingRule | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # deliveries since the last scheduled flush, for the read hold
        self._arrived = self._arrived_bytes = 0

    # -- counters and levels, read by the session and the pump --------------------------------

    @property
    def consumed(self) -> int:
        return self.ledger.consumed

    @property
    def published(self) -> int:
        return self.ledger.published

    @property
    def confirmed(self) -> int:
        return self.ledger.confirmed

    @property
    def acked(self) -> int:
        return self.ledger.acked

    @property
    def nacked(self) -> int:
        return self.ledger.nacked

    @property
    def returned(self) -> int:
        return self.ledger.returned

    @property
    def redelivered(self) -> int:
        return self.ledger.redelivered

    @property
    def bytes(self) -> int:
        return self.ledger.bytes

    @property
    def in_flight(self) -> int:
        return self.ledger.in_flight

    @property
    def buffered(self) -> int:
        return self.ledger.buffered

    @property
    def limit_reached(self) -> bool:
        return self.ledger.limit_reached

    @property
    def pending_acks(self) -> int:
        return self.ledger.pending_acks

    @property
    def paused(self) -> bool:
        return self.ledger.paused

    @property
    def destination_paused(self) -> bool:
        return self.ledger.destination_paused

    @property
    def last_message(self) -> Delivered | None:
        return self.ledger.last_message

    def has_settlements(self) -> bool:
        return self.ledger.has_settlements()

    # -- moving ---------------------------------------------------------------------------------

    def start(self, hooks: PathHooks, *, read_hold: BatchingRule) -> None:
        self._hooks, self._rule = hooks, read_hold
        self._loop = asyncio.get_running_loop()
        self.destination.set_edits(self.edits)
        self.destination.on_settled(self._on_settled)
        self.destination.on_returned(self._on_returned)
        self.destination.on_credit(self._schedule)
        self.source.on_delivery(self._on_delivery)

    def _schedule(self) -> None:
        """Have the session flush in this loop iteration (once, however many events)."""
        if not self.flush_scheduled and self._loop is not None:
            self.flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        """The scheduled flush, after the read hold's rule saw what arrived since the last one
        (most often one socket read's deliveries)."""
        hooks, rule = self._hooks, self._rule
        assert hooks is not None and rule is not None
        if self._arrived and rule.hold > 0:
            hold = rule.after_read(time.monotonic(), self._arrived_bytes, self._arrived)
            if hold > 0:
                hooks.hold_source(hold)
        self._arrived = self._arrived_bytes = 0
        self.flush_scheduled = False
        hooks.flush()

    def _on_delivery(self, incoming: Incoming) -> None:
        ledger = self.ledger
        counted = ledger.bytes
        if not ledger.received(incoming):
            return
        self._arrived += 1
        self._arrived_bytes += ledger.bytes - counted  # its size, as the ledger counted it
        if not self._buffer_held and ledger.buffered > self._bound:
            self._buffer_held = True
            self.source.pause_reading(True, _BUFFER_HOLD)
        self._schedule()

    def _on_settled(self, first: int, last: int, how: Settlement) -> None:
        if self.ledger.settled(first, last, how):
            assert self._hooks is not None
            self._hooks.source_paused()
        if self.ledger.has_settlements():
            self._schedule()

    def _on_returned(self, returned: Returned) -> None:
        if self.ledger.returned_message(returned):
            assert self._hooks is not None
            self._hooks.destination_paused()

    def forward(self) -> None:
        """Forward what is buffered, as far as the destination's credit goes."""
        ledger, destination = self.ledger, self.destination
        while ledger.forwardable and destination.credit_left > 0:
            incoming = ledger.take_next()
            try:
                seq = destination.forward(incoming.message)
            except Unforwardable as exc:
                ledger.unforwardable(incoming, str(exc))
                assert self._hooks is not None
                self._hooks.source_paused()
                break
            ledger.forwarded(incoming, seq)
        if self._buffer_held and ledger.buffered <= self._bound // 2:
            self._buffer_held = False
            self.source.pause_reading(False, _BUFFER_HOLD)

    def settle(self) -> None:
        source = self.source
        for first, last, how in self.ledger.take_ranges():
            source.settle(first, last, how)

    # -- a message the policy settles ----------------------------------------------------------

    def take_undeliverable(self) -> Delivered | None:
        return self.ledger.take_undeliverable()

    def resume(self) -> None:
        self.ledger.resume()
        self._schedule()

    def hold_rest(self) -> None:
        self.ledger.hold_rest()
        if self._buffer_held:  # reading goes on: the close needs the broker's answers
            self._buffer_held = False
            self.source.pause_reading(False, _BUFFER_HOLD)

    def take_returned(self) -> Returned | None:
        return self.ledger.take_returned()

    def resume_destination(self) -> None:
        self.ledger.resume_destination()
        self._schedule()

