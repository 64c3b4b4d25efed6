"""A loopback TCP proxy that injects faults and latency, for tests and benchmarks.

This machine has no netem, so faults and delays are made in user space: :class:`TcpProxy` listens
on loopback, opens one connection to the target per accepted connection and copies bytes both
ways. It runs its own asyncio event loop in a daemon thread, so blocking test code and benchmarks
drive it with plain method calls::

    with TcpProxy("127.0.0.1", node.amqp_port) as proxy:
        uri = f"amqp://guest:guest@127.0.0.1:{proxy.port}/%2F"
        ...
        proxy.reset_all()          # every connection is reset (RST) now
        proxy.stall(3)             # nothing moves for 3 s; the connections stay open
        proxy.stall_open()         # the connections open now go silent for good; new ones pass
        proxy.set_mode("reset-on-accept")

What each control does:

* ``delay_ms`` (:meth:`TcpProxy.set_delay_ms`): every chunk read on one side is written to the
  other ``delay_ms`` after it was read, in both directions, so a round trip gains twice the delay.
  Each direction is a queue of (due time, chunk) drained by one timer: the delay is a latency, not
  a per-message pause, so pipelined traffic keeps its throughput and its byte order.
* :meth:`TcpProxy.stall`: nothing is forwarded in either direction until the time is up; what
  arrives meanwhile is held (reading pauses beyond a few MiB, so TCP pushes back) and then
  delivered in order.
* :meth:`TcpProxy.stall_open`: the connections open now forward nothing more, in either
  direction, until they end (a half-dead TCP path, or a peer's connection that hangs), while new
  connections pass: a client that gives up on a silent connection and reconnects gets through.
* :meth:`TcpProxy.reset_all`: both sockets of every open connection are closed with
  ``SO_LINGER`` 0, so the client and the target each see a reset (``ECONNRESET``), not a clean
  close; whatever was held is discarded.
* :meth:`TcpProxy.set_mode`: ``pass`` (normal), ``stall`` (as :meth:`~TcpProxy.stall`, until the
  mode changes), ``refuse`` (a new connection is closed as soon as it is accepted: the client
  reads end-of-file) and ``reset-on-accept`` (a new connection is accepted and reset at once: a
  load balancer whose backend is down). ``refuse`` and ``reset-on-accept`` affect new connections
  only; open ones keep passing.

An end-of-file from one side is passed on (after the data queued before it); a reset from one side
resets the other, so pumpd sees the same kind of failure the broker's side had. If the target
cannot be reached, the accepted connection is reset.

``python -m pumpd.testing.proxy HOST:PORT --delay-ms 2.5`` runs one in a process of its own (a
benchmark whose client is CPU-bound should not share its interpreter with the proxy).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import concurrent.futures
import socket
import struct
import sys
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Literal, TypeVar, cast, get_args

__all__ = ["MODES", "ProxyMode", "TcpProxy"]

ProxyMode = Literal["pass", "stall", "refuse", "reset-on-accept"]
MODES: tuple[ProxyMode, ...] = get_args(ProxyMode)

# Bytes held in one direction (delayed or stalled) beyond which reading from its source pauses,
# and below which it resumes: a stall must not buffer a fast sender without bound.
_HIGH_WATER = 4 * 1024 * 1024
_LOW_WATER = 1024 * 1024

_T = TypeVar("_T")


def _reset(transport: asyncio.Transport | None) -> None:
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


class _Side(asyncio.Protocol):
    """One socket of a proxied connection: the accepted one (client) or the one to the target."""

    def __init__(self, pair: _Pair, role: str) -> None:
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


class _Direction:
    """Bytes from one side to the other: a FIFO of (due time, chunk or None for EOF)."""

    def __init__(self, pair: _Pair, src: _Side, dst: _Side, upstream: bool) -> None:
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
        proxy = self.pair.proxy
        if self.pair.closed or self.done:
            return
        loop = proxy._loop
        if (chunk is not None and not self.queue and proxy._delay == 0.0 and self._writable()
                and not proxy._stalled(loop.time()) and not self.pair.silent):
            self._write(chunk)
            return
        self.queue.append((loop.time() + proxy._delay, chunk))
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
            self.pair.proxy._bytes_up += len(data)
        else:
            self.pair.proxy._bytes_down += len(data)
        self.dst.transport.write(data)

    def schedule(self) -> None:
        proxy = self.pair.proxy
        if (self.timer is not None or not self.queue or self.pair.closed
                or proxy._mode == "stall" or self.pair.silent):
            return  # set_mode("pass") kicks every direction again; a silent pair stays so
        due = max(self.queue[0][0], proxy._stall_until)
        self.timer = proxy._loop.call_at(due, self.flush)

    def flush(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        proxy = self.pair.proxy
        if self.pair.closed or not self._writable() or self.pair.silent:
            return  # the target's connection_made or resume_writing flushes again
        now = proxy._loop.time()
        if proxy._stalled(now):
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
                self.dst.transport.write_eof()
            self.pair.maybe_finish()
            return
        self.schedule()

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.queue.clear()
        self.pending = 0


class _Pair:
    """An accepted connection and its connection to the target."""

    def __init__(self, proxy: TcpProxy) -> None:
        self.proxy = proxy
        self.client = _Side(self, "client")
        self.target = _Side(self, "target")
        self.up = _Direction(self, self.client, self.target, upstream=True)
        self.down = _Direction(self, self.target, self.client, upstream=False)
        self.closed = False
        self.silent = False  # stall_open(): forwards nothing more until it ends
        self.connecting: asyncio.Task[None] | None = None

    def outgoing(self, side: _Side) -> _Direction:
        return self.up if side is self.client else self.down

    def incoming(self, side: _Side) -> _Direction:
        return self.down if side is self.client else self.up

    def side_made(self, side: _Side) -> None:
        if side is self.client:
            self.proxy._accepted(self)
        elif self.closed:
            _reset(side.transport)
        else:
            self.up.flush()

    async def connect(self) -> None:
        proxy = self.proxy
        try:
            await proxy._loop.create_connection(
                lambda: self.target, proxy.target_host, proxy.target_port)
        except OSError:
            self.reset()

    def side_lost(self, side: _Side, exc: Exception | None) -> None:
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
        self._end()
        _reset(self.client.transport)
        _reset(self.target.transport)

    def close(self) -> None:
        self._end()
        for side in (self.client, self.target):
            if side.transport is not None:
                side.transport.close()

    def _end(self) -> None:
        self.closed = True
        self.up.cancel()
        self.down.cancel()
        self.proxy._pairs.discard(self)


class TcpProxy:
    """A TCP proxy from ``listen_host:listen_port`` (0: any free port) to
    ``target_host:target_port``, with a one-way delay of ``delay_ms`` in each direction.

    Connect to :attr:`host`:\\ :attr:`port` once :meth:`start` has returned (or inside ``with``).
    Every method may be called from any thread; the controls act on the proxy's own loop and
    return once they have taken effect there.
    """

    def __init__(self, target_host: str, target_port: int, *, listen_host: str = "127.0.0.1",
                 listen_port: int = 0, delay_ms: float = 0.0) -> None:
        if delay_ms < 0:
            raise ValueError(f"delay_ms must be >= 0, not {delay_ms}")
        self.target_host = target_host
        self.target_port = target_port
        self.host = listen_host
        self._listen_port = listen_port
        self._delay = delay_ms / 1000.0
        self._mode: ProxyMode = "pass"
        self._stall_until = 0.0
        self._pairs: set[_Pair] = set()
        self._bytes_up = 0
        self._bytes_down = 0
        self._accepted_total = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=f"TcpProxy->{target_port}",
                                        daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._port: int | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> TcpProxy:
        """Listen; returns once connections are accepted."""
        self._thread.start()
        server = asyncio.run_coroutine_threadsafe(
            self._loop.create_server(lambda: _Pair(self).client, self.host, self._listen_port),
            self._loop).result(30)
        self._server = server
        self._port = int(server.sockets[0].getsockname()[1])
        return self

    def stop(self) -> None:
        """Stop listening, drop every connection (without a reset) and end the loop's thread."""
        if not self._thread.is_alive():
            if self._thread.ident is None and not self._loop.is_closed():
                self._loop.close()  # never started
            return

        def shut() -> None:
            if self._server is not None:
                self._server.close()
            for pair in list(self._pairs):
                pair._end()
                for side in (pair.client, pair.target):
                    if side.transport is not None:
                        side.transport.abort()
        self._call(shut)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            tasks = asyncio.all_tasks(self._loop)  # connections to the target under way
            for task in tasks:
                task.cancel()
            if tasks:
                self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self._loop.close()

    def _call(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn`` on the proxy's loop and return its result."""
        if threading.current_thread() is self._thread:
            return fn()
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)
        self._loop.call_soon_threadsafe(run)
        return future.result(30)

    # -- where to connect, and what went through ---------------------------------------------

    @property
    def port(self) -> int:
        """The port the proxy listens on (known once started)."""
        if self._port is None:
            raise RuntimeError("the proxy is not started")
        return self._port

    @property
    def connections(self) -> int:
        """Connections open through the proxy now."""
        return len(self._pairs)

    @property
    def accepted(self) -> int:
        """Connections accepted since the start, whatever the mode did with them."""
        return self._accepted_total

    @property
    def bytes_up(self) -> int:
        """Bytes written to the target so far (client to target)."""
        return self._bytes_up

    @property
    def bytes_down(self) -> int:
        """Bytes written to the clients so far (target to client)."""
        return self._bytes_down

    @property
    def mode(self) -> ProxyMode:
        return self._mode

    @property
    def delay_ms(self) -> float:
        return self._delay * 1000.0

    # -- faults --------------------------------------------------------------------------------

    def reset_all(self) -> int:
        """Reset every open connection now, on both sides; returns how many there were."""
        def run() -> int:
            pairs = list(self._pairs)
            for pair in pairs:
                pair.reset()
            return len(pairs)
        return self._call(run)

    def stall(self, seconds: float) -> None:
        """Forward nothing, in either direction, for ``seconds`` from now; then deliver what was
        held, in order. Connections stay open; new ones are accepted (and stalled too)."""
        def run() -> None:
            self._stall_until = max(self._stall_until, self._loop.time() + seconds)
        self._call(run)

    def stall_open(self) -> int:
        """The connections open now forward nothing more, in either direction, until they end
        (held bytes push back on the sender as a stall does); new connections pass. Returns how
        many went silent."""
        def run() -> int:
            pairs = list(self._pairs)
            for pair in pairs:
                pair.silent = True
            return len(pairs)
        return self._call(run)

    def set_mode(self, mode: ProxyMode) -> None:
        """``pass``, ``stall`` (until another mode is set), ``refuse`` or ``reset-on-accept``
        (see the module's documentation)."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; one of {', '.join(MODES)}")

        def run() -> None:
            self._mode = mode
            for pair in list(self._pairs):
                pair.up.flush()
                pair.down.flush()
        self._call(run)

    def set_delay_ms(self, ms: float) -> None:
        """The one-way delay for bytes read from now on (bytes already held keep theirs)."""
        if ms < 0:
            raise ValueError(f"delay must be >= 0, not {ms}")

        def run() -> None:
            self._delay = ms / 1000.0
        self._call(run)

    # -- on the loop -----------------------------------------------------------------------------

    def _stalled(self, now: float) -> bool:
        return self._mode == "stall" or now < self._stall_until

    def _accepted(self, pair: _Pair) -> None:
        self._accepted_total += 1
        if self._mode == "refuse":
            pair._end()
            assert pair.client.transport is not None
            pair.client.transport.close()
        elif self._mode == "reset-on-accept":
            pair.reset()
        else:
            self._pairs.add(pair)
            pair.connecting = self._loop.create_task(pair.connect())

    def __repr__(self) -> str:
        where = f"{self.host}:{self._port}" if self._port is not None else "not started"
        return (f"<TcpProxy {where} -> {self.target_host}:{self.target_port} mode={self._mode} "
                f"delay_ms={self.delay_ms:g} connections={self.connections}>")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pumpd.testing.proxy",
                                description="A loopback TCP proxy with a one-way delay.")
    p.add_argument("target", help="HOST:PORT to forward to")
    p.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (default 127.0.0.1:0)")
    p.add_argument("--delay-ms", type=float, default=0.0, help="one-way delay, each direction")
    ns = p.parse_args(argv)
    host, _, port = ns.target.rpartition(":")
    lhost, _, lport = ns.listen.rpartition(":")
    proxy = TcpProxy(host, int(port), listen_host=lhost, listen_port=int(lport),
                     delay_ms=ns.delay_ms).start()
    # The port on a line of its own, so a parent process can read where to connect.
    print(proxy.port, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
