"""The Spark readers' parts that need no JVM and no broker: the read options checked and named,
AMQP 1.0 rows against the chunk columns, and sub-entry batches read plain and gzipped."""

from __future__ import annotations

from typing import Any

import pytest
from pumpd.spark.read.read_options import parse_read_options
from pumpd.spark.read.schema import COLUMNS


def test_read_options_are_checked_and_named() -> None:
    base = {"uri": "amqp://u:p@h/v"}
    with pytest.raises(ValueError, match="exactly one of the options stream"):
        parse_read_options(base)
    with pytest.raises(ValueError, match="exactly one of the options stream"):
        parse_read_options({**base, "stream": "s", "queue": "q"})
    with pytest.raises(ValueError, match="protocol: one of auto, stream, amqp, got 'kafka'"):
        parse_read_options({**base, "stream": "s", "protocol": "kafka"})
    with pytest.raises(ValueError, match="startingOffsets: one of first, last, next"):
        parse_read_options({**base, "stream": "s", "startingOffsets": "soon"})
    with pytest.raises(ValueError, match="maxRecordsPerTrigger: must be from 1 to 1000000000, got 0"):
        parse_read_options({**base, "stream": "s", "maxRecordsPerTrigger": "0"})
    with pytest.raises(ValueError, match=r"maxRecordsPerTrigger: at most 32767 when reading a "
                                         r"queue with the option prefetch .*, got 50000"):
        parse_read_options({**base, "queue": "q", "maxRecordsPerTrigger": "50000",
                            "prefetch": "100"})
    with pytest.raises(ValueError, match=r"prefetch: at most 32767 when reading a queue .*, "
                                         r"got 40000"):
        parse_read_options({**base, "queue": "q", "prefetch": "40000"})
    with pytest.raises(ValueError, match=r"maxRecordsPerTrigger: at most 1000000 when reading a "
                                         r"queue .*, got 1000001"):
        parse_read_options({**base, "queue": "q", "maxRecordsPerTrigger": "1000001"})
    assert parse_read_options({**base, "queue": "q", "maxRecordsPerTrigger": "1000000"}
                              ).max_records_per_trigger == 1_000_000
    with pytest.raises(ValueError, match=r"prefetch: at most 65535 \(basic.qos\), got 70000"):
        parse_read_options({**base, "stream": "s", "prefetch": "70000"})
    assert parse_read_options({**base, "stream": "s", "maxRecordsPerTrigger": "50000"}
                              ).max_records_per_trigger == 50000
    # a queue has no basic.qos unless the option prefetch sets one
    assert parse_read_options({**base, "queue": "q"}).prefetch == 0
    assert parse_read_options({**base, "queue": "q", "prefetch": "500"}).prefetch == 500
    assert parse_read_options({**base, "stream": "s"}).prefetch == 1000
    with pytest.raises(ValueError, match="unknown read option 'strem'"):
        parse_read_options({**base, "strem": "s"})
    o = parse_read_options({**base, "STREAM": "a, b", "startingoffsets": "earliest",
                            "password": "s3cr:t"})
    assert o.streams == ("a", "b") and o.starting == "first"
    assert o.uri == "amqp://u:s3cr%3At@h/v"
    assert "s3cr" not in repr(o)


# two messages as RabbitMQ 3.10 stores 0-9-1 publishes: a bare one, and one with every property
_BARE = b"\x00Sr\xc1!\x04\xa3\rx-routing-key\xa1\x01s\xa3\nx-exchange\xa1\x00\x00Su\xa0\x05plain"


_RICH = (b"\x00Sr\xc1l\n\xa3\rx-routing-key\xa1\x02rk\xa3\nx-exchange\xa1\x02ex\xa3\x10x-basic"
         b"-priorityP\x03\xa3\x15x-basic-delivery-modeP\x02\xa3\x12x-basic-expiration\xa1\x05"
         b"60000\x00Ss\xc07\r\xa1\x03mid\xa0\x05guest@@\xa1\x02rt\xa1\x03cid\xa3\ntext/plain"
         b"\xa3\x04gzip@\x83\x00\x00\x01\x8b\xcf\xe5h\x00@@@\x00St\xc1K\x0e\xa1\x0cx-basic-type"
         b"\xa1\x02ty\xa1\x0ex-basic-app-id\xa1\x03app\xa1\x01aT\x01\xa1\x01b\xa1\x01x\xa1\x01cV"
         b"\x01\xa1\x01d\x81\x00\x00\x01\x00\x00\x00\x00\x00\xa1\x01g\xa0\x02\x00\xff\x00Su\xa0"
         b"\x05hello")


def _chunk(messages: list[bytes]) -> bytes:
    """A chunk's entries as the streams protocol delivers them: each one size-prefixed."""
    return b"".join(len(m).to_bytes(4, "big") + m for m in messages)


def _rows(batches: list[Any]) -> list[tuple[Any, ...]]:
    out = []
    for batch in batches:
        cols = batch.to_pydict()
        for i in range(batch.num_rows):
            row = [cols[n][i] for n, _ in COLUMNS]
            h = row[5]
            row[5] = None if h is None else dict(h)
            out.append(tuple(row))
    return out


def test_amqp10_rows_and_the_chunk_columns_agree() -> None:
    from pumpd.spark.read.streams.amqp10_decode import row_of_amqp10
    from pumpd.spark.read.streams.chunk import ChunkColumns

    names = [n for n, _ in COLUMNS]
    rich = dict(zip(names, row_of_amqp10(_RICH, 7, "st"), strict=True))
    assert rich["body"] == b"hello" and (rich["exchange"], rich["routing_key"]) == ("ex", "rk")
    assert (rich["message_id"], rich["correlation_id"], rich["reply_to"], rich["user_id"]) == (
        "mid", "cid", "rt", "guest")
    assert (rich["content_type"], rich["content_encoding"], rich["expiration"]) == (
        "text/plain", "gzip", "60000")
    assert (rich["delivery_mode"], rich["priority"], rich["type"], rich["app_id"]) == (
        2, 3, "ty", "app")
    assert int(rich["timestamp"].timestamp()) == 1_700_000_000
    assert rich["headers"] == {"a": "1", "b": "x", "c": "true", "d": "1099511627776",
                               "g": "\x00\ufffd"}
    assert (rich["offset"], rich["stream"]) == (7, "st")
    # the same metadata with another body: the body changes, nothing else
    other = _BARE[:-5] + b"other"
    # a header holding the data section's descriptor bytes is not mistaken for the body
    tricky = _BARE.replace(b"\xa1\x01s", b"\xa1\x03\x00Su", 1).replace(b"\xc1!", b"\xc1#", 1)
    assert row_of_amqp10(tricky, 9, "st")[1] == "\x00Su"
    messages = [_BARE, _RICH, _BARE, _RICH, other, tricky, _BARE, tricky, other]
    # offsets 5 to 13 in two chunks; the range 6 to 12 skips the first and stops before the last
    cols = ChunkColumns("st", 6, 13)
    cols.add_chunk(b"\0" * 3 + _chunk(messages[:4]), 5, 4, pos=3)
    assert not cols.done
    cols.add_chunk(_chunk(messages[4:]), 9, 5)
    assert cols.done and len(cols) == 7
    expected = [row_of_amqp10(m, 5 + i, "st") for i, m in enumerate(messages)][1:8]
    assert _rows(cols.take()) == expected
    # the next batch begins afresh
    cols = ChunkColumns("st", 0, 2)
    cols.add_chunk(_chunk([_BARE, _BARE, _BARE]), 0, 3)
    assert cols.done and _rows(cols.take()) == [row_of_amqp10(_BARE, i, "st") for i in (0, 1)]


def test_a_sub_entry_batch_is_read_plain_and_gzipped() -> None:
    import gzip

    from pumpd.spark.read.streams.amqp10_decode import row_of_amqp10
    from pumpd.spark.read.streams.chunk import ChunkColumns

    records = _chunk([_BARE, _RICH, _BARE])
    for codec, stored in ((0, records), (1, gzip.compress(records))):
        entry = (bytes([0x80 | codec << 4]) + (3).to_bytes(2, "big")
                 + len(records).to_bytes(4, "big") + len(stored).to_bytes(4, "big") + stored)
        cols = ChunkColumns("st", 1, 10)
        cols.add_chunk(entry + _chunk([_RICH]), 0, 2)
        assert _rows(cols.take()) == [row_of_amqp10(m, i + 1, "st")
                                      for i, m in enumerate([_RICH, _BARE, _RICH])]



def _deliveries(n: int, size: int = 10) -> list[Any]:
    return [(i + 1, False, b"ex", f"rk.{i}".encode(), b"\x00\x00", bytes([i % 256]) * size)
            for i in range(n)]


def test_a_queue_micro_batch_travels_in_partitions_within_their_bound() -> None:
    """The rows a micro-batch hands to its read tasks come out of the partitions as they went
    in, in order, each partition within the bound (a row larger than it alone)."""
    pytest.importorskip("pyspark")
    pa = pytest.importorskip("pyarrow")
    import pickle

    from pumpd.spark.read.arrow import deliveries_batch
    from pumpd.spark.read.queue.queue_reader import arrow_parts, joined, rows_of

    batch = deliveries_batch(_deliveries(1000, 1000), "q")
    parts = arrow_parts(batch, 100_000)
    assert len(parts) > 1 and all(len(p.arrow) < 2 * 100_000 for p in parts)
    # joined into two read tasks, or more where the bytes need it; the rows come out the same
    for tasks, most, expected in ((2, 10**9, 2), (1, 10**9, 1), (100, 10**9, len(parts)),
                                  (2, 1, len(parts))):
        together = joined(parts, tasks, most)
        assert len(together) == expected
        again = pa.Table.from_batches([b for p in together for b in rows_of(p)])
        assert again.to_pylist() == pa.Table.from_batches([batch]).to_pylist()
    assert joined([], 2) == [] and joined(parts[:1], 2) == parts[:1]
    back = [pickle.loads(pickle.dumps(p)) for p in parts]  # as Spark sends them to a task
    rows = pa.Table.from_batches([b for p in back for b in rows_of(p)])
    assert rows.to_pylist() == pa.Table.from_batches([batch]).to_pylist()
    assert rows.schema == batch.schema
    # one row over the bound: a partition of its own, not an empty one
    assert [sum(b.num_rows for b in rows_of(p))
            for p in arrow_parts(deliveries_batch(_deliveries(3, 50_000), "q"), 1_000)] == [1, 1, 1]
    assert len(arrow_parts(deliveries_batch(_deliveries(5), "q"))) == 1
    # routing keys and exchanges are checked as UTF-8 a column at a time; invalid ones replaced
    odd = deliveries_batch([(1, True, b"ex\xff", b"r\xc3", b"\x00\x00", b"x"),
                            (2, False, b"", "žluť".encode(), b"\x00\x00", b"y")], "q")
    assert odd.column("routing_key").to_pylist() == ["r\ufffd", "žluť"]
    assert odd.column("exchange").to_pylist() == ["ex\ufffd", ""]
    assert odd.column("stream").to_pylist() == ["q", "q"]
    assert odd.column("redelivered").to_pylist() == [True, False]


def test_a_queue_micro_batch_takes_the_rest_of_the_backlog_then_ends_at_a_pause() -> None:
    """Within the backlog counted at the start, a micro-batch's goal is the backlog's rest (up
    to the bound) and only a long pause ends it early; past the backlog, the bound and the
    short pause."""
    pytest.importorskip("pyspark")
    from pumpd.spark.read.queue.queue_reader import _PAUSE, BACKLOG_PAUSE, batch_goal

    assert batch_goal(250_000, 200_000, 0) == (200_000, BACKLOG_PAUSE)
    assert batch_goal(100_000, 1_000_000, 950_000) == (50_000, BACKLOG_PAUSE)
    assert batch_goal(100_000, 1_000_000, 200_000) == (100_000, BACKLOG_PAUSE)
    assert batch_goal(100_000, 1_000, 1_000) == (100_000, _PAUSE)
    assert batch_goal(100_000, 0, 0) == (100_000, _PAUSE)
    assert batch_goal(100_000, 10, 20) == (100_000, _PAUSE)  # more came than was counted
    assert BACKLOG_PAUSE > _PAUSE


def test_the_queue_reader_pickles_without_its_consumer_and_replays_nothing() -> None:
    """A read task gets the reader without the driver's connection or batches; a range Spark
    replays from its checkpoint (its messages requeued when the old connection closed) reads
    nothing; a range at its own end only says where Spark restarted."""
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    import pickle

    from pumpd.spark.read.queue.queue_reader import PumpdQueueReader
    from pumpd.spark.read.read_options import QUEUE_BATCH_DEFAULT

    reader = PumpdQueueReader(parse_read_options({"uri": "amqp://u:p@h/v", "queue": "q"}))
    assert (reader.batch_max, reader.qos) == (QUEUE_BATCH_DEFAULT, 0)
    reader._batches[5] = (0, [], 5)
    copy = pickle.loads(pickle.dumps(reader))
    assert copy._batches == {} and copy._consumer is None and copy.batch_max == QUEUE_BATCH_DEFAULT
    replayed = reader.partitions({"delivered": 100}, {"delivered": 120})
    assert [list(reader.read(p)) for p in replayed] == [[]]
    assert reader.partitions({"delivered": 120}, {"delivered": 120}) == []
    assert reader._delivered == 120
    bounded = PumpdQueueReader(parse_read_options({"uri": "amqp://u:p@h/v", "queue": "q",
                                                   "prefetch": "300"}))
    assert (bounded.batch_max, bounded.qos) == (300, 600)
