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

The connections themselves are pumped by :mod:`pumpd.testing.proxy_traffic`; this module holds
the proxy's thread and its controls. ``python -m pumpd.testing.proxy HOST:PORT --delay-ms 2.5``
runs one in a process of its own (a benchmark whose client is CPU-bound should not share its
interpreter with the proxy).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import sys
import threading
from collections.abc import Callable
from types import TracebackType
from typing import TypeVar

from .proxy_traffic import MODES, Pair, ProxyMode, Traffic

__all__ = ["MODES", "ProxyMode", "TcpProxy"]

_T = TypeVar("_T")


class TcpProxy(Traffic):
    """A TCP proxy from ``listen_host:listen_port`` (0: any free port) to
    ``target_host:target_port``, with a one-way delay of ``delay_ms`` in each direction.

    Connect to :attr:`host`:\\ :attr:`port` once :meth:`start` has returned (or inside ``with``).
    Every method may be called from any thread; the controls act on the proxy's own loop and
    return once they have taken effect there. The counts (:attr:`accepted`, :attr:`bytes_up`,
    :attr:`bytes_down`) and :attr:`mode` are :class:`~pumpd.testing.proxy_traffic.Traffic`'s.
    """

    def __init__(self, target_host: str, target_port: int, *, listen_host: str = "127.0.0.1",
                 listen_port: int = 0, delay_ms: float = 0.0) -> None:
        if delay_ms < 0:
            raise ValueError(f"delay_ms must be >= 0, not {delay_ms}")
        super().__init__(asyncio.new_event_loop(), target_host, target_port, delay_ms / 1000.0)
        self.host = listen_host
        self._listen_port = listen_port
        self._thread = threading.Thread(target=self._run, name=f"TcpProxy->{target_port}",
                                        daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._port: int | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> TcpProxy:
        """Listen; returns once connections are accepted."""
        self._thread.start()
        server = asyncio.run_coroutine_threadsafe(
            self.loop.create_server(lambda: Pair(self).client, self.host, self._listen_port),
            self.loop).result(30)
        self._server = server
        self._port = int(server.sockets[0].getsockname()[1])
        return self

    def stop(self) -> None:
        """Stop listening, drop every connection (without a reset) and end the loop's thread."""
        if not self._thread.is_alive():
            if self._thread.ident is None and not self.loop.is_closed():
                self.loop.close()  # never started
            return

        def shut() -> None:
            if self._server is not None:
                self._server.close()
            for pair in list(self.pairs):
                pair.end()
                for side in (pair.client, pair.target):
                    if side.transport is not None:
                        side.transport.abort()
        self._call(shut)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            tasks = asyncio.all_tasks(self.loop)  # connections to the target under way
            for task in tasks:
                task.cancel()
            if tasks:
                self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self.loop.close()

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
        self.loop.call_soon_threadsafe(run)
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
        return len(self.pairs)

    @property
    def delay_ms(self) -> float:
        return self.delay * 1000.0

    # -- faults --------------------------------------------------------------------------------

    def reset_all(self) -> int:
        """Reset every open connection now, on both sides; returns how many there were."""
        def run() -> int:
            pairs = list(self.pairs)
            for pair in pairs:
                pair.reset()
            return len(pairs)
        return self._call(run)

    def stall(self, seconds: float) -> None:
        """Forward nothing, in either direction, for ``seconds`` from now; then deliver what was
        held, in order. Connections stay open; new ones are accepted (and stalled too)."""
        def run() -> None:
            self.stall_until = max(self.stall_until, self.loop.time() + seconds)
        self._call(run)

    def stall_open(self) -> int:
        """The connections open now forward nothing more, in either direction, until they end
        (held bytes push back on the sender as a stall does); new connections pass. Returns how
        many went silent."""
        def run() -> int:
            pairs = list(self.pairs)
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
            self.mode = mode
            for pair in list(self.pairs):
                pair.up.flush()
                pair.down.flush()
        self._call(run)

    def set_delay_ms(self, ms: float) -> None:
        """The one-way delay for bytes read from now on (bytes already held keep theirs)."""
        if ms < 0:
            raise ValueError(f"delay must be >= 0, not {ms}")

        def run() -> None:
            self.delay = ms / 1000.0
        self._call(run)

    def __repr__(self) -> str:
        where = f"{self.host}:{self._port}" if self._port is not None else "not started"
        return (f"<TcpProxy {where} -> {self.target_host}:{self.target_port} mode={self.mode} "
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
