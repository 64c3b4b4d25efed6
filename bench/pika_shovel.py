"""A plain pika shovel: the baseline a Python user would write, for the shovel benchmark.

pika's AsyncioConnection on a uvloop event loop, pika's public API only. It consumes from a source
queue with a prefetch limit, re-publishes every delivery (body and properties unchanged) on the
destination connection, and acknowledges the source according to the ack mode:

* ``on_confirm``: the destination channel is in confirm mode; publish sequence numbers are mapped
  to source delivery tags, and each advance of the contiguous confirmed prefix becomes one
  ``basic.ack(multiple=True)`` on the source, coalesced over one event-loop iteration. A nacked
  publish splits the run: the prefix before it is acked, the message itself nacked (requeued).
* ``on_publish``: the source is acked (coalesced, ``multiple=True``) right after the publish.
* ``no_ack``: the consumer uses automatic acknowledgements.

It runs until SIGTERM / SIGINT: then it cancels the consumer, waits (bounded) for outstanding
confirms, sends the last acks, closes both connections and exits 0. It exits 1 if a connection
or channel fails. No reconnection: this is a benchmark baseline, not a daemon::

    python bench/pika_shovel.py --src-uri amqp://guest:guest@127.0.0.1:5672/%2F --src-queue q1 \\
        --dest-uri amqp://guest:guest@127.0.0.1:5672/%2F --dest-queue q2 --ack-mode on_confirm
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import signal
import sys
from typing import Any

import pika
import uvloop
from pika import spec
from pika.adapters.asyncio_connection import AsyncioConnection

ACK_MODES = ("no_ack", "on_publish", "on_confirm")


class PikaShovel:
    def __init__(self, args: argparse.Namespace, loop: asyncio.AbstractEventLoop) -> None:
        self.args = args
        self.loop = loop
        self.exchange: str = args.dest_exchange
        self.routing_key: str = args.dest_routing_key
        self.mode: str = args.ack_mode
        self.src_conn: AsyncioConnection | None = None
        self.dst_conn: AsyncioConnection | None = None
        self.src_ch: Any = None
        self.dst_ch: Any = None
        self.consumer_tag: str | None = None
        self.stopping = False
        self.exit_code = 0
        # on_confirm bookkeeping: source tags of unconfirmed publishes, in publish order; the
        # first one has publish sequence number head_seq. Verdicts (ack True / nack False) that
        # arrive for publishes past the head wait in `verdicts` until the prefix reaches them.
        self.pending: collections.deque[int] = collections.deque()
        self.head_seq = 1
        self.verdicts: dict[int, bool] = {}
        self.ack_upto = 0  # highest source tag that may be acked (multiple=True)
        self.acked_sent = 0  # highest source tag actually acked
        self.flush_scheduled = False
        self.cancelled = False  # cancel-ok received after a stop request
        self.closing = False
        self.consumed = 0
        self.published = 0
        self.nacked = 0

    # ------------------------------------------------------------------------------- setup

    def start(self) -> None:
        self.dst_conn = self._connect(self.args.dest_uri, self._on_dst_open)
        self.src_conn = self._connect(self.args.src_uri, self._on_src_open)

    def _connect(self, uri: str, on_open: Any) -> AsyncioConnection:
        return AsyncioConnection(
            pika.URLParameters(uri),
            on_open_callback=on_open,
            on_open_error_callback=self._on_open_error,
            on_close_callback=self._on_conn_closed,
            custom_ioloop=self.loop,
        )

    def _on_open_error(self, _conn: AsyncioConnection, exc: BaseException) -> None:
        self._fail(f"connection failed: {exc!r}")

    def _on_dst_open(self, conn: AsyncioConnection) -> None:
        conn.channel(on_open_callback=self._on_dst_channel)

    def _on_dst_channel(self, ch: Any) -> None:
        ch.add_on_close_callback(self._on_channel_closed)
        if self.mode == "on_confirm":
            ch.confirm_delivery(self._on_confirm, callback=lambda _frame: self._dst_ready(ch))
        else:
            self._dst_ready(ch)

    def _dst_ready(self, ch: Any) -> None:
        self.dst_ch = ch  # open, and in confirm mode when on_confirm
        self._maybe_consume()

    def _on_src_open(self, conn: AsyncioConnection) -> None:
        conn.channel(on_open_callback=self._on_src_channel)

    def _on_src_channel(self, ch: Any) -> None:
        ch.add_on_close_callback(self._on_channel_closed)
        ch.basic_qos(
            prefetch_count=self.args.prefetch, callback=lambda _frame: self._src_ready(ch)
        )

    def _src_ready(self, ch: Any) -> None:
        self.src_ch = ch
        self._maybe_consume()

    def _maybe_consume(self) -> None:
        if self.src_ch is None or self.dst_ch is None or self.consumer_tag or self.stopping:
            return
        self.consumer_tag = self.src_ch.basic_consume(
            self.args.src_queue, self._on_message, auto_ack=self.mode == "no_ack"
        )

    # --------------------------------------------------------------------------- data path

    def _on_message(
        self, _ch: Any, method: spec.Basic.Deliver, props: spec.BasicProperties, body: bytes
    ) -> None:
        self.consumed += 1
        self.dst_ch.basic_publish(self.exchange, self.routing_key, body, props)
        self.published += 1
        if self.mode == "on_confirm":
            self.pending.append(method.delivery_tag)
        elif self.mode == "on_publish":
            self.ack_upto = method.delivery_tag
            self._schedule_flush()

    def _on_confirm(self, frame: Any) -> None:
        m = frame.method
        ok = isinstance(m, spec.Basic.Ack)
        tag: int = m.delivery_tag
        if m.multiple:
            # every publish up to `tag` without an earlier verdict gets this one
            while self.pending and self.head_seq <= tag:
                self._settle(self.verdicts.pop(self.head_seq, ok))
        else:
            self.verdicts[tag] = ok
        while self.pending and self.head_seq in self.verdicts:
            self._settle(self.verdicts.pop(self.head_seq))
        if self.cancelled and not self.pending:
            self._finish_stop()

    def _settle(self, ok: bool) -> None:
        src_tag = self.pending.popleft()
        self.head_seq += 1
        if ok:
            self.ack_upto = src_tag
            self._schedule_flush()
        else:
            self.nacked += 1
            self._flush_acks()  # ack the confirmed run before it, then requeue this one
            self.src_ch.basic_nack(src_tag, multiple=False, requeue=True)
            self.acked_sent = src_tag

    def _schedule_flush(self) -> None:
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.loop.call_soon(self._flush_acks)

    def _flush_acks(self) -> None:
        self.flush_scheduled = False
        if self.ack_upto > self.acked_sent and self.src_ch is not None and self.src_ch.is_open:
            self.src_ch.basic_ack(self.ack_upto, multiple=True)
            self.acked_sent = self.ack_upto

    # ---------------------------------------------------------------------------- shutdown

    def stop(self) -> None:
        """SIGTERM / SIGINT: stop consuming, drain, close."""
        if self.stopping:
            return
        self.stopping = True
        if self.consumer_tag and self.src_ch is not None and self.src_ch.is_open:
            self.src_ch.basic_cancel(self.consumer_tag, callback=lambda _f: self._after_cancel())
        else:
            self._close()

    def _after_cancel(self) -> None:
        # deliveries sent before cancel-ok have been handled (published) by now
        self.cancelled = True
        if self.mode == "on_confirm" and self.pending:
            self.loop.call_later(self.args.drain_timeout, self._finish_stop)
        else:
            self._finish_stop()

    def _finish_stop(self) -> None:
        if self.closing:
            return
        self.closing = True
        self._flush_acks()
        self._close()

    def _close(self) -> None:
        for conn in (self.src_conn, self.dst_conn):
            if conn is not None and not (conn.is_closed or conn.is_closing):
                try:
                    conn.close()  # also aborts a connection that is still being opened
                except pika.exceptions.ConnectionWrongStateError:
                    pass
        self._maybe_exit()

    def _maybe_exit(self) -> None:
        if all(c is None or c.is_closed for c in (self.src_conn, self.dst_conn)):
            self.loop.stop()

    def _on_channel_closed(self, ch: Any, reason: BaseException) -> None:
        if not self.stopping:
            self._fail(f"channel {ch.channel_number} closed: {reason!r}")

    def _on_conn_closed(self, _conn: AsyncioConnection, reason: BaseException) -> None:
        if not self.stopping:
            self._fail(f"connection closed: {reason!r}")
        self._maybe_exit()

    def _fail(self, why: str) -> None:
        print(f"pika_shovel: {why}", file=sys.stderr)
        self.exit_code = 1
        self.stopping = True
        self._close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src-uri", required=True)
    p.add_argument("--src-queue", required=True)
    p.add_argument("--dest-uri", required=True)
    p.add_argument("--dest-queue", help="publish to the default exchange with this routing key")
    p.add_argument("--dest-exchange", default=None)
    p.add_argument("--dest-routing-key", default=None)
    p.add_argument("--ack-mode", choices=ACK_MODES, default="on_confirm")
    p.add_argument("--prefetch", type=int, default=1000)
    p.add_argument("--drain-timeout", type=float, default=30.0)
    args = p.parse_args(argv)
    if args.dest_queue is not None:
        if args.dest_exchange not in (None, "") or args.dest_routing_key is not None:
            p.error("--dest-queue excludes --dest-exchange / --dest-routing-key")
        args.dest_exchange, args.dest_routing_key = "", args.dest_queue
    elif args.dest_exchange is None or args.dest_routing_key is None:
        p.error("give --dest-queue, or --dest-exchange and --dest-routing-key")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    shovel = PikaShovel(args, loop)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, shovel.stop)
    shovel.start()
    try:
        loop.run_forever()
    finally:
        loop.close()
    print(
        f"pika_shovel: consumed {shovel.consumed} published {shovel.published} "
        f"acked up to tag {shovel.acked_sent} nacked {shovel.nacked} "
        f"unconfirmed {len(shovel.pending)}",
        file=sys.stderr,
    )
    return shovel.exit_code


if __name__ == "__main__":
    sys.exit(main())
