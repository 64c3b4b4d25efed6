"""An AMQP 1.0 session (§2.5): one channel of a connection, its links, its windows, and the
numbering of its deliveries.

Session flow control counts transfer frames: the peer's incoming-window is how many more we may
send (frames beyond it wait here, and :attr:`~pumpd.amqp10.link.Sender.credit` reads 0 meanwhile);
ours is reopened, in full, with every flow frame we send, and by a flow of its own once half of
it is used. Delivery-ids are the session's, one more per delivery across all its links; they are
mapped onto 64-bit numbers that never wrap (:mod:`pumpd.amqp10.serials`): incoming ones must
come in sequence, and dispositions are sent in wire ranges split at the 2^32 wrap.

A session holds any number of receivers and at most one sender (the peer's dispositions are
session-wide, and one sender makes them that sender's).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Protocol

from ..dataplane.api import TransferWriter
from ..dataplane.implementation import TransferWriter as TransferWriterImpl
from ..dataplane.implementation import encode_disposition as disposition_frame
from .errors import (
    DECODE_ERROR,
    NOT_ALLOWED,
    UNATTACHED_HANDLE,
    WINDOW_VIOLATION,
    Amqp10Error,
    PeerViolation,
)
from .framing import encode_frame
from .link import DEFAULT_MAX_MESSAGE_SIZE, Link, Receiver, Sender
from .performatives import (
    Accepted,
    Attach,
    Begin,
    Detach,
    Disposition,
    End,
    Flow,
    Modified,
    Rejected,
    Released,
    Transfer,
    encode_disposition,
    encode_performative,
)
from .serials import MASK, serial_diff, unwrap_before, wire_ranges
from .values import UInt

__all__ = ["DEFAULT_HANDLE_MAX", "DEFAULT_INCOMING_WINDOW", "OUTGOING_WINDOW", "Session",
           "SessionHost", "TransferEvent"]

#: transfer frames the peer may send before we reopen the window (we do at half of it)
DEFAULT_INCOMING_WINDOW = 4096
#: the outgoing-window we announce: we do not limit ourselves below the peer's incoming-window
OUTGOING_WINDOW = 0x7FFF_FFFF
#: the highest link handle we accept from the peer
DEFAULT_HANDLE_MAX = 1023
#: a frame's header (size, doff, type, channel)
FRAME_HEADER_SIZE = 8

#: A delivery's end among a run of transfer frames in which the peer aborted one: None for a
#: delivery completed, (handle, delivery-id or None) for one aborted.
TransferEvent = tuple[int, int | None] | None
#: a whole delivery as the connection's frame scanner hands it over
Delivery = tuple[int, int, bool, bytes]  # handle, delivery-id, settled, payload

# a disposition's outcome by the scanner's state code (fields are not read: the outcome's kind
# is what settles a delivery); another code is a state that is no outcome ("received", ...)
_ACCEPTED, _REJECTED, _RELEASED, _MODIFIED = 0x24, 0x25, 0x26, 0x27
_NO_OUTCOME = object()
_OUTCOME_FIELDS = {_REJECTED: ("error",),
                   _MODIFIED: ("delivery_failed", "undeliverable_here", "message_annotations")}
# what the data plane's encode_disposition writes: the outcome, every field absent
_STATE_CODES: dict[type, int] = {Accepted: _ACCEPTED, Released: _RELEASED, Rejected: _REJECTED,
                                 Modified: _MODIFIED}


class SessionHost(Protocol):
    """What a session needs of its connection."""

    @property
    def peer(self) -> str: ...

    @property
    def remote_max_frame_size(self) -> int: ...

    def write(self, data: bytes) -> None:
        """Queue bytes for the next flush (once per event loop iteration)."""
        ...

    def write_from(self, writer: TransferWriter) -> None:
        """Queue what ``writer`` holds (and will hold until then) for the next flush, ahead
        of anything written after this call."""
        ...

    def wants_flush(self, session: Session) -> None:
        """Have ``session.before_flush()`` called before the next flush."""
        ...

    async def await_step(self, step: str, answer: asyncio.Future[Any],
                         ender: asyncio.Future[BaseException]) -> Any: ...

    def step_or(self, default: str) -> str:
        """The step a wait is in progress for, else ``default`` (what a failure is named by)."""
        ...

    def fail(self, error: Amqp10Error) -> None:
        """The peer ended a session or a link unasked: the connection closes with ``error``."""
        ...


class Session:
    """One session; made by :meth:`pumpd.amqp10.connection.Connection.begin`.

    :attr:`closed` is done, with an :class:`~pumpd.amqp10.errors.Amqp10Error`, once the session
    ended (either side) or its connection did.
    """

    def __init__(self, host: SessionHost, channel: int, *, incoming_window: int,
                 handle_max: int) -> None:
        if not 1 <= incoming_window <= MASK:
            raise ValueError(f"incoming_window {incoming_window}: expected 1 .. {MASK}")
        loop = asyncio.get_running_loop()
        self._host = host
        self.channel = channel
        self.remote_channel: int | None = None
        self.closed: asyncio.Future[BaseException] = loop.create_future()
        self._begun: asyncio.Future[Begin] = loop.create_future()
        self._ended: asyncio.Future[End] | None = None
        # incoming transfers: the peer's transfer-id we expect, our window, delivery numbers
        self.next_incoming_id = 0
        self._window_max = incoming_window
        self._incoming_window = incoming_window
        self._next_in_delivery: int | None = None
        # outgoing transfers
        self.next_outgoing_id = 0
        self._remote_window = 0
        self._next_out_delivery = 0
        self._waiting: deque[bytes] = deque()  # transfer frames beyond the peer's window
        self._writers: dict[int, TransferWriter] = {}  # by our link handle
        # links: by our handle, by the peer's handle, by name
        self._handle_max = handle_max
        self._remote_handle_max = MASK
        self._links: dict[int, Link] = {}
        #: the largest message a receiver of this session takes (the frame scanner's bound)
        self.receive_bound = DEFAULT_MAX_MESSAGE_SIZE
        self._remote_links: dict[int, Link] = {}
        self._names: dict[str, Link] = {}
        self._sender: Sender | None = None
        self._dirty: list[Receiver] = []
        self._flush_wanted = False

    @property
    def peer(self) -> str:
        return self._host.peer

    @property
    def is_open(self) -> bool:
        return self._begun.done() and not self.closed.done()

    # -- begin and end ----------------------------------------------------------------------

    async def begin(self) -> None:
        """Send begin and wait for the peer's (step "begin")."""
        self.send_performative(Begin(
            next_outgoing_id=UInt(self.next_outgoing_id), incoming_window=UInt(self._window_max),
            outgoing_window=UInt(OUTGOING_WINDOW), handle_max=UInt(self._handle_max)))
        await self._host.await_step("begin", self._begun, self.closed)

    def on_begin(self, remote_channel: int, begin: Begin) -> None:
        """The peer's begin, on its channel ``remote_channel``."""
        if self._begun.done():
            raise PeerViolation(NOT_ALLOWED, f"a second begin for channel {self.channel}")
        self.remote_channel = remote_channel
        self.next_incoming_id = int(begin.next_outgoing_id)
        self._remote_window = int(begin.incoming_window)
        if begin.handle_max is not None:
            self._remote_handle_max = int(begin.handle_max)
        self._begun.set_result(begin)

    async def end(self) -> None:
        """End the session and wait for the peer's end (step "end"); its links are over."""
        if self.closed.done() or self._ended is not None:
            return
        self._ended = asyncio.get_running_loop().create_future()
        self.send_performative(End())
        try:
            await self._host.await_step("end", self._ended, self.closed)
        finally:
            self.end_all(Amqp10Error("end", "ended by the client", peer=self.peer))

    def on_end(self, end: End) -> None:
        """The peer's end: the answer to ours, or the peer ending the session (then the
        connection ends)."""
        if self._ended is not None:
            if not self._ended.done():
                self._ended.set_result(end)
            return
        self.send_performative(End())
        err = end.error
        error = Amqp10Error(self._host.step_or("session"), "the peer ended the session",
                            condition=None if err is None else str(err.condition),
                            description=None if err is None or err.description is None
                            else str(err.description), peer=self.peer)
        self.end_all(error)
        self._host.fail(error)

    def end_all(self, error: Amqp10Error) -> None:
        """The session is over: so are its links."""
        if not self.closed.done():
            self.closed.set_result(error)
        for link in list(self._links.values()):
            link.end(error)

    # -- links ------------------------------------------------------------------------------

    async def attach_receiver(self, address: str, *, name: str, credit: int,
                              settle_mode: str = "first", filters: dict[Any, Any] | None = None,
                              properties: dict[Any, Any] | None = None,
                              max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> Receiver:
        """Attach a link on which the peer sends us messages from ``address`` (its source).

        :param name: the link's name (unique between the two containers)
        :param credit: at most this many deliveries unsettled at once (see
            :meth:`Receiver.flow`), granted as soon as the link is attached
        :param settle_mode: "first": the peer sends unsettled, we settle
            (:meth:`Receiver.settle`); "settled": it sends pre-settled (at most once)
        :param filters: the source's filter map (e.g. ``{"rabbitmq:stream-offset-spec":
            "first"}``), keys as symbols, values as the peer expects them
        :param properties: the attach's link properties
        :param max_message_size: a larger message closes the connection
            (amqp:link:message-size-exceeded)
        :raises Amqp10Error: step "attach ADDRESS": refused, timed out, or the connection ended
        """
        receiver = Receiver(self, name=name, handle=self._new_handle(name), address=address,
                            credit=credit, settle_mode=settle_mode, filters=filters,
                            max_message_size=max_message_size, properties=properties)
        await self._attach(receiver)
        return receiver

    async def attach_sender(self, address: str, *, name: str, settled: bool = False,
                            properties: dict[Any, Any] | None = None) -> Sender:
        """Attach a link on which we send messages to ``address`` (its target). Returns once
        attached; the peer's credit comes with its flow (:meth:`Sender.on_credit`).

        :param settled: every message pre-settled (at most once); else each :meth:`Sender.send`
            says, and the peer's outcomes come to :meth:`Sender.on_disposition`
        :raises Amqp10Error: step "attach ADDRESS"
        :raises ValueError: the session has a sender already
        """
        if self._sender is not None and not self._sender.closed.done():
            raise ValueError(f"session on channel {self.channel} has a sender already "
                             f"({self._sender.name!r}): one sender per session")
        sender = Sender(self, name=name, handle=self._new_handle(name), address=address,
                        settled=settled, properties=properties)
        self._sender = sender
        await self._attach(sender)
        return sender

    def _new_handle(self, name: str) -> int:
        if not self.is_open:
            raise self._not_open()
        if name in self._names:
            raise ValueError(f"a link named {name!r} is attached on this session already")
        limit = min(self._handle_max, self._remote_handle_max)
        handle = next((h for h in range(limit + 1) if h not in self._links), None)
        if handle is None:
            raise ValueError(f"no free link handle on this session (handle-max {limit})")
        return handle

    def _not_open(self) -> Amqp10Error:
        if self.closed.done():
            cause = self.closed.result()
            if isinstance(cause, Amqp10Error):
                return cause
        return Amqp10Error("attach", "the session is not open", peer=self.peer)

    async def _attach(self, link: Link) -> None:
        self._links[link.handle] = link
        self._names[link.name] = link
        self._bound_receivers()
        try:
            await link.attach()
        except BaseException:
            self.forget(link)
            raise

    def forget(self, link: Link) -> None:
        """``link`` is detached: its handles and name are free."""
        if self._links.get(link.handle) is link:
            del self._links[link.handle]
        if link.remote_handle is not None and self._remote_links.get(link.remote_handle) is link:
            del self._remote_links[link.remote_handle]
        if self._names.get(link.name) is link:
            del self._names[link.name]
        self._writers.pop(link.handle, None)
        self._bound_receivers()

    def _bound_receivers(self) -> None:
        bounds = [link.max_message_size for link in self._links.values()
                  if isinstance(link, Receiver)]
        self.receive_bound = max(bounds) if bounds else DEFAULT_MAX_MESSAGE_SIZE

    def link_failed(self, link: Link, error: Amqp10Error) -> None:
        self._host.fail(error)

    def on_attach(self, attach: Attach) -> None:
        link = self._names.get(str(attach.name))
        if link is None:
            raise PeerViolation(NOT_ALLOWED, f"attach for link {str(attach.name)!r}, which we did "
                                             "not attach (links from the peer are not accepted)")
        if bool(attach.role) == link.role:
            raise PeerViolation(NOT_ALLOWED, f"attach for link {link.name!r} with our own role")
        handle = int(attach.handle)
        if handle > self._handle_max or handle in self._remote_links:
            raise PeerViolation(NOT_ALLOWED, f"attach for link {link.name!r} with handle "
                                             f"{handle}, which is in use or above handle-max "
                                             f"{self._handle_max}")
        self._remote_links[handle] = link
        link.on_attach(attach)

    def on_detach(self, detach: Detach) -> None:
        self._remote_link(int(detach.handle), "detach").on_detach(detach)

    def _remote_link(self, handle: int, what: str) -> Link:
        link = self._remote_links.get(handle)
        if link is None:
            raise PeerViolation(UNATTACHED_HANDLE, f"{what} for handle {handle}, which is not "
                                                   "attached")
        return link

    # -- incoming transfers -----------------------------------------------------------------

    def on_transfer(self, transfer: Transfer, body: bytes, pos: int) -> None:
        """A transfer frame (payload ``body[pos:]``)."""
        if self._incoming_window <= 0:
            raise PeerViolation(WINDOW_VIOLATION, f"a transfer beyond our incoming-window "
                                                  f"(channel {self.channel})")
        self._incoming_window -= 1
        self.next_incoming_id = (self.next_incoming_id + 1) & MASK
        link = self._remote_links.get(int(transfer.handle))
        if link is None:
            raise PeerViolation(UNATTACHED_HANDLE, f"transfer for handle {int(transfer.handle)}, "
                                                   "which is not attached")
        if not isinstance(link, Receiver):
            raise PeerViolation(NOT_ALLOWED, f"transfer on link {link.name!r}, on which we are "
                                             "the sender")
        link.on_transfer_frame(transfer, body, pos)
        if self._incoming_window <= self._window_max // 2 and not self._flush_wanted:
            self._flush_wanted = True
            self._host.wants_flush(self)

    def on_transfers(self, frames: int, deliveries: list[Delivery],
                     events: list[TransferEvent] | None) -> None:
        """``frames`` transfer frames, which completed ``deliveries`` (in order); ``events``
        says where aborted deliveries were among them, when there were any."""
        if frames > self._incoming_window:
            raise PeerViolation(WINDOW_VIOLATION, f"a transfer beyond our incoming-window "
                                                  f"(channel {self.channel})")
        self._incoming_window -= frames
        self.next_incoming_id = (self.next_incoming_id + frames) & MASK
        closed = self.closed
        if events is None:
            links = self._remote_links
            for handle, wire, settled, payload in deliveries:
                if closed.done():
                    return
                link = links.get(handle)
                if not isinstance(link, Receiver):
                    raise self._not_receiving(handle, link)
                expected = self._next_in_delivery
                if expected is not None and wire == expected & MASK:
                    self._next_in_delivery = expected + 1
                    link.on_delivery(expected, payload, settled)
                else:
                    link.on_delivery(self.incoming_delivery(wire), payload, settled)
        else:
            self._on_events(deliveries, events)
        if self._incoming_window <= self._window_max // 2 and not self._flush_wanted:
            self._flush_wanted = True
            self._host.wants_flush(self)

    def _on_events(self, deliveries: list[Delivery], events: list[TransferEvent]) -> None:
        if sum(event is None for event in events) != len(deliveries):
            raise PeerViolation(DECODE_ERROR, f"transfers on channel {self.channel} that the "
                                              "codec and the frame scanner read differently")
        completed = iter(deliveries)
        for event in events:
            if self.closed.done():
                return
            if event is None:
                handle, wire, settled, payload = next(completed)
                self._receiving(handle).on_delivery(self.incoming_delivery(wire), payload,
                                                    settled)
                continue
            handle, aborted_wire = event
            link = self._receiving(handle)
            if aborted_wire is not None:
                number = self.incoming_delivery(aborted_wire)
            else:  # its first frame came earlier, with the delivery-id next in sequence
                expected = self._next_in_delivery
                number = 0 if expected is None else expected
                if expected is not None:
                    self._next_in_delivery = expected + 1
            link.on_aborted(number)

    def _receiving(self, handle: int) -> Receiver:
        link = self._remote_links.get(handle)
        if not isinstance(link, Receiver):
            raise self._not_receiving(handle, link)
        return link

    def _not_receiving(self, handle: int, link: Link | None) -> PeerViolation:
        if link is None:
            return PeerViolation(UNATTACHED_HANDLE, f"transfer for handle {handle}, which is "
                                                    "not attached")
        return PeerViolation(NOT_ALLOWED, f"transfer on link {link.name!r}, on which we are "
                                          "the sender")

    def incoming_delivery(self, wire_id: int) -> int:
        expected = self._next_in_delivery
        if expected is None:
            self._next_in_delivery = wire_id + 1
            return wire_id
        if wire_id != expected & MASK:
            raise PeerViolation(NOT_ALLOWED, f"delivery-id {wire_id} out of sequence (expected "
                                             f"{expected & MASK})")
        self._next_in_delivery = expected + 1
        return expected

    def settle_incoming(self, first: int, last: int, state: Any) -> None:
        self._dispositions(True, first, last, state)

    def settle_outgoing(self, first: int, last: int, state: Any) -> None:
        self._dispositions(False, first, last, state)

    def _dispositions(self, role: bool, first: int, last: int, state: Any) -> None:
        code = 0 if state is None else _STATE_CODES.get(type(state))
        if code is not None and state is not None and any(
                getattr(state, name) is not None for name in _OUTCOME_FIELDS.get(code, ())):
            code = None  # an outcome with fields (a rejection's error): the codec writes it
        write = self._host.write
        for a, b in wire_ranges(first, last):
            if code is not None:
                write(disposition_frame(self.channel, role, a, b, True, code))
            else:
                write(encode_frame(self.channel, encode_disposition(
                    role, a, None if a == b else b, True, state)))

    # -- outgoing transfers -----------------------------------------------------------------

    def transfer(self, handle: int, payload: bytes, settled: bool) -> int:
        """Send one delivery on link ``handle``; returns its 64-bit number. Its frames go into
        the link's transfer writer, which the connection takes at its next write or flush;
        frames beyond the peer's session window wait for its flow."""
        number = self._next_out_delivery
        self._next_out_delivery = number + 1
        writer = self._writers.get(handle)
        if writer is None:
            writer = self._writers[handle] = TransferWriterImpl(
                self.channel, handle, self._host.remote_max_frame_size)
        held = writer.buffered
        frames = writer.frames
        writer.add(number, payload, settled)
        added = writer.frames - frames
        if added <= self._remote_window and not self._waiting:
            self._remote_window -= added
            self.next_outgoing_id = (self.next_outgoing_id + added) & MASK
            self._host.write_from(writer)
            return number
        # not all within the window: what the writer held before goes first, then this
        # delivery's frames one by one, those beyond the window waiting
        out = writer.take()
        if held:
            self._host.write(out[:held])
        pos = held
        while pos < len(out):
            size = int.from_bytes(out[pos:pos + 4], "big")
            self._transfer_frame(out[pos:pos + size])
            pos += size
        return number

    def _transfer_frame(self, frame: bytes) -> None:
        if self._remote_window > 0 and not self._waiting:
            self._remote_window -= 1
            self.next_outgoing_id = (self.next_outgoing_id + 1) & MASK
            self._host.write(frame)
        else:
            self._waiting.append(frame)

    def window_room(self) -> int:
        return 0 if self._waiting else max(0, self._remote_window)

    def on_disposition(self, disposition: Disposition) -> None:
        if not disposition.role:
            # the peer settling deliveries it sent us: we settle first, so nothing to do
            return
        first = int(disposition.first)
        last = first if disposition.last is None else int(disposition.last)
        self._peer_settled(first, last, disposition.state, bool(disposition.settled))

    def on_dispositions(self, dispositions: list[tuple[bool, int, int, bool, int]]) -> None:
        """Dispositions as the connection's frame scanner reads them: (role, first, last,
        settled, state code). An outcome comes to the sender as its kind (Accepted(),
        Rejected(), Released(), Modified()), without its fields."""
        for role, first, last, settled, code in dispositions:
            if not role:
                continue  # the peer settling deliveries it sent us: we settle first
            if code == _ACCEPTED:
                state: Any = Accepted()
            elif code == 0:
                state = None
            elif code == _REJECTED:
                state = Rejected()
            elif code == _RELEASED:
                state = Released()
            elif code == _MODIFIED:
                state = Modified()
            else:
                state = _NO_OUTCOME
            self._peer_settled(first, last, state, settled)

    def _peer_settled(self, first: int, last: int, state: Any, settled: bool) -> None:
        sent = self._next_out_delivery
        first64 = unwrap_before(first, sent)
        last64 = first64 + ((last - first) & MASK)
        if first64 < 0 or last64 >= sent or self._sender is None:
            raise PeerViolation(NOT_ALLOWED, f"disposition for delivery-ids {first}..{last}, "
                                             f"which were not sent (next delivery-id "
                                             f"{sent & MASK})")
        self._sender.on_settled(first64, last64, state, settled)

    # -- flow -------------------------------------------------------------------------------

    def on_flow(self, flow: Flow) -> None:
        sender = self._sender
        credit = 0 if sender is None else sender.credit
        their_next_in = 0 if flow.next_incoming_id is None else int(flow.next_incoming_id)
        unseen = serial_diff(self.next_outgoing_id, their_next_in)
        if unseen < 0:
            raise PeerViolation(WINDOW_VIOLATION, f"flow with next-incoming-id {their_next_in}, "
                                                  "ahead of our next-outgoing-id "
                                                  f"{self.next_outgoing_id}")
        self._remote_window = max(0, int(flow.incoming_window) - unseen)
        while self._waiting and self._remote_window > 0:
            self._remote_window -= 1
            self.next_outgoing_id = (self.next_outgoing_id + 1) & MASK
            self._host.write(self._waiting.popleft())
        link = None if flow.handle is None else self._remote_link(int(flow.handle), "flow")
        if link is not None:
            link.on_flow(flow)
        elif flow.echo:
            self._send_flow()
        if sender is not None and sender.credit > credit:
            sender.credit_rose()
        if link is not None and link is sender:
            sender.answer_flow(flow)

    def send_link_flow(self, handle: int, delivery_count: int, link_credit: int, *,
                       drain: bool = False, echo: bool = False) -> None:
        self._send_flow(handle=UInt(handle), delivery_count=UInt(delivery_count),
                        link_credit=UInt(link_credit), drain=drain, echo=echo)

    def _send_flow(self, **link: Any) -> None:
        """A flow frame with the session's fields (and ``link``'s, for a link); it reopens our
        incoming window in full."""
        self._incoming_window = self._window_max
        self.send_performative(Flow(
            next_incoming_id=UInt(self.next_incoming_id), incoming_window=UInt(self._window_max),
            next_outgoing_id=UInt(self.next_outgoing_id), outgoing_window=UInt(OUTGOING_WINDOW),
            **link))

    def wants_flush(self, receiver: Receiver) -> None:
        self._dirty.append(receiver)
        if not self._flush_wanted:
            self._flush_wanted = True
            self._host.wants_flush(self)

    def before_flush(self) -> None:
        """Once per flush: grant receivers' credit, reopen our window if half of it is used."""
        self._flush_wanted = False
        dirty, self._dirty = self._dirty, []
        for receiver in dirty:
            receiver.top_up()
        if self._incoming_window <= self._window_max // 2 and not self.closed.done():
            self._send_flow()

    # -- writing ----------------------------------------------------------------------------

    def send_performative(self, performative: Any, payload: bytes = b"") -> None:
        self._host.write(encode_frame(self.channel, encode_performative(performative), payload))

    async def await_step(self, step: str, answer: asyncio.Future[Any],
                         ender: asyncio.Future[BaseException]) -> Any:
        return await self._host.await_step(step, answer, ender)
