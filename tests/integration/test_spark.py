"""The PySpark data source ``pumpd``, in a local SparkSession, against private RabbitMQ nodes.

One session ``local[2,4]`` for the file: four attempts per task, so failed partitions are retried
as on a cluster. Faults are made at chosen points from inside a task through
:class:`spark_helpers.Trigger` (the task asks the driver process to act, and waits)."""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from pumpd import Publisher
from pumpd.dataplane.properties import encode_properties, message_id_of
from pumpd.publishing import MessageIds
from pumpd.spark import publish_partition, register
from pumpd.testing import TcpProxy
from pumpd.testing.localnode import LocalNode
from pyspark import cloudpickle
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from tests.support import spark_helpers
from tests.support.amqp_helpers import (
    blocking_connection,
    declare_queue,
    drain_queue,
    naive,
    raw_get,
)
from tests.support.redaction_cases import forms
from tests.support.spark_helpers import Trigger, pull, take_first

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

cloudpickle.register_pickle_by_value(spark_helpers)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_helpers.spark_session()
    # An editable install hides pyspark_pumpd from Spark's automatic lookup (pkgutil does not
    # see setuptools' editable finder); from a wheel, format("pumpd") works without this.
    register(session)
    yield session
    session.stop()


def _queue(uri: str, name: str, *, exchange: str = "", keys: tuple[str, ...] = (),
           arguments: dict[str, Any] | None = None) -> None:
    declare_queue(uri, name, durable=False, arguments=arguments)
    if exchange:
        with blocking_connection(uri) as c:
            ch = c.channel()
            ch.exchange_declare(exchange, "direct")
            for k in keys:
                ch.queue_bind(name, exchange, k)


def _numbered(spark: Any, rows: int, partitions: int, *, fault: Any = None) -> Any:
    """``body`` = the row's number, 8 digits, then 100 dots (enough bytes that rows flow to the
    writer while the generator waits in ``fault``): ``rows`` rows in ``partitions`` partitions,
    made in the task itself, which calls ``fault(attempt, row)`` before each row."""
    per = rows // partitions
    pad = "." * 100

    def gen(it: Iterator[int]) -> Iterator[tuple[str]]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        attempt = ctx.attemptNumber()
        for p in it:
            for k in range(per):
                if fault is not None:
                    fault(attempt, k)
                yield (f"{p * per + k:08d}{pad}",)

    rdd = spark.sparkContext.parallelize(range(partitions), partitions).mapPartitions(gen)
    return spark.createDataFrame(rdd, "body string")


def _number(body: bytes) -> int:
    return int(body[:8])


def _ids(deliveries: list[Any]) -> Counter[str]:
    return Counter(d.properties.message_id for d in deliveries)


def test_publisher_publish_arrow_arrives_with_ids(impl: str, node_b: LocalNode,
                                                   vhost_b: str) -> None:
    import pyarrow as pa

    uri = node_b.uri(vhost_b)
    col = pa.array([b"%05d" % i for i in range(3000)])
    with Publisher(uri, routing_key="q", window=500, implementation=impl,
                   declarations=[("queue.declare", {"queue": "q"})]) as p:
        p.publish_arrow(col.slice(1000), properties={"delivery_mode": 2, "app_id": "s"},
                        message_ids=MessageIds(b"w:0:1:", range(7, 7 + 2000)))
        p.publish_arrow(col.slice(0, 2))
        p.flush()
        assert p.confirmed == 2002
    got = drain_queue(uri, "q", expected=2002, timeout=30)
    assert [d.body for d in got] == [*col.slice(1000).to_pylist(), b"00000", b"00001"]
    assert [d.properties.message_id for d in got[:2000]] == [f"w:0:1:{7 + i}" for i in range(2000)]
    assert {(d.properties.delivery_mode, d.properties.app_id) for d in got[:2000]} == {(2, "s")}
    assert got[2000].properties.message_id is None


def test_rows_arrive_with_body_key_properties_and_headers_exact(
        spark: Any, node_b: LocalNode, vhost_b: str) -> None:
    uri = node_b.uri(vhost_b)
    _queue(uri, "q1", exchange="x", keys=("k1", "k2"))
    _queue(uri, "q2", exchange="x", keys=("k2",))
    _queue(uri, "q3", exchange="y", keys=("k1",))
    schema = StructType([
        StructField("body", BinaryType()), StructField("routing_key", StringType()),
        StructField("content_type", StringType()), StructField("delivery_mode", IntegerType()),
        StructField("priority", IntegerType()), StructField("message_id", StringType()),
        StructField("correlation_id", StringType()), StructField("timestamp", LongType()),
        StructField("app_id", StringType()), StructField("type", StringType()),
        StructField("headers", MapType(StringType(), StringType())),
        StructField("exchange", StringType()),
    ])
    rows = [
        (bytes(range(256)) * 3, "k1", "application/octet-stream", 2, 5, "m-0", "c-0",
         1_700_000_000, "spark", "t", {"a": "1", "b": "é"}, None),
        (b"", "k2", None, None, None, "m-1", None, None, None, None, None, None),
        (b"\x00" * 200_000, None, "text/plain", 1, None, None, None, None, None, None, {}, None),
        (b"to y", None, None, None, None, None, None, None, None, None, None, "y"),
    ]
    df = spark.createDataFrame(rows, schema).coalesce(1)
    (df.write.format("pumpd").option("uri", uri).option("exchange", "x")
     .option("routingKey", "k1").mode("append").save())
    q1 = drain_queue(uri, "q1", expected=3)
    q2 = drain_queue(uri, "q2")
    q3 = drain_queue(uri, "q3", expected=1)
    assert [(d.method.exchange, d.method.routing_key, d.body) for d in q3] == [("y", "k1", b"to y")]
    assert [(d.method.routing_key, d.body) for d in q1] == [
        ("k1", rows[0][0]), ("k2", b""), ("k1", rows[2][0])]
    assert [d.body for d in q2] == [b""]
    p0, p1, p2 = (d.properties for d in q1)
    assert (p0.content_type, p0.delivery_mode, p0.priority, p0.message_id, p0.correlation_id,
            p0.timestamp, p0.app_id, p0.type, naive(p0.headers)) == (
        "application/octet-stream", 2, 5, "m-0", "c-0", 1_700_000_000, "spark", "t",
        {"a": "1", "b": "é"})
    assert (p1.message_id, p1.content_type, p1.delivery_mode, p1.headers) == ("m-1", None, None,
                                                                             None)
    assert (p2.content_type, p2.delivery_mode, p2.headers) == ("text/plain", 1, {})


def test_typed_headers_value_alias_persistent_and_deterministic_ids(
        spark: Any, node_b: LocalNode, vhost_b: str) -> None:
    uri = node_b.uri(vhost_b)
    _queue(uri, "q")
    header_t = StructType([StructField("n", LongType()), StructField("f", DoubleType()),
                           StructField("ok", BooleanType()), StructField("s", StringType())])
    schema = StructType([StructField("value", StringType()), StructField("headers", header_t)])
    df = spark.createDataFrame([("a", (-(2**40), 0.25, True, "x")), ("b", None)],
                               schema).coalesce(1)
    (df.write.format("pumpd").option("URI", uri).option("routingkey", "q")
     .option("persistent", "true").option("messageId", "deterministic").mode("append").save())
    raw = raw_get(node_b.amqp_port, vhost_b, "q", 2)  # pika's decoder truncates doubles
    assert [body for _, body in raw] == [b"a", b"b"]
    write_id = message_id_of(raw[0][0]).decode().split(":")[0]
    headers = {"n": -(2**40), "f": 0.25, "ok": True, "s": "x"}
    assert [props for props, _ in raw] == [
        encode_properties({"headers": headers, "delivery_mode": 2,
                           "message_id": f"{write_id}:0:0:0"}),
        encode_properties({"delivery_mode": 2, "message_id": f"{write_id}:0:0:1"})]


def test_foreach_partition_helper(spark: Any, node_b: LocalNode, vhost_b: str) -> None:
    uri = node_b.uri(vhost_b)
    _queue(uri, "q")
    df = spark.createDataFrame([(str(i), "q") for i in range(500)], "body string, routing_key string")
    df.repartition(2).foreachPartition(
        lambda rows: publish_partition(rows, uri=uri, messageId="deterministic", writeId="w"))
    got = drain_queue(uri, "q", expected=500)
    assert sorted(int(d.body) for d in got) == list(range(500))
    assert len(_ids(got)) == 500


def test_bad_options_credentials_exchange_and_columns_fail_at_save(
        spark: Any, node_b: LocalNode, vhost_b: str) -> None:
    uri = node_b.uri(vhost_b)
    df = spark.createDataFrame([("a",)], "body string")
    bad_password = node_b.uri(vhost_b, password="wrong")
    cases: list[tuple[Any, dict[str, str], str, str]] = [
        (df, {"uri": uri, "routngKey": "q"}, "append", "unknown option 'routngkey' (did you mean routingKey?)"),
        (df, {}, "append", 'option "uri" is required'),
        (df, {"uri": uri, "maxInFlight": "lots"}, "append", "maxInFlight: expected an integer"),
        (df, {"uri": bad_password, "exchange": "amq.direct"}, "append", "authentication refused"),
        (df, {"uri": uri, "exchange": "nope"}, "append", "no exchange 'nope'"),
        (df, {"uri": uri, "routingKey": "missing-queue"}, "append", "no queue 'missing-queue'"),
        (df, {"uri": uri}, "overwrite", 'save mode "overwrite" is not supported'),
        (df.selectExpr("body", "1 AS colour"), {"uri": uri}, "append",
         "unknown column colour"),
        (df.selectExpr("body AS payload"), {"uri": uri}, "append", "needs a column 'body'"),
    ]
    for frame, options, mode, expected in cases:
        writer = frame.write.format("pumpd").mode(mode)
        for k, v in options.items():
            writer = writer.option(k, v)
        with pytest.raises(Exception) as info:
            writer.save()
        assert expected in str(info.value), (options, str(info.value)[:2000])
        assert type(info.value).__name__ == "AnalysisException", str(info.value)[:500]


SPARK_PASSWORD = 'sp@rk "p\u00e4ss"/w%rd 1'


def _shows_password(text: str, *passwords: str) -> list[str]:
    return sorted(f for p in passwords for f in forms(p) if len(f) >= 4 and f in text)


def test_the_password_option_logs_in_and_a_refused_login_shows_no_password(
        spark: Any, node_b: LocalNode, vhost_b: str) -> None:
    node_b.add_user("spark-user", SPARK_PASSWORD, vhost_b)
    uri = node_b.uri(vhost_b)
    _queue(uri, "q")
    user_uri = f"amqp://spark-user@127.0.0.1:{node_b.amqp_port}/{vhost_b}"
    df = spark.createDataFrame([("a",), ("b",)], "body string")
    (df.write.format("pumpd").option("uri", user_uri).option("password", SPARK_PASSWORD)
     .option("routingKey", "q").mode("append").save())
    assert sorted(d.body for d in drain_queue(uri, "q", expected=2)) == [b"a", b"b"]

    # refused on the driver: the test connection, in the URI or in the option
    wrong = "wr0ng-" + SPARK_PASSWORD
    for options in ({"uri": user_uri, "password": wrong},
                    {"uri": node_b.uri(vhost_b, "spark-user", wrong)}):
        writer = df.write.format("pumpd").option("routingKey", "q").mode("append")
        for k, v in options.items():
            writer = writer.option(k, v)
        with pytest.raises(Exception) as info:
            writer.save()
        assert "authentication refused" in str(info.value), str(info.value)[:2000]
        assert _shows_password(str(info.value), wrong) == [], str(info.value)


@pytest.mark.parametrize("where", ["option", "uri"])
def test_a_task_refused_its_login_fails_without_showing_the_password(
        spark: Any, node_b: LocalNode, vhost_b: str, where: str) -> None:
    """The driver's test connection passes; then the password changes under the tasks: the
    task's error, which Spark hands to the driver (and logs), must not show the password,
    given in the option ``password`` or (warned against) in the URI."""
    user = f"task-user-{where}"  # users are the node's, not the vhost's
    node_b.add_user(user, SPARK_PASSWORD, vhost_b)
    uri = node_b.uri(vhost_b)
    _queue(uri, "q")
    trigger = Trigger(lambda: node_b.ctl("change_password", user, "changed-since-1"))
    port = trigger.port

    def fault(attempt: int, row: int) -> None:
        if attempt == 0 and row == 0:
            pull(port)

    try:
        df = _numbered(spark, 10, 1, fault=fault)
        writer = df.write.format("pumpd").option("routingKey", "q").mode("append")
        if where == "option":
            writer = writer.option(
                "uri", f"amqp://{user}@127.0.0.1:{node_b.amqp_port}/{vhost_b}").option(
                "password", SPARK_PASSWORD)
        else:
            writer = writer.option("uri", node_b.uri(vhost_b, user, SPARK_PASSWORD))
        with pytest.raises(Exception) as info:
            writer.save()
    finally:
        trigger.close()
    text = str(info.value)
    assert trigger.calls == 1
    assert "authentication refused" in text and "0 of 10 rows confirmed" in text, text[:3000]
    assert _shows_password(text, SPARK_PASSWORD) == [], text


def test_a_nack_fails_the_task_and_the_retry_delivers_every_row(
        spark: Any, node_b: LocalNode, vhost_b: str) -> None:
    """max-length 1500, reject-publish, 1200 fillers: the first attempt has 300 of its 1000 rows
    confirmed and 700 nacked; the retry first takes the fillers off, then all 1000 fit."""
    uri = node_b.uri(vhost_b)
    _queue(uri, "q", arguments={"x-max-length": 1500, "x-overflow": "reject-publish"})
    with blocking_connection(uri) as c:
        ch = c.channel()
        ch.confirm_delivery()
        for _ in range(1200):
            ch.basic_publish("", "q", b"filler")

    def fault(attempt: int, start: int) -> None:
        if attempt == 1 and start == 0:
            take_first(uri, "q", 1200)

    df = _numbered(spark, 1000, 1, fault=fault)
    (df.write.format("pumpd").option("uri", uri).option("routingKey", "q")
     .option("messageId", "deterministic").mode("append").save())
    got = drain_queue(uri, "q", expected=1300)
    assert len(got) == 1300 and b"filler" not in {d.body for d in got}
    assert Counter(_number(d.body) for d in got) == Counter(
        {**dict.fromkeys(range(1000), 1), **dict.fromkeys(range(300), 2)})
    ids = _ids(got)
    assert len(ids) == 1000 and sorted(ids.values()).count(2) == 300
    for d in got:  # a row keeps its id across attempts: {writeId}:0:{partition}:{row}
        assert d.properties.message_id.endswith(f":0:0:{_number(d.body)}")


def test_a_connection_lost_mid_partition_is_retried_and_nothing_is_lost(
        spark: Any, node_b: LocalNode, vhost_b: str) -> None:
    uri = node_b.uri(vhost_b)
    _queue(uri, "q")
    with TcpProxy("127.0.0.1", node_b.amqp_port) as proxy:
        proxy_uri = uri.replace(f":{node_b.amqp_port}/", f":{proxy.port}/")

        def cut() -> None:
            # wait for some of the first attempt's rows to be in the queue, then reset
            for _ in range(600):
                with blocking_connection(uri) as c:
                    if c.channel().queue_declare("q", passive=True).method.message_count >= 1000:
                        break
                threading.Event().wait(0.05)
            proxy.reset_all()

        trigger = Trigger(cut)
        port = trigger.port

        def fault(attempt: int, start: int) -> None:
            if attempt == 0 and start == 3000:
                pull(port)

        # small Arrow batches: the writer gets rows while the generator waits at row 3000
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
        try:
            df = _numbered(spark, 6000, 1, fault=fault)
            (df.write.format("pumpd").option("uri", proxy_uri).option("routingKey", "q")
             .option("messageId", "deterministic").mode("append").save())
        finally:
            spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
            trigger.close()
    assert trigger.calls == 1
    got = drain_queue(uri, "q")
    bodies = Counter(_number(d.body) for d in got)
    assert set(bodies) == set(range(6000))
    dup = [b for b, n in bodies.items() if n > 1]
    assert 1000 <= len(dup) <= 3000 and max(bodies.values()) == 2  # the first attempt's rows
    ids = _ids(got)
    assert len(ids) == 6000 and all(n == bodies[int(i.rsplit(":", 1)[1])] for i, n in ids.items())


def test_a_blocked_broker_ends_in_the_confirm_timeout_error(
        spark: Any, node_b: LocalNode, vhost_b: str) -> None:
    uri = node_b.uri(vhost_b)
    _queue(uri, "q")
    df = _numbered(spark, 200, 1)
    node_b.set_vm_memory_high_watermark(0)
    try:
        with pytest.raises(Exception) as info:
            (df.write.format("pumpd").option("uri", uri).option("routingKey", "q")
             .option("confirmTimeoutMs", "1500").mode("append").save())
    finally:
        node_b.set_vm_memory_high_watermark(0.4)
    text = str(info.value)
    assert "0 of 200 rows confirmed" in text, text[:3000]
    assert "no confirm for 1.5 s while the broker had blocked the connection" in text


def test_a_streaming_query_restarted_from_its_checkpoint_loses_nothing(
        spark: Any, node_b: LocalNode, vhost_b: str, tmp_path: Any) -> None:
    uri = node_b.uri(vhost_b)
    _queue(uri, "q")
    checkpoint = str(tmp_path / "checkpoint")

    def run(batches: int) -> tuple[str, int]:
        """The query's id and how many rows its completed batches carried."""
        stream = (spark.readStream.format("rate").option("rowsPerSecond", 400)
                  .option("numPartitions", 2).load()
                  .selectExpr("CAST(value AS STRING) AS body"))
        query = (stream.writeStream.format("pumpd").option("uri", uri)
                 .option("routingKey", "q").option("messageId", "deterministic")
                 .option("checkpointLocation", checkpoint)
                 .trigger(processingTime="300 milliseconds").start())
        return str(query.id), spark_helpers.run_until_batch(query, batches)

    first, rows_first = run(3)
    second, rows_second = run(6)
    assert first == second  # the checkpoint keeps the query id: ids stay stable across restarts
    got = drain_queue(uri, "q")
    values = {int(d.body) for d in got}
    # Every row of a completed batch arrived (a batch cut by stop() was replayed by the second
    # run; the second run's own last batch may be cut too, its rows published only in part:
    # they are beyond the committed ones, and nothing restarts to replay them).
    committed = rows_first + rows_second
    assert committed > 0 and set(range(committed)) <= values
    ids = {d.properties.message_id for d in got}
    assert {i.split(":")[0] for i in ids} == {first}
    assert len(ids) == len({(d.properties.message_id, d.body) for d in got})

