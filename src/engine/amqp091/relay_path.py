"""The native path between an AMQP 0-9-1 source and an AMQP 0-9-1 destination.

The relay (``pumpd._fastpath.Relay``, or ``dataplane/relay_ref.py``) reads the source's
``basic.deliver`` frames off its socket and builds the destination's ``basic.publish`` frames,
then reads the destination's confirms and builds the source's acks: bytes in, bytes out, no
Python object per message. This module puts it between the two byte streams: the source's
interceptor feeds it, schedules the session's flush for this loop iteration when it has output,
tells the session when it paused on a message it cannot forward, and asks for the read hold when
the arrival rate says more messages are coming (``engine/batching.py``); the destination's
interceptor feeds it the confirms and returns.
"""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import Callable
from typing import Any

from ...dataplane.api import Delivered, Returned
from ...dataplane.implementation import Relay
from ..batching import BatchingRule
from ..endpoint import ByteDestination, ByteSource, PathHooks

__all__ = ["RelayPath"]


class RelayPath:
    """One session's relay between ``source`` and ``destination`` (see the module docstring);
    ``relay_options`` are the relay's own (window, limit, the edits of ``forwarding.py``)."""

    def __init__(self, source: ByteSource, destination: ByteDestination,
                 **relay_options: Any) -> None:
        self.source, self.destination = source, destination
        self.relay = Relay(
            source_channel=source.channel_number,
            dest_channel=destination.channel_number,
            dest_frame_max=destination.frame_max,
            source_frame_max=source.frame_max,
            **relay_options,
        )
        self.flush_scheduled = False
        # asked on every flush: the relay's own method, with no call through this class
        self.has_settlements: Callable[[], bool] = self.relay.has_source_output

    # -- counters and levels, read by the session and the pump --------------------------------

    @property
    def consumed(self) -> int:
        return self.relay.consumed

    @property
    def published(self) -> int:
        return self.relay.published

    @property
    def confirmed(self) -> int:
        return self.relay.confirmed

    @property
    def acked(self) -> int:
        return self.relay.acked

    @property
    def nacked(self) -> int:
        return self.relay.nacked

    @property
    def returned(self) -> int:
        return self.relay.returned

    @property
    def redelivered(self) -> int:
        return self.relay.redelivered

    @property
    def bytes(self) -> int:
        return self.relay.bytes

    @property
    def in_flight(self) -> int:
        return self.relay.in_flight

    @property
    def buffered(self) -> int:
        return self.relay.buffered

    @property
    def limit_reached(self) -> bool:
        return self.relay.limit_reached

    @property
    def pending_acks(self) -> int:
        return self.relay.pending_acks

    @property
    def paused(self) -> bool:
        return self.relay.paused

    @property
    def destination_paused(self) -> bool:
        return self.relay.destination_paused

    @property
    def last_message(self) -> Delivered | None:
        return self.relay.last_message

    # -- moving ---------------------------------------------------------------------------------

    def start(self, hooks: PathHooks, *, read_hold: BatchingRule) -> None:
        self.source.intercept(self._source_feed(hooks, read_hold))
        # returned messages go to the unroutable policy before their confirm is read
        self.destination.intercept(self._destination_feed(hooks))

    def _source_feed(self, hooks: PathHooks, rule: BatchingRule) -> Callable[[builtins.bytes], builtins.bytes]:
        """The source's interceptor. A broker delivering at a steady pace sends a few messages
        per socket read, and every read costs a wakeup, a read, a publish write and (over
        loopback) the broker's side of that TCP segment: at a high rate, holding for a
        millisecond lets the deliveries of that millisecond be read, scanned and forwarded in
        one go; at a low rate it would only delay them. The bytes already read go on at once."""
        relay = self.relay
        feed, has_output = relay.feed_source, relay.has_output
        flush, source_paused, hold_source = hooks.flush, hooks.source_paused, hooks.hold_source
        holds = rule.hold > 0
        loop = asyncio.get_running_loop()

        def feed_source(data: builtins.bytes) -> builtins.bytes:
            before = relay.consumed
            rest = feed(data)
            if not self.flush_scheduled and has_output():
                self.flush_scheduled = True
                loop.call_soon(flush)
            if relay.paused:
                source_paused()
            if holds:
                hold = rule.after_read(time.monotonic(), len(data), relay.consumed - before)
                if hold > 0:
                    hold_source(hold)
            return rest

        return feed_source

    def _destination_feed(self, hooks: PathHooks) -> Callable[[builtins.bytes], builtins.bytes]:
        """The destination's interceptor: confirms (and returns) for the relay."""
        relay = self.relay
        feed, has_output = relay.feed_destination, relay.has_output
        flush, destination_paused = hooks.flush, hooks.destination_paused
        loop = asyncio.get_running_loop()

        def feed_destination(data: builtins.bytes) -> builtins.bytes:
            rest = feed(data)
            if not self.flush_scheduled and has_output():
                self.flush_scheduled = True
                loop.call_soon(flush)
            if relay.destination_paused:
                destination_paused()
            return rest

        return feed_destination

    def forward(self) -> None:
        publishes = self.relay.take_publishes()
        if publishes:  # none after a read of confirms: no call to the link for nothing
            self.destination.write(publishes)

    def settle(self) -> None:
        self.source.write(self.relay.take_source_output())

    # -- a message the policy settles ----------------------------------------------------------

    def take_undeliverable(self) -> Delivered | None:
        return self.relay.take_undeliverable()

    def resume(self) -> None:
        self.source.hand_to_client(self.relay.resume())

    def hold_rest(self) -> None:
        self.relay.hold_rest()

    def take_returned(self) -> Returned | None:
        return self.relay.take_returned()

    def resume_destination(self) -> None:
        self.destination.hand_to_client(self.relay.resume_destination())
