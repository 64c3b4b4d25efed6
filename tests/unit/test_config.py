"""Configuration parsing and validation: both shovel forms, every clause, every bad input.

Pure parsing: no broker.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
from pumpd.config.model import AckMode, Declaration, DeleteAfter, ShovelConfig, TLSOptions
from pumpd.config.parse import ConfigError, load_config, parse_config, shovel_to_json
from pumpd.config.uri import parse_uri

# The plugin documentation's verbose example, clause for clause, in JSON.
PLUGIN_DOCS_EXAMPLE: dict[str, Any] = {
    "sources": {
        "brokers": ["amqp://fred:secret@host1.domain/my_vhost",
                    "amqp://john:secret@host2.domain/my_vhost"],
        "declarations": [
            {"exchange.declare": {"exchange": "my_fanout", "type": "fanout", "durable": True}},
            {"queue.declare": {"arguments": {"x-message-ttl": 60000}}},
            {"queue.bind": {"exchange": "my_direct", "queue": ""}},
        ],
    },
    "destinations": {
        "broker": "amqp://",
        "declarations": [
            {"exchange.declare": {"exchange": "my_direct", "type": "direct", "durable": True}},
        ],
    },
    "queue": "",
    "prefetch_count": 10,
    "ack_mode": "on_confirm",
    "publish_properties": {"delivery_mode": 2},
    "publish_fields": {"exchange": "my_direct", "routing_key": "from_shovel"},
    "reconnect_delay": 5,
}

MINIMAL: dict[str, Any] = {
    "sources": {"broker": "amqp://src"},
    "destinations": {"broker": "amqp://dst"},
    "queue": "work",
}

DYN_MINIMAL: dict[str, Any] = {"src-uri": "amqp://src", "src-queue": "in", "dest-uri": "amqp://dst"}


def one(definition: dict[str, Any], name: str = "s") -> ShovelConfig:
    return parse_config({"shovels": {name: definition}}).shovels[name]


def error(definition: Any, name: str = "orders") -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config({"shovels": {name: definition}}, source="config.json")
    return info.value


def with_(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    d = copy.deepcopy(base)
    for k, v in changes.items():
        d[k.replace("__", "-")] = v
    return d


def without(base: dict[str, Any], key: str) -> dict[str, Any]:
    d = copy.deepcopy(base)
    del d[key]
    return d


# --- the static form's clauses -------------------------------------------------------------------


def test_plugin_docs_example() -> None:
    s = one(PLUGIN_DOCS_EXAMPLE, "my_first_shovel")
    assert s.name == "my_first_shovel"
    assert [u.host for u in s.source.brokers] == ["host1.domain", "host2.domain"]
    assert s.source.brokers[0].password == "secret"
    assert s.source.declarations == (
        Declaration("exchange.declare", {"exchange": "my_fanout", "type": "fanout",
                                         "durable": True}),
        Declaration("queue.declare", {"arguments": {"x-message-ttl": 60000}}),
        Declaration("queue.bind", {"exchange": "my_direct", "queue": ""}),
    )
    assert s.destination.brokers[0].host is None  # the local broker
    assert s.destination.declarations == (
        Declaration("exchange.declare", {"exchange": "my_direct", "type": "direct",
                                         "durable": True}),)
    assert s.queue == ""
    assert s.prefetch_count == 10
    assert s.ack_mode is AckMode.ON_CONFIRM
    assert s.publish_properties == {"delivery_mode": 2}
    assert (s.publish_exchange, s.publish_routing_key) == ("my_direct", "from_shovel")
    assert s.reconnect_delay == 5.0


def test_defaults() -> None:
    s = one(MINIMAL)
    assert s.queue == "work"
    assert s.prefetch_count == 1000
    assert s.ack_mode is AckMode.ON_CONFIRM
    assert s.publish_properties == {}
    assert (s.publish_exchange, s.publish_routing_key) == (None, None)
    assert s.reconnect_delay == 5.0
    assert s.workers == 1
    assert s.source_read_hold_ms == 1
    assert s.stall_timeout == 60.0
    assert s.delete_after is DeleteAfter.NEVER
    assert (s.add_forward_headers, s.add_timestamp_header) == (False, False)
    assert s.source.declarations == () and s.destination.declarations == ()


@pytest.mark.parametrize("clause,value,attr,expected", [
    ("prefetch_count", 0, "prefetch_count", 0),
    ("prefetch_count", 65535, "prefetch_count", 65535),
    ("ack_mode", "no_ack", "ack_mode", AckMode.NO_ACK),
    ("ack_mode", "on_publish", "ack_mode", AckMode.ON_PUBLISH),
    ("ack_mode", "on_confirm", "ack_mode", AckMode.ON_CONFIRM),
    ("reconnect_delay", 0, "reconnect_delay", 0.0),
    ("reconnect_delay", 1.5, "reconnect_delay", 1.5),
    ("workers", 4, "workers", 4),
    ("source_read_hold_ms", 0, "source_read_hold_ms", 0),
    ("source_read_hold_ms", 1000, "source_read_hold_ms", 1000),
    ("own_process", True, "own_process", True),
    ("stall_timeout", 0, "stall_timeout", 0.0),
    ("stall_timeout", 2.5, "stall_timeout", 2.5),
    ("delete_after", "queue-length", "delete_after", DeleteAfter.QUEUE_LENGTH),
    ("delete_after", "never", "delete_after", DeleteAfter.NEVER),
    ("delete_after", 100, "delete_after", 100),
    ("add_forward_headers", True, "add_forward_headers", True),
    ("add_timestamp_header", True, "add_timestamp_header", True),
    ("publish_fields", {"exchange": ""}, "publish_exchange", ""),
    ("publish_fields", {"routing_key": "rk"}, "publish_routing_key", "rk"),
    ("publish_fields", {}, "publish_exchange", None),
])
def test_clause_values(clause: str, value: Any, attr: str, expected: Any) -> None:
    assert getattr(one(with_(MINIMAL, **{clause: value})), attr) == expected


def test_brokers_list_and_broker() -> None:
    s = one(with_(MINIMAL, sources={"brokers": ["amqp://a", "amqps://b"]}))
    assert [(u.scheme, u.host) for u in s.source.brokers] == [("amqp", "a"), ("amqps", "b")]
    assert one(MINIMAL).source.brokers == (parse_uri("amqp://src"),)


def test_tls_uri_in_config() -> None:
    uri = ("amqps://u:p@h/v?cacertfile=/ca.pem&certfile=/c.pem&keyfile=/k.pem"
           "&verify=verify_peer&fail_if_no_peer_cert=true")
    s = one(with_(MINIMAL, destinations={"broker": uri}))
    assert s.destination.brokers[0].tls == TLSOptions("/ca.pem", "/c.pem", "/k.pem", True, True)


ALL_PROPERTIES = {
    "content_type": "application/json", "content_encoding": "gzip",
    "headers": {"x-a": 1, "x-b": ["s", 2.5, None, True, {"n": 1}]},
    "delivery_mode": 1, "priority": 255, "correlation_id": "c", "reply_to": "r",
    "expiration": "60000", "message_id": "m", "timestamp": 1700000000, "type": "t",
    "user_id": "guest", "app_id": "pumpd", "cluster_id": "",
}


def test_all_fourteen_publish_properties() -> None:
    s = one(with_(MINIMAL, publish_properties=ALL_PROPERTIES))
    assert s.publish_properties == ALL_PROPERTIES
    assert len(ALL_PROPERTIES) == 14


@pytest.mark.parametrize("prop,value,fragment", [
    ("delivery_mode", 3, "must be 1 (transient) or 2 (persistent), got 3"),
    ("delivery_mode", True, "must be 1 (transient) or 2 (persistent), got true"),
    ("delivery_mode", "2", 'got "2"'),
    ("priority", 256, "must be at most 255, got 256"),
    ("priority", -1, "must be a non-negative integer, got -1"),
    ("timestamp", 1.5, "must be a non-negative integer, got 1.5"),
    ("timestamp", -5, "must be a non-negative integer, got -5"),
    ("headers", [], "must be an object, got a list"),
    ("headers", {"x": 2**64}, "does not fit in 64 bits"),
    ("expiration", 60000, 'must be a string of digits (milliseconds), e.g. "60000", got 60000'),
    ("expiration", "1m", 'must be a string of digits (milliseconds), got "1m"'),
    ("content_type", 5, "must be a string, got 5"),
    ("app_id", "x" * 256, "must be at most 255 bytes in UTF-8, got 256"),
    ("message_id", "\u00e9" * 128, "must be at most 255 bytes in UTF-8, got 256"),
    ("deliverymode", 2, "not a basic property (did you mean 'delivery_mode'?)"),
    ("mandatory", True, "not a basic property"),
])
def test_bad_publish_properties(prop: str, value: Any, fragment: str) -> None:
    e = error(with_(MINIMAL, publish_properties={prop: value}))
    assert e.shovel == "orders" and e.clause == f"publish_properties.{prop}"
    assert fragment in e.message


BAD_CLAUSES = [
    # (changes, clause, message fragment)
    ({"prefetch_count": -1}, "prefetch_count", "must be a non-negative integer, got -1"),
    ({"prefetch_count": 70000}, "prefetch_count", "must be at most 65535, got 70000"),
    ({"prefetch_count": "10"}, "prefetch_count", 'must be a non-negative integer, got "10"'),
    ({"prefetch_count": 10.0}, "prefetch_count", "got 10.0"),
    ({"prefetch_count": True}, "prefetch_count", "got true"),
    ({"prefetch_count": None}, "prefetch_count", "got null"),
    ({"ack_mode": "on-confirm"}, "ack_mode", "(did you mean 'on_confirm'?)"),
    ({"ack_mode": "always"}, "ack_mode", "must be one of no_ack, on_publish, on_confirm"),
    ({"ack_mode": 1}, "ack_mode", "got 1"),
    ({"reconnect_delay": "5"}, "reconnect_delay", "must be a non-negative number"),
    ({"reconnect_delay": False}, "reconnect_delay", "got false"),
    ({"workers": 0}, "workers", "must be a positive integer, got 0"),
    ({"source_read_hold_ms": -1}, "source_read_hold_ms", "must be a non-negative integer, got -1"),
    ({"source_read_hold_ms": 0.5}, "source_read_hold_ms", "got 0.5"),
    ({"source_read_hold_ms": 1001}, "source_read_hold_ms", "must be at most 1000, got 1001"),
    ({"stall_timeout": -1}, "stall_timeout", "must be a non-negative number (seconds), got -1"),
    ({"stall_timeout": "60"}, "stall_timeout", 'got "60"'),
    ({"queue": 5}, "queue", "must be a string, got 5"),
    ({"queue": "q" * 256}, "queue", "at most 255 bytes"),
    ({"publish_properties": [1]}, "publish_properties", "must be an object, got a list"),
    ({"publish_fields": "x"}, "publish_fields", 'must be an object, got "x"'),
    ({"publish_fields": {"exchange": 1}}, "publish_fields.exchange", "must be a string, got 1"),
    ({"publish_fields": {"routing_key": None}}, "publish_fields.routing_key", "got null"),
    ({"publish_fields": {"mandatory": "yes"}}, "publish_fields.mandatory", "must be true or false"),
    ({"publish_fields": {"immediate": True}}, "publish_fields.immediate", "not a publish field"),
    ({"publish_fields": {"routingkey": "k"}}, "publish_fields.routingkey",
     "(did you mean 'routing_key'?)"),
    ({"delete_after": -1}, "delete_after", 'must be "never", "queue-length" or a non-negative'),
    ({"delete_after": "always"}, "delete_after", 'got "always"'),
    ({"add_forward_headers": "yes"}, "add_forward_headers", 'must be true or false, got "yes"'),
    ({"add_timestamp_header": 1}, "add_timestamp_header", "must be true or false, got 1"),
    ({"prefetch": 10}, "prefetch", "unknown clause (did you mean 'prefetch_count'?)"),
    ({"reconect_delay": 1}, "reconect_delay", "(did you mean 'reconnect_delay'?)"),
    ({"colour": "blue"}, "colour", "unknown clause"),
    ({"sources": []}, "sources", "must be an object, got a list"),
    ({"sources": {}}, "sources", "missing 'brokers' (a list of URIs) or 'broker' (one URI)"),
    ({"sources": {"brokers": []}}, "sources.brokers",
     "must be a non-empty list of URIs, got a list"),
    ({"sources": {"brokers": "amqp://h"}}, "sources.brokers", 'got "amqp://h"'),
    ({"sources": {"brokers": ["amqp://a", 5]}}, "sources.brokers[1]",
     "must be an AMQP URI string, got 5"),
    ({"sources": {"broker": ["amqp://a"]}}, "sources.broker", "must be an AMQP URI string"),
    ({"sources": {"broker": "amqp://a", "brokers": ["amqp://b"]}}, "sources",
     "give 'brokers' (a list) or 'broker' (one URI), not both"),
    ({"destinations": {"broker": "amqp://a", "declaration": []}}, "destinations.declaration",
     "unknown key (did you mean 'declarations'?)"),
    ({"destinations": {"broker": "amqp://a", "declarations": {}}}, "destinations.declarations",
     "must be a list, got an object"),
    ({"sources": {"broker": "amqp://u:hunter2@h:99/a/b"}}, "sources.broker",
     "invalid AMQP URI 'amqp://u:***@h:99/a/b': the vhost must be a single path segment"),
    ({"sources": {"broker": "mqtt://h"}}, "sources.broker", "unsupported scheme 'mqtt'"),
]


@pytest.mark.parametrize("changes,clause,fragment", BAD_CLAUSES)
def test_bad_clauses(changes: dict[str, Any], clause: str, fragment: str) -> None:
    e = error(with_(MINIMAL, **changes))
    assert (e.source, e.shovel, e.clause) == ("config.json", "orders", clause)
    assert fragment in e.message
    assert "hunter2" not in str(e)


def test_error_string_format() -> None:
    e = error(with_(MINIMAL, prefetch_count=-1))
    assert str(e) == ("config.json: shovel 'orders': clause 'prefetch_count': must be a "
                      "non-negative integer, got -1")


@pytest.mark.parametrize("missing", ["sources", "destinations", "queue"])
def test_missing_mandatory_clause(missing: str) -> None:
    e = error(without(MINIMAL, missing))
    assert e.clause == missing
    assert "missing (it is mandatory)" in e.message


# --- declarations ---------------------------------------------------------------------------


def source_decls(*decls: Any, queue: str = "work") -> tuple[Declaration, ...]:
    d = with_(MINIMAL, queue=queue, sources={"broker": "amqp://s", "declarations": list(decls)})
    return one(d).source.declarations


@pytest.mark.parametrize("method", ["exchange.declare", "exchange.delete", "exchange.bind",
                                    "exchange.unbind", "queue.declare", "queue.bind",
                                    "queue.unbind", "queue.purge", "queue.delete"])
def test_every_method_with_every_field(method: str) -> None:
    fields: dict[str, dict[str, Any]] = {
        "exchange.declare": {"exchange": "x", "type": "topic", "passive": False, "durable": True,
                             "auto_delete": False, "internal": False, "nowait": False,
                             "arguments": {"alternate-exchange": "ae"}},
        "exchange.delete": {"exchange": "x", "if_unused": True, "nowait": False},
        "exchange.bind": {"destination": "d", "source": "s", "routing_key": "#",
                          "nowait": False, "arguments": {}},
        "exchange.unbind": {"destination": "d", "source": "s", "routing_key": "#",
                            "nowait": False, "arguments": {}},
        "queue.declare": {"queue": "q", "passive": False, "durable": True, "exclusive": False,
                          "auto_delete": False, "nowait": False,
                          "arguments": {"x-queue-type": "quorum", "x-max-length": 10}},
        "queue.bind": {"queue": "q", "exchange": "x", "routing_key": "k", "nowait": False,
                       "arguments": {"x-match": "any"}},
        "queue.unbind": {"queue": "q", "exchange": "x", "routing_key": "k", "arguments": {}},
        "queue.purge": {"queue": "q", "nowait": False},
        "queue.delete": {"queue": "q", "if_unused": False, "if_empty": True, "nowait": False},
    }
    assert source_decls({method: fields[method]}) == (Declaration(method, fields[method]),)


def test_bare_method_names_take_all_defaults() -> None:
    decls = source_decls("queue.declare", "queue.purge", "queue.delete", queue="")
    assert decls == (Declaration("queue.declare"), Declaration("queue.purge"),
                     Declaration("queue.delete"))
    assert all(d.arguments == {} and not d.if_missing for d in decls)


def test_if_missing_extension() -> None:
    decls = source_decls({"queue.declare": {"queue": "q", "durable": True}, "if_missing": True})
    assert decls == (Declaration("queue.declare", {"queue": "q", "durable": True},
                                 if_missing=True),)


BAD_DECLARATIONS = [
    # (declarations, clause, fragment)
    (["queue.declar"], "sources.declarations[0]",
     "unsupported method 'queue.declar' (did you mean 'queue.declare'?)"),
    (["basic.publish"], "sources.declarations[0]", "unsupported method 'basic.publish'"),
    ([5], "sources.declarations[0]", "a declaration is a method name or an object, got 5"),
    ([{}], "sources.declarations[0]", "exactly one key, the method name"),
    ([{"queue.declare": {}, "queue.bind": {}}], "sources.declarations[0]", "exactly one key"),
    ([{"queue.declare": ["durable"]}], "sources.declarations[0]",
     "the fields of queue.declare must be an object, got a list"),
    ([{"queue.declare": {"durabel": True}}], "sources.declarations[0].queue.declare.durabel",
     "queue.declare has no field 'durabel' (did you mean 'durable'?)"),
    ([{"queue.declare": {"ticket": 0}}], "sources.declarations[0].queue.declare.ticket",
     "has no field 'ticket'"),
    ([{"queue.unbind": {"exchange": "x", "nowait": True}}],
     "sources.declarations[0].queue.unbind.nowait", "queue.unbind has no field 'nowait'"),
    ([{"queue.declare": {"durable": "yes"}}], "sources.declarations[0].queue.declare.durable",
     'must be true or false, got "yes"'),
    ([{"exchange.declare": {"exchange": 5}}],
     "sources.declarations[0].exchange.declare.exchange", "must be a string, got 5"),
    ([{"exchange.declare": {"exchange": "x", "arguments": [1]}}],
     "sources.declarations[0].exchange.declare.arguments", "must be an object, got a list"),
    (["exchange.declare"], "sources.declarations[0]",
     "exchange.declare needs a non-empty 'exchange'"),
    ([{"exchange.declare": {"exchange": ""}}], "sources.declarations[0]", "non-empty 'exchange'"),
    (["exchange.delete"], "sources.declarations[0]",
     "exchange.delete needs a non-empty 'exchange'"),
    ([{"exchange.bind": {"source": "s"}}], "sources.declarations[0]",
     "exchange.bind needs a non-empty 'destination'"),
    ([{"exchange.unbind": {"destination": "d"}}], "sources.declarations[0]",
     "exchange.unbind needs a non-empty 'source'"),
    ([{"queue.bind": {"queue": "q"}}], "sources.declarations[0]",
     "queue.bind needs a non-empty 'exchange'"),
    ([{"queue.bind": {"exchange": "x", "queue": ""}}], "sources.declarations[0]",
     "means the most recently declared queue, but no queue.declare comes before it"),
    (["queue.purge"], "sources.declarations[0]", "no queue.declare comes before it"),
    (["exchange.delete", {"queue.delete": {}}], "sources.declarations[0]", "non-empty 'exchange'"),
    ([{"queue.bind": {"exchange": "x"}, "if_missing": True}], "sources.declarations[0].if_missing",
     "applies to queue.declare only"),
    ([{"queue.declare": {}, "if_missing": "yes"}], "sources.declarations[0].if_missing",
     "must be true or false"),
]


@pytest.mark.parametrize("decls,clause,fragment", BAD_DECLARATIONS)
def test_bad_declarations(decls: list[Any], clause: str, fragment: str) -> None:
    e = error(with_(MINIMAL, sources={"broker": "amqp://s", "declarations": decls}))
    assert e.clause == clause
    assert fragment in e.message


def test_declared_queue_reference_order() -> None:
    # A later queue.declare does not make an earlier "" reference valid.
    e = error(with_(MINIMAL, sources={"broker": "amqp://s", "declarations": [
        {"queue.bind": {"exchange": "x"}}, "queue.declare"]}))
    assert e.clause == "sources.declarations[0]"
    # Named queues need no earlier declaration.
    assert source_decls({"queue.bind": {"exchange": "x", "queue": "q"}})


def test_empty_queue_needs_a_source_declaration() -> None:
    e = error(with_(MINIMAL, queue=""))
    assert e.clause == "queue"
    assert "most recently declared queue" in e.message
    # A queue.declare on the destination does not count.
    e = error(with_(MINIMAL, queue="", destinations={"broker": "amqp://d",
                                                      "declarations": ["queue.declare"]}))
    assert e.clause == "queue"
    assert one(with_(MINIMAL, queue="", sources={"broker": "amqp://s",
                                                  "declarations": ["queue.declare"]})).queue == ""


def test_workers_need_a_shared_queue() -> None:
    e = error(with_(PLUGIN_DOCS_EXAMPLE, workers=2))
    assert e.clause == "workers" and "shared, named, non-exclusive" in e.message
    e = error(with_(MINIMAL, workers=2, sources={"broker": "amqp://s", "declarations": [
        {"queue.declare": {"queue": "work", "exclusive": True}}]}))
    assert e.clause == "workers"
    assert one(with_(MINIMAL, workers=3)).workers == 3


def test_numeric_delete_after_with_no_ack() -> None:
    e = error(with_(MINIMAL, delete_after=10, ack_mode="no_ack"))
    assert e.clause == "delete_after" and "no_ack" in e.message
    assert one(with_(MINIMAL, delete_after="queue-length", ack_mode="no_ack")).delete_after \
        is DeleteAfter.QUEUE_LENGTH


# --- the dynamic shovel's flat names --------------------------------------------------------


def test_dynamic_src_queue_dest_queue() -> None:
    s = one({"src-protocol": "amqp091", "src-uri": "amqp://u:p@a/v", "src-queue": "in",
             "dest-protocol": "amqp091", "dest-uri": ["amqp://b", "amqp://c"],
             "dest-queue": "out"})
    # rabbit_amqp091_shovel:ensure_queue: passive declare, created durable only when missing.
    assert s.source.declarations == (
        Declaration("queue.declare", {"queue": "in", "durable": True}, if_missing=True),)
    assert s.queue == "in"
    assert s.destination.declarations == (
        Declaration("queue.declare", {"queue": "out", "durable": True}, if_missing=True),)
    # Published through the default exchange, routing key = the queue.
    assert (s.publish_exchange, s.publish_routing_key) == ("", "out")
    assert [u.host for u in s.destination.brokers] == ["b", "c"]
    # The plugin's defaults.
    assert s.prefetch_count == 1000
    assert s.ack_mode is AckMode.ON_CONFIRM
    assert s.reconnect_delay == 5.0
    assert s.delete_after is DeleteAfter.NEVER
    assert s.publish_properties == {}
    assert (s.add_forward_headers, s.add_timestamp_header) == (False, False)


def test_dynamic_queue_args_and_predeclared() -> None:
    s = one(with_(DYN_MINIMAL, src__queue__args={"x-queue-type": "quorum"},
                  dest__queue="out", dest__predeclared=True))
    assert s.source.declarations == (Declaration(
        "queue.declare", {"queue": "in", "durable": True,
                          "arguments": {"x-queue-type": "quorum"}}, if_missing=True),)
    # check_queue: a passive declare only.
    assert s.destination.declarations == (
        Declaration("queue.declare", {"queue": "out", "passive": True}),)
    s = one(with_(DYN_MINIMAL, src__predeclared=True, dest__predeclared=False))
    assert s.source.declarations == (
        Declaration("queue.declare", {"queue": "in", "passive": True}),)
    assert s.destination.declarations == ()


def test_dynamic_src_exchange() -> None:
    s = one({"src-uri": "amqp://a", "src-exchange": "events", "src-exchange-key": "order.*",
             "dest-uri": "amqp://b", "dest-exchange": "archive", "dest-exchange-key": "k"})
    assert s.source.declarations == (
        Declaration("queue.declare", {"exclusive": True}),
        Declaration("queue.bind", {"queue": "", "exchange": "events", "routing_key": "order.*"}),
    )
    assert s.queue == ""
    assert s.destination.declarations == ()
    assert (s.publish_exchange, s.publish_routing_key) == ("archive", "k")
    # src-exchange-key defaults to "" (the plugin's pget(<<"src-exchange-key">>, Def, <<>>)).
    s = one({"src-uri": "amqp://a", "src-exchange": "events", "dest-uri": "amqp://b"})
    assert s.source.declarations[1].arguments["routing_key"] == ""


@pytest.mark.parametrize("dest,exchange,key", [
    ({}, None, None),  # original exchange and routing key
    ({"dest-exchange": "x"}, "x", None),
    ({"dest-exchange": ""}, "", None),
    ({"dest-exchange-key": "k"}, None, "k"),  # only the routing key replaced
    ({"dest-exchange": "x", "dest-exchange-key": "k"}, "x", "k"),
    ({"dest-queue": "q"}, "", "q"),
])
def test_dynamic_publish_fields(dest: dict[str, str], exchange: str | None,
                                key: str | None) -> None:
    s = one({**DYN_MINIMAL, **dest})
    assert (s.publish_exchange, s.publish_routing_key) == (exchange, key)


@pytest.mark.parametrize("key,value,attr,expected", [
    ("ack-mode", "on-confirm", "ack_mode", AckMode.ON_CONFIRM),
    ("ack-mode", "on-publish", "ack_mode", AckMode.ON_PUBLISH),
    ("ack-mode", "no-ack", "ack_mode", AckMode.NO_ACK),
    ("src-prefetch-count", 10, "prefetch_count", 10),
    ("prefetch-count", 20, "prefetch_count", 20),  # legacy name
    ("src-delete-after", "queue-length", "delete_after", DeleteAfter.QUEUE_LENGTH),
    ("src-delete-after", 5, "delete_after", 5),
    ("delete-after", "never", "delete_after", DeleteAfter.NEVER),  # legacy name
    ("reconnect-delay", 1, "reconnect_delay", 1.0),
    ("dest-add-forward-headers", True, "add_forward_headers", True),
    ("add-forward-headers", True, "add_forward_headers", True),  # legacy name
    ("dest-add-timestamp-header", True, "add_timestamp_header", True),
    ("add-timestamp-header", True, "add_timestamp_header", True),  # legacy name
    ("dest-publish-properties", {"delivery_mode": 2}, "publish_properties", {"delivery_mode": 2}),
    ("publish-properties", {"priority": 1}, "publish_properties", {"priority": 1}),  # legacy
    ("workers", 2, "workers", 2),
    ("source_read_hold_ms", 5, "source_read_hold_ms", 5),
    ("own_process", True, "own_process", True),
    ("stall-timeout", 0, "stall_timeout", 0.0),
    ("stall-timeout", 30, "stall_timeout", 30.0),
])
def test_dynamic_values(key: str, value: Any, attr: str, expected: Any) -> None:
    assert getattr(one({**DYN_MINIMAL, key: value}), attr) == expected


BAD_DYNAMIC = [
    # (definition, clause, fragment)
    ({**DYN_MINIMAL, "src-protocol": "amqp10"}, "src-queue",
     "belongs to an AMQP 0-9-1 source, and this source's protocol is amqp10 (use src-address)"),
    ({**DYN_MINIMAL, "dest-protocol": "local"}, "dest-protocol",
     "local shovels run inside the broker"),
    ({**DYN_MINIMAL, "dest-protocol": "amqp"}, "dest-protocol",
     'must be one of amqp091, amqp10, stream, got "amqp"'),
    (without(DYN_MINIMAL, "src-uri"), "src-uri", "missing (it is mandatory)"),
    (without(DYN_MINIMAL, "dest-uri"), "dest-uri", "missing (it is mandatory)"),
    (without(DYN_MINIMAL, "src-queue"), "src-queue",
     "give exactly one of 'src-queue' and 'src-exchange'"),
    ({**DYN_MINIMAL, "src-exchange": "x"}, "src-queue", "exactly one of"),
    ({**DYN_MINIMAL, "dest-queue": "q", "dest-exchange": "x"}, "dest-queue",
     "give at most one of 'dest-queue' and 'dest-exchange'"),
    ({**DYN_MINIMAL, "src-predeclared": "yes"}, "src-predeclared", "must be true or false"),
    ({**DYN_MINIMAL, "delete-after": 10, "ack-mode": "no-ack"}, "delete-after",
     "cannot be combined with ack mode no_ack"),
    ({**DYN_MINIMAL, "src-queue-args": {"x-max-length": 2**63}}, "src-queue-args",
     "at x-max-length: integer 9223372036854775808 does not fit in 64 bits"),
    ({**DYN_MINIMAL, "src-queue": ""}, "src-queue", "must not be empty"),
    ({**DYN_MINIMAL, "dest-queue": ""}, "dest-queue", "must not be empty"),
    ({**without(DYN_MINIMAL, "src-queue"), "src-exchange": ""}, "src-exchange",
     "must not be empty (the default exchange cannot be bound)"),
    ({**DYN_MINIMAL, "src-queue": 5}, "src-queue", "must be a string, got 5"),
    ({**DYN_MINIMAL, "src-uri": []}, "src-uri", "a URI or a non-empty list of URIs"),
    ({**DYN_MINIMAL, "src-uri": 5}, "src-uri", "a URI or a non-empty list of URIs, got 5"),
    ({**DYN_MINIMAL, "dest-uri": ["amqp://b", "amqp://u:hunter2@c:x"]}, "dest-uri[1]",
     "invalid AMQP URI 'amqp://u:***@c:x'"),
    ({**DYN_MINIMAL, "ack-mode": "on_confirm"}, "ack-mode", "(did you mean 'on-confirm'?)"),
    ({**DYN_MINIMAL, "src-prefetch-count": -5}, "src-prefetch-count",
     "must be a non-negative integer, got -5"),
    ({**DYN_MINIMAL, "prefetch-count": 1.5}, "prefetch-count", "got 1.5"),
    ({**DYN_MINIMAL, "prefetch-count": 1, "src-prefetch-count": 2}, "prefetch-count",
     "give 'src-prefetch-count' or its legacy name 'prefetch-count', not both"),
    ({**DYN_MINIMAL, "reconnect-delay": "5"}, "reconnect-delay", "non-negative number"),
    ({**DYN_MINIMAL, "src-delete-after": "later"}, "src-delete-after", 'got "later"'),
    ({**DYN_MINIMAL, "src-delete-after": 10, "ack-mode": "no-ack"}, "src-delete-after",
     "cannot be combined with ack mode no_ack"),
    ({**DYN_MINIMAL, "dest-publish-properties": {"delivery_mode": 9}},
     "dest-publish-properties.delivery_mode", "must be 1 (transient) or 2"),
    ({**DYN_MINIMAL, "publish-properties": {"colour": 1}}, "publish-properties.colour",
     "not a basic property"),
    ({**DYN_MINIMAL, "dest-add-forward-headers": "true"}, "dest-add-forward-headers",
     "must be true or false"),
    ({**DYN_MINIMAL, "src-consumer-arg": {}}, "src-consumer-arg", "unknown key"),
    ({**DYN_MINIMAL, "src-address": "q"}, "src-address",
     "belongs to an AMQP 1.0 source, and this source's protocol is amqp091"),
    ({**DYN_MINIMAL, "dest-address": "q"}, "dest-address", "AMQP 1.0"),
    ({**DYN_MINIMAL, "src-delete-after-duration": 0}, "src-delete-after-duration",
     "must be a positive integer (seconds), got 0"),
    ({**DYN_MINIMAL, "src-delete-after-duration": 1.5}, "src-delete-after-duration", "got 1.5"),
    ({**DYN_MINIMAL, "src-consumer-args": {"x-priority": "high"}}, "src-consumer-args.x-priority",
     "must be an integer"),
    ({**DYN_MINIMAL, "src-consumer-name": 7}, "src-consumer-name", "must be a string"),
    ({**DYN_MINIMAL, "dest-exchang": "x"}, "dest-exchang",
     "unknown key (did you mean 'dest-exchange'?)"),
    ({**without(DYN_MINIMAL, "src-queue"), "src-exchange": "x", "workers": 2}, "workers",
     "shared, named, non-exclusive"),
    # Mixing the two forms.
    ({**DYN_MINIMAL, "queue": "q"}, "src-uri",
     "mixes dynamic-shovel names ('src-uri') with the static form's clauses ('queue')"),
    ({**MINIMAL, "ack-mode": "no-ack"}, "ack-mode", "use one form per shovel"),
]


@pytest.mark.parametrize("definition,clause,fragment", BAD_DYNAMIC)
def test_bad_dynamic(definition: dict[str, Any], clause: str, fragment: str) -> None:
    e = error(definition)
    assert (e.shovel, e.clause) == ("orders", clause)
    assert fragment in e.message
    assert "hunter2" not in str(e)


def test_unrecognised_form_guessed_from_spelling() -> None:
    assert "did you mean 'src-uri'" in error({"src-url": "amqp://a"}).message
    assert "did you mean 'sources'" in error({"source": {}}).message


# --- whole configurations -------------------------------------------------------------------


@pytest.mark.parametrize("obj,fragment", [
    ([], 'the top level must be an object {"shovels": {...}}, got a list'),
    ("x", "the top level must be an object"),
    ({}, 'missing "shovels" at the top level'),
    ({"shovel": {}}, "unknown top-level key (did you mean 'shovels'?)"),
    ({"shovels": []}, "must be an object mapping shovel names to definitions, got a list"),
    ({"shovels": {}, "shovels_per_process": 0}, "must be a positive integer, got 0"),
    ({"shovels": {}, "shovels_per_process": "8"}, 'got "8"'),
    ({"shovels": {}, "shovel_per_process": 8}, "did you mean 'shovels_per_process'?"),
])
def test_bad_top_level(obj: Any, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(obj, source="config.json")
    assert info.value.shovel is None
    assert fragment in info.value.message
    assert str(info.value).startswith("config.json: ")


@pytest.mark.parametrize("name,fragment", [
    ("", "a shovel name must not be empty"),
    ("   ", "a shovel name must not be empty"),
    ("a\nb", "must not contain control characters"),
])
def test_bad_shovel_names(name: str, fragment: str) -> None:
    e = error(MINIMAL, name=name)
    assert e.shovel == name and fragment in e.message


def test_shovel_definition_not_an_object() -> None:
    e = error(["sources"])
    assert e.clause is None and "must be an object, got a list" in e.message


def test_several_shovels_in_order_and_first_error_wins() -> None:
    cfg = parse_config({"shovels": {"b": MINIMAL, "a": DYN_MINIMAL}})
    assert list(cfg.shovels) == ["b", "a"]
    assert cfg.shovels["a"].name == "a"
    with pytest.raises(ConfigError) as info:
        parse_config({"shovels": {"ok": MINIMAL, "bad1": with_(MINIMAL, workers=0),
                                  "bad2": with_(MINIMAL, ack_mode="x")}})
    assert info.value.shovel == "bad1"


def test_shovels_per_process_at_the_top_level() -> None:
    assert parse_config({"shovels": {}}).shovels_per_process is None
    assert parse_config({"shovels": {}, "shovels_per_process": 50}).shovels_per_process == 50
    assert one(MINIMAL).own_process is False
    e = error(with_(MINIMAL, own_process="yes"))
    assert e.clause == "own_process" and "true or false" in e.message


def test_empty_shovels_is_valid() -> None:
    assert parse_config({"shovels": {}}).shovels == {}


def test_default_source_name() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({})
    assert str(info.value) == '<config>: missing "shovels" at the top level'


# --- files ----------------------------------------------------------------------------------


def write(tmp_path: Path, text: str, name: str = "config.json") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_load_config(tmp_path: Path) -> None:
    path = write(tmp_path, json.dumps({"shovels": {"my_first_shovel": PLUGIN_DOCS_EXAMPLE,
                                                   "dyn": DYN_MINIMAL}}, indent=2))
    cfg = load_config(path)
    assert list(cfg.shovels) == ["my_first_shovel", "dyn"]
    assert load_config(Path(path)).shovels == cfg.shovels


def test_unreadable_file(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.json")
    with pytest.raises(ConfigError) as info:
        load_config(missing)
    assert str(info.value) == f"{missing}: cannot read the file: No such file or directory"
    with pytest.raises(ConfigError, match="cannot read the file: Is a directory"):
        load_config(str(tmp_path))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file_permissions(tmp_path: Path) -> None:
    path = write(tmp_path, "{}")
    os.chmod(path, 0)
    with pytest.raises(ConfigError, match="Permission denied"):
        load_config(path)


@pytest.mark.parametrize("text,fragment", [
    ('{\n  "shovels": {\n    "a": x\n  }\n}',
     "invalid JSON at line 3, column 10: Expecting value"),
    ('{"shovels": {}', "invalid JSON at line 1"),
    ("", "invalid JSON at line 1"),
    ('{"shovels": {},}', "invalid JSON at line 1"),
    ('{\n\n"shovels": NaN}', "at shovels: NaN is not a JSON number"),
])
def test_invalid_json(tmp_path: Path, text: str, fragment: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.source == path
    assert fragment in info.value.message


def test_invalid_utf8(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_bytes(b'{"shovels": {"\xff": {}}}')
    with pytest.raises(ConfigError, match="invalid JSON"):
        load_config(str(path))


def test_duplicate_shovel_name(tmp_path: Path) -> None:
    m = json.dumps(MINIMAL)
    path = write(tmp_path, f'{{"shovels": {{"orders": {m}, "other": {m}, "orders": {m}}}}}')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.shovel == "orders"
    assert "given twice" in info.value.message and "distinct" in info.value.message


def test_duplicate_clause_and_deeper_keys(tmp_path: Path) -> None:
    path = write(tmp_path, '{"shovels": {"orders": {"queue": "a", "queue": "b"}}}')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert (info.value.shovel, info.value.clause) == ("orders", "queue")
    path = write(tmp_path, '{"shovels": {"orders": {"sources": {"declarations": '
                           '[{"queue.declare": {"durable": true, "durable": false}}]}}}}')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.clause == "sources.declarations[0].queue.declare.durable"
    path = write(tmp_path, '{"shovels": {}, "shovels": {}}')
    with pytest.raises(ConfigError, match="'shovels' is given twice at the top level"):
        load_config(path)


def test_malformed_uri_in_file_is_redacted(tmp_path: Path) -> None:
    d = with_(MINIMAL, sources={"brokers": ["amqp://fred:hunter2@host:bad/v"]})
    path = write(tmp_path, json.dumps({"shovels": {"orders": d}}))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.clause == "sources.brokers[0]"
    assert "hunter2" not in str(info.value)
    assert "amqp://fred:***@host:bad/v" in str(info.value)


def test_password_never_shown_even_in_got_values() -> None:
    e = error(with_(MINIMAL, sources={"brokers": "amqp://fred:hunter2@h"}))
    assert "hunter2" not in str(e) and "amqp://fred:***@h" in str(e)


# --- back to JSON ---------------------------------------------------------------------------


@pytest.mark.parametrize("definition", [
    PLUGIN_DOCS_EXAMPLE,
    MINIMAL,
    with_(MINIMAL, publish_properties=ALL_PROPERTIES, workers=3, delete_after=7,
          add_forward_headers=True, reconnect_delay=0.25, ack_mode="on_publish",
          source_read_hold_ms=0, stall_timeout=0),
    with_(DYN_MINIMAL, stall__timeout=5),
    with_(MINIMAL, destinations={"broker": "amqps://u:p%40w@[::1]:1/?heartbeat=0&cacertfile=/a"
                                           "&certfile=/b&keyfile=/c&verify=verify_none"
                                           "&fail_if_no_peer_cert=false&connection_timeout=2000"}),
    with_(DYN_MINIMAL, dest__queue="q", src__queue__args={"x-queue-type": "quorum"}),
    {"src-uri": "amqp://a", "src-exchange": "x", "dest-uri": "amqp://b", "dest-exchange-key": "k",
     "src-delete-after": "queue-length"},
])
def test_shovel_to_json_round_trips(definition: dict[str, Any]) -> None:
    shovel = one(definition)
    as_json = shovel_to_json(shovel)
    json.dumps(as_json)  # plain JSON types only
    assert one(as_json) == shovel


def test_publish_fields_mandatory_defaults_to_true_and_can_be_turned_off() -> None:
    assert one(MINIMAL).publish_mandatory is True
    off = one({**MINIMAL, "publish_fields": {"mandatory": False}})
    assert off.publish_mandatory is False
    assert shovel_to_json(off)["publish_fields"] == {"mandatory": False}


# --- parity with the plugin's current keys -------------------------------------------------------

def test_dynamic_current_keys() -> None:
    s = one({**DYN_MINIMAL, "src-delete-after-duration": 120,
             "src-consumer-args": {"x-stream-offset": "first", "x-priority": 5},
             "src-consumer-name": "pumpd-orders", "dest-publish-properties": []})
    assert s.delete_after_duration == 120.0
    assert s.consumer_arguments == {"x-stream-offset": "first", "x-priority": 5}
    assert s.consumer_tag == "pumpd-orders"
    assert s.publish_properties == {} and s.warnings == ()
    # the state file keeps them
    assert one(shovel_to_json(s)) == s


def test_static_form_current_clauses() -> None:
    s = one({**MINIMAL, "delete_after_duration": 90, "consumer_args": {"x-priority": 1},
             "consumer_name": "t", "publish_properties": []})
    assert (s.delete_after_duration, s.consumer_arguments, s.consumer_tag) == (
        90.0, {"x-priority": 1}, "t")


@pytest.mark.parametrize("definition,fragment", [
    # What the plugin ignores in these combinations: accepted, with a warning saying so.
    ({**DYN_MINIMAL, "src-exchange-key": "k"}, "'src-exchange-key': ignored, as the plugin does"),
    ({**DYN_MINIMAL, "dest-queue-args": {}}, "'dest-queue-args': ignored"),
    ({**DYN_MINIMAL, "dest-queue": "q", "dest-exchange-key": "k"},
     "'dest-exchange-key': ignored, as the plugin does: with 'dest-queue'"),
    ({**DYN_MINIMAL, "dest-predeclared": True}, "'dest-predeclared': ignored"),
    ({**DYN_MINIMAL, "src-predeclared": True, "src-queue-args": {"x-max-length": 1}},
     "'src-queue-args': ignored with src-predeclared"),
    # The plugin restarts a shovel only for a positive whole number of seconds.
    ({**DYN_MINIMAL, "reconnect-delay": -1}, "-1 is read as 0, as the plugin does"),
    ({**DYN_MINIMAL, "reconnect-delay": 0.5}, "where the plugin never reconnects"),
    ({**MINIMAL, "reconnect_delay": 2.5}, "where the plugin never reconnects"),
    ({**DYN_MINIMAL, "src-delete-after-duration": 5}, "raises any value under 60 s to 60 s"),
])
def test_plugin_ignores_warned(definition: dict[str, Any], fragment: str) -> None:
    s = one(definition)
    assert any(fragment in w for w in s.warnings), s.warnings


def test_negative_reconnect_delay_never_reconnects() -> None:
    assert one({**DYN_MINIMAL, "reconnect-delay": -3}).reconnect_delay == 0.0
    assert one({**MINIMAL, "reconnect_delay": -1}).reconnect_delay == 0.0


def test_dest_exchange_key_beside_dest_queue_publishes_to_the_queue() -> None:
    s = one({**DYN_MINIMAL, "dest-queue": "q", "dest-exchange-key": "k"})
    assert (s.publish_exchange, s.publish_routing_key) == ("", "q")


def test_predeclared_declares_nothing() -> None:
    s = one({**DYN_MINIMAL, "src-predeclared": True, "dest-queue": "d",
             "dest-predeclared": True})
    for ep in (s.source, s.destination):
        (decl,) = ep.declarations
        assert decl.method == "queue.declare" and decl.arguments.get("passive") is True
        assert not decl.if_missing


def test_empty_shovels_accepted() -> None:
    assert parse_config({"shovels": {}}).shovels == {}


# The plugin's own validation cases (amqp091_dynamic_SUITE:validation/1): the same verdicts.
_URIS = {"src-uri": "amqp://", "dest-uri": "amqp://"}
_QURIS = {**_URIS, "src-queue": "test"}
PLUGIN_VALID = [
    {**_URIS, "src-exchange": "test"},
    _QURIS,
    {**_QURIS, "src-delete-after-duration": 60},
    {**_QURIS, "src-delete-after-duration": 1},
    {**_QURIS, "src-delete-after-duration": 10 * 365 * 24 * 60 * 60},  # runs_long
    {**_URIS, "src-exchange": "test",
     "publish-properties": {"cluster_id": "rabbit@localhost", "delivery_mode": 2}},
    {**_QURIS, "publish-properties": {}},
    {**_QURIS, "publish-properties": []},
    {**_QURIS, "src-consumer-args": {"x-stream-offset": "first"}},
]
PLUGIN_INVALID = [
    {},
    {"src-queue": "test", "src-uri": "derp", "dest-uri": "amqp://"},
    {"src-queue": "test", "src-uri": ["derp"], "dest-uri": "amqp://"},
    {"src-queue": "test", "dest-uri": "amqp://"},
    _URIS,
    {**_QURIS, "src-exchange": "test"},
    {**_QURIS, "prefetch-count": "three"},
    {**_QURIS, "reconnect-delay": "three"},
    {**_QURIS, "ack-mode": "whenever"},
    {**_QURIS, "src-delete-after": "whenever"},
    {**_QURIS, "src-delete-after-duration": 0},
    {**_QURIS, "src-delete-after-duration": "whenever"},
    {**_QURIS, "src-delete-after-duration": 100 * 365 * 24 * 60 * 60},
    {**_QURIS, "publish-properties": {"nonexistent": ""}},
    {**_QURIS, "publish-properties": {"cluster_id": 2}},
    {**_QURIS, "publish-properties": "something"},
    {**_QURIS, "src-delete-after": 1, "ack-mode": "no-ack"},
    {**_QURIS, "delete-after": 1, "ack-mode": "no-ack"},
    {"src-uri": "an arbitrary string", "dest-uri": "\\o/ \\o/ \\o/", "src-queue": "a",
     "dest-queue": "b"},
]


@pytest.mark.parametrize("definition", PLUGIN_VALID)
def test_plugin_valid_params(definition: dict[str, Any]) -> None:
    one(definition)


@pytest.mark.parametrize("definition", PLUGIN_INVALID)
def test_plugin_invalid_params(definition: dict[str, Any]) -> None:
    error(definition)


def test_the_group_clause_and_its_earlier_name_cluster_read_alike() -> None:
    body = {"name": "eu-1", "coordination_uri": "amqp://coord/pumpd", "grace": 3}
    shovels = {"s": {"sources": {"broker": "amqp://a"}, "destinations": {"broker": "amqp://b"},
                     "queue": "q"}}
    as_group = parse_config({"shovels": shovels, "group": body}).cluster
    as_cluster = parse_config({"shovels": shovels, "cluster": body}).cluster
    assert as_group is not None and as_group == as_cluster
    assert as_group.name == "eu-1" and as_group.grace == 3
    with pytest.raises(ConfigError, match='give "group" or its earlier name "cluster", not both'):
        parse_config({"shovels": shovels, "group": body, "cluster": body})
    with pytest.raises(ConfigError, match=r"group\.grace"):
        parse_config({"shovels": shovels, "group": {**body, "grace": -1}})
