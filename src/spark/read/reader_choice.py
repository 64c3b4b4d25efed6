"""Which reader Spark gets for ``format("pumpd")``: the options ``stream`` / ``queue`` decide.

:class:`~pumpd.spark.source.PumpdDataSource` calls these from its ``reader`` /
``streamReader`` methods: a stream's reader or a queue's (see
:mod:`pumpd.spark.read.queue.queue_reader`). Imports pyspark.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .read_options import ReadOptions, parse_read_options


def _options(options: Mapping[str, Any]) -> ReadOptions:
    """Parsed options with ``protocol`` decided (``auto``: the streams protocol when its port
    answers) and a super stream's partitions found (the streams protocol's ``partitions``:
    the streams bound to its exchange, in their ``x-stream-partition-order``), once, when the
    query starts: a partition added later is read after a restart."""
    from .streams.protocol import streams_port_open, super_stream_partitions

    parsed = parse_read_options(options)
    if parsed.queue:
        return replace(parsed, protocol="amqp")
    port_open = streams_port_open(parsed)
    if parsed.protocol == "auto":
        parsed = replace(parsed, protocol="stream" if port_open else "amqp")
    elif parsed.protocol == "stream" and not port_open:
        raise ValueError(f"pumpd option protocol=stream: nothing answers on the streams port "
                         f"{parsed.stream_port} (option streamPort) of the URI's host")
    if parsed.super_stream:
        if not port_open:
            raise ValueError(f"pumpd option superStream: its partitions are asked over the "
                             f"streams protocol, and nothing answers on the streams port "
                             f"{parsed.stream_port} (option streamPort) of the URI's host")
        parsed = replace(parsed, streams=tuple(super_stream_partitions(parsed)))
    return parsed


def batch_reader(options: Mapping[str, Any]) -> Any:
    from .streams.stream_reader import PumpdBatchReader

    parsed = _options(options)
    if parsed.queue:
        raise ValueError("pumpd: a queue cannot be read in a batch (reading removes what it "
                         "reads): use spark.readStream with option queue")
    return PumpdBatchReader(parsed)


def stream_reader(options: Mapping[str, Any]) -> Any:
    parsed = _options(options)
    if parsed.queue:
        from .queue.queue_reader import PumpdQueueReader

        return PumpdQueueReader(parsed)
    from .streams.stream_reader import PumpdStreamReader

    return PumpdStreamReader(parsed)
