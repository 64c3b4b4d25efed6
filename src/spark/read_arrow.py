"""Rows into Arrow record batches for Spark: a read task that yields ``pyarrow.RecordBatch``es
skips Spark's conversion of every Python tuple (the larger part of a task's time with tuples).

One schema, :data:`pumpd.spark.read_schema.COLUMNS` in Arrow types; rows are gathered
``BATCH_ROWS`` at a time and turned into columns, and a queue reader's deliveries go straight
into columns. Needs pyarrow (the ``spark`` extra).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any

import pika.spec

from ..dataplane.api import Delivery
from .read_schema import COLUMNS, PLAIN_PROPERTIES, headers_map

BATCH_ROWS = 8192


def arrow_schema() -> Any:
    import pyarrow as pa

    kinds = {"binary": pa.binary(), "string": pa.string(), "int": pa.int32(),
             "bigint": pa.int64(), "boolean": pa.bool_(),
             "timestamp": pa.timestamp("us", tz="UTC"),
             "map<string,string>": pa.map_(pa.string(), pa.string())}
    return pa.schema([pa.field(name, kinds[kind]) for name, kind in COLUMNS])


def batches(rows: Iterable[tuple[Any, ...]], size: int = BATCH_ROWS) -> Iterator[Any]:
    """Record batches of ``size`` rows at most."""
    import pyarrow as pa

    schema = arrow_schema()
    it = iter(rows)
    while chunk := list(islice(it, size)):
        columns = list(zip(*chunk, strict=True))
        arrays = []
        for field, values in zip(schema, columns, strict=True):
            if pa.types.is_map(field.type):  # Arrow maps from (key, value) lists
                arrays.append(pa.array([None if v is None else list(v.items()) for v in values],
                                       type=field.type))
            else:
                arrays.append(pa.array(values, type=field.type))
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


# a content header's property list with no property set: the flags word alone
_NO_PROPERTIES = b"\x00\x00"


def _decoded(raw: bytes, seen: dict[bytes, Any]) -> Any:
    """pika's decoding of a raw property list, once per distinct list in a batch (the messages
    of one producer often share theirs)."""
    props = seen.get(raw)
    if props is None:
        props = seen[raw] = pika.spec.BasicProperties()
        props.decode(raw)
    return props


def deliveries_batch(deliveries: Sequence[Delivery], source: str) -> Any:
    """One record batch of queue deliveries as a delivery reader hands them out, built a column
    at a time: the same values :func:`~pumpd.spark.read_schema.row_of` gives for pika's
    objects, without a tuple per row or Spark's conversion of each tuple."""
    import pyarrow as pa

    n = len(deliveries)
    values: dict[str, list[Any]] = {
        "body": [d[5] for d in deliveries],
        "routing_key": [d[3].decode("utf-8", "replace") for d in deliveries],
        "exchange": [d[2].decode("utf-8", "replace") for d in deliveries],
        "stream": [source] * n,
        "redelivered": [d[1] for d in deliveries],
    }
    # messages without properties (common for bulk traffic): those columns are all null
    if any(d[4] != _NO_PROPERTIES for d in deliveries):
        seen: dict[bytes, Any] = {_NO_PROPERTIES: pika.spec.BasicProperties()}
        props = [_decoded(d[4], seen) for d in deliveries]
        values["headers"] = [None if (h := headers_map(p.headers)) is None else list(h.items())
                             for p in props]
        # AMQP timestamps are whole seconds; the column is microseconds since the epoch
        values["timestamp"] = [None if p.timestamp is None else p.timestamp * 1_000_000
                               for p in props]
        for name in (*PLAIN_PROPERTIES, "delivery_mode", "priority"):
            values[name] = [getattr(p, name) for p in props]
    schema = arrow_schema()
    return pa.RecordBatch.from_arrays(
        [pa.array(values[f.name], type=f.type) if f.name in values else pa.nulls(n, f.type)
         for f in schema], schema=schema)
