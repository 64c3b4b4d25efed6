"""One connected attempt of a shovel: a source, a destination and the path between them.

A session opens both sides, issues the declarations, pairs them into a path (``wiring.py``) and
forwards until it is told to stop, a connection fails, or its delivery limit is reached. Any
failure ends the whole session (both connections), as in the Erlang shovel: whatever the source had
delivered and not yet had acknowledged is requeued by the source broker, so nothing is lost and a
new session starts clean. Reconnecting and reporting status are the pump's business, not this one;
what happens to a message that cannot be delivered is the policy's (``undeliverable.py``). The
session knows no wire: it drives both sides and the path through the contract of ``endpoint.py``.

Where a delivery can wait, and what ends each wait; none ends only on a later arrival, so a
source that goes quiet leaves nothing unpublished or unacked (``tests/integration/test_quiet_source.py``):
the source socket while reading is paused (each pause has its reason and its end: the read
hold's timer, armed with it; the destination's buffer draining to a quarter of
``DEST_WRITE_HIGH_WATER``; the undeliverable policy settling a message); the relay's carry-over
(a frame's start, until its rest is read); the relay's publishes (flushed in the loop iteration
of the read that completed them, whichever link it was on; only ``connection.blocked`` keeps
them, until unblocked); the destination's write buffer (the event loop's); the confirm window
(until the destination confirms; else the stall rule); source acks (at once when a quarter of
the prefetch window is due or no more messages are expected, else by a timer armed in the same
flush, ``ACK_DELAY`` later).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from ..config.model import AckMode, Amqp10URI, BrokerURI, ShovelConfig, reads_stream
from .batching import BatchingRule
from .ending import Outcome, SessionEnded, connection_ended
from .endpoint import Destination, Endpoint, Path, PositionedDestination, Source
from .fence import Fence, gap_clock
from .forwarding import relay_options
from .link_errors import LinkError
from .status import Counters
from .stream_position import StreamPosition, stream_offset
from .undeliverable import Undeliverable
from .wiring import open_destination, open_source, pair, stream_source_end

__all__ = ["Session", "SessionEnded"]

log = logging.getLogger("pumpd.session")


DEST_WRITE_HIGH_WATER = 8 * 1024 * 1024  # bytes queued for the destination socket
ACK_DELAY = 0.001  # seconds a source ack may wait to cover more messages (libuv timers are ms)
UNBOUNDED_ACK_BATCH = 256  # with prefetch 0: ack at once when this many are settled


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
        lease: str | None = None,
        producer: str = "",
    ) -> None:
        self.cfg = cfg
        self._lease = lease  # the lease queue of this position of a group (engine/lease.py)
        self._producer = producer  # a stream destination's producer name
        self._on_blocked = on_blocked
        self._limit = limit
        self._limit_from_queue_length = limit_from_queue_length
        # delete-after "queue-length": the queue's length when the shovel first connected
        self.queue_length_limit: int | None = None
        self._client_name = client_name
        self.source: Source | None = None
        self.destination: Destination | None = None
        self.path: Path | None = None
        self.queue = cfg.queue
        self._consumer_tag: str | None = None
        self._blocked = False
        self._ack_timer: asyncio.TimerHandle | None = None
        # whether a read hold or an ack delay pays now: only when more messages are coming
        self._batching = BatchingRule(cfg.source_read_hold_ms / 1000, ACK_DELAY)
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
        self.source_uri: BrokerURI | Amqp10URI | None = None
        self.destination_uri: BrokerURI | Amqp10URI | None = None
        self.undeliverable = Undeliverable(cfg, self, careful=careful)
        # a stream source: where it is, recorded on the source broker (engine/stream_position.py)
        self._position: StreamPosition | None = None
        # the source offset a stream destination stored last, plus one: where to resume
        self._resume: int | None = None
        # Fencing (engine/fence.py). With no_ack the source has let go of every delivery
        # already: publishing it is the only copy, so it is never fenced.
        self._fence = Fence(self.end) if cfg.ack_mode != AckMode.NO_ACK else None

    @property
    def careful_left(self) -> int:
        """After a refused message handled here: how many the next session forwards carefully."""
        return self.undeliverable.careful_left

    @property
    def reads_stream(self) -> bool:
        """The source is a stream: its message count is what it retains, not a backlog."""
        return self._position is not None

    @property
    def stream_forwarded(self) -> int | None:
        """A stream source: the offset of the last message forwarded (published, and not
        waiting for the destination), -1 when none before the start; None when not known (not
        a stream, or a start at ``last``, ``next`` or a time before the first message)."""
        if self._position is None:
            return None
        path = self.path
        last = path.last_message if path is not None else None
        if path is not None and last is not None:
            offset = stream_offset(last.properties)
            if offset is not None:
                # those in flight were published before the last one: offsets in order
                return max(-1, offset - path.in_flight)
        start = self._consumer_arguments().get("x-stream-offset", "first")
        if start == "first":
            return -1  # counted from offset 0: retention may have removed some of them
        if isinstance(start, int) and not isinstance(start, bool):
            return max(-1, start - 1)
        return None

    @property
    def unbounded(self) -> bool:
        """Whether nothing but us limits what the source sends (no prefetch applies)."""
        return self.cfg.ack_mode == AckMode.NO_ACK or self.cfg.prefetch_count == 0

    async def open(self, source_uri: BrokerURI | Amqp10URI,
                   destination_uri: BrokerURI | Amqp10URI) -> None:
        """Connect both sides, declare, and start consuming.

        :raises LinkError: when a broker refuses or fails (the message names the side); the
            caller closes the session
        """
        self._loop = asyncio.get_running_loop()
        self._failed = self._loop.create_future()
        self.source_uri, self.destination_uri = source_uri, destination_uri
        name = f"{self._client_name} {self.cfg.name}"
        if self._lease is not None:
            # A position of a group: the lease first, so that a standby one never connects to
            # the destination nor runs the source declarations.
            await self._connect_source(source_uri, name)
        self.destination = await open_destination(destination_uri, f"{name} (destination)",
                                                  self.cfg, producer=self._producer)
        self._watch(self.destination, "destination")
        try:
            await self.destination.declare(self.cfg.destination.declarations)
            if self.cfg.ack_mode == AckMode.ON_CONFIRM:
                await self.destination.expect_confirms()
        except LinkError as exc:
            raise LinkError(f"destination: {exc}", reply_code=exc.reply_code,
                            side="destination") from exc
        if self.source is None:
            await self._connect_source(source_uri, name)
        assert self.source is not None
        try:
            await self.source.declare(self.cfg.source.declarations)
            await self._start_source(name)
        except LinkError as exc:
            if exc.side is not None:  # the destination, lost meanwhile: already says so
                raise
            raise LinkError(f"source: {exc}", reply_code=exc.reply_code, side="source") from exc

    async def _connect_source(self, source_uri: BrokerURI | Amqp10URI, name: str) -> None:
        """Open the source and, for a position of a group, take its lease.

        :raises LeaseRefused: another connection holds the lease
        :raises LinkError: naming the source side
        """
        self.source = await open_source(source_uri, f"{name} (source)")
        self._watch(self.source, "source")
        if self._lease is not None:
            try:
                await self.source.take_lease(self._lease)
            except LinkError as exc:
                raise LinkError(f"source: {exc}", reply_code=exc.reply_code,
                                side="source") from exc

    async def _start_source(self, name: str) -> None:
        assert self.source is not None and self.destination is not None
        if not self.destination.is_open:  # lost while the source was opening
            raise LinkError(f"destination: {self.destination.closed.result()}",
                            side="destination")
        assert self.source_uri is not None and self.destination_uri is not None
        source_uri, destination_uri = self.source_uri, self.destination_uri
        # an AMQP 1.0 source reads its address; an AMQP 0-9-1 one its queue
        self.queue = (self.cfg.queue or self.cfg.source.address
                      or self.source.last_declared_queue)
        if not self.queue:
            raise LinkError("queue \"\" means the last declared queue, but none was declared")
        if self._limit_from_queue_length:
            self.queue_length_limit = self._limit = await self.source.backlog(self.queue)
            if self._limit == 0:
                return
        careful = self.undeliverable.careful
        if isinstance(source_uri, BrokerURI) and reads_stream(
                self.queue, self.cfg.consumer_arguments, self.cfg.source.declarations):
            self._position = StreamPosition(source_uri, self.cfg.name, self.queue,
                                            client_name=f"{name} (stream position)")
            if await self._position.load() is not None:
                log.info("shovel %s: stream %r resumes after offset %d (recorded on the source "
                         "broker)", self.cfg.name, self.queue, self._position.saved)
        if isinstance(self.destination, PositionedDestination):
            # the destination's own record is exact: it stored every offset up to it
            self._resume = await self.destination.resume_offset()
            if self._resume is not None:
                if self._position is not None and isinstance(source_uri, BrokerURI):
                    await self._check_resume(source_uri, self.destination.position_holder,
                                             self._resume, name)
                log.info("shovel %s: %r resumes at offset %d (the destination stream stored "
                         "the one before)", self.cfg.name, self.queue, self._resume)
        if self.cfg.ack_mode != AckMode.NO_ACK:
            await self.source.credit(1 if careful else self.cfg.prefetch_count)
        if careful:
            log.warning("shovel %s: the destination refused a message last time: forwarding the "
                        "next %d one at a time to find it", self.cfg.name, careful)
        self.path = pair(
            self.source, self.destination,
            window=1 if careful else self.cfg.prefetch_count,
            limit=self._limit,
            keep_last=bool(careful) or self._position is not None,
            hold_returns=self.undeliverable.holds_returns,
            **relay_options(self.cfg, source_uri, destination_uri, self.queue),
        )
        if isinstance(source_uri, BrokerURI):  # an AMQP 1.0 source parks nothing
            self.undeliverable.open_parker(source_uri, f"{name} (park)")
        self.path.start(self, read_hold=self._batching)
        self.destination.on_blocked(self._set_blocked)
        # A destination slower than the source (a WAN link, large bodies, no_ack with nothing
        # bounding it) must not pile up unsent bytes here: stop reading the source meanwhile.
        source = self.source
        self.destination.on_write_pressure(source.pause_reading, DEST_WRITE_HIGH_WATER)
        if self._fence is not None:
            self._fence.start(source)
        await self._consume()

    async def _check_resume(self, source_uri: BrokerURI, holder: str, resume: int,
                            name: str) -> None:
        """Refuse a destination that stored a source offset past the source stream's end: it
        holds more than the source ever had (a wrong destination, or a peer that lies), and
        resuming there would skip what comes next. Unchecked, with a warning, when the source's
        streams port cannot be read.

        :raises LinkError: naming the destination side, the holder, its answer and the end
        """
        try:
            last = await stream_source_end(source_uri, self.queue, self.cfg.source.stream_port,
                                           client_name=f"{name} (stream end)")
        except LinkError as exc:
            log.warning("shovel %s: the destination's position (offset %d stored by %s) cannot "
                        "be checked against the end of stream %r: %s", self.cfg.name,
                        resume - 1, holder, self.queue, exc)
            return
        if last is None or resume - 1 > last:
            end = "holds no message" if last is None else f"ends at offset {last}"
            raise LinkError(
                f"destination: {holder} stored source offset {resume - 1} (its publisher "
                f"sequence is {resume}), but source stream {self.queue!r} {end}: the "
                "destination holds more than the source ever had (a wrong destination, or a "
                "peer that lies); not resuming there", side="destination")

    async def _consume(self) -> None:
        assert self.source is not None
        self._consumer_tag = await self.source.consume(
            self.queue, no_ack=self.cfg.ack_mode == AckMode.NO_ACK,
            # src-consumer-args / src-consumer-name
            arguments=self._consumer_arguments(),
            consumer_tag=self.cfg.consumer_tag,
        )
        if self._blocked and self.unbounded and self._loop is not None:
            # the destination was blocked (an alarm raised before the shovel started)
            # before the consumer existed to be cancelled: cancel it now.
            self._flow_task = self._loop.create_task(self._source_flow(False))

    def _consumer_arguments(self) -> dict[str, Any]:
        """basic.consume's arguments: the start offset from the destination's record, else
        from the source broker's, else as configured."""
        configured = dict(self.cfg.consumer_arguments)
        if self._resume is not None:
            return {**configured, "x-stream-offset": self._resume}
        if self._position is not None:
            return self._position.consumer_arguments(configured)
        return configured

    def _watch(self, endpoint: Endpoint, side: str) -> None:
        def closed(fut: asyncio.Future[BaseException]) -> None:
            if self._failed is not None and not self._failed.done():
                path = self.path
                unsettled = path.in_flight + path.buffered if path is not None else 0
                self._failed.set_result(connection_ended(side, fut.result(), unsettled))

        endpoint.closed.add_done_callback(closed)

    def end(self, ended: SessionEnded) -> None:
        """End the session (the first end given is the one :meth:`wait` raises)."""
        if self._failed is not None and not self._failed.done():
            self._failed.set_result(ended)

    # -- what the path calls back (endpoint.PathHooks) ----------------------------------------

    def source_paused(self) -> None:
        """The path paused the source on a message it cannot forward: the policy settles it."""
        self.undeliverable.source_paused()

    def destination_paused(self) -> None:
        """The path paused the destination on a returned message: the policy settles it."""
        self.undeliverable.destination_paused()

    def hold_source(self, seconds: float) -> None:
        """The read hold: the source is not read for ``seconds`` (``engine/batching.py``)."""
        if self._read_hold_timer is None and self.source is not None:
            assert self._loop is not None
            self.source.pause_reading(True, "read-hold")
            self._read_hold_timer = self._loop.call_later(seconds, self._end_read_hold)

    def _end_read_hold(self) -> None:
        self._read_hold_timer = None
        if self.source is not None:
            self.source.pause_reading(False, "read-hold")

    def flush(self, *, acks_due: bool = False) -> None:
        """Write what the path produced: publishes (unless blocked), then source acks and nacks
        when they are due (see ``_ack_batch``)."""
        path = self.path
        if path is None:
            return
        path.flush_scheduled = False
        fence = self._fence  # engine/fence.py: read here, no call on every message's path
        if fence is not None and (fence.fenced or fence.source_closed.done()
                                  or gap_clock() > fence.deadline):
            fence.trip()
            return
        if not self._blocked:
            path.forward()
        if acks_due or path.pending_acks >= self._ack_batch:
            if self._ack_timer is not None:
                self._ack_timer.cancel()
                self._ack_timer = None
            path.settle()
        elif self._ack_timer is None and path.has_settlements():
            # Waiting covers more messages only when more are coming; on a quiet link it
            # would only keep the source's unacknowledged count up.
            wait = self._batching.ack_wait(time.monotonic())
            if wait <= 0:
                path.settle()
            else:
                assert self._loop is not None
                self._ack_timer = self._loop.call_later(wait, self._acks_due)
        if self._position is not None:
            self._position.offer(path)

    def _acks_due(self) -> None:
        self._ack_timer = None
        self.flush(acks_due=True)

    @property
    def blocked(self) -> bool:
        """The destination has blocked publishing (read when the session opens)."""
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

    async def wait(self, stop: asyncio.Event) -> Outcome | None:
        """Forward until ``stop`` is set (returns None), the delivery limit is reached (returns
        ``Outcome.LIMIT``), a careful session has done its part (``Outcome.CAREFUL_DONE``), or
        a connection fails or a message stops the shovel (raises :class:`SessionEnded`)."""
        assert self._failed is not None and self.path is not None
        path = self.path
        stop_task: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
        # Only a delivery limit or a careful session needs polling; otherwise sleep until a
        # failure or the stop (an idle shovel must not wake five times a second).
        careful = self.undeliverable.careful
        poll = 0.2 if self._limit or careful else None
        try:
            while True:
                waiting: set[asyncio.Future[Any]] = {self._failed, stop_task}
                await asyncio.wait(waiting, timeout=poll, return_when=asyncio.FIRST_COMPLETED)
                if self._failed.done():
                    raise await self.undeliverable.settle_refused(self._failed.result())
                if stop_task.done():
                    return None
                if path.limit_reached and path.buffered == 0:
                    return Outcome.LIMIT
                if careful and path.acked >= careful:
                    log.info("shovel %s: %d messages forwarded one at a time without a refusal; "
                             "back to the full prefetch window", self.cfg.name, careful)
                    return Outcome.CAREFUL_DONE
        finally:
            stop_task.cancel()

    async def drain(self, timeout: float) -> bool:
        """Stop consuming, publish what is held, wait for outstanding confirms and ack them.

        Returns True when everything received was settled within ``timeout`` seconds; whatever
        was not is left unacknowledged and the source requeues it when the session closes.
        """
        path, source = self.path, self.source
        if path is None or source is None or not source.is_open:
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
            if path.buffered == 0 and path.in_flight == 0:
                break
            if path.destination_paused:
                break  # stopped on a returned message: what is in flight stays unacknowledged
            if self._failed is not None and self._failed.done() \
                    and not self._failed.result().terminal:
                return False  # a connection failed: what is left is requeued at the source
            await asyncio.sleep(0.02)
        self.flush(acks_due=True)
        return path.buffered == 0 and path.in_flight == 0

    async def close(self) -> None:
        """Close both connections (source first, after its acks are written)."""
        if self._fence is not None:
            self._fence.cancel()
        if self._flow_task is not None:
            self._flow_task.cancel()
        if self._ack_timer is not None:
            self._ack_timer.cancel()
        if self._read_hold_timer is not None:  # closing needs to read the broker's close-ok
            self._read_hold_timer.cancel()
            self._end_read_hold()
        await self.undeliverable.close()
        if self._position is not None:
            await self._position.close(self.path)
        failed = self._failed
        stalled = failed.result() if failed is not None and failed.done() else None
        sides: tuple[tuple[str, Endpoint | None], ...] = (
            ("source", self.source), ("destination", self.destination))
        for side, endpoint in sides:
            if endpoint is None:
                continue
            if stalled is not None and stalled.stalled and stalled.side == side:
                endpoint.abort()  # it does not answer: a polite close would wait for nothing
            else:
                await endpoint.close_quietly()

    def counters(self) -> Counters:
        """What this session moved: its path's counters and the undeliverable ones it handled."""
        if self.path is None:
            return Counters()
        return Counters.of_relay(self.path, **self.undeliverable.counts)
