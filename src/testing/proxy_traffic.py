"""The connection pumping of :class:`pumpd.testing.proxy.TcpProxy`, on its event loop.

:class:`Traffic` is what every connection of one proxy shares (the loop, the delay, the stall, the
counts); each accepted connection is a :class:`Pair` of :class:`Side` sockets with a
:class:`Direction` each way, a FIFO of (due time, chunk) drained by one timer. The faults that act
on a whole proxy (its modes, resets, stalls) are :mod:`pumpd.testing.proxy`'s.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import struct
from typing import Literal, cast, get_args

ProxyMode = Literal["pass", "stall", "refuse", "reset-on-accept"]
MODES: tuple[ProxyMode, ...] = get_args(ProxyMode)

# Bytes held in one direction (delayed or stalled) beyond which reading from its source pauses,
# and below which it resumes: a stall must not buffer a fast sender without bound.
_HIGH_WATER = 4 * 1024 * 1024
_LOW_WATER = 1024 * 1024


class Traffic:
    """The state every connection of one proxy reads and counts into, on the proxy's loop.

    :attr:`accepted`, :attr:`bytes_up` and :attr:`bytes_down` are counts (read them, never set
    them); :attr:`mode`, :attr:`delay` and :attr:`stall_until` change only on the loop.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, target_host: str, target_port: int,
                 delay: float) -> None:
        self.loop = loop
        self.target_host = target_host
        self.target_port = target_port
        self.delay = delay  # seconds, one way
        self.mode: ProxyMode = "pass"
        self.stall_until = 0.0  # loop time
        self.pairs: set[Pair] = set()
        #: Connections accepted since the start, whatever the mode did with them.
        self.accepted = 0
        #: Bytes written to the target so far (client to target).
        self.bytes_up = 0
        #: Bytes written to the clients so far (target to client).
        self.bytes_down = 0

    def stalled(self, now: float) -> bool:
        return self.mode == "stall" or now < self.stall_until

    def admit(self, pair: Pair) -> None:
        """A client connection was accepted: ``refuse`` closes it, ``reset-on-accept`` resets it,
        any other mode connects it to the target."""
        self.accepted += 1
        if self.mode == "refuse":
            pair.end()
            assert pair.client.transport is not None
            pair.client.transport.close()
        elif self.mode == "reset-on-accept":
            pair.reset()
        else:
            self.pairs.add(pair)
            pair.connecting = self.loop.create_task(pair.connect())


def reset_transport(transport: asyncio.Transport | None) -> None:
    """Close ``transport``'s socket so that the peer sees a reset, not a clean close."""
    if transport is None or transport.is_closing():
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass  # already gone: abort() below is all there is to do
    transport.abort()


class Side(asyncio.Protocol):
    """One socket of a proxied connection: the accepted one (client) or the one to the target."""

    def __init__(self, pair: Pair, role: str) -> None:
        self.pair = pair
        self.role = role
        self.transport: asyncio.Transport | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.pair.side_made(self)

    def data_received(self, data: bytes) -> None:
        self.pair.outgoing(self).push(data)

    def eof_received(self) -> bool:
        self.pair.outgoing(self).push(None)
        return True  # keep the other half open until the EOF has been passed on

    def pause_writing(self) -> None:
        self.pair.incoming(self).writer_paused = True

    def resume_writing(self) -> None:
        direction = self.pair.incoming(self)
        direction.writer_paused = False
        direction.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.pair.side_lost(self, exc)


class Direction:
    """Bytes from one side to the other: a FIFO of (due time, chunk or None for EOF)."""

    def __init__(self, pair: Pair, src: Side, dst: Side, upstream: bool) -> None:
        self.pair = pair
        self.src = src
        self.dst = dst
        self.upstream = upstream
        self.queue: collections.deque[tuple[float, bytes | None]] = collections.deque()
        self.pending = 0
        self.timer: asyncio.TimerHandle | None = None
        self.writer_paused = False
        self.reading_paused = False
        self.done = False  # the EOF has been passed on

    def push(self, chunk: bytes | None) -> None:
        traffic = self.pair.traffic
        if self.pair.closed or self.done:
            return
        loop = traffic.loop
        if (chunk is not None and not self.queue and traffic.delay == 0.0 and self._writable()
                and not traffic.stalled(loop.time()) and not self.pair.silent):
            self._write(chunk)
            return
        self.queue.append((loop.time() + traffic.delay, chunk))
        if chunk is not None:
            self.pending += len(chunk)
            if self.pending > _HIGH_WATER and not self.reading_paused and self.src.transport:
                self.src.transport.pause_reading()
                self.reading_paused = True
        self.schedule()

    def _writable(self) -> bool:
        return self.dst.transport is not None and not self.dst.lost and not self.writer_paused

    def _write(self, data: bytes) -> None:
        assert self.dst.transport is not None
        # Counted first: a peer that has read the bytes must find them counted.
        if self.upstream:
            self.pair.traffic.bytes_up += len(data)
        else:
            self.pair.traffic.bytes_down += len(data)
        self.dst.transport.write(data)

    def schedule(self) -> None:
        traffic = self.pair.traffic
        if (self.timer is not None or not self.queue or self.pair.closed
                or traffic.mode == "stall" or self.pair.silent):
            return  # set_mode("pass") kicks every direction again; a silent pair stays so
        due = max(self.queue[0][0], traffic.stall_until)
        self.timer = traffic.loop.call_at(due, self.flush)

    def flush(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        traffic = self.pair.traffic
        if self.pair.closed or not self._writable() or self.pair.silent:
            return  # the target's connection_made or resume_writing flushes again
        now = traffic.loop.time()
        if traffic.stalled(now):
            self.schedule()
            return
        parts: list[bytes] = []
        eof = False
        while self.queue and self.queue[0][0] <= now:
            _, chunk = self.queue.popleft()
            if chunk is None:
                eof = True
                break
            parts.append(chunk)
        if parts:
            data = b"".join(parts)
            self.pending -= len(data)
            self._write(data)
        if self.reading_paused and self.pending < _LOW_WATER and self.src.transport is not None:
            self.src.transport.resume_reading()
            self.reading_paused = False
        if eof:
            self.done = True
            self.queue.clear()
            assert self.dst.transport is not None
            if self.dst.transport.can_write_eof():
                try:
                    self.dst.transport.write_eof()
                except OSError:
                    pass  # the other side is gone already (ENOTCONN): nothing to tell it
            self.pair.maybe_finish()
            return
        self.schedule()

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.queue.clear()
        self.pending = 0


class Pair:
    """An accepted connection and its connection to the target."""

    def __init__(self, traffic: Traffic) -> None:
        self.traffic = traffic
        self.client = Side(self, "client")
        self.target = Side(self, "target")
        self.up = Direction(self, self.client, self.target, upstream=True)
        self.down = Direction(self, self.target, self.client, upstream=False)
        self.closed = False
        self.silent = False  # stall_open(): forwards nothing more until it ends
        self.connecting: asyncio.Task[None] | None = None

    def outgoing(self, side: Side) -> Direction:
        return self.up if side is self.client else self.down

    def incoming(self, side: Side) -> Direction:
        return self.down if side is self.client else self.up

    def side_made(self, side: Side) -> None:
        if side is self.client:
            self.traffic.admit(self)
        elif self.closed:
            reset_transport(side.transport)
        else:
            self.up.flush()

    async def connect(self) -> None:
        traffic = self.traffic
        try:
            await traffic.loop.create_connection(
                lambda: self.target, traffic.target_host, traffic.target_port)
        except OSError:
            self.reset()

    def side_lost(self, side: Side, exc: Exception | None) -> None:
        if self.closed:
            return
        if exc is not None:
            self.reset()  # pass the reset on: the other side must not see a clean close
            return
        # A clean close: pass on what that side sent, then its EOF, then close both.
        self.outgoing(side).push(None)
        self.maybe_finish()

    def maybe_finish(self) -> None:
        gone = [s for s in (self.client, self.target) if s.lost]
        if (self.up.done and self.down.done) or any(self.outgoing(s).done for s in gone):
            self.close()

    def reset(self) -> None:
        self.end()
        reset_transport(self.client.transport)
        reset_transport(self.target.transport)

    def close(self) -> None:
        self.end()
        for side in (self.client, self.target):
            if side.transport is not None:
                side.transport.close()

    def end(self) -> None:
        self.closed = True
        self.up.cancel()
        self.down.cancel()
        self.traffic.pairs.discard(self)
