"""The PySpark data source ``pumpd`` (Spark >= 4.0's Python Data Source API); imports pyspark.

The options choose the side: a write goes to :mod:`pumpd.spark.write.writers`, a read to the
reader :mod:`pumpd.spark.read.reader_choice` picks by the options ``stream`` / ``queue``. Each
side is imported only when used: Spark starts a Python process for each streaming query's
reader, and a reader's start-up should not pay for the publisher's imports.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from .redacted import redacting

if TYPE_CHECKING:
    from .write.writers import PumpdStreamWriter, PumpdWriter


class PumpdDataSource(DataSource):  # type: ignore[misc]
    """``df.write.format("pumpd")``: see docs/spark.md for options and columns."""

    @classmethod
    def name(cls) -> str:
        return "pumpd"

    @redacting
    def writer(self, schema: StructType, overwrite: bool) -> PumpdWriter:
        from .write.writers import PumpdWriter, prepared

        return PumpdWriter(prepared(dict(self.options), schema, overwrite),
                           uuid.uuid4().hex[:16])

    @redacting
    def streamWriter(self, schema: StructType, overwrite: bool) -> PumpdStreamWriter:
        from .write.writers import PumpdStreamWriter, prepared

        options = prepared(dict(self.options), schema, overwrite)
        if options.producer_name:
            raise ValueError("pumpd option producerName: only for a batch write (a streaming "
                             "write's producers are named by the query id, kept in the "
                             "checkpoint)")
        return PumpdStreamWriter(options)

    # -- reading: the options stream / queue choose the reader (pumpd.spark.read.reader_choice)

    def schema(self) -> str:
        from .read.schema import SCHEMA_DDL

        return SCHEMA_DDL

    def reader(self, schema: StructType) -> Any:
        from .read.reader_choice import batch_reader

        return batch_reader(dict(self.options))

    def streamReader(self, schema: StructType) -> Any:
        from .read.reader_choice import stream_reader

        return stream_reader(dict(self.options))

