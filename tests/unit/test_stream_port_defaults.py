"""The streams port defaults to 5551 for ``amqps`` and 5552 for ``amqp``, unless ``streamPort``
is given."""

from __future__ import annotations

from pumpd.spark.read.read_options import parse_read_options


def test_the_stream_port_defaults_to_5551_for_amqps_and_5552_for_amqp() -> None:
    assert parse_read_options({"uri": "amqps://h", "stream": "s"}).stream_port == 5551
    assert parse_read_options({"uri": "amqp://h", "stream": "s"}).stream_port == 5552
    assert parse_read_options({"uri": "amqps://h", "stream": "s",
                               "streamPort": "6000"}).stream_port == 6000

