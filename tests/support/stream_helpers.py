"""Streams for tests of a stream destination: declare one, publish numbered messages into it,
read it back whole over AMQP 0-9-1 (pika: a client other than pumpd's), and a shovel's clauses
from a stream to a stream destination.

A message's body names its number (``body 17``), so what a destination holds reads back as the
source offsets it stored, in its order."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pika

from tests.support.amqp_helpers import blocking_connection

PROBE_WAIT_MS = 5000  # how long stream_length waits for an answer, and for an empty stream


def new_stream(uri: str) -> str:
    """A new durable stream with a name of its own."""
    name = f"s-{uuid.uuid4().hex[:8]}"
    with blocking_connection(uri) as c:
        c.channel().queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    return name


def publish(uri: str, queue: str, first: int, n: int, pause: float = 0.0,
            **props: Any) -> None:
    """Messages ``first``..``first + n - 1`` (their bodies name them), each confirmed, with
    ``pause`` seconds between batches of 100 so that a fault lands with messages in flight."""
    with blocking_connection(uri) as c:
        ch = c.channel()
        ch.confirm_delivery()
        for i in range(first, first + n):
            ch.basic_publish("", queue, b"body %d" % i,
                             pika.BasicProperties(message_id=f"id{i}", **props))
            if pause and i % 100 == 99:
                time.sleep(pause)


def publish_paced(uri: str, queue: str, n: int, per_second: float, batch: int = 1000) -> None:
    """Messages ``0``..``n - 1`` (their bodies name them) at about ``per_second``, a batch at a
    time without confirms; a passive declare after each batch answers only once the channel
    has handed the batch to the stream, so the pace is the broker's, not the socket's."""
    with blocking_connection(uri) as c:
        ch = c.channel()
        began = time.monotonic()
        for start in range(0, n, batch):
            for i in range(start, min(n, start + batch)):
                ch.basic_publish("", queue, b"body %d" % i)
            ch.queue_declare(queue, passive=True)
            ahead = began + min(n, start + batch) / per_second - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)


def in_background(fn: Any, *args: Any, **kw: Any) -> threading.Thread:
    t = threading.Thread(target=fn, args=args, kwargs=kw, daemon=True)
    t.start()
    return t


def read_stream(uri: str, stream: str, at_least: int, timeout: float = 30
                ) -> list[tuple[pika.BasicProperties, bytes]]:
    """Every message of ``stream`` from its first, over AMQP 0-9-1 (at least ``at_least``,
    then what comes within a second more)."""
    got: list[tuple[pika.BasicProperties, bytes]] = []

    def take(ch: Any, m: Any, p: Any, b: bytes) -> None:
        got.append((p, b))
        if len(got) % 250 == 0:  # one ack for many: the stream's credit comes back in bulk
            ch.basic_ack(m.delivery_tag, multiple=True)

    with blocking_connection(uri) as c:
        ch = c.channel()
        ch.basic_qos(prefetch_count=500)
        ch.basic_consume(stream, take, arguments={"x-stream-offset": "first"})
        deadline = time.monotonic() + timeout
        while len(got) < at_least and time.monotonic() < deadline:
            c.process_data_events(time_limit=0.1)
        c.process_data_events(time_limit=1.0)
        c._impl.close()  # no cancel: pika's cancel rejects, which a stream refuses
    return got


def held_once_up(uri: str, stream: str, at_least: int) -> int:
    """How many messages ``stream`` holds, 0 while its node has not brought it back after a
    restart (the broker refuses a consumer with 404 until the stream's member is up)."""
    try:
        return len(read_stream(uri, stream, at_least, timeout=3))
    except pika.exceptions.ChannelClosedByBroker as exc:
        if exc.reply_code != 404:
            raise
        return 0


def stream_shovel(src: str, queue: str, dst: str, stream: str, port: int,
                  **clauses: Any) -> dict[str, Any]:
    """A shovel's clauses from ``queue`` (a stream read from its first offset, unless the
    clauses say otherwise) to a stream destination."""
    return {"sources": {"broker": src}, "queue": queue,
            "destinations": {"protocol": "stream", "broker": dst, "stream": stream,
                             "stream_port": port},
            "consumer_args": {"x-stream-offset": "first"}, "prefetch_count": 200, **clauses}


def stored_offsets(uri: str, stream: str, n: int, timeout: float = 30) -> list[int]:
    """The source offsets the destination stream holds, in its order (bodies name them)."""
    return [int(b.split()[1]) for _p, b in read_stream(uri, stream, n, timeout)]


def stream_length(uri: str, port: int, stream: str) -> int:
    """The next offset of ``stream`` (its length, for a stream never truncated) over the
    streams protocol; 0 when it holds nothing (after ``PROBE_WAIT_MS``). Cheap: one chunk's
    header, not a read."""
    from pumpd.spark.read.read_options import parse_read_options
    from pumpd.spark.read.streams.protocol import StreamProbe

    probe = StreamProbe(parse_read_options({"uri": uri, "stream": stream,
                                            "streamPort": str(port),
                                            "pollTimeoutMs": str(PROBE_WAIT_MS)}))
    try:
        tail = probe.next_offset(stream)
    finally:
        probe.close()
    return 0 if tail is None else tail
