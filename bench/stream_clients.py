"""Which client reads a RabbitMQ stream fastest here: rstream, rbfly, or pika over AMQP 0-9-1.

    python bench/stream_clients.py [--messages 300000] [--reps 2]

rbfly is not a dependency of pumpd (GPLv3+; its current release needs Python 3.12): ``pip install
rbfly`` to include it, else its rows are skipped. One private node with ``rabbitmq_stream``; a stream filled with ``--messages`` bodies of 64 B
(pumpd's Publisher, confirmed); then each client reads the whole stream from ``first`` in this
one process, timed from subscribe to the last message. Prints one JSON line per run and a table.
The machine is shared: compare clients within one run of this script, not across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import pika
from pumpd import Publisher
from pumpd.testing.localnode import LocalNode

STREAM = "bench-stream"


def publish(uri: str, routing_key: str, n: int, body: bytes) -> None:
    """``n`` copies of ``body`` to the default exchange, confirmed."""
    with Publisher(uri, routing_key=routing_key, window=5000) as p:
        for start in range(0, n, 10_000):
            p.publish_many([body] * min(10_000, n - start))
        p.flush()


METADATA = ("identical", "varied")


def publish_varied(uri: str, routing_key: str, n: int, body: bytes) -> None:
    """``n`` copies of ``body``, each with its own message id and four headers of different
    types (a string, an integer, a boolean, a float), as pumpd's writer and typical producers
    send them; confirmed."""
    with Publisher(uri, routing_key=routing_key, window=5000) as p:
        for start in range(0, n, 10_000):
            ids = range(start, min(start + 10_000, n))
            p.publish_rows([body] * len(ids),
                           properties={"content_type": "application/json", "delivery_mode": 2},
                           columns={"message_id": [f"msg-{i:010d}" for i in ids],
                                    "headers": [{"tenant": f"tenant-{i % 97}", "seq": i,
                                                 "sampled": i % 3 == 0, "score": i / 7}
                                                for i in ids]})
        p.flush()


def fill(uri: str, n: int, metadata: str = "identical") -> None:
    """A stream of ``n`` bodies of 64 B: with ``identical`` metadata (no properties, the
    exchange and routing key alone) or ``varied`` (:func:`publish_varied`)."""
    with pika.BlockingConnection(pika.URLParameters(uri)) as c:
        c.channel().queue_declare(STREAM, durable=True, arguments={"x-queue-type": "stream"})
    (publish_varied if metadata == "varied" else publish)(uri, STREAM, n, b"x" * 64)


def read_pika(uri: str, queue: str, n: int, arguments: dict[str, Any] | None = None) -> int:
    """``n`` deliveries from ``queue`` with pika's BlockingConnection (prefetch 2,000, one
    ``basic.ack(multiple)`` per 1,000 and at the last); ``arguments``: the consumer's, such
    as ``x-stream-offset`` for a stream."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=2000)
    got = 0

    def take(_c: Any, m: Any, _p: Any, _b: bytes) -> None:
        nonlocal got
        got += 1
        if got % 1000 == 0 or got == n:
            ch.basic_ack(m.delivery_tag, multiple=True)

    ch.basic_consume(queue, take, arguments=arguments)
    while got < n:
        conn.process_data_events(time_limit=0.1)
    conn._impl.close()  # no cancel: pika's cancel rejects, which a stream refuses
    # ...but wait for close-ok: a connection left half-closed keeps the prefetched, unacked
    # deliveries from the queue until the broker times it out (minutes), and the next run
    # would miss them
    try:
        while not conn._impl.is_closed:
            conn.process_data_events(time_limit=0.05)
    except pika.exceptions.AMQPError:  # closed: what pika raises once it is
        pass
    return got


def read_rstream(host: str, port: int, n: int, streams: Sequence[str] = (STREAM,)) -> int:
    """``n`` messages from ``streams`` together (one consumer subscribed to each from its
    first offset, all in this process), counted and not decoded."""
    from rstream import Consumer, ConsumerOffsetSpecification, OffsetType

    async def run() -> int:
        got = 0
        done = asyncio.Event()

        def take(_msg: Any, ctx: Any) -> None:
            nonlocal got
            got += 1
            if got >= n:
                done.set()

        async with Consumer(host, port, username="guest", password="guest") as consumer:
            for stream in streams:
                await consumer.subscribe(stream, take, decoder=lambda b: b,
                                         offset_specification=ConsumerOffsetSpecification(
                                             OffsetType.FIRST, None))
            await done.wait()
        return got

    return asyncio.run(run())


def read_rbfly(host: str, port: int, n: int, amqp: bool) -> int:
    import rbfly.streams as rbs

    @rbs.connection
    async def run(client: Any) -> int:
        got = 0
        async for _msg in client.subscribe(STREAM, offset=rbs.Offset.FIRST, amqp=amqp):
            got += 1
            if got >= n:
                break
        return got

    return asyncio.run(run(rbs.streams_client(f"rabbitmq-stream://guest:guest@{host}:{port}/")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    with LocalNode(plugins=["rabbitmq_stream"]) as node:
        uri, n = node.uri(), args.messages
        assert node.stream_port is not None
        port = node.stream_port
        fill(uri, n)
        clients: dict[str, Callable[[], int]] = {
            "pika (AMQP 0-9-1, x-stream-offset)": lambda: read_pika(
                uri, STREAM, n, {"x-stream-offset": "first"}),
            "rstream 1.1.1 (raw bodies)": lambda: read_rstream("127.0.0.1", port, n),
            "rbfly 0.10.0 (raw bodies)": lambda: read_rbfly("127.0.0.1", port, n, False),
            "rbfly 0.10.0 (AMQP 1.0 decoded)": lambda: read_rbfly("127.0.0.1", port, n, True),
        }
        try:
            import rbfly  # noqa: F401
        except ImportError:
            clients = {k: v for k, v in clients.items() if "rbfly" not in k}
        rates: dict[str, list[float]] = {k: [] for k in clients}
        for rep in range(1, args.reps + 1):
            for name, read in clients.items():
                t0 = time.perf_counter()
                got = read()
                rate = got / (time.perf_counter() - t0)
                rates[name].append(rate)
                print(json.dumps({"bench": "stream_clients", "case": f"{n} x 64 B",
                                  "system": name, "rep": rep, "msg_s": round(rate, 1)}),
                      flush=True)
    print(f"\n| client | msg/s (median of {args.reps}) |\n|---|---|")
    for name, r in rates.items():
        print(f"| {name} | {statistics.median(r):,.0f} |")


if __name__ == "__main__":
    main()
