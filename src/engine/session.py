"""One connected attempt of a shovel: a source link, a destination link and the relay between them.

A session opens both connections, issues the declarations, wires the relay into both streams and
forwards until it is told to stop, a connection fails, or its delivery limit is reached. Any
failure ends the whole session (both connections), as in the Erlang shovel: whatever the source had
delivered and not yet had acknowledged is requeued by the source broker, so nothing is lost and a
new session starts clean. Reconnecting and reporting status are the pump's business, not this one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from ..config.model import AckMode, BrokerURI, Disposition, ShovelConfig
from ..dataplane.fastpath import Relay
from ..dataplane.frames import basic_ack_frame, basic_reject_frame
from .forwarding import relay_options
from .link import Link, LinkError, open_link
from .parameters import to_pika_parameters
from .parking import Parker, message_id
from .status import Counters
from .stream_position import StreamPosition, reads_stream

log = logging.getLogger("pumpd.session")


DEST_WRITE_HIGH_WATER = 8 * 1024 * 1024  # bytes queued for the destination socket
ACK_DELAY = 0.001  # seconds a source ack may wait to cover more messages (libuv timers are ms)
UNBOUNDED_ACK_BATCH = 256  # with prefetch 0: ack at once when this many are settled
# A source read shorter than this starts a read hold (ShovelConfig.source_read_hold_ms); a longer
# one means the broker is ahead of us, and the next read follows at once anyway.
READ_HOLD_BELOW = 64 * 1024


# Reply codes with which a destination refuses one message by closing its channel or connection
# while forwarding (a user_id that is not the connection's user, a message over max_message_size,
# a frame it cannot parse): the same message would be refused again on the next session.
MESSAGE_REFUSAL_CODES = frozenset({406, 501, 502, 505})
# What a source broker says when a delivery stayed unacknowledged longer than its consumer_timeout.
CONSUMER_TIMEOUT_TEXT = "delivery acknowledgement"


class SessionEnded(Exception):
    """Why a session stopped forwarding (a failure; carries a human-readable reason).

    :param side: "source" or "destination" when one connection failed
    :param reply_code: the broker's reply code when it closed the channel or connection
    :param unsettled: messages published and not yet confirmed when it happened
    :param terminal: the shovel must stop (an undeliverable message under the ``stop`` policy)
    :param handled: the failure was a refused message that the policy has dealt with: reconnect
        at once, it is not a failure of the shovel
    """

    def __init__(self, reason: str, *, side: str | None = None, reply_code: int | None = None,
                 unsettled: int = 0, terminal: bool = False, handled: bool = False) -> None:
        super().__init__(reason)
        self.side = side
        self.reply_code = reply_code
        self.unsettled = unsettled
        self.terminal = terminal
        self.handled = handled

    @property
    def refused_message(self) -> bool:
        """The destination closed on a message (see MESSAGE_REFUSAL_CODES) with some in flight."""
        return (self.side == "destination" and self.reply_code in MESSAGE_REFUSAL_CODES
                and self.unsettled > 0)


def undeliverable_kind(reason: str) -> str:
    """The counter suffix for a reason the relay gives."""
    return "too_large" if "frame_max" in reason else "malformed"


class Session:
    """See the module docstring. ``on_blocked(bool)`` reports destination flow control."""

    def __init__(
        self,
        cfg: ShovelConfig,
        *,
        on_blocked: Callable[[bool], None],
        limit: int = 0,
        limit_from_queue_length: bool = False,
        client_name: str = "pumpd",
        careful: int = 0,
    ) -> None:
        self.cfg = cfg
        self._on_blocked = on_blocked
        self._limit = limit
        self._limit_from_queue_length = limit_from_queue_length
        # delete-after "queue-length": the queue's length when the shovel first connected
        self.queue_length_limit: int | None = None
        self._client_name = client_name
        self.source: Link | None = None
        self.destination: Link | None = None
        self.relay: Relay | None = None
        self.queue = cfg.queue
        self._consumer_tag: str | None = None
        self._blocked = False
        self._flush_scheduled = False
        self._ack_timer: asyncio.TimerHandle | None = None
        self._read_hold = cfg.source_read_hold_ms / 1000
        self._read_hold_timer: asyncio.TimerHandle | None = None
        # Ack at once when a quarter of the prefetch window waits for it, so the source never
        # runs dry; below that an ack waits up to ACK_DELAY to cover more. Each ack is a write
        # here and work for the broker's channel and queue: acking per socket read (~7 messages
        # at 40,000 msg/s) cost both sides more than the acks' own bytes.
        window = cfg.prefetch_count
        self._ack_batch = max(1, window // 4) if window else UNBOUNDED_ACK_BATCH
        self._failed: asyncio.Future[SessionEnded] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flow_task: asyncio.Task[None] | None = None
        self.source_uri: BrokerURI | None = None
        self.destination_uri: BrokerURI | None = None
        # careful > 0: the last session ended on a message the destination refused. This one
        # forwards one message at a time (prefetch 1, the relay keeping a copy of it) until
        # ``careful`` messages are settled, so that a refusal names its message for certain.
        self._careful = careful if cfg.ack_mode == AckMode.ON_CONFIRM else 0
        self.careful_left = 0  # after a refusal handled here: for the next session
        self._parker: Parker | None = None
        # a stream source: where it is, recorded on the source broker (engine/stream_position.py)
        self._position: StreamPosition | None = None
        # The task settling a paused side, by why it paused ("undeliverable" on the source,
        # "returned" on the destination): at most one each.
        self._settling: dict[str, asyncio.Task[None]] = {}
        self._terminal: str | None = None
        # handled undeliverable messages, by Counters field
        self.policy_counts: dict[str, int] = {}

    @property
    def unbounded(self) -> bool:
        """Whether nothing but us limits what the source sends (no prefetch applies)."""
        return self.cfg.ack_mode == AckMode.NO_ACK or self.cfg.prefetch_count == 0

    async def open(self, source_uri: BrokerURI, destination_uri: BrokerURI) -> None:
        """Connect both sides, declare, and start consuming.

        :raises LinkError: when a broker refuses or fails (the message names the side); the
            caller closes the session
        """
        self._loop = asyncio.get_running_loop()
        self._failed = self._loop.create_future()
        self.source_uri, self.destination_uri = source_uri, destination_uri
        name = f"{self._client_name} {self.cfg.name}"
        try:
            self.destination = await open_link(
                destination_uri,
                to_pika_parameters(destination_uri, client_name=f"{name} (destination)"))
            self._watch(self.destination, "destination")
            await self.destination.declare(self.cfg.destination.declarations)
            if self.cfg.ack_mode == AckMode.ON_CONFIRM:
                await self.destination.confirm_select()
        except LinkError as exc:
            raise LinkError(f"destination: {exc}", reply_code=exc.reply_code) from exc
        try:
            self.source = await open_link(
                source_uri, to_pika_parameters(source_uri, client_name=f"{name} (source)"))
            self._watch(self.source, "source")
            await self.source.declare(self.cfg.source.declarations)
            await self._start_source(name)
        except LinkError as exc:
            raise LinkError(f"source: {exc}", reply_code=exc.reply_code) from exc

    async def _start_source(self, name: str) -> None:
        assert self.source is not None and self.destination is not None
        if not self.destination.is_open:  # lost while the source was opening
            raise LinkError(f"destination: {self.destination.closed.result()}")
        assert self.source_uri is not None and self.destination_uri is not None
        source_uri, destination_uri = self.source_uri, self.destination_uri
        self.queue = self.cfg.queue or self.source.last_declared_queue
        if not self.queue:
            raise LinkError("queue \"\" means the last declared queue, but none was declared")
        if self._limit_from_queue_length:
            self.queue_length_limit = self._limit = await self.source.queue_length(self.queue)
            if self._limit == 0:
                return
        if reads_stream(self.queue, self.cfg.consumer_arguments, self.cfg.source.declarations):
            self._position = StreamPosition(source_uri, self.cfg.name, self.queue,
                                            client_name=f"{name} (stream position)")
            if await self._position.load() is not None:
                log.info("shovel %s: stream %r resumes after offset %d (recorded on the source "
                         "broker)", self.cfg.name, self.queue, self._position.saved)
        if self.cfg.ack_mode != AckMode.NO_ACK:
            await self.source.qos(1 if self._careful else self.cfg.prefetch_count)
        if self._careful:
            log.warning("shovel %s: the destination refused a message last time: forwarding the "
                        "next %d one at a time to find it", self.cfg.name, self._careful)
        self.relay = Relay(
            source_channel=self.source.channel_number,
            dest_channel=self.destination.channel_number,
            dest_frame_max=self.destination.frame_max,
            window=1 if self._careful else self.cfg.prefetch_count,
            limit=self._limit,
            keep_last=bool(self._careful) or self._position is not None,
            hold_returns=self._holds_returns,
            **relay_options(self.cfg, source_uri, destination_uri, self.queue),
        )
        self._parker = Parker(source_uri, self.cfg.undeliverable.park_queue,
                              client_name=f"{name} (park)")
        relay = self.relay
        self.source.intercept(self._held(self._settles(
            self._fed(relay.feed_source), "source", "undeliverable",
            lambda r: r.paused, self._settle_paused)))
        # returned messages go to the unroutable policy before their confirm is read
        self.destination.intercept(self._settles(
            self._fed(relay.feed_destination), "destination", "returned",
            lambda r: r.destination_paused, self._settle_returned))
        self.destination.on_blocked(self._set_blocked)
        # A destination slower than the source (a WAN link, large bodies, no_ack with nothing
        # bounding it) must not pile up unsent bytes here: stop reading the source meanwhile.
        source = self.source
        self.destination.on_write_pressure(source.pause_reading, DEST_WRITE_HIGH_WATER)
        await self._consume()

    async def _consume(self) -> None:
        assert self.source is not None
        self._consumer_tag = await self.source.consume(
            self.queue, no_ack=self.cfg.ack_mode == AckMode.NO_ACK,
            # issue 13: src-consumer-args / src-consumer-name
            arguments=self.cfg.consumer_arguments if self._position is None
            else self._position.consumer_arguments(self.cfg.consumer_arguments),
            consumer_tag=self.cfg.consumer_tag,
        )
        if self._blocked and self.unbounded and self._loop is not None:
            # issue 13: the destination was blocked (an alarm raised before the shovel started)
            # before the consumer existed to be cancelled: cancel it now.
            self._flow_task = self._loop.create_task(self._source_flow(False))

    def _watch(self, link: Link, side: str) -> None:
        def closed(fut: asyncio.Future[BaseException]) -> None:
            if self._failed is not None and not self._failed.done():
                self._failed.set_result(self._ended(side, fut.result()))

        link.closed.add_done_callback(closed)

    def _ended(self, side: str, exc: BaseException) -> SessionEnded:
        """The session's end, in words that say which side failed and why."""
        code = getattr(exc, "reply_code", None)
        text = str(exc)
        if side == "source" and code == 406 and CONSUMER_TIMEOUT_TEXT in text:
            text += (" (consumer timeout: the source broker's consumer_timeout passed while "
                     "messages waited for the destination; they are redelivered)")
        unsettled = 0
        if self.relay is not None:
            unsettled = self.relay.in_flight + self.relay.buffered
        return SessionEnded(f"{side}: {text}", side=side, reply_code=code, unsettled=unsettled)

    def _end(self, ended: SessionEnded) -> None:
        if self._failed is not None and not self._failed.done():
            self._failed.set_result(ended)

    # -- undeliverable messages ---------------------------------------------------------------

    def _settles(self, feed: Callable[[bytes], bytes], side: str, why: str,
                 paused: Callable[[Relay], bool],
                 settle: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[bytes], bytes]:
        """Wrap a relay feed: when the relay paused that side on a message (``paused``), stop
        reading it and settle the message by the policy (``settle``, one task at a time)."""

        def check(data: bytes) -> bytes:
            rest = feed(data)
            relay = self.relay
            if relay is not None and paused(relay) and why not in self._settling:
                link = self.source if side == "source" else self.destination
                assert self._loop is not None and link is not None
                link.pause_reading(True, why)
                self._settling[why] = self._loop.create_task(settle())
            return rest

        return check

    async def _settle_paused(self) -> None:
        relay, source = self.relay, self.source
        assert relay is not None and source is not None
        try:
            while relay.paused:
                item = relay.take_undeliverable()
                if item is None:
                    break
                tag, _redelivered, exchange, routing_key, props, body, reason = item
                self.flush(acks_due=True)  # what came before it goes first
                await self._dispose(f"undeliverable_{undeliverable_kind(reason)}", tag,
                                    (exchange, routing_key), props, body, reason)
                if self._terminal is not None:
                    # Everything after it stays unacknowledged and is requeued at close; the
                    # relay goes on reading, so that pika sees the cancel-ok and close-ok.
                    relay.hold_rest()
                source.hand_to_pika(relay.resume())
            source.pause_reading(False, "undeliverable")
            self.flush()
        except LinkError as exc:
            self._end(SessionEnded(f"source: {exc}", side="source"))
        finally:
            self._settling.pop("undeliverable", None)

    async def _dispose(self, counter: str, tag: int, routing: tuple[bytes, bytes], props: bytes,
                       body: bytes, cause: str) -> None:
        """Apply the undeliverable policy to one message the source delivered as ``tag``.

        :raises LinkError: when parking fails (the message stays unacknowledged at the source)
        """
        assert self.source is not None and self._parker is not None
        policy = self.cfg.undeliverable.policy
        mid = message_id(props)
        what = f"delivery tag {tag}" + (f", message_id {mid!r}" if mid else "")
        self._count(counter)
        if policy == Disposition.STOP:
            self._stop_on(what, cause)
            return
        if policy == Disposition.DEAD_LETTER:
            self.source.write(basic_reject_frame(self.source.channel_number, tag, False))
            self._count("dead_lettered")
            log.warning("shovel %s: undeliverable message (%s): %s; rejected to the source "
                        "queue's dead-letter exchange", self.cfg.name, what, cause)
            return
        await self._park(what, routing, props, body, cause)
        self.source.write(basic_ack_frame(self.source.channel_number, tag, False))

    def _stop_on(self, what: str, cause: str) -> None:
        """The stop policy: the session ends and the shovel terminates, naming the message."""
        self._terminal = f"undeliverable message ({what}): {cause}; policy stop"
        log.error("shovel %s: %s", self.cfg.name, self._terminal)
        self._end(SessionEnded(self._terminal, terminal=True))

    async def _park(self, what: str, routing: tuple[bytes, bytes], props: bytes, body: bytes,
                    cause: str) -> None:
        """The park policy, up to the park queue's confirm (the caller settles the source).

        :raises LinkError: when the park queue cannot take it
        """
        assert self._parker is not None
        await self._parker.park(routing, props, body, {
            "x-pumpd-undeliverable": cause,
            "x-pumpd-shovel": self.cfg.name,
            "x-pumpd-original-exchange": routing[0].decode("utf-8", "replace"),
            "x-pumpd-original-routing-key": routing[1].decode("utf-8", "replace"),
        })
        self._count("parked")
        log.warning("shovel %s: undeliverable message (%s): %s; parked in queue %r",
                    self.cfg.name, what, cause, self.cfg.undeliverable.park_queue)

    @property
    def _holds_returns(self) -> bool:
        """Whether returned messages go to the unroutable policy (else they are only counted)."""
        return (self.cfg.publish_mandatory
                and self.cfg.undeliverable.unroutable != Disposition.DROP)

    async def _settle_returned(self) -> None:
        relay, destination = self.relay, self.destination
        assert relay is not None and destination is not None and self._parker is not None
        try:
            while relay.destination_paused:
                returned = relay.take_returned()
                if returned is None:
                    break
                code, text, exchange, routing_key, props, body = returned
                cause = (f"unroutable: the destination returned it ({code} {text}; exchange "
                         f"{exchange.decode('utf-8', 'replace')!r}, routing key "
                         f"{routing_key.decode('utf-8', 'replace')!r})")
                self._count("undeliverable_unroutable")
                mid = message_id(props)
                what = "a returned message" + (f" (message_id {mid!r})" if mid else "")
                if self.cfg.undeliverable.unroutable == Disposition.STOP:
                    # Its confirm, and the source ack it would allow, stay unread: the source
                    # keeps it (and requeues the messages in flight after it) when we close.
                    self._stop_on(what, cause)
                    return
                # Parked before its confirm is read, so its source ack waits for the park.
                await self._park(what, (exchange, routing_key), props, body, cause)
                destination.hand_to_pika(relay.resume_destination())
            destination.pause_reading(False, "returned")
            self.flush()
        except LinkError as exc:
            self._end(SessionEnded(f"source: {exc}", side="source"))
        finally:
            self._settling.pop("returned", None)

    def _count(self, counter: str) -> None:
        self.policy_counts[counter] = self.policy_counts.get(counter, 0) + 1

    async def settle_refused(self, ended: SessionEnded) -> SessionEnded:
        """After the destination closed on a message in a careful session: that message (the
        only one in flight) is the one it refuses; apply the policy to it at the source, which
        is still connected. Returns how the session ended, marked handled when it was."""
        relay, source = self.relay, self.source
        if not (self._careful and ended.refused_message and relay is not None
                and source is not None and source.is_open and relay.in_flight == 1):
            return ended
        last = relay.last_message
        if last is None:
            return ended
        tag, _redelivered, exchange, routing_key, props, body, _ = last
        cause = f"refused by the destination: {ended}"
        try:
            await self._dispose("undeliverable_refused", tag, (exchange, routing_key), props,
                                body, cause)
        except LinkError as exc:
            return SessionEnded(f"{ended}; parking the refused message failed: {exc}",
                                side="source")
        if self._terminal is not None:
            return SessionEnded(self._terminal, terminal=True)
        self.careful_left = max(self._careful - relay.acked - 1, 0)
        return SessionEnded(str(ended), side=ended.side, reply_code=ended.reply_code,
                            handled=True)


    def _fed(self, feed: Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
        """Wrap a relay feed so that any output it produced gets flushed this loop iteration."""

        def intercept(data: bytes) -> bytes:
            rest = feed(data)
            if not self._flush_scheduled and self.relay is not None and self.relay.has_output():
                self._flush_scheduled = True
                assert self._loop is not None
                self._loop.call_soon(self.flush)
            return rest

        return intercept

    def _held(self, feed: Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
        """Wrap the source feed so that a short read pauses reading the source for the read
        hold. A broker delivering at a steady pace sends a few messages per socket read, and
        every read costs a wakeup, a read, a publish write and (over loopback) the broker's side
        of that TCP segment: holding for a millisecond lets the deliveries of that millisecond
        be read, scanned and forwarded in one go. The bytes already read go on at once."""
        if self._read_hold <= 0:
            return feed

        def hold_after_short_read(data: bytes) -> bytes:
            rest = feed(data)
            if len(data) < READ_HOLD_BELOW and self._read_hold_timer is None:
                assert self._loop is not None and self.source is not None
                self.source.pause_reading(True, "read-hold")
                self._read_hold_timer = self._loop.call_later(self._read_hold, self._end_read_hold)
            return rest

        return hold_after_short_read

    def _end_read_hold(self) -> None:
        self._read_hold_timer = None
        if self.source is not None:
            self.source.pause_reading(False, "read-hold")

    def flush(self, *, acks_due: bool = False) -> None:
        """Write what the relay produced: publishes (unless blocked), then source acks and nacks
        when they are due (see ``_ack_batch``)."""
        self._flush_scheduled = False
        relay = self.relay
        if relay is None or self.source is None or self.destination is None:
            return
        if not self._blocked:
            self.destination.write(relay.take_publishes())
        if acks_due or relay.pending_acks >= self._ack_batch:
            if self._ack_timer is not None:
                self._ack_timer.cancel()
                self._ack_timer = None
            self.source.write(relay.take_source_output())
        elif self._ack_timer is None and relay.has_source_output():
            assert self._loop is not None
            self._ack_timer = self._loop.call_later(ACK_DELAY, self._acks_due)
        if self._position is not None:
            self._position.offer(relay)

    def _acks_due(self) -> None:
        self._ack_timer = None
        self.flush(acks_due=True)

    @property
    def blocked(self) -> bool:
        """The destination has blocked publishing (issue 13: read when the session opens)."""
        return self._blocked

    def _set_blocked(self, blocked: bool) -> None:
        self._blocked = blocked
        log.info("shovel %s: destination %s", self.cfg.name, "blocked" if blocked else "unblocked")
        self._on_blocked(blocked)
        if not blocked:
            self.flush(acks_due=True)
        if self.unbounded:
            # With no prefetch to bound what piles up, stop the source delivering while blocked.
            assert self._loop is not None
            self._flow_task = self._loop.create_task(self._source_flow(not blocked))

    async def _source_flow(self, active: bool) -> None:
        assert self.source is not None
        try:
            if not active and self._consumer_tag:
                tag, self._consumer_tag = self._consumer_tag, None
                await self.source.cancel(tag)
            elif active and not self._consumer_tag:
                await self._consume()
        except LinkError as exc:
            log.debug("shovel %s: source flow change failed: %s", self.cfg.name, exc)

    async def wait(self, stop: asyncio.Event) -> str | None:
        """Forward until ``stop`` is set (returns None), the delivery limit is reached (returns
        "limit"), a careful session has done its part (returns "careful-done"), or a connection
        fails or a message stops the shovel (raises :class:`SessionEnded`)."""
        assert self._failed is not None and self.relay is not None
        stop_task: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
        # Only a delivery limit or a careful session needs polling; otherwise sleep until a
        # failure or the stop (issue 14: an idle shovel must not wake five times a second).
        poll = 0.2 if self._limit or self._careful else None
        try:
            while True:
                waiting: set[asyncio.Future[Any]] = {self._failed, stop_task}
                await asyncio.wait(waiting, timeout=poll, return_when=asyncio.FIRST_COMPLETED)
                if self._failed.done():
                    raise await self.settle_refused(self._failed.result())
                if stop_task.done():
                    return None
                if self.relay.limit_reached and self.relay.buffered == 0:
                    return "limit"
                if self._careful and self.relay.acked >= self._careful:
                    log.info("shovel %s: %d messages forwarded one at a time without a refusal; "
                             "back to the full prefetch window", self.cfg.name, self._careful)
                    return "careful-done"
        finally:
            stop_task.cancel()

    async def drain(self, timeout: float) -> bool:
        """Stop consuming, publish what is held, wait for outstanding confirms and ack them.

        Returns True when everything received was settled within ``timeout`` seconds; whatever
        was not is left unacknowledged and the source requeues it when the session closes.
        """
        relay, source = self.relay, self.source
        if relay is None or source is None or not source.is_open:
            return False
        deadline = time.monotonic() + timeout  # one budget for the cancel and the settling
        if self._consumer_tag:
            tag, self._consumer_tag = self._consumer_tag, None
            try:
                await asyncio.wait_for(source.cancel(tag), timeout=max(timeout, 0.1))
            except (LinkError, asyncio.TimeoutError):
                return False
        while time.monotonic() < deadline:
            self.flush(acks_due=True)
            if relay.buffered == 0 and relay.in_flight == 0:
                break
            if relay.destination_paused:
                break  # stopped on a returned message: what is in flight stays unacknowledged
            if self._failed is not None and self._failed.done() \
                    and not self._failed.result().terminal:
                return False  # a connection failed: what is left is requeued at the source
            await asyncio.sleep(0.02)
        self.flush(acks_due=True)
        return relay.buffered == 0 and relay.in_flight == 0

    async def close(self) -> None:
        """Close both connections (source first, after its acks are written)."""
        if self._flow_task is not None:
            self._flow_task.cancel()
        if self._ack_timer is not None:
            self._ack_timer.cancel()
        if self._read_hold_timer is not None:  # closing needs to read the broker's close-ok
            self._read_hold_timer.cancel()
            self._end_read_hold()
        for task in list(self._settling.values()):
            task.cancel()
        if self._parker is not None:
            await self._parker.close()
        if self._position is not None:
            await self._position.close(self.relay)
        for link in (self.source, self.destination):
            if link is not None:
                try:
                    await link.close()
                except Exception as exc:  # closing is best effort: the broker may be gone
                    log.debug("closing %s: %s", link.uri.redacted(), exc)
                    link.abort()

    def counters(self) -> Counters:
        """What this session moved: its relay's counters and the undeliverable ones it handled."""
        if self.relay is None:
            return Counters()
        return Counters.of_relay(self.relay, **self.policy_counts)
