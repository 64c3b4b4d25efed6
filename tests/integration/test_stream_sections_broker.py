"""The stream reader's column decoder (native and reference) on the chunks a real RabbitMQ
stores: AMQP 0-9-1 messages with every basic property and headers of every field type, read
back over the streams protocol (no Spark) and decoded into columns, row for row what the
per-message decoder gives each stored message."""

from __future__ import annotations

import datetime as dt
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pumpd import Publisher
from pumpd.dataplane import stream_sections_ref
from pumpd.spark.read.read_options import parse_read_options
from pumpd.spark.read.schema import COLUMNS
from pumpd.spark.read.streams.amqp10_decode import row_of_amqp10
from pumpd.spark.read.streams.chunk import ChunkColumns
from pumpd.spark.read.streams.protocol import connect
from pumpd.spark.read.streams.wire import FIRST
from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import blocking_connection
from tests.support.impls import IMPLEMENTATIONS, native

pytest.importorskip("pyarrow")

HEADERS: list[dict[str, Any]] = [
    {},
    {"tenant": "acme", "seq": 7, "ok": True, "score": 0.1},
    {"neg": -(2**40), "small": 3, "no": False, "none": None, "raw": b"\xff\x00bytes",
     "at": dt.datetime(2023, 11, 14, 22, 13, 20), "utf": "\u00e9t\u00e9 \U0001F600",
     "nested": {"a": 1}, "list": [1, "two"]},
]


@pytest.fixture(scope="module")
def node() -> Iterator[LocalNode]:
    with LocalNode(plugins=["rabbitmq_stream"]) as n:
        yield n


def _published(node: LocalNode, stream: str) -> int:
    """Messages with none, some and all the basic properties, published with pumpd's Publisher
    (its field tables carry floats, which pika's do not)."""
    with blocking_connection(node.uri()) as c:
        c.channel().queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    messages = []
    for i, headers in enumerate(HEADERS * 3):
        props = [None,
                 {"headers": headers or None, "message_id": f"id-{i}"},
                 {"content_type": "application/json", "content_encoding": "gzip",
                  "headers": headers or None, "delivery_mode": 2, "priority": i % 10,
                  "correlation_id": str(uuid.uuid4()), "reply_to": "replies",
                  "expiration": "60000", "message_id": f"id-{i}", "timestamp": 1_700_000_000 + i,
                  "type": "order", "user_id": "guest", "app_id": "shop"}][i % 3]
        messages.append((f"body {i}".encode() * (i + 1), stream, props))
    with Publisher(node.uri(), window=100) as p:
        p.publish_messages(messages)
        p.flush()
    return len(messages)


def _entries(data: bytes, pos: int, entries: int) -> list[bytes]:
    out = []
    for _ in range(entries):
        (size,) = struct.unpack_from(">I", data, pos)
        assert not size & 0x80000000  # AMQP 0-9-1 publishes: no sub-entry batches
        out.append(data[pos + 4:pos + 4 + size])
        pos += 4 + size
    return out


def _rows(batches: list[Any]) -> list[tuple[Any, ...]]:
    out = []
    for batch in batches:
        batch.validate(full=True)
        cols = batch.to_pydict()
        out += [tuple(cols[n][i] for n, _ in COLUMNS) for i in range(batch.num_rows)]
    return out


def test_stored_messages_decode_as_row_of_amqp10(node: LocalNode) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    n = _published(node, stream)
    options = parse_read_options({"uri": node.uri(), "stream": stream, "protocol": "stream",
                                  "streamPort": str(node.stream_port)})
    columns = {impl: ChunkColumns(stream, 0, n, sections=(
        stream_sections_ref.StreamSections() if impl == "reference"
        else native().StreamSections())) for impl in IMPLEMENTATIONS}
    raw: list[bytes] = []
    with connect(options, "pumpd test sections", timeout=20) as conn:
        conn.subscribe(stream, FIRST, credit=10)
        while len(raw) < n:
            c = conn.chunk()
            conn.credit(1)
            raw += _entries(c.frame, c.data_at, c.entries)
            for cols in columns.values():
                cols.add_chunk(c.frame, c.first, c.entries, c.data_at)
    want = []
    for i, m in enumerate(raw):
        row = list(row_of_amqp10(m, i, stream))
        row[5] = None if row[5] is None else list(row[5].items())
        want.append(tuple(row))
    for impl, cols in columns.items():
        assert cols.done
        assert _rows(cols.take()) == want, impl
    # what the broker kept of the richest message, as the columns have it
    rich = dict(zip([c for c, _ in COLUMNS], want[8], strict=True))
    assert (rich["message_id"], rich["type"], rich["app_id"], rich["user_id"]) == (
        "id-8", "order", "shop", "guest")
    # nested tables and arrays are not kept by RabbitMQ 3.10; a timestamp is in milliseconds
    assert rich["headers"] == [("neg", "-1099511627776"), ("small", "3"), ("no", "false"),
                               ("none", "null"), ("raw", "\ufffd\x00bytes"),
                               ("at", "1700000000000"), ("utf", "\u00e9t\u00e9 \U0001F600")]
    assert want[4][5] == [("tenant", "acme"), ("seq", "7"), ("ok", "true"), ("score", "0.1")]
