"""Writing into a stream or a super stream with the data source ``pumpd`` (options ``stream``,
``superStream``), effectively once, against a private node with the stream plugin, also through
a fault proxy that resets or stalls the streams connection; read back over AMQP 0-9-1
(``x-stream-offset``), not with pumpd's own reader."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pumpd.spark import register
from pumpd.spark.read.streams.wire import LAST, StreamsConnection, StreamsError
from pumpd.spark.write.stream_messages import StreamMessages
from pumpd.spark.write.stream_partition import producer_id
from pumpd.testing.localnode import LocalNode
from pumpd.testing.proxy import TcpProxy
from pyspark import cloudpickle

from tests.support import spark_helpers
from tests.support.amqp_helpers import blocking_connection, drain_queue, super_stream
from tests.support.spark_helpers import Trigger, pull

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

cloudpickle.register_pickle_by_value(spark_helpers)
cloudpickle.register_pickle_by_value(sys.modules[__name__])

ROOT = Path(__file__).resolve().parents[2]


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


def _stream(uri: str, name: str) -> None:
    with blocking_connection(uri) as c:
        c.channel().queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})


def _connection(node: LocalNode) -> StreamsConnection:
    assert node.stream_port is not None
    return StreamsConnection("127.0.0.1", node.stream_port, "guest", "guest", "/")


def _tail(node: LocalNode, stream: str) -> int:
    """The stream's next offset (how many messages it holds, none expired): after its last
    chunk, which a subscription at ``last`` gets first (none within 2 s: empty)."""
    with _connection(node) as conn:
        conn.sock.settimeout(2.0)
        conn.subscribe(stream, LAST, credit=1)
        try:
            c = conn.chunk()
        except TimeoutError:
            return 0
        return c.first + c.records


def _read_back(uri: str, stream: str, at_least: int, quiet: float = 1.5) -> list[Any]:
    """Every message of ``stream`` as (properties, body, routing key), over AMQP 0-9-1: until
    ``at_least`` came and then nothing more for ``quiet`` seconds."""
    got: list[Any] = []

    def take(ch: Any, m: Any, p: Any, body: bytes) -> None:
        got.append((p, body, m.routing_key))
        ch.basic_ack(m.delivery_tag)

    with blocking_connection(uri) as c:
        ch = c.channel()
        ch.basic_qos(prefetch_count=1000)
        ch.basic_consume(stream, take, arguments={"x-stream-offset": "first"})
        deadline = time.monotonic() + 60
        last_len, last_change = -1, time.monotonic()
        while time.monotonic() < deadline:
            c.process_data_events(time_limit=0.1)
            if len(got) != last_len:
                last_len, last_change = len(got), time.monotonic()
            elif len(got) >= at_least and time.monotonic() - last_change >= quiet:
                break
        c._impl.close()  # no cancel: pika's cancel rejects, which a stream refuses
    return got


# RabbitMQ's .NET stream client's test vectors of its hash routing over three partitions
# (invoices-01 to -03): a routing key and the index of the partition it goes to. They check the
# write's routing against the clients' own, not against pumpd's hash.
KNOWN_ROUTES = {"hello1": 1, "hello2": 0, "hello3": 1, "hello4": 2, "hello5": 0, "hello6": 2,
                "hello7": 0, "hello8": 1, "hello9": 0, "hello10": 2, "hello88": 1}
# the empty routing key's partition of three (mmh3.hash(b"", 104729, signed=False) % 3)
EMPTY_KEY_ROUTE = 1
# the routing keys of numbered rows, by the row's number modulo their count (None: no key)
KEYS: list[str | None] = [*KNOWN_ROUTES, None]


def _route(n: int) -> int:
    """The partition (of three) the row numbered ``n`` belongs in."""
    key = KEYS[n % len(KEYS)]
    return EMPTY_KEY_ROUTE if key is None else KNOWN_ROUTES[key]


def _numbered(spark: Any, rows: int, partitions: int, *, fault: Any = None,
              keyed: bool = False) -> Any:
    """``body``: the row's number in 8 digits and dots, ``rows`` rows in ``partitions``
    partitions made in the task, which calls ``fault(attempt, row)`` before each row; ``keyed``
    adds the column ``routing_key``, the row's of :data:`KEYS`."""
    per = rows // partitions
    keys = KEYS

    def gen(it: Iterator[int]) -> Iterator[tuple[str | None, ...]]:
        from pyspark import TaskContext

        attempt = TaskContext.get().attemptNumber()
        for p in it:
            for k in range(per):
                if fault is not None:
                    fault(attempt, k)
                n = p * per + k
                body = f"{n:08d}" + "." * 56
                yield (body, keys[n % len(keys)]) if keyed else (body,)

    rdd = spark.sparkContext.parallelize(range(partitions), partitions).mapPartitions(gen)
    return spark.createDataFrame(rdd, "body string, routing_key string" if keyed
                                 else "body string")


def _wait_until(done: Callable[[], bool], seconds: float = 60) -> None:
    """Poll ``done`` until it holds or ``seconds`` pass (the test's own assertions then tell)."""
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        time.sleep(0.05)


def _producer_holds(node: LocalNode, streams: list[str], producer: str, row: int) -> bool:
    """Whether every one of ``streams`` holds partition 0's row ``row`` of micro-batch 0 (or a
    later one) from ``producer``."""
    with _connection(node) as conn:
        return min(conn.query_publisher_sequence(s, f"{producer}-0")
                   for s in streams) >= producer_id(0, row)


def _at_row(action: Callable[[], None], at: int, *, fail: bool) -> tuple[Trigger, Any]:
    """A trigger that runs ``action`` on the driver when partition 0's first attempt reaches
    row ``at``, and the per-row hook for :func:`_numbered` that pulls it (and then fails that
    attempt, with ``fail``). The caller closes the trigger."""
    trigger = Trigger(action)
    port = trigger.port

    def hook(attempt: int, row: int) -> None:
        if attempt == 0 and row == at:
            from pyspark import TaskContext

            if TaskContext.get().partitionId() == 0:
                pull(port)
                if fail:
                    raise RuntimeError("the first attempt fails after publishing")

    return trigger, hook


def _write(df: Any, node: LocalNode, stream: str | None, *, port: int | None = None,
           **options: Any) -> None:
    """A batch write to ``stream`` (None: the options name the target) on ``node``'s streams
    port, or on ``port``."""
    w = df.write.format("pumpd").option("uri", node.uri())
    if stream is not None:
        w = w.option("stream", stream)
    w = w.option("streamPort", port or node.stream_port)
    for k, v in options.items():
        w = w.option(k, v)
    w.mode("append").save()


# -- the client's publishing commands ------------------------------------------------------------


def test_a_named_producer_is_deduplicated_by_publishing_id(node: LocalNode) -> None:
    s = _name("dedup")
    _stream(node.uri(), s)
    messages = StreamMessages(s)
    with _connection(node) as conn:
        assert conn.query_publisher_sequence(s, "p") == 0
        conn.declare_publisher(s, "p")
        conn.publish(messages.entries(1, [b"m%d" % i for i in range(1, 11)]), 10)
        assert conn.outcomes() == (10, [])
        # ids 5 to 15 again: the broker confirms them all and stores only 11 to 15
        conn.publish(messages.entries(5, [b"m%d" % i for i in range(5, 16)]), 11)
        confirmed = 0
        while confirmed < 11:
            n, errors = conn.outcomes()
            assert errors == []
            confirmed += n
        assert conn.query_publisher_sequence(s, "p") == 15
        conn.delete_publisher()
    got = _read_back(node.uri(), s, 15)
    assert [body for _, body, _ in got] == [b"m%d" % i for i in range(1, 16)]
    assert {rk for _, _, rk in got} == {s}  # a publish to the stream through the default exchange


def test_a_missing_stream_is_refused_by_name(node: LocalNode) -> None:
    with _connection(node) as conn, pytest.raises(StreamsError) as caught:
        conn.declare_publisher("no-such-stream", "p")
    assert "no-such-stream" in str(caught.value)
    assert "STREAM_DOES_NOT_EXIST" in str(caught.value)


# -- batch writes ---------------------------------------------------------------------------------


def test_batch_write_into_a_stream_reads_back_every_row_once_and_exact(
        spark: Any, node: LocalNode) -> None:
    s = _name("out")
    _stream(node.uri(), s)
    df = spark.createDataFrame(
        [(f"body{i}".encode(), f"id{i}", "text/plain", {"n": str(i), "k": "v"}, 2, i % 10,
          "60000") for i in range(300)],
        "body binary, message_id string, content_type string, headers map<string,string>, "
        "delivery_mode int, priority int, expiration string")
    _write(df.repartition(3), node, s)
    got = _read_back(node.uri(), s, 300)
    assert len(got) == 300
    by_id = {p.message_id: (p, body) for p, body, _ in got}
    assert sorted(by_id) == sorted(f"id{i}" for i in range(300))
    for i in (0, 17, 299):
        p, body = by_id[f"id{i}"]
        assert body == f"body{i}".encode()
        assert p.content_type == "text/plain"
        assert {k: p.headers[k] for k in ("n", "k")} == {"n": str(i), "k": "v"}
        assert (p.delivery_mode, p.priority, p.expiration) == (2, i % 10, "60000")


def test_a_body_only_write_of_long_and_short_bodies_is_exact(spark: Any, node: LocalNode
                                                             ) -> None:
    s = _name("sizes")
    _stream(node.uri(), s)
    bodies = [b"x" * n for n in (0, 1, 255, 256, 70_000)]
    df = spark.createDataFrame([(b,) for b in bodies], "body binary")
    _write(df.coalesce(1), node, s)
    got = _read_back(node.uri(), s, len(bodies))
    assert sorted(body for _, body, _ in got) == sorted(bodies)


def test_a_task_retried_after_publishing_part_of_its_rows_adds_no_duplicate(
        spark: Any, node: LocalNode) -> None:
    s, producer = _name("retry"), _name("job")
    _stream(node.uri(), s)
    rows, fail_at = 50_000, 20_000

    # the first attempt waits until its first Arrow batches (10,000 rows each) are confirmed,
    # then fails
    trigger, fault = _at_row(lambda: _wait_until(lambda: _producer_holds(node, [s], producer,
                                                                          9_999)),
                             fail_at, fail=True)

    try:
        _write(_numbered(spark, rows, 2, fault=fault), node, s, producerName=producer)
    finally:
        trigger.close()
    assert trigger.calls == 1
    got = Counter(int(body[:8]) for _, body, _ in _read_back(node.uri(), s, rows))
    assert sorted(got) == list(range(rows))
    assert set(got.values()) == {1}


def test_a_rerun_with_the_same_producer_name_adds_nothing(spark: Any, node: LocalNode) -> None:
    s, producer = _name("rerun"), _name("job")
    _stream(node.uri(), s)
    df = _numbered(spark, 4000, 2)
    _write(df, node, s, producerName=producer)
    _write(df, node, s, producerName=producer)
    assert _tail(node, s) == 4000
    _write(df, node, s)  # another write: other producers, the rows again
    assert _tail(node, s) == 8000


def test_stream_write_errors_name_the_stream_and_the_option(spark: Any, node: LocalNode
                                                            ) -> None:
    df = spark.createDataFrame([(b"x",)], "body binary")
    with pytest.raises(Exception) as caught:
        _write(df, node, "no-such-stream-here")
    assert "no-such-stream-here" in str(caught.value)
    assert "STREAM_DOES_NOT_EXIST" in str(caught.value)
    for bad, words in (({"exchange": "x"}, "option exchange"),
                       ({"persistent": "true"}, "option persistent"),
                       ({"maxInFlight": "100000"}, "option maxInFlight"),
                       ({"streamPort": "0"}, "option streamPort")):
        with pytest.raises(Exception) as caught:
            _write(df, node, "whatever", **bad)
        assert words in str(caught.value)
    with pytest.raises(Exception) as caught:
        (spark.createDataFrame([(b"x", "e")], "body binary, exchange string").write
         .format("pumpd").option("uri", node.uri()).option("stream", "s").mode("append").save())
    assert "column 'exchange'" in str(caught.value)


# -- faults on the streams connection ------------------------------------------------------------


@pytest.mark.parametrize("fault", ["reset", "stall"])
def test_a_stream_write_whose_connection_is_reset_or_stalls_writes_every_row_once(
        spark: Any, node: LocalNode, fault: str) -> None:
    # the proxy resets the streams connections (ECONNRESET both ways), or makes them silent for
    # good (a hung path: the task waits confirmTimeoutMs), once partition 0's first Arrow batch
    # is confirmed; Spark retries the failed tasks (local[2,4]) through the proxy, which lets
    # new connections pass, and each retry sends only what the stream lacks
    assert node.stream_port is not None
    s, producer = _name(f"fault-{fault}"), _name("job")
    _stream(node.uri(), s)
    rows, cut_at = 40_000, 15_000
    with TcpProxy("127.0.0.1", node.stream_port) as proxy:

        def cut() -> None:
            _wait_until(lambda: _producer_holds(node, [s], producer, 9_999))
            if fault == "reset":
                assert proxy.reset_all() >= 1
            else:
                assert proxy.stall_open() >= 1

        trigger, at_row = _at_row(cut, cut_at, fail=False)

        try:
            _write(_numbered(spark, rows, 2, fault=at_row), node, s, port=proxy.port,
                   producerName=producer, confirmTimeoutMs=3000)
        finally:
            trigger.close()
        # the check's connection and the two tasks', then at least one retry's
        assert proxy.accepted >= 4, proxy.accepted
    assert trigger.calls == 1
    got = Counter(int(body[:8]) for _, body, _ in _read_back(node.uri(), s, rows))
    assert sorted(got) == list(range(rows))
    assert set(got.values()) == {1}


@pytest.mark.parametrize("target", ["stream", "queue"])
def test_a_write_waits_out_its_broker_stopped_and_started_mid_write(spark: Any,
                                                                   target: str) -> None:
    """The broker stops once 10,000 rows are stored and starts again 3 s later. The tasks that
    lost their connection fail; Spark's retries (local[2,4]) find no broker and try again to
    connect for up to connectWaitMs, then write what the target lacks: into a stream every row
    once, into a queue every row at least once."""
    rows, cut_at = 40_000, 15_000
    with LocalNode(plugins=["rabbitmq_stream"]) as n:
        assert n.stream_port is not None
        uri, name, producer = n.uri(), _name(f"restart-{target}"), _name("job")
        with blocking_connection(uri) as c:
            c.channel().queue_declare(name, durable=True, arguments=(
                {"x-queue-type": "stream"} if target == "stream" else {}))

        def stored_10k() -> bool:
            if target == "stream":
                return _producer_holds(n, [name], producer, 9_999)
            with blocking_connection(uri) as c:
                return c.channel().queue_declare(name, passive=True).method.message_count >= 10_000

        def cut() -> None:
            _wait_until(stored_10k)
            n.stop()

            def back() -> None:
                time.sleep(3)
                n.start()
            threading.Thread(target=back, daemon=True).start()

        trigger, at_row = _at_row(cut, cut_at, fail=False)

        df = _numbered(spark, rows, 2, fault=at_row)
        w = df.write.format("pumpd").option("uri", uri).option("connectWaitMs", "120000")
        if target == "stream":
            w = w.option("stream", name).option("streamPort", n.stream_port) \
                .option("producerName", producer)
        else:
            w = w.option("routingKey", name).option("persistent", "true") \
                .option("confirmTimeoutMs", "10000")
        try:
            w.mode("append").save()
        finally:
            trigger.close()
        assert trigger.calls == 1
        if target == "stream":
            got = Counter(int(body[:8]) for _, body, _ in _read_back(uri, name, rows))
            assert sorted(got) == list(range(rows))
            assert set(got.values()) == {1}
        else:
            got = Counter(int(d.body[:8]) for d in drain_queue(uri, name))
            assert sorted(got) == list(range(rows))  # duplicates allowed: at least once


# -- super streams ------------------------------------------------------------------------------


def _read_partitions(uri: str, parts: list[str], rows: int) -> list[list[Any]]:
    """Every message of each partition (as :func:`_read_back`), ``rows`` over them all: each
    partition read until it holds its share of :func:`_route`'s rows."""
    share = Counter(_route(n) for n in range(rows))
    return [_read_back(uri, p, share[i]) for i, p in enumerate(parts)]


def _each_once_where_its_key_hashes(got: list[list[Any]], rows: int) -> None:
    seen: Counter[int] = Counter()
    for index, messages in enumerate(got):
        for _, body, routing_key in messages:
            n = int(body[:8])
            seen[n] += 1
            assert _route(n) == index, (n, index)
            assert routing_key == (KEYS[n % len(KEYS)] or "")  # stored as it was routed by
    assert sorted(seen) == list(range(rows))  # nothing lost
    assert set(seen.values()) == {1}  # nothing twice


def test_a_super_stream_write_puts_each_row_once_in_the_partition_its_key_hashes_to(
        spark: Any, node: LocalNode) -> None:
    uri, name, rows = node.uri(), _name("ss"), 1200
    parts = super_stream(uri, name, 3)
    _write(_numbered(spark, rows, 2, keyed=True), node, None, superStream=name,
           messageId="deterministic")
    got = _read_partitions(uri, parts, rows)
    _each_once_where_its_key_hashes(got, rows)
    assert all(p.message_id for messages in got for p, _, _ in messages)
    # no routing_key column: every row takes the option routingKey's partition
    name2 = _name("ss")
    parts2 = super_stream(uri, name2, 3)
    _write(_numbered(spark, 30, 1), node, None, superStream=name2, routingKey="hello4")
    assert [_tail(node, p) for p in parts2] == [0, 0, 30]


def test_a_super_stream_write_retried_mid_partition_and_rerun_adds_no_duplicate(
        spark: Any, node: LocalNode) -> None:
    uri, name, producer = node.uri(), _name("ssretry"), _name("job")
    parts = super_stream(uri, name, 3)
    rows, fail_at = 40_000, 15_000

    # the first attempt waits until its first Arrow batch (10,000 rows, whose last twelve go
    # to every partition) is confirmed in every partition, then fails
    trigger, fault = _at_row(lambda: _wait_until(lambda: _producer_holds(node, parts, producer,
                                                                          9_988)),
                             fail_at, fail=True)

    df = _numbered(spark, rows, 2, fault=fault, keyed=True)
    try:
        _write(df, node, None, superStream=name, producerName=producer)
    finally:
        trigger.close()
    assert trigger.calls == 1
    _each_once_where_its_key_hashes(_read_partitions(uri, parts, rows), rows)
    tails = [_tail(node, p) for p in parts]
    assert sum(tails) == rows
    # the same write again (batch id 0, the same producers): the broker holds every row
    _write(df, node, None, superStream=name, producerName=producer)
    assert [_tail(node, p) for p in parts] == tails


def test_a_streaming_query_into_a_super_stream_restarted_from_its_checkpoint_writes_once(
        spark: Any, node: LocalNode, tmp_path: Path) -> None:
    """A rate source's rows, keyed by the row's number, into a super stream: stopped after a
    few micro-batches (the last one cut short) and restarted from its checkpoint. Every row of a
    committed micro-batch is once in the partition its key hashes to; the replayed batch adds
    no duplicate."""
    uri, name = node.uri(), _name("ssquery")
    parts = super_stream(uri, name, 3)
    checkpoint = str(tmp_path / "checkpoint")
    keys = ", ".join(f"'{k}'" for k in KNOWN_ROUTES)

    def run(batches: int) -> int:
        """Rows of the micro-batches the run completed."""
        rows = (spark.readStream.format("rate").option("rowsPerSecond", 2000)
                .option("numPartitions", 2).load()
                .selectExpr("CAST(value AS STRING) AS body",
                            f"element_at(array({keys}), CAST(value % {len(KNOWN_ROUTES)} AS INT)"
                            " + 1) AS routing_key"))
        query = (rows.writeStream.format("pumpd").option("uri", uri)
                 .option("superStream", name).option("streamPort", node.stream_port)
                 .option("checkpointLocation", checkpoint)
                 .trigger(processingTime="300 milliseconds").start())
        return spark_helpers.run_until_batch(query, batches)

    committed = run(3) + run(6)
    assert committed > 0
    routes = list(KNOWN_ROUTES.values())
    seen: Counter[int] = Counter()
    for index, p in enumerate(parts):
        for _props, body, key in _read_back(uri, p, 0, quiet=2):
            value = int(body)
            assert routes[value % len(routes)] == index, (value, key, index)
            seen[value] += 1
    assert set(range(committed)) <= set(seen)
    assert set(seen.values()) == {1}, [v for v, c in seen.items() if c > 1][:10]


def test_super_stream_write_errors_name_the_super_stream_and_the_options(
        spark: Any, node: LocalNode) -> None:
    df = spark.createDataFrame([(b"x",)], "body binary")
    with pytest.raises(Exception) as caught:
        _write(df, node, None, superStream="no-such-super-stream")
    text = str(caught.value)
    assert "pumpd option superStream 'no-such-super-stream'" in text, text[:2000]
    assert "STREAM_DOES_NOT_EXIST" in text
    for stream, bad, words in (("s", {}, "pumpd options stream and superStream"),
                               (None, {"exchange": "x"},
                                "pumpd option exchange and option superStream")):
        with pytest.raises(Exception) as caught:
            _write(df, node, stream, superStream="whatever", **bad)
        assert words in str(caught.value)


# -- a streaming query killed and restarted -------------------------------------------------------


def _query(node: LocalNode, source: str, out: str, checkpoint: Path, log: Path, *,
           available_now: bool) -> subprocess.Popen[bytes]:
    """tests/support/stream_write_query.py in a process group of its own (its JVM in it), its
    output appended to ``log``."""
    cmd = [sys.executable, "-m", "tests.support.stream_write_query", node.uri(),
           str(node.stream_port), source, out, str(checkpoint)]
    if available_now:
        cmd.append("--available-now")
    with log.open("ab") as out_file:
        return subprocess.Popen(cmd, cwd=ROOT, start_new_session=True, env=os.environ.copy(),
                                stdout=out_file, stderr=subprocess.STDOUT)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.mark.slow
def test_a_streaming_query_killed_and_restarted_writes_every_row_once(
        node: LocalNode, tmp_path: Path) -> None:
    uri, source, out = node.uri(), _name("src"), _name("dst")
    rows = 10_000
    _stream(uri, source)
    _stream(uri, out)
    with _connection(node) as conn:
        conn.declare_publisher(source)
        bodies = [f"{i:08d}".encode() + b"." * 56 for i in range(rows)]
        for first in range(0, rows, 1000):
            conn.publish(StreamMessages(source).entries(first + 1, bodies[first:first + 1000]),
                         1000)
        confirmed = 0
        while confirmed < rows:
            confirmed += conn.outcomes()[0]
    started = time.monotonic()
    checkpoint, log = tmp_path / "checkpoint", tmp_path / "query.log"
    # each micro-batch is 1,000 rows in two partitions, the second one slowed down: a kill once
    # a batch's first partition is written leaves the batch part written, for the restart to
    # replay (the broker drops what it holds of it)
    killed_at = []
    # PUMPD_QUERY_KILLS=5 for a longer run; each kill lands 300 rows into a micro-batch
    kills = int(os.environ.get("PUMPD_QUERY_KILLS", "3"))
    for threshold in [(k + 1) * rows // (kills + 1) // 1000 * 1000 + 300 for k in range(kills)]:
        proc = _query(node, source, out, checkpoint, log, available_now=False)
        try:
            deadline = time.monotonic() + 240  # a loaded machine starts Spark slowly
            while _tail(node, out) < threshold and time.monotonic() < deadline:
                assert proc.poll() is None, log.read_text()[-3000:]
                time.sleep(0.2)
            assert time.monotonic() < deadline, "the query made no progress"
        finally:
            _kill(proc)
        killed_at.append(_tail(node, out))
        print(f"killed at {killed_at[-1]} of {rows} rows, {time.monotonic() - started:.0f} s")
    proc = _query(node, source, out, checkpoint, log, available_now=True)
    try:
        proc.wait(timeout=300)
    finally:
        _kill(proc)
    assert proc.returncode == 0, log.read_text()[-3000:]
    print(f"restarted to the end, {time.monotonic() - started:.0f} s")
    got = Counter(int(body[:8]) for _, body, _ in _read_back(uri, out, rows))
    assert any(n % 1000 for n in killed_at), killed_at  # a micro-batch was cut at least once
    assert sorted(got) == list(range(rows))  # nothing lost
    assert set(got.values()) == {1}  # nothing twice
