"""The queue reader's own consumer (pumpd's delivery reader under an engine link, on a thread)
against pika's view of the same messages, published by another client (aio-pika, whose codec is
pamqp's), and the reader in Spark surviving a connection closed by the broker and a read task
retried.

The ack-on-commit behaviour is tested in tests/integration/test_spark_read.py.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")
pytest.importorskip("aio_pika")

import aio_pika
from pumpd.spark import register
from pumpd.spark.read.arrow import deliveries_batch
from pumpd.spark.read.queue.consumer import QueueConsumer
from pumpd.spark.read.schema import COLUMNS, headers_map
from pumpd.testing.localnode import LocalNode
from pyspark import cloudpickle

from tests.support import spark_helpers
from tests.support.amqp_helpers import blocking_connection, unacked

cloudpickle.register_pickle_by_value(spark_helpers)
cloudpickle.register_pickle_by_value(sys.modules[__name__])

# every AMQP field type pamqp writes in a table, and every basic property
HEADERS: dict[str, Any] = {
    "s": "text", "utf8": "žluťoučký", "i": 7, "neg": -2**40, "f": 1.5, "t": True,
    "bytes": bytearray(b"\x00\xffraw"), "d": decimal.Decimal("3.25"), "none": None,
    "when": dt.datetime(2024, 5, 6, 7, 8, 9), "list": [1, "two", [3]],
    "table": {"inner": {"deep": 1}, "x": "y"},
}
LARGE = 300_000  # bytes: a body over several frames (frame_max 131,072)


def _message(i: int) -> Any:
    return aio_pika.Message(
        body=(b"L" * LARGE) if i == 3 else f"body-{i}".encode(),
        headers={**HEADERS, "i": i} if i % 2 == 0 else None,
        content_type="application/json" if i % 2 == 0 else None,
        content_encoding="identity", delivery_mode=2, priority=i % 10,
        correlation_id=f"c{i}", reply_to="replies", expiration=60 + i,
        message_id=f"id{i}", timestamp=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
        + dt.timedelta(seconds=i), type="t", user_id="guest", app_id="aio-pika")


def _publish_foreign(uri: str, exchange: str, n: int) -> None:
    async def main() -> None:
        conn = await aio_pika.connect(uri)
        try:
            ch = await conn.channel(publisher_confirms=True)
            ex = await ch.get_exchange(exchange)
            for i in range(n):
                await ex.publish(_message(i), routing_key=f"rk.{i}")
        finally:
            await conn.close()

    asyncio.run(main())


def row_of(method: Any, props: Any, body: bytes, source: str) -> tuple[Any, ...]:
    """A row as pika's own objects give it (the independent view the columns are held to)."""
    ts = props.timestamp
    return (body, method.routing_key, method.exchange, props.content_type,
            props.content_encoding, headers_map(props.headers), props.delivery_mode,
            props.priority, props.correlation_id, props.reply_to, props.expiration,
            props.message_id,
            None if ts is None else dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc),
            props.type, props.user_id, props.app_id, props.cluster_id, None, source,
            bool(method.redelivered))


def _pika_rows(uri: str, queue: str, n: int) -> list[tuple[Any, ...]]:
    """The same messages as pika decodes them, through :func:`row_of`."""
    rows: list[tuple[Any, ...]] = []
    with blocking_connection(uri) as c:
        ch = c.channel()
        for _ in range(n):
            method, props, body = ch.basic_get(queue, auto_ack=True)
            assert method is not None
            rows.append(row_of(method, props, body, queue))
    return rows


@pytest.fixture(scope="module")
def node() -> Iterator[LocalNode]:
    with LocalNode() as n:
        yield n


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_helpers.spark_session()
    register(session)
    yield session


def _twin_queues(uri: str) -> tuple[str, str, str]:
    """A fanout exchange copying every message to two queues: one for pika, one for pumpd."""
    tag = uuid.uuid4().hex[:8]
    ex, mine, theirs = f"fan-{tag}", f"mine-{tag}", f"pika-{tag}"
    with blocking_connection(uri) as c:
        ch = c.channel()
        ch.exchange_declare(ex, "fanout")
        for q in (mine, theirs):
            ch.queue_declare(q, durable=True)
            ch.queue_bind(q, ex)
    return ex, mine, theirs


def _plain(value: Any) -> Any:
    """A column value as pika's row gives it: maps as dicts, timestamps as UTC datetimes."""
    if isinstance(value, list) and value and isinstance(value[0], tuple):
        return dict(value)
    return value


def test_the_consumer_gives_the_columns_pika_decodes(node: LocalNode) -> None:
    uri = node.uri()
    ex, mine, theirs = _twin_queues(uri)
    n = 6
    _publish_foreign(uri, ex, n)
    consumer = QueueConsumer(uri, mine, prefetch=100)
    try:
        consumer.wait(n, pause=5.0, timeout=30.0)
        batch = deliveries_batch(consumer.take(n), mine).to_pydict()
    finally:
        consumer.close()
    expected = _pika_rows(uri, theirs, n)
    names = [name for name, _ in COLUMNS]
    got = [tuple(_plain(batch[name][i]) for name in names) for i in range(n)]
    for row, want in zip(got, expected, strict=True):
        want = list(want)
        want[names.index("stream")] = mine
        assert dict(zip(names, row, strict=True)) == dict(zip(names, want, strict=True))
    assert len(batch["body"][3]) == LARGE
    headers = dict(batch["headers"][0])
    assert headers["utf8"] == "žluťoučký" and headers["i"] == "0" and headers["t"] == "true"
    assert headers["bytes"] == "\x00\ufffdraw"  # invalid UTF-8 replaced, as documented


def test_the_consumer_bounds_its_read_ahead_and_a_micro_batch_by_bytes(
        node: LocalNode, monkeypatch: pytest.MonkeyPatch) -> None:
    from pumpd.spark.read.queue import consumer as queue_consumer

    monkeypatch.setattr(queue_consumer, "BATCH_BYTES", 250_000)
    monkeypatch.setattr(queue_consumer, "READ_AHEAD_BYTES", 500_000)
    uri, q = node.uri(), f"big-{uuid.uuid4().hex[:8]}"
    with blocking_connection(uri) as c:
        ch = c.channel()
        ch.queue_declare(q)
        ch.confirm_delivery()
        for i in range(20):
            ch.basic_publish("", q, bytes([i]) * 100_000)
    consumer = QueueConsumer(uri, q, prefetch=100)
    try:
        time.sleep(1.0)  # the broker may send all 20 (prefetch 100): the consumer stops at ~5
        waiting = consumer.pending()
        # the hold comes after the read that crossed the bound: at most one read beyond it
        assert 5 <= waiting < 20
        seen: list[int] = []
        while len(seen) < 20:
            consumer.wait(100, pause=0.5, timeout=10.0)
            batch = consumer.take(100)
            assert batch, f"nothing more after {len(seen)} of 20"
            assert len(batch) <= 3  # 3 bodies of 100,000 reach the 250,000 bound
            seen += [d[5][0] for d in batch]
            consumer.ack(batch[-1][0])
        assert seen == list(range(20))  # in order, each once: reading resumed every time
    finally:
        consumer.close()


def test_the_consumer_without_basic_qos_bounds_its_read_ahead_in_messages(
        node: LocalNode) -> None:
    """No basic.qos (the queue reader's default): the broker would send all 40 at once, and the
    consumer stops reading at its read-ahead of 5, reading again as they are taken."""
    uri, q = node.uri(), f"ahead-{uuid.uuid4().hex[:8]}"
    with blocking_connection(uri) as c:
        ch = c.channel()
        ch.queue_declare(q)
        ch.confirm_delivery()
        for i in range(40):
            ch.basic_publish("", q, bytes([i]) * 30_000)
    consumer = QueueConsumer(uri, q, prefetch=0, read_ahead=5)
    try:
        time.sleep(1.0)
        waiting = consumer.pending()
        # the hold comes after the read that crossed the bound: at most one read beyond it
        assert 5 <= waiting < 40
        seen: list[int] = []
        while len(seen) < 40:
            consumer.wait(5, pause=0.5, timeout=10.0)
            batch = consumer.take(5)
            assert batch, f"nothing more after {len(seen)} of 40"
            seen += [d[5][0] for d in batch]
        consumer.ack(batch[-1][0])
        assert seen == list(range(40))  # in order, each once: reading resumed every time
    finally:
        consumer.close()
    assert _depth(uri, q) == 0  # one ack for all: none requeued when the connection closed


def test_a_missing_queue_or_a_wrong_password_is_said_without_the_password(
        node: LocalNode) -> None:
    from pumpd.engine.link_errors import LinkError

    with pytest.raises(LinkError, match=r"404 NOT_FOUND - no queue 'nope'"):
        QueueConsumer(node.uri(), "nope", prefetch=10)
    wrong = node.uri().replace("guest:guest", "guest:s3cret-pw")
    assert "s3cret-pw" in wrong
    with pytest.raises(LinkError, match="authentication refused") as refused:
        QueueConsumer(wrong, "nope", prefetch=10)
    assert "s3cret-pw" not in str(refused.value)


def _depth(uri: str, queue: str) -> int:
    with blocking_connection(uri) as c:
        return int(c.channel().queue_declare(queue, passive=True).method.message_count)


def _publish(uri: str, queue: str, first: int, count: int, persistent: bool = False) -> None:
    """Messages ``m{i}`` with ids ``id{i}`` into ``queue`` (declared durable)."""
    with blocking_connection(uri) as c:
        ch = c.channel()
        ch.queue_declare(queue, durable=True)
        ch.confirm_delivery()
        for i in range(first, first + count):
            ch.basic_publish("", queue, f"m{i}".encode(), pika.BasicProperties(
                message_id=f"id{i}", delivery_mode=2 if persistent else None))


def _memory_query(spark: Any, uri: str, queue: str, per_trigger: int) -> tuple[Any, str]:
    """A streaming query reading ``queue`` into a memory table; the query and the table."""
    table = f"t_{queue.replace('-', '_')}"
    query = (spark.readStream.format("pumpd").option("uri", uri).option("queue", queue)
             .option("maxRecordsPerTrigger", per_trigger).load()
             .writeStream.format("memory").queryName(table)
             .trigger(processingTime="200 milliseconds").start())
    return query, table


def _ids_read(spark: Any, query: Any, table: str, n: int, deadline: float) -> set[str]:
    """The message ids in ``table`` once there are ``n`` distinct ones (or at the deadline);
    the query must not fail meanwhile."""
    ids: set[str] = set()
    while len(ids) < n and time.monotonic() < deadline:
        assert query.exception() is None
        ids = {r.message_id for r in spark.table(table).select("message_id").collect()}
        time.sleep(0.3)
    return ids


def test_a_read_task_that_fails_is_retried_with_the_same_rows(
        spark: Any, node: LocalNode) -> None:
    """The micro-batch travels in its partitions: Spark's retry of a failed task reads the
    same rows again, none lost, none twice, and nothing requeued meanwhile."""
    from pyspark import TaskContext
    from pyspark.sql.functions import udf

    @udf("string")
    def flaky(message_id):  # type: ignore[no-untyped-def]  # pyspark warns at plain hints
        if TaskContext.get().attemptNumber() == 0:
            raise RuntimeError("task down on its first attempt")
        return message_id

    uri = node.uri()
    q = f"q-{uuid.uuid4().hex[:8]}"
    _publish(uri, q, 0, 60)
    table = f"t_{q.replace('-', '_')}"
    query = (spark.readStream.format("pumpd").option("uri", uri).option("queue", q)
             .option("maxRecordsPerTrigger", 25).load()
             .select(flaky("message_id").alias("message_id"), "redelivered")
             .writeStream.format("memory").queryName(table)
             .trigger(processingTime="200 milliseconds").start())
    try:
        ids = _ids_read(spark, query, table, 60, time.monotonic() + 120)
        assert ids == {f"id{i}" for i in range(60)}
        rows = spark.table(table).collect()
        assert len(rows) == 60 and not any(r.redelivered for r in rows)
    finally:
        query.stop()


def test_the_queue_reader_goes_on_after_the_broker_closes_its_connection(
        spark: Any, node: LocalNode) -> None:
    uri = node.uri()
    q = f"q-{uuid.uuid4().hex[:8]}"
    _publish(uri, q, 0, 50)
    query, table = _memory_query(spark, uri, q, 20)
    try:
        deadline = time.monotonic() + 120
        _ids_read(spark, query, table, 50, deadline)
        node.ctl("close_all_connections", "test: the reader's connection dropped")
        _publish(uri, q, 50, 50)
        # at-least-once: every message read; what was not acknowledged came again
        assert _ids_read(spark, query, table, 100, deadline) == {f"id{i}" for i in range(100)}
        assert query.isActive and query.exception() is None
        rows = spark.table(table).count()
        assert 100 <= rows <= 100 + 40  # duplicates: at most the two unacknowledged batches
        # the reader acknowledged what Spark committed: at most the last batch is left
        assert _depth(uri, q) <= 20
    finally:
        query.stop()


def test_the_last_micro_batch_before_a_quiet_spell_is_acknowledged(
        spark: Any, node: LocalNode) -> None:
    """The trigger after a micro-batch acknowledges it, data or not: a query stopped while the
    queue is quiet reads nothing of it again."""
    uri = node.uri()
    q = f"q-{uuid.uuid4().hex[:8]}"
    _publish(uri, q, 0, 30)
    query, table = _memory_query(spark, uri, q, 20)
    try:
        assert len(_ids_read(spark, query, table, 30, time.monotonic() + 120)) == 30
        assert _unacked_reaches(node, q, 0) == 0  # the second micro-batch (10) acked too
    finally:
        query.stop()
    stopped = time.monotonic()
    while time.monotonic() - stopped < 3.0:  # nothing requeued at the stop
        assert _depth(uri, q) == 0
        time.sleep(0.2)
    assert spark.table(table).count() == 30


def test_the_queue_reader_waits_out_a_broker_killed_and_restarted(
        spark: Any, node: LocalNode) -> None:
    """Last in this module: it kills the module's node (and leaves it running again)."""
    uri = node.uri()
    q = f"q-{uuid.uuid4().hex[:8]}"
    _publish(uri, q, 0, 30, persistent=True)  # persistent: they outlive the crash
    query, table = _memory_query(spark, uri, q, 10)
    try:
        deadline = time.monotonic() + 180
        _ids_read(spark, query, table, 30, deadline)
        node.kill()
        time.sleep(3)  # a few triggers find no broker: tried again, the query goes on
        node.restart()
        _publish(uri, q, 30, 30, persistent=True)
        assert _ids_read(spark, query, table, 60, deadline) == {f"id{i}" for i in range(60)}
        assert query.isActive and query.exception() is None
    finally:
        query.stop()
        node.ensure_running()



def _depth_reaches(uri: str, queue: str, n: int, within: float = 20.0) -> int:
    """The queue's ready messages once they are ``n`` (the broker requeues a closed
    connection's deliveries a moment after), or at the deadline."""
    deadline = time.monotonic() + within
    depth = _depth(uri, queue)
    while depth != n and time.monotonic() < deadline:
        time.sleep(0.1)
        depth = _depth(uri, queue)
    return depth


def _unacked_reaches(node: LocalNode, queue: str, n: int, within: float = 20.0) -> int:
    """The queue's unacknowledged messages once they are ``n`` (an ack reaches the queue a
    moment after it is sent), or at the deadline."""
    deadline = time.monotonic() + within
    count = unacked(node, "/", queue)
    while count != n and time.monotonic() < deadline:
        time.sleep(0.1)
        count = unacked(node, "/", queue)
    return count


def test_the_queue_reader_takes_the_backlog_and_acks_a_batch_once_spark_is_past_it(
        node: LocalNode) -> None:
    """The reader on the driver, as Spark calls it: the consumer starts at initialOffset() and
    counts the backlog; micro-batches take it up to their bound, then what comes after. A
    micro-batch is acknowledged only once Spark is past it: when Spark asks for a micro-batch
    starting where it ended (Spark asks only after the sink and the checkpoint have it), or at
    its commit(). A reader stopped before that loses nothing (every message back in the
    queue)."""
    from pumpd.spark.read.queue.queue_reader import PumpdQueueReader
    from pumpd.spark.read.read_options import parse_read_options

    uri, q = node.uri(), f"backlog-{uuid.uuid4().hex[:8]}"
    _publish(uri, q, 0, 300)
    options = parse_read_options({"uri": uri, "queue": q, "maxRecordsPerTrigger": "200"})
    reader = PumpdQueueReader(options)
    try:
        assert reader.initialOffset() == {"delivered": 0}
        assert reader._consumer is not None and reader._consumer.backlog == 300
        first = reader.latestOffset({"delivered": 0}, None)
        assert first == {"delivered": 200}
        rows = [r for p in reader.partitions({"delivered": 0}, first) for b in reader.read(p)
                for r in b.column("message_id").to_pylist()]
        assert rows == [f"id{i}" for i in range(200)]
        assert _unacked_reaches(node, q, 300) == 300  # none acknowledged yet
    finally:
        reader.stop()
    assert _depth_reaches(uri, q, 300) == 300  # never past the first batch: none lost

    again = PumpdQueueReader(options)
    try:
        again.initialOffset()
        assert again._consumer is not None and again._consumer.backlog == 300
        first = again.latestOffset({"delivered": 0}, None)
        parts = again.partitions({"delivered": 0}, first)
        redelivered = [r for p in parts for b in again.read(p)
                       for r in b.column("redelivered").to_pylist()]
        assert len(redelivered) == 200 and all(redelivered)
        second = again.latestOffset(first, None)  # Spark is past the first: it is acked
        assert second == {"delivered": 300}
        assert _unacked_reaches(node, q, 100) == 100
        _publish(uri, q, 300, 5)  # after the backlog: taken when they pause
        assert again.latestOffset(second, None) == {"delivered": 305}
        assert _unacked_reaches(node, q, 5) == 5
        again.commit({"delivered": 305})
        assert _unacked_reaches(node, q, 0) == 0
        again.commit({"delivered": 305})  # a commit of what is acked already sends nothing
    finally:
        again.stop()
    assert _depth_reaches(uri, q, 0) == 0
