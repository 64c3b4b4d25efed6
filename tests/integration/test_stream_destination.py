"""A stream destination over the streams protocol, against private nodes with ``rabbitmq_stream``:
a stream → stream shovel stores every source offset once and in order, and what an AMQP 0-9-1
consumer reads from the destination stream equals what it read from the source stream
(properties, headers of every type, body); after a restart, a destination connection reset and
a destination node restart, still every offset exactly once; a queue source loses nothing;
publishing-id properties that are missing or do not increase are refused by name."""

from __future__ import annotations

import asyncio
import os
import signal
import struct
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pika
import pytest
from pumpd.amqp10.message import complete, decode_message
from pumpd.config.uri import parse_uri
from pumpd.engine.queue_names import producer_reference
from pumpd.spark.read.streams.wire import StreamsConnection
from pumpd.streams.routing import partition
from pumpd.testing.localnode import LocalNode
from pumpd.testing.proxy import TcpProxy

from tests.support.amqp_helpers import blocking_connection, drain_queue
from tests.support.daemon_helpers import running_state
from tests.support.harness import running, shovel
from tests.support.stream_helpers import (
    held_once_up,
    in_background,
    new_stream,
    publish,
    read_stream,
    stored_offsets,
    stream_shovel,
)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def node() -> Iterator[LocalNode]:
    with LocalNode(plugins=["rabbitmq_stream"]) as n:
        yield n


@pytest.fixture(scope="module")
def other_node() -> Iterator[LocalNode]:
    """A second node, for a destination that restarts."""
    with LocalNode(plugins=["rabbitmq_stream"]) as n:
        yield n


def test_stream_to_stream_stores_every_offset_once_and_in_order(node: LocalNode) -> None:
    uri = node.uri()
    assert node.stream_port is not None
    src, dst = new_stream(uri), new_stream(uri)
    publish(uri, src, 0, 500)
    cfg = shovel("s2s", **stream_shovel(uri, src, uri, dst, node.stream_port))
    with running(cfg) as pumps:
        pumps.wait_for(lambda: len(read_stream(uri, dst, 500, timeout=2)) >= 500, 60,
                       "500 in the destination stream")
    assert stored_offsets(uri, dst, 500) == list(range(500))
    # a restart resumes after the last stored offset: nothing again, the new ones once
    publish(uri, src, 500, 100)
    with running(cfg) as pumps:
        pumps.wait_for(lambda: len(read_stream(uri, dst, 600, timeout=2)) >= 600, 60,
                       "600 in the destination stream")
    assert stored_offsets(uri, dst, 600) == list(range(600))


def _seen(props: pika.BasicProperties, body: bytes) -> dict[str, Any]:
    """What a 0-9-1 consumer reads of a message, but the offset the stream gave it."""
    seen = {k: v for k, v in vars(props).items() if v is not None}
    headers = dict(seen.pop("headers", None) or {})
    headers.pop("x-stream-offset", None)
    return {**seen, "headers": headers, "body": body}


def test_a_091_consumer_reads_from_the_destination_what_it_read_from_the_source(
        node: LocalNode) -> None:
    uri = node.uri()
    assert node.stream_port is not None
    src, dst = new_stream(uri), new_stream(uri)
    # no decimal: RabbitMQ 3.10 refuses a 0-9-1 publish with one into any stream
    headers = {"str": "ünïcode", "int": 7, "long": 2**40, "neg": -5, "bool": True,
               "time": datetime(2024, 1, 2, 3, 4, 5), "none": None, "bytes": b"\x00\x01", "list": [1, "two", [3]],
               "table": {"k": "v", "n": {"deep": 1}}, "x-custom": "kept"}
    with blocking_connection(uri) as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.basic_publish("", src, b"\x00binary body\xff", pika.BasicProperties(
            content_type="application/octet-stream", content_encoding="gzip", headers=headers,
            delivery_mode=2, priority=3, correlation_id="corr-1", reply_to="replies",
            message_id="id-1", timestamp=1_700_000_000, type="kind", user_id="guest",
            app_id="the-app"))
        ch.basic_publish("", src, b"plain", pika.BasicProperties())
    cfg = shovel("fidelity", **stream_shovel(uri, src, uri, dst, node.stream_port))
    with running(cfg) as pumps:
        pumps.wait_for(lambda: len(read_stream(uri, dst, 2, timeout=2)) >= 2, 60,
                       "2 in the destination stream")
    source = [_seen(p, b) for p, b in read_stream(uri, src, 2)]
    destination = [_seen(p, b) for p, b in read_stream(uri, dst, 2)]
    assert destination == source


def _exactly_once(uri: str, stream: str, n: int) -> None:
    assert stored_offsets(uri, stream, n) == list(range(n))


def test_a_destination_connection_reset_still_stores_every_offset_once(node: LocalNode) -> None:
    uri = node.uri()
    assert node.stream_port is not None
    src, dst = new_stream(uri), new_stream(uri)
    n = 3000
    with TcpProxy("127.0.0.1", node.stream_port) as proxy:
        cfg = shovel("reset", **stream_shovel(uri, src, uri, dst, proxy.port,
                                              reconnect_delay=0.5))
        with running(cfg) as pumps:
            publisher = in_background(publish, uri, src, 0, n, pause=0.02)
            for _ in range(3):
                pumps.wait_for(lambda: proxy.connections > 0, 30, "a destination connection")
                time.sleep(0.5)
                proxy.reset_all()
            publisher.join(120)
            pumps.wait_for(lambda: len(read_stream(uri, dst, n, timeout=3)) >= n, 90,
                           f"{n} in the destination stream")
    _exactly_once(uri, dst, n)


def test_a_destination_connection_reset_during_its_handshake_is_retried_by_the_same_pump(
        node: LocalNode) -> None:
    """A proxy or load balancer that accepts and then resets (its broker is down) loses the
    connection while the client waits for an answer: a destination failure to reconnect
    from, not an end of the pump."""
    uri = node.uri()
    assert node.stream_port is not None
    src, dst = new_stream(uri), new_stream(uri)
    n = 100
    publish(uri, src, 0, n)
    with TcpProxy("127.0.0.1", node.stream_port) as proxy:
        proxy.set_mode("reset-on-accept")
        cfg = shovel("handshake", **stream_shovel(uri, src, uri, dst, proxy.port,
                                                  reconnect_delay=0.2))
        with running(cfg) as pumps:
            pumps.wait_for(lambda: proxy.accepted >= 3, 30, "three destination connections")
            assert any("destination" in (why or "") for _state, why in
                       pumps.history["handshake"]), pumps.history["handshake"]
            proxy.set_mode("pass")
            pumps.wait_for(lambda: len(read_stream(uri, dst, n, timeout=2)) >= n, 60,
                           f"{n} in the destination stream")
    _exactly_once(uri, dst, n)


def test_a_destination_node_restart_still_stores_every_offset_once(
        node: LocalNode, other_node: LocalNode) -> None:
    src_uri, dst_uri = node.uri(), other_node.uri()
    assert other_node.stream_port is not None
    src, dst = new_stream(src_uri), new_stream(dst_uri)
    n = 2000
    cfg = shovel("restart", **stream_shovel(src_uri, src, dst_uri, dst,
                                            other_node.stream_port, reconnect_delay=1))
    with running(cfg) as pumps:
        publisher = in_background(publish, src_uri, src, 0, n, pause=0.05)
        pumps.wait_for(lambda: len(read_stream(dst_uri, dst, 300, timeout=1)) >= 300, 60,
                       "300 in the destination stream")
        other_node.restart()
        publisher.join(120)
        pumps.wait_for(lambda: held_once_up(dst_uri, dst, n) >= n, 120,
                       f"{n} in the destination stream")
    _exactly_once(dst_uri, dst, n)


def test_kill_9_of_the_worker_mid_stream_still_stores_every_offset_once(
        pumpd_daemon: Any, node: LocalNode) -> None:
    uri = node.uri()
    assert node.stream_port is not None
    src, dst = new_stream(uri), new_stream(uri)
    n = 5000
    d = pumpd_daemon({"k": stream_shovel(uri, src, uri, dst, node.stream_port,
                                         reconnect_delay=0.5)})
    d.wait_for(lambda: running_state(d, "k"), 30, "the shovel running")
    status = d.shovel("k")
    assert status is not None and status["dest_protocol"] == "stream"
    (old_pid,) = d.worker_pids("k")
    publisher = in_background(publish, uri, src, 0, n, pause=0.02)
    d.wait_for(lambda: d.shovel("k")["counters"]["confirmed"] >= 1000, 60, "1000 confirmed")
    os.kill(old_pid, signal.SIGKILL)
    d.wait_for(lambda: d.worker_pids("k")[0] not in (None, old_pid) and running_state(d, "k"),
               60, "a replacement worker running")
    publisher.join(120)
    d.wait_for(lambda: len(read_stream(uri, dst, n, timeout=3)) >= n, 120,
               f"{n} in the destination stream")
    _exactly_once(uri, dst, n)


def _queue(uri: str) -> str:
    name = f"q-{uuid.uuid4().hex[:8]}"
    with blocking_connection(uri) as c:
        c.channel().queue_declare(name, durable=True)
    return name


def test_a_queue_source_loses_nothing(node: LocalNode) -> None:
    uri = node.uri()
    assert node.stream_port is not None
    src, dst = _queue(uri), new_stream(uri)
    n = 1000
    publish(uri, src, 0, n)
    clauses = stream_shovel(uri, src, uri, dst, node.stream_port)
    del clauses["consumer_args"]
    with running(shovel("q2s", **clauses)) as pumps:
        pumps.wait_for(lambda: len(read_stream(uri, dst, n, timeout=2)) >= n, 60,
                       f"{n} in the destination stream")
    assert sorted(stored_offsets(uri, dst, n)) == list(range(n))


def test_publishing_ids_from_a_header_refuse_a_missing_or_repeated_one_by_name(
        node: LocalNode) -> None:
    uri = node.uri()
    assert node.stream_port is not None
    src, dst = _queue(uri), new_stream(uri)
    with blocking_connection(uri) as c:
        ch = c.channel()
        ch.confirm_delivery()
        for body, headers in ((b"body 0", {"seq": 1}), (b"body 1", {"seq": 2}),
                              (b"no seq", {}), (b"again", {"seq": 2}),
                              (b"body 2", {"seq": 5})):
            ch.basic_publish("", src, body, pika.BasicProperties(headers=headers))
    parked = f"parked-{uuid.uuid4().hex[:6]}"
    clauses = stream_shovel(uri, src, uri, dst, node.stream_port,
                            publishing_id="header:seq",
                            undeliverable={"policy": "park", "park_queue": parked})
    del clauses["consumer_args"]
    with running(shovel("ids", **clauses)) as pumps:
        pumps.wait_for(lambda: pumps.statuses["ids"].counters.parked >= 2, 60, "2 parked")
        pumps.wait_for(lambda: len(read_stream(uri, dst, 3, timeout=2)) >= 3, 60,
                       "3 in the destination stream")
    assert [b for _p, b in read_stream(uri, dst, 3)] == [b"body 0", b"body 1", b"body 2"]
    reasons = [(d.properties.headers or {}).get("x-pumpd-undeliverable", "")
               for d in drain_queue(uri, parked, 2)]
    assert any("no integer header 'seq'" in str(r) for r in reasons), reasons
    assert any("header 'seq' 2 is not above the previous message's 2" in str(r)
               for r in reasons), reasons


def _read_with_rstream(port: int, stream: str, n: int) -> list[bytes]:
    """The first ``n`` stored messages of ``stream`` as bytes, read by rstream (a streams
    client other than pumpd's)."""
    from rstream import Consumer, ConsumerOffsetSpecification, OffsetType

    async def run() -> list[bytes]:
        got: list[bytes] = []
        done = asyncio.Event()

        def take(message: Any, _ctx: Any) -> None:
            got.append(bytes(message))
            if len(got) >= n:
                done.set()

        async with Consumer("127.0.0.1", port, username="guest", password="guest") as consumer:
            await consumer.subscribe(stream, take, decoder=lambda b: b,
                                     offset_specification=ConsumerOffsetSpecification(
                                         OffsetType.FIRST, None))
            await asyncio.wait_for(done.wait(), 30)
        return got

    return asyncio.run(run())


def _sections(raw: bytes) -> tuple[Any, ...]:
    m = complete(decode_message(raw))
    return (m.header, m.message_annotations, m.properties, m.application_properties, m.body,
            m.footer)


def test_a_foreign_streams_client_reads_from_the_destination_what_the_source_stored(
        node: LocalNode) -> None:
    """RabbitMQ stored a 0-9-1 publish in the source; pumpd stored its 0-9-1 delivery in the
    destination in the same form: rstream reads the same AMQP 1.0 message from both (the same
    sections and values; not the same bytes: RabbitMQ writes a properties list whole and
    ``true`` as a boolean of one byte, and its 0-9-1 delivery sorts the headers)."""
    uri = node.uri()
    assert node.stream_port is not None
    src, dst = new_stream(uri), new_stream(uri)
    with blocking_connection(uri) as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.basic_publish("", src, b"\x00body\xff", pika.BasicProperties(
            content_type="text/plain", headers={"n": 7, "big": 2**40, "s": "ünï", "t": True},
            delivery_mode=2, priority=1, message_id="m-1", correlation_id="c-1",
            timestamp=1_700_000_000, type="kind", app_id="app", user_id="guest",
            expiration="60000", reply_to="r"))
        publish(uri, src, 1, 20)
    cfg = shovel("foreign", **stream_shovel(uri, src, uri, dst, node.stream_port))
    with running(cfg) as pumps:
        pumps.wait_for(lambda: len(read_stream(uri, dst, 21, timeout=2)) >= 21, 60,
                       "21 in the destination stream")
    stored, original = (_read_with_rstream(node.stream_port, dst, 21),
                        _read_with_rstream(node.stream_port, src, 21))
    assert [_sections(b) for b in stored] == [_sections(b) for b in original]


def test_a_super_stream_gets_each_message_in_the_partition_its_routing_key_hashes_to(
        node: LocalNode) -> None:
    uri = node.uri()
    assert node.stream_port is not None
    tag = uuid.uuid4().hex[:6]
    src, parts, exchange = new_stream(uri), [f"parts-{tag}-{i}" for i in range(3)], f"parts-{tag}"
    with blocking_connection(uri) as c:
        ch = c.channel()
        ch.exchange_declare(exchange, "direct", durable=True)
        for i, p in enumerate(parts):
            ch.queue_declare(p, durable=True, arguments={"x-queue-type": "stream"})
            ch.queue_bind(p, exchange, str(i), arguments={"x-stream-partition-order": i})
        ch.exchange_declare(f"in-{tag}", "topic", durable=True)
        ch.queue_bind(src, f"in-{tag}", "#")
        ch.confirm_delivery()
        n = 300
        for i in range(n):
            ch.basic_publish(f"in-{tag}", f"key-{i % 10}", b"body %d" % i)
    clauses = stream_shovel(uri, src, uri, "", node.stream_port)
    clauses["destinations"] = {"protocol": "stream", "broker": uri, "super_stream": exchange,
                               "stream_port": node.stream_port}
    with running(shovel("super", **clauses)) as pumps:
        pumps.wait_for(lambda: pumps.statuses["super"].counters.confirmed >= n, 60,
                       f"{n} confirmed")
    # each partition is read until it holds what the hash sends it (a confirm says stored on
    # the leader; a reader may see a partition's last chunk a moment later)
    expected = [sum(1 for i in range(n) if partition(f"key-{i % 10}".encode(), 3) == index)
                for index in range(3)]
    seen: list[int] = []
    for index, p in enumerate(parts):
        offsets = stored_offsets(uri, p, expected[index])
        assert len(offsets) == expected[index] and offsets == sorted(offsets)
        for i in offsets:
            assert partition(f"key-{i % 10}".encode(), 3) == index
        seen += offsets
    assert sorted(seen) == list(range(n))


def test_a_destination_that_stored_past_the_sources_end_is_refused_and_nothing_skipped(
        node: LocalNode) -> None:
    """The destination stream's producer says it stored source offset 999,999; the source
    stream ends at 9: the session fails naming the producer, the answer and the source's end,
    and forwards nothing (resuming there would skip every message the source gets next)."""
    uri = node.uri()
    assert node.stream_port is not None
    src, dst = new_stream(uri), new_stream(uri)
    publish(uri, src, 0, 10)
    producer = producer_reference(None, "liar", 0)
    u = parse_uri(uri)
    with StreamsConnection(u.effective_host, node.stream_port, u.username, u.password,
                           u.vhost) as conn:
        conn.declare_publisher(dst, producer)
        message = b"\x00\x53\x75\xa0\x05" + b"liar!"  # one data section
        conn.publish([struct.pack(">QI", 1_000_000, len(message)) + message], 1)
        assert conn.outcomes() == (1, [])
    cfg = shovel("liar", **stream_shovel(uri, src, uri, dst, node.stream_port,
                                         source_stream_port=node.stream_port))
    with running(cfg) as pumps:
        pumps.wait_for(lambda: "stored source offset" in (pumps.status().reason or ""), 60,
                       "the session refused")
        reason = pumps.status().reason or ""
        time.sleep(2)  # a retry, were it to skip ahead, would have forwarded by now
        held = read_stream(uri, dst, 1, timeout=3)
        published = pumps.status().counters.published
    assert f"producer {producer!r} of stream {dst!r} stored source offset 999999" in reason
    assert "(its publisher sequence is 1000000)" in reason
    assert f"source stream {src!r} ends at offset 9" in reason
    assert "holds more than the source ever had" in reason
    assert [b for _p, b in held] == [b"liar!"]
    assert published == 0
