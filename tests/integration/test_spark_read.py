"""Reading from RabbitMQ with the data source ``pumpd``: streams (batch and streaming) and queues,
in the shared local SparkSession, against a private node with the stream plugin."""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from pumpd.spark import register
from pumpd.testing.localnode import LocalNode
from pyspark import cloudpickle

from tests.support import spark_helpers
from tests.support.amqp_helpers import blocking_connection, super_stream, unacked

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

cloudpickle.register_pickle_by_value(spark_helpers)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_helpers.spark_session()
    register(session)
    yield session


@pytest.fixture(scope="module")
def node() -> Iterator[LocalNode]:
    with LocalNode(plugins=["rabbitmq_stream"]) as n:
        yield n


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _stream(uri: str, name: str, **arguments: Any) -> None:
    with blocking_connection(uri) as c:
        c.channel().queue_declare(name, durable=True,
                                  arguments={"x-queue-type": "stream", **arguments})


def _publish(uri: str, queue: str, first: int, n: int, size: int = 0) -> None:
    """Messages ``m{i}`` (padded to ``size`` bytes) with message id ``id{i}`` and a header."""
    with blocking_connection(uri) as c:
        ch = c.channel()
        ch.confirm_delivery()
        for i in range(first, first + n):
            body = f"m{i}".encode().ljust(size, b".")
            ch.basic_publish("", queue, body, pika.BasicProperties(
                message_id=f"id{i}", headers={"n": i, "s": "x"}, content_type="text/plain",
                timestamp=1_700_000_000 + i))


@pytest.fixture(params=["amqp", "stream"])
def protocol(request: pytest.FixtureRequest) -> str:
    """Read tasks over AMQP 0-9-1 (x-stream-offset) or the streams protocol (rstream)."""
    return str(request.param)


def _read(spark: Any, uri: str, stream: str, **options: Any) -> Any:
    r = spark.read.format("pumpd").option("uri", uri).option("stream", stream)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _stream_ids(uri: str, stream: str, last: str) -> list[tuple[int, str]]:
    """(offset, message id) of every message from the first available to the one with id
    ``last``, read with pika (independently of the reader under test)."""
    got: list[tuple[int, str]] = []

    def take(ch: Any, m: Any, p: Any, _b: bytes) -> None:
        got.append((p.headers["x-stream-offset"], p.message_id))
        ch.basic_ack(m.delivery_tag)

    with blocking_connection(uri) as c:
        ch = c.channel()
        ch.basic_qos(prefetch_count=100)
        ch.basic_consume(stream, take, arguments={"x-stream-offset": "first"})
        deadline = time.monotonic() + 30
        while (not got or got[-1][1] != last) and time.monotonic() < deadline:
            c.process_data_events(time_limit=0.1)
        c._impl.close()  # no cancel: pika's cancel rejects, which a stream refuses
    assert got and got[-1][1] == last
    return got


def test_batch_read_of_a_stream_has_every_column(spark: Any, node: LocalNode,
                                                 protocol: str) -> None:
    uri, s = node.uri(), _name("s")
    _stream(uri, s)
    _publish(uri, s, 0, 50)
    rows = _read(spark, uri, s, minPartitions=3, protocol=protocol,
                 streamPort=node.stream_port).collect()
    assert sorted(r.offset for r in rows) == list(range(50))
    r = min(rows, key=lambda r: r.offset)
    assert (r.body, r.message_id, r.routing_key, r.exchange, r.stream, r.content_type) == (
        b"m0", "id0", s, "", s, "text/plain")
    assert r.headers == {"n": "0", "s": "x"}
    assert int(r.timestamp.timestamp()) == 1_700_000_000


def test_batch_read_between_starting_and_ending_offsets(spark: Any, node: LocalNode,
                                                        protocol: str) -> None:
    uri, s = node.uri(), _name("s")
    _stream(uri, s)
    _publish(uri, s, 0, 40)
    got = _read(spark, uri, s, startingOffsets="10", endingOffsets="25", minPartitions=4,
                protocol=protocol, streamPort=node.stream_port)
    assert sorted(r.offset for r in got.collect()) == list(range(10, 25))
    nxt = _read(spark, uri, s, startingOffsets="next").collect()
    assert nxt == []


def test_two_streams_read_together_are_partitions(spark: Any, node: LocalNode) -> None:
    uri, a, b = node.uri(), _name("a"), _name("b")
    for s, n in ((a, 7), (b, 12)):
        _stream(uri, s)
        _publish(uri, s, 0, n)
    rows = _read(spark, uri, f"{a},{b}", protocol="amqp").collect()
    assert sorted((r.stream, r.offset) for r in rows) == sorted(
        [(a, i) for i in range(7)] + [(b, i) for i in range(12)])


@pytest.mark.parametrize("protocol", ["stream", "amqp"])
def test_a_super_stream_is_read_by_its_name(spark: Any, node: LocalNode, protocol: str) -> None:
    # the partitions come from the broker (the streams protocol's partitions command), in their
    # x-stream-partition-order, whichever protocol then reads them
    uri, name = node.uri(), _name("ss")
    parts = super_stream(uri, name, 3)
    for i, s in enumerate(parts):
        _publish(uri, s, 100 * i, 5 + i)
    r = (spark.read.format("pumpd").option("uri", uri).option("superStream", name)
         .option("streamPort", node.stream_port).option("protocol", protocol)
         .option("minPartitions", 2).load())
    got = sorted((row.stream, row.message_id) for row in r.collect())
    assert got == sorted((s, f"id{100 * i + k}") for i, s in enumerate(parts)
                         for k in range(5 + i))


def test_a_missing_super_stream_is_one_clear_error(spark: Any, node: LocalNode) -> None:
    with pytest.raises(Exception, match=r"superStream 'no-such-super-stream'.*does not exist"):
        (spark.read.format("pumpd").option("uri", node.uri())
         .option("superStream", "no-such-super-stream")
         .option("streamPort", node.stream_port).load().collect())


def _available_now(spark: Any, uri: str, stream: str, out: Path, checkpoint: Path,
                   **options: Any) -> list[int]:
    """One Trigger.AvailableNow run into a Parquet sink; returns the rows of each micro-batch.
    (``uri`` is the node: its streams port is passed too.)"""
    r = spark.readStream.format("pumpd").option("uri", uri).option("stream", stream)
    for k, v in options.items():
        r = r.option(k, v)
    q = (r.load().select("offset", "message_id", "body").writeStream.format("parquet")
         .option("path", str(out)).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    try:
        q.awaitTermination(180)
        if q.exception() is not None:
            raise RuntimeError(str(q.exception()))
        return [int(p["numInputRows"]) for p in q.recentProgress if p["numInputRows"]]
    finally:
        q.stop()


def test_streaming_read_resumes_from_its_checkpoint_exactly_once(
        spark: Any, node: LocalNode, tmp_path: Path, protocol: str) -> None:
    uri, s = node.uri(), _name("s")
    _stream(uri, s)
    _publish(uri, s, 0, 70)
    out, cp = tmp_path / "out", tmp_path / "cp"
    opts = {"protocol": protocol, "streamPort": node.stream_port, "maxRecordsPerTrigger": 30}
    assert _available_now(spark, uri, s, out, cp, **opts) == [30, 30, 10]
    _publish(uri, s, 70, 25)
    assert _available_now(spark, uri, s, out, cp, **opts) == [25]
    got = spark.read.parquet(str(out)).collect()
    assert sorted(r.offset for r in got) == list(range(95))  # none lost, none twice
    assert sorted(r.message_id for r in got) == sorted(f"id{i}" for i in range(95))


def test_streaming_read_starting_at_next_skips_history(spark: Any, node: LocalNode,
                                                       tmp_path: Path) -> None:
    uri, s = node.uri(), _name("s")
    _stream(uri, s)
    _publish(uri, s, 0, 20)
    out, cp = tmp_path / "out", tmp_path / "cp"
    assert _available_now(spark, uri, s, out, cp, startingOffsets="next",
                          protocol="amqp") == []
    _publish(uri, s, 20, 5)
    assert _available_now(spark, uri, s, out, cp, protocol="amqp") == [5]
    assert sorted(r.offset for r in spark.read.parquet(str(out)).collect()) == list(range(20, 25))


@pytest.mark.parametrize("fail", [True, False])
def test_retention_truncation_with_fail_on_data_loss(spark: Any, node: LocalNode,
                                                     tmp_path: Path, fail: bool) -> None:
    uri, s = node.uri(), _name("s")
    # tiny segments and a byte limit: older segments go as new ones fill
    _stream(uri, s, **{"x-max-length-bytes": 20_000, "x-stream-max-segment-size-bytes": 4_000})
    _publish(uri, s, 0, 10, size=500)
    out, cp = tmp_path / "out", tmp_path / "cp"
    opts = {"protocol": "stream", "streamPort": node.stream_port}
    assert _available_now(spark, uri, s, out, cp, **opts) == [10]
    _publish(uri, s, 10, 200, size=500)
    # the broker removes segments a moment after the write that rolled them: wait until the
    # first offset stays put
    kept, before = _stream_ids(uri, s, "id209"), None
    while before != kept[0]:
        before = kept[0]
        time.sleep(1)
        kept = _stream_ids(uri, s, "id209")
    first = kept[0][0]
    assert kept[0][1] != "id10", "retention removed nothing: the test would prove nothing"
    # (offsets have gaps where a segment begins: compare message ids, not offsets)
    if fail:
        with pytest.raises(Exception, match=rf"offsets \d+ to {first - 1} no longer exist"):
            _available_now(spark, uri, s, out, cp, **opts)
    else:
        _available_now(spark, uri, s, out, cp, failOnDataLoss="false", **opts)
        ids = sorted(r.message_id for r in spark.read.parquet(str(out)).collect())
        assert ids == sorted([f"id{i}" for i in range(10)] + [m for _, m in kept])


def _depth(uri: str, queue: str) -> int:
    with blocking_connection(uri) as c:
        return int(c.channel().queue_declare(queue, passive=True).method.message_count)


def _wait_depth(uri: str, queue: str, n: int, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while (d := _depth(uri, queue)) != n and time.monotonic() < deadline:
        time.sleep(0.2)
    return d


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_queue_reader_acks_after_the_sink_and_a_failed_query_leaves_messages_queued(
        spark: Any, node: LocalNode, tmp_path: Path, queue_type: str) -> None:
    uri, q = node.uri(), _name("q")
    with blocking_connection(uri) as c:
        c.channel().queue_declare(q, durable=True, arguments={"x-queue-type": queue_type})
    _publish(uri, q, 0, 30)

    def fail(df: Any, batch_id: int) -> None:
        raise RuntimeError(f"sink down (batch {batch_id}, {df.count()} rows)")

    reader = (spark.readStream.format("pumpd").option("uri", uri).option("queue", q)
              .option("maxRecordsPerTrigger", 20).load())
    failing = reader.writeStream.foreachBatch(fail).start()
    with pytest.raises(Exception, match="sink down"):
        failing.awaitTermination(120)
    # the batch was never committed: its messages went back to the queue
    assert _wait_depth(uri, q, 30) == 30

    query = (reader.writeStream.format("memory").queryName(f"t_{q.replace('-', '_')}")
             .option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="300 milliseconds").start())
    table = f"t_{q.replace('-', '_')}"
    try:
        deadline = time.monotonic() + 120
        while spark.table(table).count() < 30 and time.monotonic() < deadline:
            time.sleep(0.5)
        _publish(uri, q, 30, 1)  # one more, after the redelivered ones
        while spark.table(table).count() < 31 and time.monotonic() < deadline:
            time.sleep(0.5)
        # the trigger after each micro-batch acknowledges it, the last one's included
        while unacked(node, "/", q) and time.monotonic() < deadline:
            time.sleep(0.2)
        query.stop()
        rows = spark.table(table).collect()
        assert sorted(r.message_id for r in rows) == sorted(f"id{i}" for i in range(31))
        assert {r.redelivered for r in rows if r.message_id != "id30"} == {True}
        assert all(r.offset is None and r.stream == q for r in rows)
        stopped = time.monotonic()
        while time.monotonic() - stopped < 2.0:  # nothing was left to requeue at the stop
            assert _depth(uri, q) == 0
            time.sleep(0.2)
    finally:
        query.stop()

