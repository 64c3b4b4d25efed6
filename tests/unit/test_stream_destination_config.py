"""A stream destination in the configuration: "protocol": "stream" (dest-protocol in the dynamic
form) with AMQP URIs, the stream, its port and the publishing ids; every bad clause refused by
name. Pure parsing: no broker."""

from __future__ import annotations

from typing import Any

import pytest
from pumpd.config.model import Protocol
from pumpd.config.parse import ConfigError, parse_config, shovel_to_json

STATIC: dict[str, Any] = {
    "sources": {"broker": "amqp://src"},
    "destinations": {"protocol": "stream", "broker": "amqps://u:secret@dst/vh", "stream": "out"},
    "queue": "in", "consumer_args": {"x-stream-offset": "first"},
}
DYNAMIC: dict[str, Any] = {"src-uri": "amqp://src", "src-queue": "in", "dest-protocol": "stream",
                           "dest-uri": "amqp://dst", "dest-stream": "out",
                           "dest-stream-port": 6000, "dest-publishing-id": "message_id"}


def _one(shovel: dict[str, Any]) -> Any:
    return parse_config({"shovels": {"s": shovel}}).shovels["s"]


def test_a_static_stream_destination_is_read_and_written_back() -> None:
    cfg = _one({**STATIC, "publishing_id": "header:seq"})
    dest = cfg.destination
    assert (dest.protocol, dest.stream, dest.stream_port) == (Protocol.STREAM, "out", None)
    assert dest.brokers[0].scheme == "amqps" and dest.brokers[0].vhost == "vh"
    assert cfg.publishing_id == "header:seq"
    assert "secret" not in dest.describe() and "stream 'out'" in dest.describe()
    assert _one(shovel_to_json(cfg)) == cfg


def test_a_super_stream_destination_is_read_in_both_forms() -> None:
    static = _one({**STATIC, "destinations": {"protocol": "stream", "broker": "amqp://d",
                                              "super_stream": "parts"}})
    dynamic = _one({**{k: v for k, v in DYNAMIC.items() if k != "dest-stream"},
                    "dest-super-stream": "parts"})
    for cfg in (static, dynamic):
        assert (cfg.destination.stream, cfg.destination.super_stream) == (None, "parts")
    assert _one(shovel_to_json(static)) == static


def test_a_dynamic_stream_destination_is_read() -> None:
    cfg = _one(DYNAMIC)
    assert (cfg.destination.protocol, cfg.destination.stream, cfg.destination.stream_port,
            cfg.publishing_id) == (Protocol.STREAM, "out", 6000, "message_id")


@pytest.mark.parametrize(("shovel", "where", "message"), [
    ({**STATIC, "destinations": {"protocol": "stream", "broker": "amqp://d"}},
     "destinations.stream", "give exactly one of 'stream' (a stream) and 'super_stream'"),
    ({**STATIC, "destinations": {"protocol": "stream", "broker": "amqp://d", "stream": "s",
                                 "super_stream": "p"}},
     "destinations.stream", "give exactly one of"),
    ({**STATIC, "publishing_id": "offset"}, "publishing_id", "'offset' is not a publishing id"),
    ({**STATIC, "publishing_id": "header:"}, "publishing_id", "is not a publishing id"),
    ({**STATIC, "add_forward_headers": True}, "add_forward_headers",
     "a stream destination adds no headers"),
    ({**STATIC, "publish_fields": {"exchange": "x"}}, "publish_fields",
     "belongs to an AMQP 0-9-1 destination, and this destination's protocol is stream"),
    ({**STATIC, "destinations": {**STATIC["destinations"], "declarations": ["queue.declare"]}},
     "destinations.declarations", "belongs to an AMQP 0-9-1 destination"),
    ({**STATIC, "destinations": {**STATIC["destinations"], "stream_port": 70000}},
     "destinations.stream_port", "65535"),
    ({**STATIC, "sources": {"protocol": "stream", "broker": "amqp://s", "stream": "x"}},
     "sources.protocol", "a stream is a destination only"),
    ({"src-uri": "amqp://s", "src-queue": "in", "dest-uri": "amqp://d", "dest-stream": "out"},
     "dest-stream", "belongs to a stream destination, and this destination's protocol is "
     "amqp091"),
    ({**DYNAMIC, "dest-stream": ""}, "dest-stream", "must not be empty"),
    ({k: v for k, v in DYNAMIC.items() if k != "dest-stream"}, "dest-stream",
     "give exactly one of 'dest-stream' (a stream) and 'dest-super-stream'"),
    ({**DYNAMIC, "src-protocol": "stream"}, "src-protocol", "a stream is a destination only"),
    ({**STATIC, "source_stream_port": 0}, "source_stream_port", "must be a positive integer"),
    ({**{k: v for k, v in DYNAMIC.items() if k != "src-queue"}, "src-protocol": "amqp10",
      "src-address": "/queues/in", "src-stream-port": 6001},
     "src-stream-port", "belongs to an AMQP 0-9-1 source"),
])
def test_a_bad_clause_is_refused_by_name(shovel: dict[str, Any], where: str,
                                         message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _one(shovel)
    assert where in str(info.value) and message in str(info.value), str(info.value)
    assert "secret" not in str(info.value)


def test_source_offset_ids_are_refused_for_a_queue_source_and_taken_for_a_declared_stream() -> None:
    queue_source = {k: v for k, v in STATIC.items() if k != "consumer_args"}
    with pytest.raises(ConfigError, match=r"publishing_id.*needs a stream source"):
        _one({**queue_source, "publishing_id": "source-offset"})
    declared = _one({**queue_source, "publishing_id": "source-offset",
                     "sources": {"broker": "amqp://src", "declarations": [
                         {"queue.declare": {"queue": "in", "durable": True,
                                            "arguments": {"x-queue-type": "stream"}}}]}})
    assert declared.publishing_id == "source-offset"


def test_more_than_one_worker_on_a_stream_source_with_offset_ids_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"workers.*every worker every message"):
        _one({**STATIC, "workers": 2})
    assert _one({**STATIC, "workers": 2, "publishing_id": "none"}).workers == 2


def test_a_stream_sources_streams_port_is_read_in_both_forms_and_written_back() -> None:
    """The port a stream source's lag is read on: source_stream_port / src-stream-port, on the
    source side (None: 5552, or 5551 with amqps)."""
    static = _one({**STATIC, "source_stream_port": 6001})
    dynamic = _one({**DYNAMIC, "src-stream-port": 6001})
    assert static.source.stream_port == dynamic.source.stream_port == 6001
    assert _one(STATIC).source.stream_port is None
    written = shovel_to_json(static)
    assert written["source_stream_port"] == 6001
    assert _one(written).source.stream_port == 6001
