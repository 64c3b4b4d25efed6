"""A stream read over the streams protocol (``rabbitmq_stream``, port 5552 by default, 5551 over
TLS for an ``amqps`` URI), for the read tasks on the executors, and the driver's probes over it.

A task subscribes at its range's first offset with :class:`~pumpd.spark.read.streams.wire.
StreamsConnection` and hands each delivered chunk to
:class:`~pumpd.spark.read.streams.chunk.ChunkColumns`, which skips the chunk's messages before the range
(a subscription starts at the chunk holding its offset) and stops at the first offset >= the
range's end; every :data:`BATCH_ROWS` rows become one ``pyarrow.RecordBatch`` for Spark. rbfly
read 1.9x faster than rstream here (``bench/stream_clients.py``) but is GPLv3+ (pumpd is MIT)
and needs Python 3.12; this reader needs neither.

Also :func:`streams_port_open` (``protocol=auto``) and :class:`StreamProbe`, the driver's first
and next offsets of a stream read from its first and last chunks.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

from ....config.tls import ssl_context, tls_server_name
from ....config.uri import parse_uri
from ..read_options import ReadOptions
from .amqp091 import STALL_SECONDS
from .chunk import ChunkColumns
from .wire import FIRST, LAST, OFFSET, TIMESTAMP, Chunk, StreamsConnection, StreamsError

# rows per record batch handed to Spark
BATCH_ROWS = 8192
# chunks the broker may send ahead of the task at first, and at least; credit goes back half of
# it at a time (each credit is a write, and with small chunks one per chunk was a tenth of a
# task's time)
CREDIT = 20
# ...and then as many chunks as hold about this many messages, up to CREDIT_MAX. A chunk is what
# the publisher's batching made (64 B bodies from pumpd's Publisher: about 40 messages, 5 kB), so
# 20 chunks were 800 messages: while the task handed a batch of 8,192 rows to Spark, the broker
# sent those and waited. The bytes actually in flight stay bounded by the sockets' buffers (TCP
# stops the broker), whatever the credit; a range's end reached early wastes at most that.
AHEAD_ROWS = 4 * BATCH_ROWS
CREDIT_MAX = 1000
# the driver's probe connection is opened again after this long unused (heartbeats: 60 s)
PROBE_IDLE = 20.0


def connect(options: ReadOptions, name: str, timeout: float = STALL_SECONDS
            ) -> StreamsConnection:
    """A streams connection to the URI's host at ``streamPort``: over TLS for an amqps URI,
    with the context and the name verified that the AMQP 0-9-1 side would use."""
    u = parse_uri(options.uri)
    tls = ssl_context(u) if u.scheme == "amqps" else None
    return StreamsConnection(u.effective_host, options.stream_port, u.username, u.password,
                             u.vhost, name=name, timeout=timeout, tls=tls,
                             server_hostname=tls_server_name(u) if tls is not None else None)


def streams_port_open(options: ReadOptions, timeout: float = 2.0) -> bool:
    """Whether the streams port answers (``protocol=auto``); TCP only, so an amqps URI's
    TLS problems are reported by the connection that needs it, not hidden by a fallback."""
    u = parse_uri(options.uri)
    try:
        with socket.create_connection((u.effective_host, options.stream_port), timeout):
            return True
    except OSError:
        return False


def super_stream_partitions(options: ReadOptions) -> list[str]:
    """The partition streams of the super stream ``options.super_stream``.

    :raises ValueError: when it does not exist or has no partitions
    """
    try:
        with connect(options, "pumpd spark read (driver)", timeout=10.0) as conn:
            names = conn.partitions(options.super_stream)
    except StreamsError as exc:
        raise ValueError(f"pumpd option superStream {options.super_stream!r}: {exc}") from None
    if not names:
        raise ValueError(f"pumpd option superStream {options.super_stream!r}: it has no "
                         "partitions (no stream is bound to its exchange)")
    return names


def read(options: ReadOptions, stream: str, start: int, end: int) -> Iterator[Any]:
    """Offsets ``start`` to ``end - 1`` (those the retention left) as ``pyarrow.RecordBatch``es
    of about :data:`BATCH_ROWS` rows.

    :raises RuntimeError: when no message comes for :data:`STALL_SECONDS`
    """
    if start >= end:
        return
    columns = ChunkColumns(stream, start, end)
    with connect(options, f"pumpd spark read {stream}") as conn:
        conn.subscribe(stream, OFFSET, start, credit=CREDIT)
        credit = Credit(conn)
        while not columns.done:
            try:
                c = conn.chunk()
            except TimeoutError:
                raise RuntimeError(f"pumpd: stream {stream!r}: no message at offset "
                                   f"{columns.next_offset} or later for {STALL_SECONDS:.0f} s "
                                   f"(range {start} to {end})") from None
            credit.delivered(c.records, end - c.first - c.records)
            columns.add_chunk(c.frame, c.first, c.entries, c.data_at)
            if len(columns) >= BATCH_ROWS:
                yield from columns.take()
        if len(columns):
            yield from columns.take()


class Credit:
    """A subscription's credit, given back before the chunk is used (the broker sends the next
    ones meanwhile), sized in messages: :data:`AHEAD_ROWS`, or the messages the range has left
    when fewer (what the broker sends past a range's end is thrown away), over the mean records
    per chunk seen so far, within :data:`CREDIT` and :data:`CREDIT_MAX`; subscribed with
    :data:`CREDIT`."""

    def __init__(self, conn: StreamsConnection) -> None:
        self.conn = conn
        self.granted = CREDIT  # chunks the broker may still send
        self.chunks = self.records = 0

    def delivered(self, records: int, left: int = AHEAD_ROWS) -> None:
        """One chunk of ``records`` messages came; ``left``: messages the range has after it."""
        self.granted -= 1
        self.chunks += 1
        self.records += records
        ahead = min(AHEAD_ROWS, left)
        want = min(CREDIT_MAX, max(CREDIT, ahead * self.chunks // max(self.records, 1)))
        if want - self.granted >= want // 2:
            self.conn.credit(want - self.granted)
            self.granted = want


class StreamProbe:
    """The driver's look at streams over the streams protocol, from the chunk a subscription
    gets first: a stream's first offset is its first chunk's; its next (the tail) is after the
    last chunk's records, known at once (over AMQP 0-9-1 the tail probe reads until the
    deliveries pause); ``last`` and a timestamp are the first offsets of the last chunk and of
    the chunk written at or after it. An empty stream delivers no chunk: None after
    ``pollTimeoutMs``. Same methods as :class:`pumpd.spark.read.streams.amqp091.AmqpStreams`'s probes."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.conn = self._connect()
        self.used = time.monotonic()

    def _connect(self) -> StreamsConnection:
        return connect(self.options, "pumpd spark read (driver)")

    def alive(self) -> bool:
        """False once idle for :data:`PROBE_IDLE` seconds: the broker may have closed the
        connection for missed heartbeats, and a new one costs a few milliseconds."""
        return time.monotonic() - self.used < PROBE_IDLE

    def _chunk_at(self, stream: str, kind: int, value: int = 0) -> Chunk | None:
        self.used = time.monotonic()
        self.conn.subscribe(stream, kind, value, credit=1)
        # the login and the requests may take their time on a busy broker; only the chunk,
        # which an empty stream never sends, is waited for no longer than pollTimeoutMs
        self.conn.set_timeout(self.options.poll_timeout)
        try:
            c = self.conn.chunk()
        except TimeoutError:  # a socket file that timed out reads no more: a new one
            self.conn.close()
            self.conn = self._connect()
            return None
        self.conn.set_timeout(STALL_SECONDS)
        self.conn.unsubscribe()
        return c

    def first_offset(self, stream: str) -> int | None:
        c = self._chunk_at(stream, FIRST)
        return None if c is None else c.first

    def next_offset(self, stream: str) -> int | None:
        c = self._chunk_at(stream, LAST)
        return None if c is None else c.first + c.records

    def last_offset(self, stream: str) -> int | None:
        c = self._chunk_at(stream, LAST)
        return None if c is None else c.first

    def offset_at(self, stream: str, millis: int) -> int | None:
        c = self._chunk_at(stream, TIMESTAMP, millis)
        return None if c is None else c.first

    def partitions(self, super_stream: str) -> list[str]:
        self.used = time.monotonic()
        return self.conn.partitions(super_stream)

    def close(self) -> None:
        self.conn.close()


__all__ = ["BATCH_ROWS", "StreamProbe", "StreamsError", "read", "streams_port_open",
           "super_stream_partitions"]
