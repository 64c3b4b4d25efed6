"""AMQP 0-9-1 deliveries into Arrow record batches for Spark: a reader that yields
``pyarrow.RecordBatch``es skips Spark's conversion of every Python tuple (the larger part of a
task's time with tuples).

One schema, :data:`pumpd.spark.read.schema.COLUMNS` in Arrow types; the deliveries of the
queue reader and of a stream read over AMQP go straight into columns (the streams protocol's
chunks have their own: :mod:`pumpd.spark.read.streams.chunk`). Needs pyarrow (the ``spark`` extra).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pika.spec

from ...dataplane.api import Delivery
from .schema import COLUMNS, PLAIN_PROPERTIES, headers_map


def arrow_schema() -> Any:
    import pyarrow as pa

    kinds = {"binary": pa.binary(), "string": pa.string(), "int": pa.int32(),
             "bigint": pa.int64(), "boolean": pa.bool_(),
             "timestamp": pa.timestamp("us", tz="UTC"),
             "map<string,string>": pa.map_(pa.string(), pa.string())}
    return pa.schema([pa.field(name, kinds[kind]) for name, kind in COLUMNS])


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


def properties_of(deliveries: Sequence[Delivery]) -> list[Any] | None:
    """pika's decoding of each delivery's properties; None when no delivery has any (their
    columns are then all null, with nothing decoded)."""
    if not any(d[4] != _NO_PROPERTIES for d in deliveries):
        return None
    seen: dict[bytes, Any] = {_NO_PROPERTIES: pika.spec.BasicProperties()}
    return [_decoded(d[4], seen) for d in deliveries]


def _text(values: list[bytes]) -> Any:
    """A string column of UTF-8 bytes, checked at once by Arrow; with invalid UTF-8 in it,
    decoded a value at a time, each invalid sequence replaced (U+FFFD)."""
    import pyarrow as pa

    try:
        return pa.array(values, pa.binary()).cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([v.decode("utf-8", "replace") for v in values], pa.string())


def deliveries_batch(deliveries: Sequence[Delivery], source: str,
                     props: list[Any] | None = None,
                     offsets: Sequence[int] | None = None) -> Any:
    """One record batch of deliveries as a delivery reader hands them out, built a column at a
    time: no tuple per row, and no conversion of each one by Spark. ``props``: their
    :func:`properties_of` when the caller has it already; ``offsets``: a stream's offsets, for
    the ``offset`` column (else null, as for a queue)."""
    import pyarrow as pa

    n = len(deliveries)
    if props is None:
        props = properties_of(deliveries)
    columns: dict[str, Any] = {
        "body": pa.array([d[5] for d in deliveries], pa.binary()),
        "routing_key": _text([d[3] for d in deliveries]),
        "exchange": _text([d[2] for d in deliveries]),
        "stream": pa.repeat(pa.scalar(source, pa.string()), n),
        "redelivered": pa.array([d[1] for d in deliveries], pa.bool_()),
    }
    values: dict[str, list[Any]] = {}
    if offsets is not None:
        values["offset"] = list(offsets)
    if props is not None:
        # the broker's x-stream-offset header is the offset column, not a header
        values["headers"] = [None if (h := headers_map(p.headers)) is None else list(h.items())
                             for p in props]
        # AMQP timestamps are whole seconds; the column is microseconds since the epoch
        values["timestamp"] = [None if p.timestamp is None else p.timestamp * 1_000_000
                               for p in props]
        for name in (*PLAIN_PROPERTIES, "delivery_mode", "priority"):
            values[name] = [getattr(p, name) for p in props]
    schema = arrow_schema()
    for f in schema:
        if f.name in values:
            columns[f.name] = pa.array(values[f.name], type=f.type)
    return pa.RecordBatch.from_arrays(
        [columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in schema],
        schema=schema)
