"""The contract between the engine and a protocol: what a session needs of a source, of a
destination, and of the path that moves messages from one to the other.

A session (``session.py``) connects a source and a destination, pairs them into a path, and
from then on only reads the path's counters, asks it to forward and to settle, and closes both.
Reconnecting, the stall rule, the fence, pausing, the undeliverable policy and status are the
engine's, the same for every protocol; everything that knows a wire lives behind these classes.
The shape follows the Shovel plugin's behaviour module: connect, consume with credit, forward,
settle (ack and nack, in ranges), status and pending count, close.

A path is chosen per pair (``wiring.py``). A source and a destination that speak the same wire
and offer their raw byte streams (:class:`ByteSource`, :class:`ByteDestination`) are paired on
the native relay: it reads the source's frames and writes the destination's publish frames with
no per-message Python object (``amqp091/relay_path.py``). Any other pair goes through Python
objects (``message_path.py``): the source hands each delivery as an :class:`Incoming`
(:class:`MessageSource`), the destination forwards it, converting it to its own wire when it
must, and reports its settlement in ranges (:class:`MessageDestination`). That generic path is
what a new protocol's endpoints use until they have a native path of their own.

A message on the generic path keeps the form of the wire it came from: a
:class:`~pumpd.dataplane.api.Delivered` from AMQP 0-9-1 (raw property list and body, as
received), a :class:`~pumpd.amqp10.message.Message` from AMQP 1.0 (its sections, and the bytes
it came as). A destination of the other wire converts it (``message_forms.py``).
"""

from __future__ import annotations

import asyncio
import builtins
import enum
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

from ..amqp10.message import Message
from ..config.model import Declaration
from ..dataplane.api import Delivered, Returned
from .batching import BatchingRule

__all__ = [
    "REJECTED",
    "UNLIMITED",
    "ByteDestination",
    "ByteSource",
    "Destination",
    "Edits",
    "Endpoint",
    "Incoming",
    "MessageDestination",
    "MessageSource",
    "Path",
    "PathHooks",
    "PositionedDestination",
    "Settlement",
    "Source",
    "Unforwardable",
]


#: the reason a path gives the undeliverable policy for a message the destination refused (a
#: nack, or AMQP 1.0's ``rejected``); what follows it, if anything, is the peer's own words
REJECTED = "rejected by the destination"


class Settlement(enum.Enum):
    """How a source delivery is settled: the engine's words for ack, nack and requeue (in
    AMQP 1.0: accepted, rejected, released)."""

    ACCEPT = "accept"  # done with: the source forgets it
    REJECT = "reject"  # refused for good: the source dead-letters or drops it
    REQUEUE = "requeue"  # not taken: the source delivers it again


@runtime_checkable
class Endpoint(Protocol):
    """What both sides share: a connection the engine can watch, pause, and close."""

    #: done, with the reason, once the connection or its channel or link closed; a session
    #: ends on it
    closed: asyncio.Future[BaseException]

    @property
    def is_open(self) -> bool: ...

    @property
    def heartbeat(self) -> int:
        """Seconds of silence after which the peer gives up on this connection (0: never);
        the fence publishes nothing after half of it without proof that the loop ran."""
        ...

    def pause_reading(self, paused: bool, reason: str = "write-pressure") -> None:
        """Stop reading for ``reason``, or drop that reason: reading resumes once none is left."""
        ...

    def on_blocked(self, callback: Callable[[bool], None]) -> None:
        """``callback(True)`` while the peer refuses new messages (flow control), False after."""
        ...

    async def declare(self, declarations: Sequence[Declaration]) -> None:
        """Run the shovel's declarations (topology) on this side."""
        ...

    async def close_quietly(self) -> None:
        """Close politely, within the step timeout; never raises."""
        ...

    def abort(self) -> None:
        """Drop the connection at once (a peer that does not answer)."""
        ...


@runtime_checkable
class Source(Endpoint, Protocol):
    """Where messages come from: a queue or stream consumed with credit, settled in ranges."""

    #: the queue the last declaration named ("" when none did)
    last_declared_queue: str
    #: whether :meth:`backlog` can count what waits (AMQP 1.0 has no such count)
    backlog_known: bool

    async def take_lease(self, name: str) -> None:
        """Hold the group's lease ``name`` for as long as this connection lives.

        :raises LeaseRefused: another connection holds it
        """
        ...

    async def backlog(self, queue: str) -> int:
        """Messages ready in ``queue`` (the plugin's pending count; a stream: what it retains).

        :raises LinkError: when it cannot be known (:attr:`backlog_known` False)
        """
        ...

    async def credit(self, prefetch: int) -> None:
        """How many deliveries may be unsettled at once (0: no bound)."""
        ...

    async def consume(self, queue: str, *, no_ack: bool, arguments: Mapping[str, Any],
                      consumer_tag: str) -> str:
        """Start delivering from ``queue``; returns the consumer's tag for :meth:`cancel`."""
        ...

    async def cancel(self, consumer_tag: str) -> None:
        """Stop delivering (what was delivered stays to be settled)."""
        ...

    def settle(self, first: int, last: int, how: Settlement) -> None:
        """Settle the deliveries ``first``..``last`` (tags, inclusive) at once. A range of
        more than one starts at the oldest delivery not yet settled (so that AMQP 0-9-1's
        ``multiple`` flag says it); tags inside it that were settled on their own before keep
        that settlement."""
        ...


@runtime_checkable
class Destination(Endpoint, Protocol):
    """Where messages go: published, confirmed, subject to flow control."""

    async def expect_confirms(self) -> None:
        """Have every message confirmed by the peer (``on_confirm``)."""
        ...

    def on_write_pressure(self, callback: Callable[[bool], None], high_water: int) -> None:
        """``callback(True)`` when more than ``high_water`` bytes wait to be sent, False once
        they drained to a quarter of it."""
        ...


@runtime_checkable
class ByteSource(Source, Protocol):
    """A source whose raw byte stream a native path may read (see the module docstring)."""

    @property
    def wire(self) -> str:
        """The wire protocol of the bytes ("amqp091"): a native path pairs only its own."""
        ...

    @property
    def channel_number(self) -> int: ...

    @property
    def frame_max(self) -> int: ...

    def intercept(self, interceptor: Callable[[bytes], bytes] | None) -> None:
        """Every byte read goes to ``interceptor`` first; it returns what the client library
        is to see."""
        ...

    def hand_to_client(self, data: builtins.bytes) -> None:
        """Give the client library bytes the interceptor kept back."""
        ...

    def write(self, data: builtins.bytes) -> None:
        """Write frames the path built."""
        ...


@runtime_checkable
class ByteDestination(Destination, Protocol):
    """A destination a native path writes frames to (see :class:`ByteSource`)."""

    @property
    def wire(self) -> str: ...

    @property
    def channel_number(self) -> int: ...

    @property
    def frame_max(self) -> int: ...

    def intercept(self, interceptor: Callable[[bytes], bytes] | None) -> None: ...

    def hand_to_client(self, data: builtins.bytes) -> None: ...

    def write(self, data: builtins.bytes) -> None: ...


#: :attr:`MessageDestination.credit_left` of a destination that no credit limits (AMQP 0-9-1)
UNLIMITED = sys.maxsize


class Incoming(NamedTuple):
    """One delivery of a :class:`MessageSource`.

    ``tag`` is the source's own number for it, what :meth:`Source.settle` takes; it grows with
    every delivery (never reused on one connection), which is what lets one range settle many.
    ``message`` is in the source's form (see the module docstring): a
    :class:`~pumpd.dataplane.api.Delivered` (its ``delivery_tag`` and ``redelivered`` the same
    as here, ``reason`` empty) or a :class:`~pumpd.amqp10.message.Message`."""

    tag: int
    redelivered: bool
    message: Delivered | Message


class Unforwardable(ValueError):
    """Raised by :meth:`MessageDestination.forward` for a message it cannot send as it is (its
    properties cannot be edited, it does not fit a frame, it has no form on the destination's
    wire). Nothing was sent; the message goes to the undeliverable policy, and the text, which
    says why, is its reason there ("... frame_max ..." when it is too large)."""


@dataclass(frozen=True)
class Edits:
    """How a destination changes every message it forwards: the shovel's publish clauses
    (``forwarding.py`` builds them; the native relay takes the same values).

    An AMQP 0-9-1 destination applies them as the relay does: ``exchange`` / ``routing_key``
    replace the message's own (None keeps it), ``property_overrides`` replace basic properties
    (property index → encoded value, :func:`pumpd.dataplane.properties.encode_property_overrides`),
    ``forward_hop`` (an encoded 0-9-1 table) goes first in the ``x-shovelled`` header,
    ``timestamp_header`` sets ``x-shovelled-timestamp``, ``mandatory`` asks for returns. An AMQP
    1.0 destination reads ``hop`` (the same table as text pairs, in order) and
    ``timestamp_header`` for its ``x-opt-shovelled-*`` message annotations, as the Shovel plugin
    writes them.
    """

    exchange: bytes | None = None
    routing_key: bytes | None = None
    property_overrides: Mapping[int, bytes] = field(default_factory=dict)
    forward_hop: bytes | None = None
    hop: tuple[tuple[str, str], ...] = ()
    timestamp_header: bool = False
    mandatory: bool = False


@runtime_checkable
class MessageSource(Source, Protocol):
    """A source that hands deliveries one by one, for the generic path."""

    @property
    def wire(self) -> str:
        """The form of its messages: "amqp091" (:class:`~pumpd.dataplane.api.Delivered`) or
        "amqp10" (:class:`~pumpd.amqp10.message.Message`)."""
        ...

    def on_delivery(self, callback: Callable[[Incoming], None]) -> None:
        """From now on, ``callback`` gets every delivery, in the order the source sent them."""
        ...


@runtime_checkable
class MessageDestination(Destination, Protocol):
    """A destination the generic path forwards to one message at a time; it reports, in
    ranges of the sequence numbers :meth:`forward` returned, which ones the peer settled.

    Settlements come only after :meth:`~Destination.expect_confirms` (AMQP 0-9-1: basic.ack is
    ACCEPT, basic.nack REJECT; AMQP 1.0: accepted is ACCEPT, rejected REJECT, released and
    modified REQUEUE). Without it the peer settles nothing (AMQP 1.0: messages go pre-settled).
    """

    @property
    def wire(self) -> str:
        """The form it sends natively (see :attr:`MessageSource.wire`); the other is converted."""
        ...

    @property
    def credit_left(self) -> int:
        """How many more messages :meth:`forward` may send now (AMQP 1.0: the link credit;
        :data:`UNLIMITED` where nothing limits it)."""
        ...

    def on_credit(self, callback: Callable[[], None]) -> None:
        """``callback()`` when :attr:`credit_left` grew from 0 (more may go now)."""
        ...

    def set_edits(self, edits: Edits) -> None:
        """Change every message forwarded from now on by ``edits``."""
        ...

    def forward(self, message: Delivered | Message) -> int:
        """Send ``message`` (either form); returns its sequence number for :meth:`on_settled`.
        Numbers are consecutive: each call returns one more than the call before.

        :raises Unforwardable: nothing was sent (see there)
        """
        ...

    def on_settled(self, callback: Callable[[int, int, Settlement], None]) -> None:
        """``callback(first, last, how)``: the peer settled every sequence number from
        ``first`` to ``last`` (inclusive) that it had not settled before. A range may include
        numbers reported earlier; those keep their first settlement."""
        ...

    def on_returned(self, callback: Callable[[Returned], None]) -> None:
        """``callback(returned)`` for a message the peer sent back as unroutable (AMQP 0-9-1
        basic.return, with ``mandatory``), before that message's settlement is reported."""
        ...


@runtime_checkable
class PositionedDestination(MessageDestination, Protocol):
    """A destination that stores where the source stands: a stream whose named producer's
    publishing ids are the source's offsets (``streams/publishing_ids.py``)."""

    @property
    def position_holder(self) -> str:
        """Who stores the position, in words (a stream's producer: its name and stream)."""
        ...

    async def resume_offset(self) -> int | None:
        """The source offset to resume at, right after the last one the destination stored
        (None: it stored none, and the source starts as it would without it).

        :raises LinkError: the destination cannot be asked
        """
        ...


class PathHooks(Protocol):
    """What a path calls back into its session with, from its reads."""

    def flush(self, *, acks_due: bool = False) -> None:
        """Write what the path produced (scheduled once per loop iteration)."""
        ...

    def source_paused(self) -> None:
        """The path stopped on a source message it cannot forward (see :attr:`Path.paused`)."""
        ...

    def destination_paused(self) -> None:
        """The path stopped on a message the destination returned."""
        ...

    def hold_source(self, seconds: float) -> None:
        """Pause reading the source for ``seconds``: more messages are coming."""
        ...


class Path(Protocol):
    """The messages between one source and one destination of a session: their counters, what
    is held and unsettled, and the two writes (forward, settle) that the session times.

    The counters are :class:`~pumpd.engine.status.Counters`' relay fields.
    """

    #: set by the path when it scheduled a flush; the session's flush clears it
    flush_scheduled: bool

    @property
    def consumed(self) -> int: ...
    @property
    def published(self) -> int: ...
    @property
    def confirmed(self) -> int: ...
    @property
    def acked(self) -> int: ...
    @property
    def nacked(self) -> int: ...
    @property
    def returned(self) -> int: ...
    @property
    def redelivered(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def in_flight(self) -> int:
        """Forwarded, not yet confirmed."""
        ...
    @property
    def buffered(self) -> int:
        """Received, not yet forwarded."""
        ...
    @property
    def limit_reached(self) -> bool: ...
    @property
    def pending_acks(self) -> int:
        """Source settlements due and not yet written."""
        ...
    @property
    def paused(self) -> bool:
        """Stopped on a source message it cannot forward, until the policy settled it."""
        ...
    @property
    def destination_paused(self) -> bool: ...
    @property
    def last_message(self) -> Delivered | None:
        """The last message forwarded, when the path keeps it (careful sessions, streams)."""
        ...

    def start(self, hooks: PathHooks, *, read_hold: BatchingRule) -> None:
        """Start moving: read both sides, calling ``hooks`` (``read_hold``: the session's
        :class:`~pumpd.engine.batching.BatchingRule`)."""
        ...

    def forward(self) -> None:
        """Send the destination what is ready to forward."""
        ...

    def has_settlements(self) -> bool: ...

    def settle(self) -> None:
        """Write the source settlements that are due (one range covers many)."""
        ...

    def take_undeliverable(self) -> Delivered | None: ...

    def resume(self) -> None:
        """Go on reading the source after the message it paused on was settled."""
        ...

    def hold_rest(self) -> None:
        """Forward nothing more (the policy stops the shovel); keep reading for the close."""
        ...

    def take_returned(self) -> Returned | None: ...

    def resume_destination(self) -> None: ...
