"""The RabbitMQ → Spark → RabbitMQ pipeline (pumpd.spark.pipeline) SIGKILLed mid-way, with its
JVM, and restarted from its checkpoint: nothing lost, duplicates carry their original's id."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pumpd.spark.demos import pipeline_demo
from pumpd.testing.localnode import LocalNode


@pytest.mark.slow
def test_pipeline_killed_and_restarted_loses_nothing(tmp_path: Path) -> None:
    with LocalNode(["rabbitmq_stream"]) as node:
        uri = node.uri()
        pipeline_demo.prepare(uri, 6000)
        out = pipeline_demo.kill_and_restart(uri, 6000, str(tmp_path / "cp"), per_trigger=600,
                                             stream_port=node.stream_port)
    assert out.expected == len(pipeline_demo.expected(6000)) == 4440
    assert (out.lost, out.unexpected, out.duplicates_differ) == (0, 0, 0)
    assert out.distinct == out.expected
    assert out.delivered == out.expected + out.duplicates
