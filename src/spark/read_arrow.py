"""Rows into Arrow record batches for Spark: a read task that yields ``pyarrow.RecordBatch``es
skips Spark's conversion of every Python tuple (the larger part of a task's time with tuples).

One schema, :data:`pumpd.spark.read_schema.COLUMNS` in Arrow types; rows are gathered
``BATCH_ROWS`` at a time and turned into columns. Needs pyarrow (the ``spark`` extra).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

from .read_schema import COLUMNS

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
