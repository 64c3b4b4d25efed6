"""A streaming query in a process of its own, for a test that SIGKILLs it with its JVM: a stream
read with pumpd's reader and written unchanged to another stream (option ``stream``). The second
partition of each micro-batch is slowed down, so that for a while the batch is written in part.

``python -m tests.support.stream_write_query URI STREAM_PORT SOURCE OUT CHECKPOINT
[--available-now]``: runs until killed, or with ``--available-now`` until the source's messages
at start are written, then exits 0 (1 when the query failed).
"""

from __future__ import annotations

import os
import sys
from typing import Any


def _slow_second(column: Any) -> Any:
    from pyspark.sql.functions import udf

    @udf("binary")
    def slow(body: bytes) -> bytes:
        import time

        from pyspark import TaskContext

        if TaskContext.get().partitionId() == 1:
            time.sleep(0.003)
        return body

    return slow(column)


def main(argv: list[str]) -> int:
    uri, stream_port, source, out, checkpoint = argv[:5]
    available_now = "--available-now" in argv[5:]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pumpd.spark import register
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("pumpd-stream-write-query")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    df = (spark.readStream.format("pumpd").option("uri", uri).option("stream", source)
          .option("streamPort", stream_port).option("startingOffsets", "first")
          .option("minPartitions", 2).option("maxRecordsPerTrigger", 1000).load())
    writer = (df.select(_slow_second(df.body).alias("body")).writeStream.format("pumpd").option("uri", uri)
              .option("stream", out).option("streamPort", stream_port)
              .option("checkpointLocation", checkpoint))
    writer = (writer.trigger(availableNow=True) if available_now
              else writer.trigger(processingTime="100 milliseconds"))
    query = writer.start()
    query.awaitTermination()
    failed = query.exception()
    spark.stop()
    if failed is not None:
        print(f"the query failed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
