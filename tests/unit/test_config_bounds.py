"""Every count, duration, length and nesting depth of a configuration is bounded, and a value
past its bound is a ConfigError naming the bound. Pure parsing: no broker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pumpd.config import limits
from pumpd.config.parse import ConfigError, load_config, parse_config
from pumpd.supervisor import definitions as daemon_config

MINIMAL: dict[str, Any] = {
    "sources": {"broker": "amqp://src"},
    "destinations": {"broker": "amqp://dst"},
    "queue": "work",
}
DYN_MINIMAL: dict[str, Any] = {"src-uri": "amqp://src", "src-queue": "in", "dest-uri": "amqp://dst"}


def nested(depth: int, leaf: Any = 1) -> Any:
    """``{"a": {"a": ... leaf}}`` with ``depth`` objects."""
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def nested_list(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def error(definition: Any, name: str = "orders") -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config({"shovels": {name: definition}}, source="config.json")
    return info.value


OVER_BOUND = [
    ({"workers": 100_000_000}, "workers", "must be at most 256, got 100000000"),
    ({"workers": 257}, "workers", "must be at most 256"),
    ({"prefetch_count": 65536}, "prefetch_count", "must be at most 65535"),
    ({"reconnect_delay": 86_401}, "reconnect_delay", "must be at most 86400 seconds"),
    ({"reconnect_delay": 10**400}, "reconnect_delay", "must be a non-negative number"),
    ({"delete_after": 2**63}, "delete_after", f"must be at most {2**63 - 1} messages"),
    ({"delete_after_duration": 10**5000}, "delete_after_duration",
     "must be at most 315360000 seconds, got an integer of 16610 bits"),
    ({"source_read_hold_ms": 1001}, "source_read_hold_ms", "must be at most 1000"),
    ({"stall_timeout": 86_401}, "stall_timeout", "must be at most 86400 seconds"),
    ({"queue": "q" * 256}, "queue", "must be at most 255 bytes in UTF-8, got 256"),
    ({"queue": "é" * 128}, "queue", "must be at most 255 bytes in UTF-8, got 256"),
    ({"consumer_name": "t" * 256}, "consumer_name", "at most 255 bytes"),
    ({"publish_fields": {"routing_key": "k" * 300}}, "publish_fields.routing_key",
     "at most 255 bytes"),
    ({"undeliverable": {"park_queue": "p" * 256}}, "undeliverable.park_queue", "at most 255"),
    ({"sources": {"brokers": ["amqp://h"] * 65}}, "sources.brokers", "at most 64 URIs, got 65"),
    ({"sources": {"broker": "amqp://h/" + "v" * 9000}}, "sources.broker",
     "a URI of at most 8192 characters"),
    ({"destinations": {"broker": "amqp://d", "declarations": ["exchange.declare"] * 257}},
     "destinations.declarations", "at most 256 declarations, got 257"),
    ({"publish_properties": {"headers": {f"h{i}": i for i in range(1025)}}},
     "publish_properties.headers", "more than 1024 values in one table"),
    ({"publish_properties": {"headers": {"h": "x" * 65_537}}}, "publish_properties.headers",
     "at h: a string of 65537 bytes: at most 65536"),
    ({"publish_properties": {"headers": {"k" * 256: 1}}}, "publish_properties.headers",
     "must be a string of at most 255 bytes"),
    ({"consumer_args": nested(33)}, "consumer_args",
     "at " + ".".join(["a"] * 32) + ": tables and arrays nested more than 32 deep"),
    ({"publish_properties": {"headers": {"l": nested_list(32)}}}, "publish_properties.headers",
     "nested more than 32 deep"),
]


@pytest.mark.parametrize("changes,clause,fragment", OVER_BOUND)
def test_every_bound_is_refused_with_the_bound_in_the_error(changes: dict[str, Any], clause: str,
                                                             fragment: str) -> None:
    e = error({**MINIMAL, **changes})
    assert (e.shovel, e.clause) == ("orders", clause)
    assert fragment in e.message
    assert len(str(e)) < 400 and "\n" not in str(e)  # one line


def test_the_bounds_themselves_are_accepted() -> None:
    table_at_depth = nested(31)  # the table itself is the 32nd level
    cfg = parse_config({"shovels": {"s": {
        **MINIMAL, "workers": 256, "prefetch_count": 65535, "reconnect_delay": 86_400,
        "delete_after": 2**63 - 1, "queue": "q" * 255,
        "consumer_args": table_at_depth,
        "destinations": {"broker": "amqp://d", "declarations": [{"exchange.declare": {"exchange": "x"}}] * 256},
        "sources": {"brokers": ["amqp://h"] * 64},
    }}}).shovels["s"]
    assert cfg.workers == 256 and len(cfg.destination.declarations) == 256


DYNAMIC_OVER_BOUND = [
    ({"workers": 100_000_000}, "workers", "must be at most 256"),
    ({"src-prefetch-count": 70000}, "src-prefetch-count", "must be at most 65535"),
    ({"reconnect-delay": 1e9}, "reconnect-delay", "must be at most 86400 seconds"),
    ({"src-uri": ["amqp://h"] * 65}, "src-uri", "at most 64 URIs"),
    ({"src-queue": "q" * 256}, "src-queue", "at most 255 bytes"),
    ({"dest-exchange": "x" * 256}, "dest-exchange", "at most 255 bytes"),
    ({"src-queue-args": nested(34)}, "src-queue-args", "nested more than 32 deep"),
    ({"src-queue-args": nested(40)}, "src-queue-args",
     "at " + ".".join(["a"] * 37) + ": objects and arrays nested more than 40 deep"),
    ({"src-consumer-args": {"x": list(range(2000))}}, "src-consumer-args",
     "more than 1024 values"),
]


@pytest.mark.parametrize("changes,clause,fragment", DYNAMIC_OVER_BOUND)
def test_dynamic_bounds(changes: dict[str, Any], clause: str, fragment: str) -> None:
    e = error({**DYN_MINIMAL, **changes})
    assert (e.shovel, e.clause) == ("orders", clause)
    assert fragment in e.message


def test_shovel_count_total_workers_and_name_length() -> None:
    many = {f"s{i}": MINIMAL for i in range(limits.MAX_SHOVELS + 1)}
    with pytest.raises(ConfigError, match="at most 10000 shovels, got 10001"):
        parse_config({"shovels": many})
    heavy = {f"s{i}": {**MINIMAL, "workers": 256} for i in range(40)}  # 10,240 workers
    with pytest.raises(ConfigError, match=r"at most 10000 workers in all .* got 10240"):
        parse_config({"shovels": heavy})
    with pytest.raises(ConfigError, match="a shovel name must be at most 512 bytes") as info:
        parse_config({"shovels": {"n" * 513: MINIMAL}})
    assert len(str(info.value)) < 200  # the name is shortened in the message


def test_a_document_nested_995_deep_is_a_config_error_naming_where() -> None:
    deep = {**MINIMAL, "publish_properties": {"headers": nested(995)}}
    e = error(deep)
    assert (e.shovel, e.clause) == ("orders", "publish_properties")
    assert e.message.startswith("at headers.a.a")
    assert "nested more than 40 deep" in e.message


@pytest.mark.parametrize("depth", [995, 5000, 200_000])
def test_deep_json_in_a_file_is_a_config_error_not_a_recursion_error(tmp_path: Path,
                                                                     depth: int) -> None:
    path = tmp_path / "deep.json"
    headers = '{"a":' * depth + "1" + "}" * depth
    path.write_text('{"shovels": {"s": {"sources": {"broker": "amqp://s"}, "destinations": '
                    '{"broker": "amqp://d"}, "queue": "q", "publish_properties": {"headers": '
                    + headers + "}}}}")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    text = str(info.value)
    # ours, or orjson's own depth limit (objects past 1024), both a ConfigError in one line
    assert (text.startswith(f"{path}: shovel 's': clause 'publish_properties': at headers.a.a")\
        and "nested more than 40 deep" in text) or text.endswith(": depth limit exceeded")
    assert "\n" not in text
    # a deep array at the top level too (orjson's own limit, where it has one, is a ConfigError)
    path.write_text("[" * depth + "]" * depth)
    with pytest.raises(ConfigError):
        load_config(path)


@pytest.mark.parametrize("body", [
    b'{"src-uri": "amqp://s", "src-queue": "q", "dest-uri": "amqp://d", "workers": 100000000}',
    b'{"value": {"src-uri": "amqp://s", "src-queue": "q", "dest-uri": "amqp://d", '
    b'"src-consumer-args": ' + b'{"a":' * 995 + b"1" + b"}" * 995 + b"}}",
    b"[" * 100_000 + b"]" * 100_000,
])
def test_put_bodies_over_a_bound_are_config_errors(body: bytes) -> None:
    with pytest.raises(ConfigError) as info:
        daemon_config.parse_put_body("x", body, None)
    assert str(info.value).startswith("PUT /api/shovels/x: ")


def test_command_line_workers_is_bounded_too() -> None:
    with pytest.raises(ConfigError, match="--workers 300: at most 256"):
        daemon_config.parse_runtime("x", MINIMAL, 300, "PUT /api/shovels/x")
