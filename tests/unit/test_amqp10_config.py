"""AMQP 1.0 sides of a shovel in both configuration forms and both importers, validated as the
Shovel plugin validates them: its own test cases (deps/rabbitmq_shovel/test:
unit_runtime_parameter_SUITE, amqp10_dynamic_SUITE, unit_parsing_and_validation_SUITE,
amqp10_static_SUITE) with the same verdict, and where pumpd decides otherwise on purpose.
Pure parsing: no broker."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from pumpd.config import spec
from pumpd.config.model import (
    AckMode,
    DeleteAfter,
    Disposition,
    Endpoint,
    Protocol,
    ShovelConfig,
)
from pumpd.config.parse import ConfigError, parse_config, shovel_to_json
from pumpd.config.redaction import forget_secrets
from pumpd.importers.definitions_export import import_definitions
from pumpd.importers.erlang.shovels import import_erlang_config

AMQP10, AMQP091 = Protocol.AMQP10, Protocol.AMQP091


@pytest.fixture(autouse=True)
def _forget_the_passwords() -> Iterator[None]:
    """The passwords these tests register (generated ones among them) stay out of the other
    tests' texts: the registry is the process's."""
    yield
    forget_secrets()

# unit_runtime_parameter_SUITE: parse_amqp10 / validate_amqp10 (a proplist there, an object in
# JSON: validate_amqp10_with_a_map is the same definition)
PARSE_AMQP10: dict[str, Any] = {
    "ack-mode": "on-publish",
    "reconnect-delay": 1001,
    "src-protocol": "amqp10",
    "src-uri": "amqp://localhost:5672",
    "src-address": "a-src-queue",
    "src-delete-after": "never",
    "src-prefetch-count": 30,
    "dest-protocol": "amqp10",
    "dest-uri": "amqp://remotehost:5672",
    "dest-address": "a-dest-queue",
    "dest-add-forward-headers": True,
    "dest-add-timestamp-header": True,
    "dest-application-properties": {"some-app-prop": "app-prop-value"},
    "dest-message-annotations": {"some-message-ann": "message-ann-value"},
    "dest-properties": {"user_id": "some-user"},
}
# parse_amqp10_minimal
MINIMAL: dict[str, Any] = {
    "src-protocol": "amqp10", "src-uri": "amqp://localhost:5672", "src-address": "a-src-queue",
    "dest-protocol": "amqp10", "dest-uri": "amqp://remotehost:5672",
    "dest-address": "a-dest-queue",
}
# The static form's shovel from one AMQP 1.0 queue to another
STATIC: dict[str, Any] = {
    "sources": {"protocol": "amqp10", "broker": "amqp://src", "address": "/queues/in"},
    "destinations": {"protocol": "amqp10", "broker": "amqp://dst", "address": "/queues/out"},
    "ack_mode": "on_confirm",
}
STATIC_091_SOURCE: dict[str, Any] = {"broker": "amqp://src", "declarations": ["queue.declare"]}


def one(definition: dict[str, Any], **top: Any) -> ShovelConfig:
    return parse_config({"shovels": {"s": definition}, **top}).shovels["s"]


def error(definition: dict[str, Any], **top: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        one(definition, **top)
    return info.value


def with_(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        key = key.replace("__", "-")
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


# --- the plugin's dynamic-shovel cases --------------------------------------------------------


def test_parse_amqp10() -> None:
    s = one(PARSE_AMQP10)
    assert s.source.protocol is AMQP10 and s.destination.protocol is AMQP10
    assert s.source.brokers == () and s.destination.brokers == ()
    assert [u.redacted() for u in s.source.amqp10_brokers] == ["amqp://localhost:5672"]
    assert [u.redacted() for u in s.destination.amqp10_brokers] == ["amqp://remotehost:5672"]
    assert (s.source.address, s.destination.address) == ("a-src-queue", "a-dest-queue")
    assert s.source.declarations == s.destination.declarations == ()
    assert s.queue == ""
    assert (s.ack_mode, s.reconnect_delay, s.delete_after, s.prefetch_count) == (
        AckMode.ON_PUBLISH, 1001.0, DeleteAfter.NEVER, 30)
    assert s.add_forward_headers and s.add_timestamp_header
    assert s.amqp10_properties == {"user_id": "some-user"}
    assert s.amqp10_application_properties == {"some-app-prop": "app-prop-value"}
    assert s.amqp10_message_annotations == {"some-message-ann": "message-ann-value"}
    assert s.publish_exchange is None and s.publish_routing_key is None
    # each of the three maps is said at check time: the plugin 4.2+ leaves messages unchanged
    assert len([w for w in s.warnings if "the plugin 4.2 and later" in w]) == 3


def test_parse_amqp10_minimal() -> None:
    s = one(MINIMAL)
    assert (s.ack_mode, s.delete_after, s.prefetch_count) == (AckMode.ON_CONFIRM,
                                                              DeleteAfter.NEVER, 1000)
    assert not s.add_forward_headers and not s.add_timestamp_header
    assert s.amqp10_properties == s.amqp10_application_properties == {}
    assert s.amqp10_message_annotations == {}
    assert s.warnings == ()
    # what the plugin does when it parses a dynamic shovel: the address's queue is declared
    # unless predeclared (and "a-src-queue" names none)
    assert s.source.declare_address_queue and s.destination.declare_address_queue
    assert s.source.address_queue is None


@pytest.mark.parametrize("definition, source, destination", [
    ({"src-uri": "amqp://a", "src-queue": "q", "dest-uri": "amqp://b"}, AMQP091, AMQP091),
    (MINIMAL, AMQP10, AMQP10),
    (with_(MINIMAL, src__protocol="amqp091", src__address=None, src__queue="q"), AMQP091, AMQP10),
    (with_(MINIMAL, dest__protocol="amqp091", dest__address=None), AMQP10, AMQP091),
    (with_(MINIMAL, dest__protocol=None, dest__address=None), AMQP10, AMQP091),
])
def test_the_protocols(definition: dict[str, Any], source: Protocol,
                       destination: Protocol) -> None:
    """test_protocols_defaults / _explicit / _mixed: amqp091 unless the side says amqp10."""
    s = one(definition)
    assert (s.source.protocol, s.destination.protocol) == (source, destination)


@pytest.mark.parametrize("value, fragment", [
    ("not-a-real-protocol", "must be one of amqp091, amqp10"),  # the plugin's enum refuses it
    ("local", "local shovels run inside the broker"),  # the plugin's, inside the broker
    (10, "must be one of amqp091, amqp10, got 10"),
])
def test_an_unknown_protocol_is_refused(value: Any, fragment: str) -> None:
    e = error(with_(MINIMAL, src__protocol=value))
    assert e.clause == "src-protocol" and fragment in e.message


@pytest.mark.parametrize("protocol, source_key", [("amqp10", "src-address"),
                                                  ("amqp091", "src-queue")])
@pytest.mark.parametrize("as_list", [False, True])
def test_amqp10_destination(protocol: str, source_key: str, as_list: bool) -> None:
    """amqp10_dynamic_SUITE test_amqp10_destination (simple, simple_amqp10_dest,
    with_map_config): an AMQP 1.0 destination from either source; [] is an empty map."""
    definition = {"src-uri": "amqp://h", "dest-uri": ["amqp://h"], "src-protocol": protocol,
                  source_key: "/queues/src" if protocol == "amqp10" else "src",
                  "dest-protocol": "amqp10", "dest-address": "/queues/dest",
                  "dest-add-forward-headers": True, "dest-add-timestamp-header": True,
                  "dest-application-properties": {"app-prop-key": "app-prop-value"},
                  "dest-properties": {"user_id": "guest"},
                  "dest-message-annotations": {"x-message-ann-key": "message-ann-value"}}
    if as_list:
        definition.update({"dest-application-properties": [], "dest-properties": [],
                           "dest-message-annotations": []})
    s = one(definition)
    assert s.destination.protocol is AMQP10 and s.destination.address_queue == "dest"
    assert s.source.protocol is Protocol(protocol)
    assert bool(s.amqp10_properties) is not as_list


def test_change_definition() -> None:
    """amqp10_dynamic_SUITE change_definition: only the addresses differ."""
    a = one(with_(MINIMAL, src__address="/queues/src", dest__address="/queues/dest"))
    b = one(with_(MINIMAL, src__address="/queues/src", dest__address="/queues/dest2"))
    assert a != b and a.source == b.source
    assert b.destination.address_queue == "dest2"


def test_delete_after_queue_length_is_refused() -> None:
    """amqp10_dynamic_SUITE test_amqp10_delete_after_queue_length."""
    e = error(with_(MINIMAL, src__delete__after="queue-length"))
    assert e.clause == "src-delete-after"
    assert 'must be "never" or a number of messages for an AMQP 1.0 source' in e.message
    assert one(with_(MINIMAL, src__delete__after=0)).delete_after == 0


@pytest.mark.parametrize("value", [0, "whenever", 100 * 365 * 24 * 60 * 60])
def test_delete_after_duration_validation(value: Any) -> None:
    """amqp10_dynamic_SUITE delete_after_duration_validation."""
    assert error(with_(MINIMAL, src__delete__after__duration=value)).clause == \
        "src-delete-after-duration"


def test_delete_after_duration() -> None:
    assert one(with_(MINIMAL, src__delete__after__duration=300)).delete_after_duration == 300.0


def test_no_ack_and_a_number_of_messages() -> None:
    """rabbit_amqp10_shovel:validate_src: 'no-ack' and a numerical delete-after."""
    e = error(with_(MINIMAL, ack__mode="no-ack", src__delete__after=5))
    assert e.clause == "src-delete-after" and "no_ack" in e.message


# --- keys of the other protocol, refused by name as the plugin refuses them ------------------

# A valid value of every key that only one protocol's side has.
KEY_VALUES: dict[str, Any] = {
    "src-queue": "q", "src-queue-args": {}, "src-exchange": "x", "src-exchange-key": "k",
    "prefetch-count": 1, "delete-after": "never", "dest-queue": "q", "dest-queue-args": {},
    "dest-exchange": "x", "dest-exchange-key": "k", "dest-publish-properties": {},
    "publish-properties": {}, "add-forward-headers": True, "add-timestamp-header": True,
    "src-address": "/queues/q", "dest-address": "/queues/q", "dest-properties": {},
    "dest-application-properties": {}, "dest-message-annotations": {}, "src-stream-port": 5552,
}
OTHER_SIDE_KEYS = [(side, protocol, key)
                   for side in ("source", "destination") for protocol in ("amqp091", "amqp10")
                   for key in spec.side_keys(side, protocol, dynamic=True)]


@pytest.mark.parametrize("side, protocol, key", OTHER_SIDE_KEYS,
                         ids=[f"{k}-on-{'amqp10' if p == 'amqp091' else 'amqp091'}"
                              for _, p, k in OTHER_SIDE_KEYS])
def test_a_key_of_the_other_protocol_is_refused_by_name(side: str, protocol: str,
                                                        key: str) -> None:
    other = "amqp10" if protocol == "amqp091" else "amqp091"
    base = (MINIMAL if other == "amqp10" else
            {"src-uri": "amqp://a", "src-queue": "q", "dest-uri": "amqp://b"})
    if side == "source" and other == "amqp091":
        base = with_(MINIMAL, src__protocol=None, src__address=None, src__queue="q")
    if side == "destination" and other == "amqp091":
        base = with_(MINIMAL, dest__protocol=None, dest__address=None)
    definition = {**base, key: KEY_VALUES[key]}
    if key == "src-exchange" and "src-queue" in definition:
        del definition["src-queue"]
    e = error(definition)
    assert e.clause == key
    names = {"amqp091": "AMQP 0-9-1", "amqp10": "AMQP 1.0"}
    assert f"belongs to an {names[protocol]} {side}, and this {side}'s protocol is {other}" in \
        e.message


@pytest.mark.parametrize("definition, clause, fragment", [
    (with_(MINIMAL, src__address=None), "src-address",
     "missing (it is mandatory with src-protocol amqp10)"),
    (with_(MINIMAL, dest__address=None), "dest-address",
     "missing (it is mandatory with dest-protocol amqp10)"),
    (with_(MINIMAL, src__address=5), "src-address", "must be an AMQP 1.0 address (a string)"),
    (with_(MINIMAL, dest__address=""), "dest-address", "must not be empty"),
    (with_(MINIMAL, src__address="a" * 4097), "src-address", "at most 4096 bytes"),
    (with_(MINIMAL, src__prefetch__count=0), "src-prefetch-count",
     "a credit of 0 never lets a message through"),
    (with_(MINIMAL, src__prefetch__count=65536), "src-prefetch-count", "from 1 to 65535"),
    (with_(MINIMAL, src__prefetch__count=1.5), "src-prefetch-count", "got 1.5"),
    (with_(MINIMAL, src__predeclared="yes"), "src-predeclared", "must be true or false"),
    (with_(MINIMAL, dest__properties={"userid": "u"}), "dest-properties.userid",
     "not an AMQP 1.0 property (did you mean 'user_id'?)"),
    (with_(MINIMAL, dest__properties={"user_id": 5}), "dest-properties.user_id",
     "must be a string, got 5"),
    (with_(MINIMAL, dest__properties={"content_type": "text/é"}),
     "dest-properties.content_type", "is an AMQP symbol: ASCII only"),
    (with_(MINIMAL, dest__properties={"creation_time": "yesterday"}),
     "dest-properties.creation_time", "must be a timestamp (milliseconds since the epoch)"),
    (with_(MINIMAL, dest__properties={"group_sequence": 2**32}),
     "dest-properties.group_sequence", "from 0 to 4294967295"),
    (with_(MINIMAL, dest__properties="user_id"), "dest-properties", "must be an object"),
    (with_(MINIMAL, dest__application__properties={"k": 1}),
     "dest-application-properties.k", "must be a string, got 1"),  # "should be binary"
    (with_(MINIMAL, dest__message__annotations={"x-é": "v"}),
     "dest-message-annotations.x-é", "an annotation's key is an AMQP symbol"),
    (with_(MINIMAL, dest__message__annotations={"": "v"}), "dest-message-annotations",
     "a key must not be empty"),
    (with_(MINIMAL, src__uri="amqp://h/vhost"), "src-uri",
     "invalid AMQP 1.0 URI 'amqp://h/vhost': an AMQP 1.0 URI has no vhost path"),
    (with_(MINIMAL, dest__uri=["amqp://a", "amqp://u:hunter2@b?heartbeat=5"]), "dest-uri[1]",
     "invalid AMQP 1.0 URI 'amqp://u:***@b?heartbeat=5'"),
    (with_(MINIMAL, src__uri=[]), "src-uri", "a URI or a non-empty list of URIs"),
])
def test_bad_amqp10_values(definition: dict[str, Any], clause: str, fragment: str) -> None:
    e = error(definition)
    assert e.clause == clause and fragment in e.message, str(e)


def test_amqp10_values() -> None:
    s = one(with_(MINIMAL, src__consumer__args={"x-stream-offset": "first"},
                  src__consumer__name="my-link", src__predeclared=True,
                  dest__properties={"creation_time": "1700000000000", "group_sequence": 7,
                                    "absolute_expiry_time": 1800000000000,
                                    "content_type": "text/plain", "user_id": "u"},
                  src__uri=["amqp://a", "amqps://u:p@b?hostname=vhost:v"]))
    # the args are kept; the endpoint maps x-stream-offset to rabbitmq:stream-offset-spec
    assert s.consumer_arguments == {"x-stream-offset": "first"}
    assert s.consumer_tag == "my-link"
    assert not s.source.declare_address_queue and s.destination.declare_address_queue
    assert s.amqp10_properties == {"creation_time": 1700000000000, "group_sequence": 7,
                                   "absolute_expiry_time": 1800000000000,
                                   "content_type": "text/plain", "user_id": "u"}
    assert [u.effective_hostname for u in s.source.amqp10_brokers] == ["a", "vhost:v"]
    assert s.source.uris == s.source.amqp10_brokers


@pytest.mark.parametrize("address, queue", [
    ("/queues/q", "q"), ("/queues/my%20queue", "my queue"), ("/queues/a/b", "a/b"),
    ("/queues/", None), ("/exchanges/x/k", None), ("q", None), ("/queues/%ff", None),
])
def test_the_queue_an_address_names(address: str, queue: str | None) -> None:
    """rabbitmq_amqp_address:to_map/1's queue addresses."""
    assert Endpoint((), protocol=AMQP10, address=address).address_queue == queue


# --- what an AMQP 1.0 side cannot do ----------------------------------------------------------


def test_an_amqp10_source_dead_letters_by_default() -> None:
    assert one(MINIMAL).undeliverable.policy is Disposition.DEAD_LETTER
    assert one(with_(MINIMAL, undeliverable="stop")).undeliverable.policy is Disposition.STOP
    # an AMQP 1.0 destination with an AMQP 0-9-1 source parks as before
    mixed = with_(MINIMAL, src__protocol=None, src__address=None, src__queue="q")
    assert one(mixed).undeliverable.policy is Disposition.PARK


@pytest.mark.parametrize("undeliverable, clause, fragment", [
    ("park", "undeliverable.policy", "use dead-letter (the message is settled as rejected at "
                                     "the source"),
    ({"policy": "park"}, "undeliverable.policy", "this shovel's source is AMQP 1.0"),
    ({"unroutable": "park"}, "undeliverable.unroutable", "use drop or stop"),
    ({"policy": "stop", "park_queue": "p"}, "undeliverable.park_queue", "over AMQP 0-9-1"),
])
def test_an_amqp10_source_cannot_park(undeliverable: Any, clause: str, fragment: str) -> None:
    e = error(with_(MINIMAL, undeliverable=undeliverable))
    assert e.clause == clause and fragment in e.message


@pytest.mark.parametrize("undeliverable", [None, "dead-letter", "stop"])
def test_an_amqp10_source_cannot_go_without_acks(undeliverable: str | None) -> None:
    e = error(with_(MINIMAL, ack__mode="no-ack", undeliverable=undeliverable))
    assert e.clause == "ack-mode"
    assert "use on_confirm or on_publish" in e.message


def test_an_amqp10_source_cannot_be_in_a_group() -> None:
    e = error(MINIMAL, group={"name": "g"})
    assert "a group's lease is an exclusive queue declared on the source broker over AMQP " \
           "0-9-1" in e.message
    # the lease is the source's: an AMQP 1.0 destination is fine
    mixed = with_(MINIMAL, src__protocol=None, src__address=None, src__queue="q")
    assert one(mixed, cluster={"name": "g"}).destination.protocol is AMQP10


def test_more_than_one_worker_on_an_address() -> None:
    assert one(with_(MINIMAL, workers=3)).workers == 3


# --- the static form ----------------------------------------------------------------------------


def test_the_static_form() -> None:
    s = one(STATIC)
    assert (s.source.protocol, s.destination.protocol) == (AMQP10, AMQP10)
    assert (s.source.address, s.destination.address) == ("/queues/in", "/queues/out")
    assert s.queue == ""
    # the plugin's static AMQP 1.0 sides never declare (predeclared => true)
    assert not s.source.declare_address_queue and not s.destination.declare_address_queue
    s = one(with_(STATIC, sources={**STATIC["sources"], "predeclared": False},
                  amqp10_properties={"to": "/queues/elsewhere"}))
    assert s.source.declare_address_queue and s.amqp10_properties == {"to": "/queues/elsewhere"}
    assert one(with_(STATIC, sources=STATIC_091_SOURCE, queue="")).source.protocol is AMQP091


@pytest.mark.parametrize("changes, clause, fragment", [
    ({"queue": "q"}, "queue", "belongs to an AMQP 0-9-1 source, and this source's protocol is "
                              "amqp10 (an AMQP 1.0 source receives from its address)"),
    ({"sources": {**STATIC["sources"], "declarations": []}}, "sources.declarations",
     "an AMQP 1.0 side declares nothing"),
    ({"sources": {"protocol": "amqp10", "broker": "amqp://s"}}, "sources", "missing 'address'"),
    ({"sources": {"broker": "amqp://s", "address": "a"}, "queue": ""}, "sources.address",
     "belongs to an AMQP 1.0 source, and this source's protocol is amqp091"),
    ({"destinations": {"broker": "amqp://d", "predeclared": True}}, "destinations.predeclared",
     "belongs to an AMQP 1.0 destination"),
    ({"publish_fields": {"exchange": "x"}}, "publish_fields",
     "an AMQP 1.0 destination sends to its address"),
    ({"publish_properties": {}}, "publish_properties", "use amqp10_properties"),
    ({"destinations": {"broker": "amqp://d"}, "amqp10_properties": {}}, "amqp10_properties",
     "belongs to an AMQP 1.0 destination, and this destination's protocol is amqp091"),
    ({"sources": {**STATIC["sources"], "protocol": "amqp1"}}, "sources.protocol",
     "must be one of amqp091, amqp10"),
    ({"sources": {**STATIC["sources"], "broker": "amqp://"}}, "sources.broker",
     "needs a host"),
    ({"delete_after": "queue-length"}, "delete_after", "no queue length to read"),
    ({"prefetch_count": 0}, "prefetch_count", "the link credit"),
    ({"ack_mode": "no_ack"}, "ack_mode", "no_ack cannot go with an AMQP 1.0 source"),
    ({"undeliverable": "park"}, "undeliverable.policy", "this shovel's source is AMQP 1.0"),
])
def test_bad_static_amqp10(changes: dict[str, Any], clause: str, fragment: str) -> None:
    e = error({**STATIC, **changes})
    assert e.clause == clause and fragment in e.message, str(e)


# --- back to JSON (the daemon's state file) -----------------------------------------------------


@pytest.mark.parametrize("definition", [
    PARSE_AMQP10, MINIMAL, STATIC,
    with_(MINIMAL, src__protocol=None, src__address=None, src__queue="q", dest__predeclared=True),
    with_(MINIMAL, dest__protocol=None, dest__address=None, dest__exchange="x",
          undeliverable={"policy": "stop", "unroutable": "stop"}),
    with_(MINIMAL, src__uri="amqps://u:p%40ss@h:1?hostname=vhost:v&certfile=/c&keyfile=/k"
                            "&password=kp&versions=tlsv1.2,tlsv1.3&idle_time_out=5000",
          dest__properties={"creation_time": "5", "group_sequence": 1}),
    {**STATIC, "sources": {**STATIC["sources"], "predeclared": False}},
], ids=range(7))
def test_the_state_file_round_trips(definition: dict[str, Any]) -> None:
    s = one(definition)
    written = shovel_to_json(s)
    assert one(json.loads(json.dumps(written))) == s


# --- the importers ----------------------------------------------------------------------------


def test_a_definitions_export_keeps_an_amqp10_side_as_it_is() -> None:
    value = {**MINIMAL, "src-uri": "amqp://", "dest-uri": ["amqp://d"]}
    legacy = {"src-uri": "amqp://", "src-queue": "q", "prefetch-count": 5,
              "dest-protocol": "amqp10", "dest-uri": "amqp://d", "dest-address": "a",
              "add-forward-headers": True}
    doc = import_definitions({"parameters": [
        {"component": "shovel", "vhost": "/", "name": "a", "value": value},
        {"component": "shovel", "vhost": "/", "name": "b", "value": legacy},
    ]}, source="d.json")
    assert doc["shovels"]["a"] == value  # no host-less rewrite: not an AMQP 0-9-1 URI
    b = doc["shovels"]["b"]
    # the AMQP 0-9-1 source's legacy name and local URI are rewritten; the AMQP 1.0 destination's
    # legacy name is kept, and refused by name as the plugin refuses it
    assert b["src-uri"] == "amqp:///%2F" and b["src-prefetch-count"] == 5
    assert "add-forward-headers" in b
    with pytest.raises(ConfigError, match="belongs to an AMQP 0-9-1 destination"):
        parse_config({"shovels": {"b": b}})
    with pytest.raises(ConfigError, match="needs a host"):
        parse_config({"shovels": {"a": doc["shovels"]["a"]}})


# unit_parsing_and_validation_SUITE parse_amqp10_mixed (its URIs' "ampq" typo corrected: the
# plugin parses static URIs only when it connects)
PARSE_AMQP10_MIXED = """[{rabbitmq_shovel, [{shovels, [{my_shovel, [
  {source, [{protocol, amqp10}, {uris, ["amqp://myotherhost:5672"]},
            {source_address, <<"the-queue">>}]},
  {destination, [{protocol, amqp10}, {uris, ["amqp://myhost:5672"]},
                 {target_address, <<"targe-queue">>},
                 {message_annotations, [{soma_ann, <<"some-info">>}]},
                 {properties, [{user_id, <<"some-user">>}]},
                 {application_properties, [{app_prop_key, <<"app_prop_value">>}]},
                 {add_forward_headers, true}]},
  {ack_mode, on_confirm},
  {reconnect_delay, 2}]}]}]}]."""

# amqp10_static_SUITE's shovels: an AMQP 1.0 source to an AMQP 0-9-1 destination, and back
AMQP10_STATIC_SUITE = """[{rabbitmq_shovel, [{shovels, [
 {to_091, [{source, [{protocol, amqp10}, {uris, ["amqp://h:5672"]},
                     {source_address, <<"/queues/src">>}]},
           {destination, [{uris, ["amqp://h:5672/%2f?heartbeat=5"]},
                          {declarations, [{'queue.declare', [{queue, <<"dest">>}, durable]}]},
                          {publish_fields, [{exchange, <<>>}, {routing_key, <<"dest">>}]},
                          {publish_properties, [{delivery_mode, 2},
                                                {content_type, <<"shovelled">>}]},
                          {add_forward_headers, true}, {add_timestamp_header, true}]},
           {ack_mode, on_confirm}]},
 {from_091, [{source, [{uris, ["amqp://h:5672/%2f?heartbeat=5"]},
                       {declarations, ['queue.declare',
                                       {'exchange.declare', [{exchange, <<"x">>}, auto_delete]},
                                       {'queue.bind', [{queue, <<>>}, {exchange, <<"x">>},
                                                       {routing_key, <<"k">>}]}]},
                       {queue, <<>>}]},
             {destination, [{protocol, amqp10}, {uris, ["amqp://h:5672"]},
                            {add_forward_headers, true}, {add_timestamp_header, true},
                            {target_address, <<"/queues/dest">>}]},
             {ack_mode, on_publish}]}]}]}]."""


def test_parse_amqp10_mixed() -> None:
    warnings: list[str] = []
    doc = import_erlang_config(PARSE_AMQP10_MIXED, source="c", warnings=warnings)
    assert doc["shovels"]["my_shovel"] == {
        "sources": {"protocol": "amqp10", "brokers": ["amqp://myotherhost:5672"],
                    "address": "the-queue"},
        "destinations": {"protocol": "amqp10", "brokers": ["amqp://myhost:5672"],
                         "address": "targe-queue"},
        "amqp10_message_annotations": {"soma_ann": "some-info"},
        "amqp10_properties": {"user_id": "some-user"},
        "amqp10_application_properties": {"app_prop_key": "app_prop_value"},
        "add_forward_headers": True, "ack_mode": "on_confirm", "reconnect_delay": 2}
    assert warnings == []
    s = parse_config(doc).shovels["my_shovel"]
    assert (s.source.address, s.destination.address) == ("the-queue", "targe-queue")
    assert s.amqp10_properties == {"user_id": "some-user"}
    assert s.reconnect_delay == 2.0 and s.ack_mode is AckMode.ON_CONFIRM


def test_the_amqp10_static_suites_shovels() -> None:
    doc = import_erlang_config(AMQP10_STATIC_SUITE, source="c")
    config = parse_config(doc)
    to_091, from_091 = config.shovels["to_091"], config.shovels["from_091"]
    assert (to_091.source.protocol, to_091.destination.protocol) == (AMQP10, AMQP091)
    assert to_091.publish_routing_key == "dest" and to_091.queue == ""
    assert (from_091.source.protocol, from_091.destination.protocol) == (AMQP091, AMQP10)
    assert from_091.destination.address == "/queues/dest"
    assert not from_091.destination.declare_address_queue  # static: never declared


@pytest.mark.parametrize("side, fragment", [
    ('{source, [{protocol, amqp10}, {uris, ["amqp://a"]}, {source_address, <<"s">>}, '
     '{queue, <<"q">>}, {declarations, []}]}, {destination, [{uris, ["amqp://b"]}]}',
     "clause 'source': queue: ignored, as the plugin does: it is a clause of an amqp091 source"),
    ('{source, [{uris, ["amqp://a"]}, {queue, <<"q">>}, {source_address, <<"s">>}]}, '
     '{destination, [{uris, ["amqp://b"]}]}',
     "source_address: ignored, as the plugin does: it is a clause of an amqp10 source, and "
     "this source's protocol is amqp091"),
    ('{source, [{uris, ["amqp://a"]}, {queue, <<"q">>}]}, {destination, [{protocol, amqp10}, '
     '{uris, ["amqp://b"]}, {target_address, <<"t">>}, {delivery_annotations, [{k, <<"v">>}]}]}',
     "delivery_annotations: ignored, as the plugin does: the plugin never sets delivery "
     "annotations"),
])
def test_what_the_plugin_ignores_is_dropped_with_a_warning(side: str, fragment: str) -> None:
    warnings: list[str] = []
    text = f"[{{rabbitmq_shovel, [{{shovels, [{{s, [{side}, {{ack_mode, on_confirm}}]}}]}}]}}]."
    doc = import_erlang_config(text, source="c", warnings=warnings)
    assert any(fragment in w for w in warnings), warnings
    parse_config(doc)  # what is left is a valid shovel


def test_static_amqp10_values_of_other_types() -> None:
    text = ('[{rabbitmq_shovel, [{shovels, [{s, [{source, [{protocol, amqp10}, '
            '{uris, ["amqp://a"]}, {source_address, "s"}, {prefetch_count, 5}, '
            '{delete_after, 10}, {consumer_args, [{<<"x-stream-offset">>, longstr, '
            '<<"first">>}]}, {consumer_name, <<"link">>}]}, {destination, [{protocol, amqp10}, '
            '{uris, ["amqp://b"]}, {target_address, <<"t">>}, {properties, [{creation_time, '
            '1700000000000}, {<<"subject">>, "subj"}]}]}, {ack_mode, on_confirm}]}]}]}].')
    s = parse_config(import_erlang_config(text, source="c")).shovels["s"]
    assert (s.prefetch_count, s.delete_after, s.consumer_tag) == (5, 10, "link")
    assert s.consumer_arguments == {"x-stream-offset": "first"}
    assert s.amqp10_properties == {"creation_time": 1700000000000, "subject": "subj"}


# --- the JSON Schema agrees ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    return jsonschema.Draft202012Validator(spec.json_schema())


@pytest.mark.parametrize("shovel", [PARSE_AMQP10, MINIMAL, STATIC,
                                    with_(MINIMAL, dest__protocol=None, dest__address=None)],
                         ids=range(4))
def test_the_schema_accepts(validator: jsonschema.protocols.Validator,
                            shovel: dict[str, Any]) -> None:
    validator.validate({"shovels": {"s": shovel}})


@pytest.mark.parametrize("shovel", [
    with_(MINIMAL, src__address=None), with_(MINIMAL, src__queue="q"),
    with_(MINIMAL, src__delete__after="queue-length"), with_(MINIMAL, src__prefetch__count=0),
    with_(MINIMAL, undeliverable="park"), with_(MINIMAL, dest__queue="q"),
    with_(MINIMAL, dest__properties={"colour": "red"}),
    {**MINIMAL, "dest-protocol": "amqp091", "dest-properties": {}},
    {**STATIC, "queue": "q"}, {**STATIC, "publish_fields": {}},
    {**STATIC, "sources": {**STATIC["sources"], "declarations": []}},
    {**STATIC, "sources": {"protocol": "amqp10", "broker": "amqp://s"}},
], ids=range(12))
def test_the_schema_refuses_what_the_validator_refuses(validator: jsonschema.protocols.Validator,
                                                       shovel: dict[str, Any]) -> None:
    doc = {"shovels": {"s": shovel}}
    with pytest.raises(ConfigError):
        parse_config(doc)
    assert not validator.is_valid(doc)


def test_check_shows_no_password() -> None:
    s = one(with_(MINIMAL, src__uri="amqp://fred:sup3rsecret@h",
                  dest__properties={"user_id": "u"}))
    assert "sup3rsecret" not in s.source.describe()
    assert s.source.describe() == "amqp://fred@h:5672 address 'a-src-queue'"
    assert all("sup3rsecret" not in w for w in s.warnings)
    assert "sup3rsecret" not in repr(s)
