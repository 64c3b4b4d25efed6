"""AMQP 1.0 links (§2.6): a :class:`Receiver` (messages from the peer, with credit and
settlement) and a :class:`Sender` (messages to the peer, within the credit it grants).

A link lives on a session (:mod:`pumpd.amqp10.session`), which numbers the deliveries: the
wire's 32-bit delivery-ids become 64-bit numbers that never wrap (:mod:`pumpd.amqp10.serials`),
the numbers the caller sees, settles and is told about. What a link needs of its session is
:class:`LinkHost`.

Receiver credit works like a prefetch count: :meth:`Receiver.flow` sets how many deliveries may
be unsettled at once (granted and not yet received included). Credit is granted again once the
credit granted before is used up, for as many deliveries as the caller settled meanwhile (a
pre-settled receiver, ``settle_mode="settled"``, for all of it), in one flow frame per event loop
iteration. Not earlier: RabbitMQ 3.x turns each flow into an absolute credit for its queue, and
deliveries still inside the broker (sent by the queue, not yet transferred) would be sent on top
of it; when the credit is used up, none are, and no flow can over-grant. Deliveries beyond the
credit are taken all the same and counted (:attr:`Receiver.beyond_credit`, with a warning the
first time): RabbitMQ 3.x stream queues ignore credit and send up to the session's prefetch, and
refusing them would make streams unreadable. The caller bounds what it holds with
:meth:`~pumpd.amqp10.connection.Connection.pause_reading`.

A sender sends only within its credit: :attr:`Sender.credit` says how many :meth:`Sender.send`
calls may be made now (its link credit, bounded by the room in its session window);
``send`` at 0 raises :class:`~pumpd.amqp10.errors.NoCredit`. The caller queues and waits for
:meth:`Sender.on_credit`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from .errors import (
    MESSAGE_SIZE_EXCEEDED,
    NOT_ALLOWED,
    Amqp10Error,
    NoCredit,
    PeerViolation,
)
from .performatives import (
    Accepted,
    Attach,
    Detach,
    Flow,
    Modified,
    Rejected,
    Released,
    Source,
    Target,
    Transfer,
)
from .serials import MASK, serial_add, serial_diff
from .values import UByte, UInt, ULong

__all__ = ["DEFAULT_MAX_MESSAGE_SIZE", "LinkHost", "Receiver", "Sender"]

log = logging.getLogger("pumpd.amqp10")

#: a receiver refuses a message larger than this unless told otherwise (RabbitMQ's default
#: max_message_size)
DEFAULT_MAX_MESSAGE_SIZE = 128 * 1024 * 1024

# the outcomes that settle a delivery for good (§3.4); "received" does not
TERMINAL_STATES = (Accepted, Rejected, Released, Modified)

TransferCallback = Callable[[int, bytes, bool], None]
DispositionCallback = Callable[[int, int, Any], None]


class LinkHost(Protocol):
    """What a link needs of its session."""

    @property
    def peer(self) -> str: ...

    def send_performative(self, performative: Any, payload: bytes = b"") -> None:
        """Write a frame on the session's channel (in the next flush)."""
        ...

    def send_link_flow(self, handle: int, delivery_count: int, link_credit: int, *,
                       drain: bool = False, echo: bool = False) -> None:
        """A flow frame for a link, with the session's window."""
        ...

    def incoming_delivery(self, wire_id: int) -> int:
        """The 64-bit number of a new incoming delivery with delivery-id ``wire_id``.

        :raises PeerViolation: out of sequence
        """
        ...

    def settle_incoming(self, first: int, last: int, state: Any) -> None:
        """A disposition (role receiver, settled) for ``first``..``last``."""
        ...

    def settle_outgoing(self, first: int, last: int, state: Any) -> None:
        """A disposition (role sender, settled) for ``first``..``last``."""
        ...

    def transfer(self, handle: int, payload: bytes, settled: bool) -> int:
        """Send one delivery; returns its 64-bit number."""
        ...

    def window_room(self) -> int:
        """Transfer frames the peer's session window takes now (0 while frames wait)."""
        ...

    def wants_flush(self, receiver: Receiver) -> None:
        """Have ``receiver.top_up()`` called before the next flush."""
        ...

    async def await_step(self, step: str, answer: asyncio.Future[Any],
                         ender: asyncio.Future[BaseException]) -> Any:
        """``answer``'s result, unless ``ender`` is done first or the step times out."""
        ...

    def link_failed(self, link: Link, error: Amqp10Error) -> None:
        """The peer ended ``link`` unasked: the connection ends with ``error``."""
        ...

    def forget(self, link: Link) -> None:
        """``link`` is detached: its handles are free."""
        ...


class Link:
    """What a receiver and a sender share: the name, handles, address and the attach/detach
    handshakes.

    :attr:`closed` is done, with an :class:`~pumpd.amqp10.errors.Amqp10Error`, once the link
    is detached (by either side) or its session or connection ended.
    """

    role: bool  # the wire's role: False sender, True receiver

    def __init__(self, host: LinkHost, *, name: str, handle: int, address: str) -> None:
        loop = asyncio.get_running_loop()
        self._host = host
        self.name = name
        self.handle = handle
        self.address = address
        #: the peer's handle for this link, once it attached
        self.remote_handle: int | None = None
        self.closed: asyncio.Future[BaseException] = loop.create_future()
        self._attached: asyncio.Future[Attach] = loop.create_future()
        self._detached: asyncio.Future[Detach] | None = None
        self._refused = False  # the peer's attach had no terminus: a detach with why follows

    @property
    def is_open(self) -> bool:
        return self._attached.done() and not self.closed.done()

    def attach_performative(self) -> Attach:
        raise NotImplementedError

    async def attach(self) -> None:
        """Send attach and wait for the peer's (step "attach ADDRESS").

        :raises Amqp10Error: refused (with the peer's condition and description), timed out,
            or the session or connection ended meanwhile
        """
        self._host.send_performative(self.attach_performative())
        remote = await self._host.await_step(f"attach {self.address}", self._attached,
                                             self.closed)
        self.attached(remote)

    def attached(self, remote: Attach) -> None:
        """The peer's attach arrived (after our own)."""

    def on_attach(self, remote: Attach) -> None:
        """The peer's attach: a refusal when it has no terminus (a detach follows)."""
        if self._attached.done():
            raise PeerViolation(NOT_ALLOWED, f"a second attach for link {self.name!r}")
        self.remote_handle = int(remote.handle)
        if (remote.source if self.role else remote.target) is None:
            self._refused = True
            return
        self._attached.set_result(remote)

    def on_detach(self, detach: Detach) -> None:
        """The peer's detach: the answer to ours, a refusal of our attach, or the peer ending
        the link (then the connection ends: see :meth:`LinkHost.link_failed`)."""
        if self._detached is not None:
            if not self._detached.done():
                self._detached.set_result(detach)
            return
        # not asked for: answer it (our closed mirrors the peer's), then fail
        self._host.send_performative(Detach(handle=UInt(self.handle), closed=detach.closed))
        err = detach.error
        cond = None if err is None else str(err.condition)
        desc = None if err is None or err.description is None else str(err.description)
        if not self._attached.done():
            what = "the peer refused the link" if self._refused else "the peer detached the link"
            error = Amqp10Error(f"attach {self.address}", what, condition=cond, description=desc,
                                peer=self._host.peer)
        else:
            error = Amqp10Error(f"transfer {self.address}", "the peer detached the link",
                                condition=cond, description=desc, peer=self._host.peer)
        self.end(error)
        self._host.forget(self)
        self._host.link_failed(self, error)

    def end(self, error: Amqp10Error) -> None:
        """The link is over (detached, or its session or connection ended)."""
        if not self.closed.done():
            self.closed.set_result(error)

    async def detach(self, close: bool = True) -> None:
        """Detach the link (``close``: for good, the peer forgets it; else it may be resumed)
        and wait for the peer's detach (step "detach ADDRESS"). Returns at once when the link
        is already closed.

        :raises Amqp10Error: the peer's detach did not come within the step timeout, or came
            with an error
        """
        if self.closed.done() or self._detached is not None:
            return
        loop = asyncio.get_running_loop()
        self._detached = loop.create_future()
        self._host.send_performative(Detach(handle=UInt(self.handle), closed=close))
        step = f"detach {self.address}"
        try:
            answer: Detach = await self._host.await_step(step, self._detached, self.closed)
        finally:
            self.end(Amqp10Error(step, "detached by the client", peer=self._host.peer))
            self._host.forget(self)
        if answer.error is not None:
            raise Amqp10Error(step, "the peer detached with an error",
                              condition=str(answer.error.condition),
                              description=None if answer.error.description is None
                              else str(answer.error.description), peer=self._host.peer)

    def on_flow(self, flow: Flow) -> None:
        raise NotImplementedError


class Receiver(Link):
    """A link on which the peer sends us messages; see the module docstring for credit.

    Created by :meth:`pumpd.amqp10.session.Session.attach_receiver`.
    """

    role = True

    def __init__(self, host: LinkHost, *, name: str, handle: int, address: str, credit: int,
                 settle_mode: str, filters: dict[Any, Any] | None,
                 max_message_size: int, properties: dict[Any, Any] | None) -> None:
        if settle_mode not in ("first", "settled"):
            raise ValueError(f"settle_mode {settle_mode!r}: expected 'first' or 'settled'")
        _check_credit(credit)
        if max_message_size < 1:
            raise ValueError(f"max_message_size {max_message_size}: expected at least 1")
        super().__init__(host, name=name, handle=handle, address=address)
        self.settle_mode = settle_mode
        self.filters = filters
        self.max_message_size = max_message_size
        self.properties = properties
        self._credit = credit  # the prefetch: at most this many unsettled, granted included
        self._link_credit = 0  # granted and not yet used, as we count it
        self._in_flight_excess = 0  # deliveries the peer may send beyond a credit we lowered
        #: deliveries the peer sent beyond the credit granted (taken all the same)
        self.beyond_credit = 0
        self._delivery_count = 0  # the wire's delivery-count (32-bit serial)
        self._unsettled: set[int] = set()
        self._callback: TransferCallback | None = None
        self._held: list[tuple[int, bytes, bool]] = []  # deliveries before on_transfer
        # a delivery in several frames: its chunks, size, number, wire id, settled
        self._chunks: list[bytes] | None = None
        self._chunks_size = 0
        self._partial_number = 0
        self._partial_wire = 0
        self._partial_settled = False
        self._dirty = False

    def attach_performative(self) -> Attach:
        return Attach(
            name=self.name, handle=UInt(self.handle), role=True,
            snd_settle_mode=UByte(1 if self.settle_mode == "settled" else 0),
            rcv_settle_mode=UByte(0),
            source=Source(address=self.address, filter=self.filters), target=Target(),
            max_message_size=ULong(self.max_message_size),
            properties=self.properties)

    def attached(self, remote: Attach) -> None:
        count = remote.initial_delivery_count
        self._delivery_count = 0 if count is None else int(count) & MASK
        self._want_top_up()

    # -- what the caller does ---------------------------------------------------------------

    @property
    def credit(self) -> int:
        """The prefetch :meth:`flow` set."""
        return self._credit

    @property
    def unsettled(self) -> int:
        """Deliveries received and not yet settled."""
        return len(self._unsettled)

    def on_transfer(self, callback: TransferCallback) -> None:
        """``callback(delivery, payload, settled)`` for every delivery, in order: ``delivery``
        is its 64-bit number (for :meth:`settle`), ``payload`` the encoded message,
        ``settled`` True when the peer sent it pre-settled. Deliveries that arrived before the
        callback was set are handed to it now."""
        self._callback = callback
        held, self._held = self._held, []
        for delivery in held:
            callback(*delivery)

    def flow(self, credit: int) -> None:
        """At most ``credit`` deliveries unsettled at once, those granted and not yet received
        included (0: none more; the peer stops)."""
        _check_credit(credit)
        self._credit = credit
        desired = max(0, credit - len(self._unsettled))
        if desired < self._link_credit:
            # credit taken back: deliveries already under way are still to be accepted
            self._in_flight_excess += self._link_credit - desired
            self._grant(desired)
        elif self._link_credit == 0:
            self._want_top_up()

    def settle(self, first: int, last: int, state: Any) -> None:
        """Settle the deliveries ``first``..``last`` (inclusive, 64-bit numbers) with ``state``
        (Accepted(), Rejected(error), Released(), Modified(...)). Numbers already settled, or
        received pre-settled, are skipped; the rest go out as dispositions of consecutive
        ranges (split where the wire's delivery-id wraps)."""
        if first > last:
            raise ValueError(f"settle {first}..{last}: first is after last")
        if self.closed.done():
            return
        unsettled = self._unsettled
        if last - first < len(unsettled):
            ids: Any = range(first, last + 1)
        else:
            ids = sorted(n for n in unsettled if first <= n <= last)
        run_first = run_last = -1
        for n in ids:
            if n not in unsettled:
                continue
            unsettled.discard(n)
            if run_first >= 0 and n == run_last + 1:
                run_last = n
                continue
            if run_first >= 0:
                self._host.settle_incoming(run_first, run_last, state)
            run_first = run_last = n
        if run_first >= 0:
            self._host.settle_incoming(run_first, run_last, state)
            if self._link_credit == 0:
                self._want_top_up()

    # -- the session's calls ----------------------------------------------------------------

    def top_up(self) -> None:
        """Before a flush: once the credit granted is used up, grant again so that granted
        plus unsettled is the prefetch (see the module docstring for why not earlier)."""
        self._dirty = False
        if self.closed.done() or not self._attached.done() or self._link_credit > 0:
            return
        desired = self._credit - len(self._unsettled)
        if desired > 0:
            self._grant(desired)

    def _grant(self, link_credit: int) -> None:
        self._link_credit = link_credit
        self._host.send_link_flow(self.handle, self._delivery_count, link_credit)

    def on_transfer_frame(self, transfer: Transfer, body: bytes, pos: int) -> None:
        """One transfer frame for this link (``body[pos:]`` is its payload)."""
        chunks = self._chunks
        if chunks is None:  # the first frame of a delivery
            wire = transfer.delivery_id
            if wire is None:
                raise PeerViolation(NOT_ALLOWED, f"a transfer on link {self.name!r} starts a "
                                                 "delivery without a delivery-id")
            number = self._host.incoming_delivery(int(wire))
            self._count_delivery(number)  # (a whole delivery from the scanner: on_delivery)
            if transfer.aborted:
                return  # an aborted delivery is settled and has no message
            settled = bool(transfer.settled)
            if transfer.more:
                self._partial_number = number
                self._partial_wire = int(wire)
                self._partial_settled = settled
                self._chunks = []
                self._chunks_size = 0
                self._add_chunk(body, pos)
                return
            if len(body) - pos > self.max_message_size:
                self._too_large(len(body) - pos, number)
            self._deliver(number, body[pos:], settled)
            return
        wire = transfer.delivery_id
        if wire is not None and int(wire) != self._partial_wire:
            raise PeerViolation(NOT_ALLOWED, f"a transfer continuing delivery-id "
                                             f"{self._partial_wire} on link {self.name!r} says "
                                             f"delivery-id {int(wire)}")
        if transfer.aborted:
            self._chunks = None
            return
        self._partial_settled = self._partial_settled or bool(transfer.settled)
        self._add_chunk(body, pos)
        if not transfer.more:
            payload = b"".join(chunks)
            self._chunks = None
            self._deliver(self._partial_number, payload, self._partial_settled)

    def on_delivery(self, number: int, payload: bytes, settled: bool) -> None:
        """A whole delivery (the connection's frame scanner reassembled it): ``number`` is its
        64-bit number."""
        self._count_delivery(number)
        if len(payload) > self.max_message_size:
            self._too_large(len(payload), number)
        self._deliver(number, payload, settled)

    def on_aborted(self, number: int) -> None:
        """The peer aborted delivery ``number``: it used credit and has no message."""
        self._count_delivery(number)

    def _count_delivery(self, number: int) -> None:
        """A delivery arrived (its first frame, or all of it): it uses a credit."""
        if self._link_credit > 0:
            self._link_credit -= 1
            if self._link_credit == 0:
                self._want_top_up()
        elif self._in_flight_excess > 0:
            self._in_flight_excess -= 1
        else:
            self._beyond_credit(number & MASK)
        self._delivery_count = (self._delivery_count + 1) & MASK

    def _beyond_credit(self, wire: int) -> None:
        self.beyond_credit += 1
        if self.beyond_credit == 1:
            log.warning("AMQP 1.0 %s: link %r from %s: delivery-id %d came beyond the credit "
                        "granted; the peer does not keep to credit (RabbitMQ 3.x stream queues "
                        "do not), so the prefetch of %d does not bound what is unsettled",
                        self._host.peer, self.name, self.address, wire, self._credit)

    def _add_chunk(self, body: bytes, pos: int) -> None:
        assert self._chunks is not None
        self._chunks_size += len(body) - pos
        if self._chunks_size > self.max_message_size:
            self._too_large(self._chunks_size, self._partial_number)
        self._chunks.append(body[pos:])

    def _too_large(self, size: int, number: int) -> None:
        raise PeerViolation(MESSAGE_SIZE_EXCEEDED,
                            f"delivery {number} on link {self.name!r} is larger than "
                            f"max-message-size {self.max_message_size} (at least {size} bytes)")

    def _want_top_up(self) -> None:
        if not self._dirty:
            self._dirty = True
            self._host.wants_flush(self)

    def _deliver(self, number: int, payload: bytes, settled: bool) -> None:
        if not settled:
            self._unsettled.add(number)
        callback = self._callback
        if callback is None:
            self._held.append((number, payload, settled))
        else:
            callback(number, payload, settled)

    def on_flow(self, flow: Flow) -> None:
        """The peer's flow for this link: a delivery-count that advanced without deliveries
        (a drain) consumed credit; ``echo`` asks for ours."""
        if flow.delivery_count is not None:
            advance = serial_diff(int(flow.delivery_count), self._delivery_count)
            if advance > 0:
                self._link_credit = max(0, self._link_credit - advance)
                self._delivery_count = int(flow.delivery_count) & MASK
                if self._link_credit == 0:
                    self._want_top_up()
        if flow.echo:
            self._host.send_link_flow(self.handle, self._delivery_count, self._link_credit)


class Sender(Link):
    """A link on which we send messages to the peer; see the module docstring for credit.

    Created by :meth:`pumpd.amqp10.session.Session.attach_sender`.
    """

    role = False

    def __init__(self, host: LinkHost, *, name: str, handle: int, address: str, settled: bool,
                 properties: dict[Any, Any] | None) -> None:
        super().__init__(host, name=name, handle=handle, address=address)
        #: every message pre-settled (snd-settle-mode settled); else mixed (each send says)
        self.settled = settled
        self.properties = properties
        self._link_credit = 0
        self._delivery_count = 0  # our initial-delivery-count is 0
        self._on_credit: Callable[[], None] | None = None
        self._on_disposition: DispositionCallback | None = None

    def attach_performative(self) -> Attach:
        return Attach(
            name=self.name, handle=UInt(self.handle), role=False,
            snd_settle_mode=UByte(1 if self.settled else 2), rcv_settle_mode=UByte(0),
            source=Source(), target=Target(address=self.address),
            initial_delivery_count=UInt(0), properties=self.properties)

    @property
    def credit(self) -> int:
        """How many :meth:`send` calls may be made now: the peer's link credit, at most the
        room in its session window (a message in several frames may take more of the window:
        the frames beyond it wait for the peer's flow, and meanwhile this is 0); 0 while the
        link is not open."""
        if self.closed.done() or not self._attached.done():
            return 0
        return min(self._link_credit, self._host.window_room())

    def on_credit(self, callback: Callable[[], None]) -> None:
        """``callback()`` whenever :attr:`credit` rose (a flow from the peer, or its session
        window reopening) and is above 0. Credit that came before the callback was set is in
        :attr:`credit` (the peer's first flow may come with its attach)."""
        self._on_credit = callback

    def on_disposition(self, callback: DispositionCallback) -> None:
        """``callback(first, last, state)`` when the peer settles deliveries ``first``..``last``
        (the numbers :meth:`send` returned; a range may include deliveries sent pre-settled,
        which the caller ignores) with ``state`` (Accepted(), Rejected(), Released(),
        Modified(), or None: settled without an outcome). The outcome's kind is what counts:
        on the session the connection's frame scanner reads, its fields (a rejection's error)
        are not decoded."""
        self._on_disposition = callback

    def send(self, payload: bytes, *, settled: bool) -> int:
        """Send one message (``payload``: the encoded message, one or more sections); returns
        its 64-bit delivery number (see :meth:`on_disposition`). Written with the next flush,
        in several transfer frames when larger than the peer's max-frame-size.

        :raises NoCredit: :attr:`credit` is 0
        :raises Amqp10Error: the link is closed (its reason)
        :raises ValueError: an empty payload, or unsettled on a pre-settled link
        """
        if self.closed.done():
            cause = self.closed.result()
            raise cause if isinstance(cause, Amqp10Error) else Amqp10Error(
                f"transfer {self.address}", "the link is closed", peer=self._host.peer)
        if not payload:
            raise ValueError("a message has at least one section: the payload is empty")
        if not settled and self.settled:
            raise ValueError(f"link {self.name!r} is pre-settled: a message cannot be sent "
                             "unsettled on it")
        if self.credit <= 0:
            raise NoCredit(f"no credit on link {self.name!r} to {self.address}: wait for "
                           "on_credit")
        self._link_credit -= 1
        self._delivery_count = (self._delivery_count + 1) & MASK
        return self._host.transfer(self.handle, payload, settled)

    # -- the session's calls ----------------------------------------------------------------

    def on_flow(self, flow: Flow) -> None:
        """The peer's flow: our credit is its delivery-count plus its link-credit less ours."""
        if flow.link_credit is not None:
            theirs = 0 if flow.delivery_count is None else int(flow.delivery_count)
            in_flight = serial_diff(self._delivery_count, theirs)
            if in_flight < 0:
                raise PeerViolation(NOT_ALLOWED, f"flow on link {self.name!r}: delivery-count "
                                                 f"{theirs} is ahead of ours "
                                                 f"({self._delivery_count})")
            self._link_credit = max(0, int(flow.link_credit) - in_flight)

    def answer_flow(self, flow: Flow) -> None:
        """After :meth:`on_flow` and the caller's ``on_credit``: ``drain`` uses up the credit
        the caller did not use; ``echo`` asks for our flow."""
        if flow.drain and self._link_credit > 0:
            self._delivery_count = serial_add(self._delivery_count, self._link_credit)
            self._link_credit = 0
            self._host.send_link_flow(self.handle, self._delivery_count, 0, drain=True)
        elif flow.echo:
            self._host.send_link_flow(self.handle, self._delivery_count, self._link_credit)

    def credit_rose(self) -> None:
        """The session saw :attr:`credit` rise (the link's credit, or the session window)."""
        if self._on_credit is not None and self.credit > 0:
            self._on_credit()

    def on_settled(self, first: int, last: int, state: Any, settled: bool) -> None:
        """The peer's disposition for ``first``..``last`` (64-bit). An outcome the peer did not
        settle (receiver settle mode second) is settled here."""
        if state is not None and not isinstance(state, TERMINAL_STATES):
            return  # "received": not an outcome yet
        if not settled:
            self._host.settle_outgoing(first, last, state)
        if self._on_disposition is not None:
            self._on_disposition(first, last, state)


def _check_credit(credit: int) -> None:
    if not 0 <= credit <= MASK:
        raise ValueError(f"credit {credit}: expected 0 .. {MASK}")
