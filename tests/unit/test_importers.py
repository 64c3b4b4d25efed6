"""The importers: Erlang-terms shovel configs and export_definitions JSON, to pumpd's JSON."""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import orjson
import pytest
from pumpd.cli.import_commands import (
    ConfigImportError,
    main_import_definitions,
    main_import_erlang,
)
from pumpd.importers.definitions_export import explicit_local_uri, import_definitions
from pumpd.importers.erlang.shovels import import_erlang_config

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"

# What the plugin documentation's verbose example states, clause by clause (and nothing else).
PLUGIN_DOCS_EXPECTED = {
    "shovels": {
        "my_first_shovel": {
            "sources": {
                "brokers": [
                    "amqp://fred:secret@host1.domain/my_vhost",
                    "amqp://john:secret@host2.domain/my_vhost",
                ],
                "declarations": [
                    {
                        "exchange.declare": {
                            "exchange": "my_fanout",
                            "type": "fanout",
                            "durable": True,
                        }
                    },
                    # not durable, not exclusive: the plugin makes it durable, pumpd
                    # exclusive (a warning says so)
                    {"queue.declare": {"arguments": {"x-message-ttl": 60000},
                                       "exclusive": True}},
                    {"queue.bind": {"exchange": "my_direct", "queue": ""}},
                ],
            },
            "destinations": {
                "broker": "amqp://",
                "declarations": [
                    {
                        "exchange.declare": {
                            "exchange": "my_direct",
                            "type": "direct",
                            "durable": True,
                        }
                    },
                ],
            },
            "queue": "",
            "prefetch_count": 10,
            "ack_mode": "on_confirm",
            "publish_properties": {"delivery_mode": 2},
            "publish_fields": {"exchange": "my_direct", "routing_key": "from_shovel"},
            "reconnect_delay": 5,
        }
    }
}

ADVANCED_EXPECTED = {
    "shovels": {
        "orders_to_core": {
            "sources": {
                "brokers": [
                    "amqp://edge:s3cret@edge1.example.com:5672/orders?heartbeat=10",
                    (
                        "amqps://edge:s3cret@edge2.example.com/orders?cacertfile=/etc/ssl/ca.pem"
                        "&certfile=/etc/ssl/cert.pem&keyfile=/etc/ssl/key.pem"
                        "&verify=verify_peer&fail_if_no_peer_cert=true"
                    ),
                ],
                "declarations": [
                    {
                        "queue.declare": {
                            "queue": "orders.buffer",
                            "durable": True,
                            "arguments": {
                                "x-message-ttl": 86400000,
                                "x-max-length": 1000000,
                                "x-queue-type": "quorum",
                                "x-dead-letter-exchange": "orders.dlx",
                            },
                        }
                    },
                    {
                        "queue.bind": {
                            "queue": "orders.buffer",
                            "exchange": "orders",
                            "routing_key": "order.#",
                        }
                    },
                ],
            },
            "destinations": {
                "broker": "amqp://core:pw@core.example.com/%2F",
                "declarations": [
                    {
                        "exchange.declare": {
                            "exchange": "orders.in",
                            "type": "topic",
                            "durable": True,
                            "auto_delete": False,
                        }
                    }
                ],
            },
            "queue": "orders.buffer",
            "prefetch_count": 500,
            "ack_mode": "on_publish",
            "publish_properties": {
                "delivery_mode": 2,
                "content_type": "application/json",
                "app_id": "pumpd-import",
                "headers": {
                    "x-origin": "edge",
                    "x-hop": -1,
                    "x-port": 5672,
                    "x-ratio": 0.25,
                    "x-weight": 2.0,
                    "x-price": 19.99,
                    "x-at": 1700000000,
                    "x-ok": True,
                    "x-none": None,
                    "x-meta": {"region": "eu-west", "tier": 3},
                    "x-tags": ["a", 255, False],
                },
            },
            "publish_fields": {"exchange": "orders.in"},
            "reconnect_delay": 2.5,
        },
        "audit-tap": {
            "sources": {
                "broker": "amqp://",
                "declarations": [
                    {"queue.declare": {"exclusive": True}},
                    {
                        "queue.bind": {
                            "exchange": "amq.rabbitmq.trace",
                            "queue": "",
                            "routing_key": "publish.#",
                        }
                    },
                ],
            },
            "destinations": {"brokers": ["amqp://audit@audit.example.com/audit"]},
            "queue": "",
            "ack_mode": "no_ack",
            "publish_fields": {"exchange": "", "routing_key": "audit"},
        },
    }
}

DEFINITIONS_EXPECTED = {
    "shovels": {
        "move-orders": {
            "ack-mode": "on-confirm",
            "dest-protocol": "amqp091",
            "dest-queue": "orders.archive",
            "dest-uri": "amqp://shovel:secret@backup.example.com/archive",
            "src-delete-after": "queue-length",
            "src-protocol": "amqp091",
            "src-queue": "orders",
            "src-uri": "amqp:///%2F",
        },
        "orders:archive": {
            "ack-mode": "on-publish",
            "dest-add-forward-headers": True,
            "dest-exchange": "archive",
            "dest-exchange-key": "orders.archived",
            "dest-publish-properties": {"delivery_mode": 2},
            "dest-uri": "amqp://shovel:secret@backup.example.com/archive",
            "reconnect-delay": 5,
            "src-exchange": "orders",
            "src-exchange-key": "#",
            "src-prefetch-count": 100,
            "src-uri": "amqp:///%2F",
        },
        "/:archive": {
            "dest-queue": "archive",
            "dest-uri": "amqp://backup.example.com",
            "src-queue": "to-archive",
            "src-uri": "amqp:///%2F",
        },
        "old-style": {
            "dest-add-forward-headers": True,
            "src-delete-after": 1000,
            "dest-uri": ["amqp:///%2F", "amqp://h2.example.com/legacy"],
            "src-prefetch-count": 25,
            "src-queue": "old",
            "src-uri": "amqp:///%2F?heartbeat=30",
        },
    }
}


def only_plain_types(value: object) -> bool:
    """Exactly JSON's Python types: no Atom / ErlString / bytes left over."""
    if isinstance(value, dict):
        return all(type(k) is str and only_plain_types(v) for k, v in value.items())
    if isinstance(value, list):
        return all(only_plain_types(v) for v in value)
    return value is None or type(value) in (str, int, float, bool)


def shovel(clauses: str, *, name: str = "s") -> str:
    """A config with one shovel: the mandatory clauses, then ``clauses``."""
    extra = f", {clauses}" if clauses else ""
    return (
        "[{rabbitmq_shovel, [{shovels, [\n"
        f'  {{{name}, [{{sources, [{{broker, "amqp://a"}}]}},\n'
        '      {destinations, [{broker, "amqp://b"}]},\n'
        f'      {{queue, <<"q">>}}{extra}]}}\n'
        "]}]}]."
    )


def imported(text: str) -> dict[str, Any]:
    result = import_erlang_config(text, source="test.config")
    assert only_plain_types(result)
    return result


def one(text: str, name: str = "s") -> dict[str, Any]:
    shovels: dict[str, Any] = imported(text)["shovels"]
    return shovels[name]  # type: ignore[no-any-return]


def error_of(text: str) -> ConfigImportError:
    with pytest.raises(ConfigImportError) as info:
        import_erlang_config(text, source="test.config")
    return info.value


# --- the plugin documentation's example and a realistic advanced.config --------------------------


def test_plugin_docs_example_imports_to_exactly_its_clauses() -> None:
    text = (DATA / "plugin_docs_example.config").read_text()
    assert imported(text) == PLUGIN_DOCS_EXPECTED


def test_plugin_docs_example_keeps_the_clause_order() -> None:
    result = imported((DATA / "plugin_docs_example.config").read_text())
    assert list(result["shovels"]["my_first_shovel"]) == [
        "sources",
        "destinations",
        "queue",
        "prefetch_count",
        "ack_mode",
        "publish_properties",
        "publish_fields",
        "reconnect_delay",
    ]


def test_plugin_docs_example_inside_a_config_file() -> None:
    clause = (DATA / "plugin_docs_example.config").read_text()
    text = f"[{{rabbit, [{{tcp_listeners, [5672]}}]}},\n{clause}\n]."
    assert imported(text) == PLUGIN_DOCS_EXPECTED
    assert imported(clause.rstrip() + ".\n") == PLUGIN_DOCS_EXPECTED


def test_advanced_config_with_several_apps_and_two_shovels() -> None:
    assert imported((DATA / "advanced.config").read_text()) == ADVANCED_EXPECTED


def test_imports_pass_pumpds_own_validation() -> None:
    config = pytest.importorskip("pumpd.config.parse")
    example = config.parse_config(PLUGIN_DOCS_EXPECTED, source="the plugin documentation's example")
    first = example.shovels["my_first_shovel"]
    assert first.prefetch_count == 10
    assert first.ack_mode.value == "on_confirm"
    assert first.publish_exchange == "my_direct" and first.publish_routing_key == "from_shovel"
    assert [d.method for d in first.source.declarations] == [
        "exchange.declare",
        "queue.declare",
        "queue.bind",
    ]
    assert first.destination.brokers[0].host is None  # amqp:// is the local broker
    advanced = config.parse_config(ADVANCED_EXPECTED, source="advanced")
    assert list(advanced.shovels) == ["orders_to_core", "audit-tap"]
    definitions = config.parse_config(DEFINITIONS_EXPECTED, source="definitions")
    assert list(definitions.shovels) == ["move-orders", "orders:archive", "/:archive", "old-style"]
    assert definitions.shovels["move-orders"].source.brokers[0].vhost == "/"


# --- conversion rules -----------------------------------------------------------------------


def test_bare_atoms_in_property_lists_mean_true() -> None:
    result = one(
        shovel('{publish_fields, [{exchange, <<"x">>}]}').replace(
            '{sources, [{broker, "amqp://a"}]}',
            "{sources, [{broker, \"amqp://a\"}, {declarations, [{'queue.declare', "
            "[durable, exclusive, {auto_delete, false}, {passive, true}]}]}]}",
        )
    )
    assert result["sources"]["declarations"] == [
        {
            "queue.declare": {
                "durable": True,
                "exclusive": True,
                "auto_delete": False,
                "passive": True,
            }
        }
    ]


def test_strings_binaries_and_character_lists_are_text() -> None:
    text = shovel('{publish_fields, [{exchange, "from string"}, {routing_key, [107, 101, 121]}]}')
    text = text.replace('{queue, <<"q">>}', '{queue, <<"队列"/utf8>>}')
    result = one(text)
    assert result["queue"] == "队列"
    assert result["publish_fields"] == {"exchange": "from string", "routing_key": "key"}


def test_declarations_methods_and_fields() -> None:
    decls = (
        "['queue.declare', {'queue.declare', []}, "
        '{\'exchange.bind\', [{destination, <<"d">>}, {source, <<"s">>}, {routing_key, <<"#">>}]}, '
        '{\'queue.unbind\', [{queue, <<"q">>}, {exchange, <<"x">>}]}, '
        "{'queue.purge', [{queue, <<\"q\">>}]}, "
        "{'queue.delete', [{queue, <<\"old\">>}, if_empty]}, "
        "{'exchange.delete', [{exchange, <<\"old\">>}, {if_unused, true}]}, "
        '{\'exchange.unbind\', [{destination, <<"d">>}, {source, <<"s">>}]}, '
        '{\'exchange.declare\', [{exchange, <<"x">>}, {type, <<"headers">>}, internal, '
        '{arguments, [{<<"alternate-exchange">>, longstr, <<"ae">>}]}]}]'
    )
    text = shovel("").replace(
        '{destinations, [{broker, "amqp://b"}]}',
        f'{{destinations, [{{broker, "amqp://b"}}, {{declarations, {decls}}}]}}',
    )
    assert one(text)["destinations"]["declarations"] == [
        {"queue.declare": {"exclusive": True}},
        {"queue.declare": {"exclusive": True}},
        {"exchange.bind": {"destination": "d", "source": "s", "routing_key": "#"}},
        {"queue.unbind": {"queue": "q", "exchange": "x"}},
        {"queue.purge": {"queue": "q"}},
        {"queue.delete": {"queue": "old", "if_empty": True}},
        {"exchange.delete": {"exchange": "old", "if_unused": True}},
        {"exchange.unbind": {"destination": "d", "source": "s"}},
        {
            "exchange.declare": {
                "exchange": "x",
                "type": "headers",
                "internal": True,
                "arguments": {"alternate-exchange": "ae"},
            }
        },
    ]


def test_deprecated_ticket_field_is_dropped() -> None:
    text = shovel('{publish_fields, [{ticket, 0}, {exchange, <<"x">>}]}').replace(
        '{sources, [{broker, "amqp://a"}]}',
        "{sources, [{broker, \"amqp://a\"}, {declarations, [{'queue.declare', [{ticket, 0}]}]}]}",
    )
    result = one(text)
    assert result["publish_fields"] == {"exchange": "x"}
    assert result["sources"]["declarations"] == [{"queue.declare": {"exclusive": True}}]


def test_all_publish_properties() -> None:
    props = (
        '[{content_type, <<"text/plain">>}, {content_encoding, <<"gzip">>}, '
        '{headers, []}, {delivery_mode, 1}, {priority, 9}, {correlation_id, <<"c">>}, '
        '{reply_to, <<"r">>}, {expiration, <<"60000">>}, {message_id, <<"m">>}, '
        '{timestamp, 1700000000}, {type, <<"t">>}, {user_id, <<"u">>}, '
        '{app_id, <<"a">>}, {cluster_id, <<"k">>}]'
    )
    assert one(shovel(f"{{publish_properties, {props}}}"))["publish_properties"] == {
        "content_type": "text/plain",
        "content_encoding": "gzip",
        "headers": {},
        "delivery_mode": 1,
        "priority": 9,
        "correlation_id": "c",
        "reply_to": "r",
        "expiration": "60000",
        "message_id": "m",
        "timestamp": 1700000000,
        "type": "t",
        "user_id": "u",
        "app_id": "a",
        "cluster_id": "k",
    }


@pytest.mark.parametrize(
    "entry, value",
    [
        ('longstr, <<"text">>', "text"),
        ('longstr, "a string"', "a string"),
        ('binary, <<"raw">>', "raw"),
        ("signedint, -2147483648", -(2**31)),
        ("signedint, 2147483647", 2**31 - 1),
        ("long, 9223372036854775807", 2**63 - 1),
        ("long, -1", -1),
        ("short, -32768", -32768),
        ("byte, -128", -128),
        ("byte, 127", 127),
        ("unsignedbyte, 255", 255),
        ("unsignedshort, 65535", 65535),
        ("unsignedint, 4294967295", 2**32 - 1),
        ("bool, true", True),
        ("bool, false", False),
        ("float, 1.5", 1.5),
        ("float, 2", 2.0),
        ("double, -0.125", -0.125),
        ("decimal, {2, 1999}", 19.99),
        ("decimal, {0, 42}", 42),
        ("timestamp, 1700000000", 1700000000),
        ("void, undefined", None),
        ('table, [{<<"a">>, long, 1}, {<<"b">>, table, []}]', {"a": 1, "b": {}}),
        ('array, [{longstr, <<"x">>}, {long, 2}, {array, [{bool, true}]}]', ["x", 2, [True]]),
        ("array, []", []),
    ],
)
def test_typed_table_values(entry: str, value: object) -> None:
    text = shovel(f'{{publish_properties, [{{headers, [{{<<"k">>, {entry}}}]}}]}}')
    result = one(text)["publish_properties"]["headers"]
    assert result == {"k": value}
    assert type(result["k"]) is type(value)


@pytest.mark.parametrize(
    "entry, reason",
    [
        ("byte, 128", "k: 128 is out of range -128..127"),
        ("unsignedbyte, -1", "out of range 0..255"),
        ("signedint, 2147483648", "out of range"),
        ("long, 9223372036854775808", "out of range"),
        ('long, <<"60000">>', 'expected an integer of type long, found <<"60000">>'),
        ("bool, yes", "expected true or false, found yes"),
        ('float, <<"1">>', "expected a number of type float"),
        ("decimal, 1.5", "expected a decimal {Scale, Value}, found 1.5"),
        ("longstr, 42", "expected a binary for type longstr, found 42"),
        ("longstr, <<255>>", "is not valid UTF-8"),
        ("table, 1", "expected a field table"),
        ("array, [long]", "expected a typed array element {Type, Value}, found long"),
        ("array, [{long, x}]", "k[0]: expected an integer of type long, found x"),
        ("integer, 1", "unknown field type integer"),
        ('"long", 1', 'unknown field type "long"'),
    ],
)
def test_bad_typed_table_values(entry: str, reason: str) -> None:
    err = error_of(shovel(f'{{publish_properties, [{{headers, [{{<<"k">>, {entry}}}]}}]}}'))
    assert "shovel 's': clause 'publish_properties': headers" in err.reason
    assert reason in err.reason


@pytest.mark.parametrize(
    "table, reason",
    [
        (
            '[{<<"x-message-ttl">>, 60000}]',
            'expected a typed table entry {<<"name">>, Type, Value}',
        ),
        ("[{'x-message-ttl', long, 60000}]", "expected a binary name, found 'x-message-ttl'"),
        ('[{<<"a">>, long, 1}, {<<"a">>, long, 2}]', "the table has the key 'a' twice"),
        ("#{a => 1}", "expected a field table"),
    ],
)
def test_bad_arguments_tables(table: str, reason: str) -> None:
    text = shovel("").replace(
        '{sources, [{broker, "amqp://a"}]}',
        "{sources, [{broker, \"amqp://a\"},\n  {declarations, [{'queue.declare', "
        f"[{{arguments, {table}}}]}}]}}]}}",
    )
    err = error_of(text)
    assert "shovel 's': clause 'sources': declarations: queue.declare: arguments" in err.reason
    assert reason in err.reason
    assert err.line == 3


def test_extra_clauses_the_plugin_reads() -> None:
    text = shovel(
        "{delete_after, 'queue-length'}, {add_forward_headers, true}, {add_timestamp_header, false}"
    )
    result = one(text)
    assert result["delete_after"] == "queue-length"
    assert result["add_forward_headers"] is True
    assert result["add_timestamp_header"] is False
    assert one(shovel("{delete_after, never}"))["delete_after"] == "never"
    assert one(shovel("{delete_after, 100}"))["delete_after"] == 100


def test_defaults_fill_missing_optional_clauses() -> None:
    text = (
        "[{rabbitmq_shovel, [\n"
        "  {defaults, [{prefetch_count, 50}, {reconnect_delay, 1}, {ack_mode, on_publish}]},\n"
        "  {shovels, [\n"
        '    {a, [{sources, [{broker, "amqp://x"}]}, {destinations, [{broker, "amqp://y"}]},\n'
        '         {queue, <<"q">>}, {prefetch_count, 10}]},\n'
        '    {b, [{sources, [{broker, "amqp://x"}]}, {destinations, [{broker, "amqp://y"}]},\n'
        '         {queue, <<"q">>}]}]}]}].'
    )
    shovels = imported(text)["shovels"]
    assert shovels["a"]["prefetch_count"] == 10
    assert shovels["a"]["reconnect_delay"] == 1 and shovels["a"]["ack_mode"] == "on_publish"
    assert shovels["b"]["prefetch_count"] == 50


def test_other_application_settings_are_ignored() -> None:
    text = shovel("").replace("[{shovels,", "[{some_future_setting, 1}, {shovels,")
    assert list(imported(text)["shovels"]) == ["s"]


def test_quoted_atom_shovel_names() -> None:
    assert list(imported(shovel("", name="'my shovel'"))["shovels"]) == ["my shovel"]


# --- refusals, with the shovel, the clause and the position ---------------------------------


@pytest.mark.parametrize(
    "clauses, reason",
    [
        ("{prefetch_count, 70000}", "clause 'prefetch_count': 70000 is out of range 0..65535"),
        ("{prefetch_count, -1}", "out of range 0..65535"),
        ("{prefetch_count, 1.5}", "clause 'prefetch_count': expected an integer, found 1.5"),
        (
            "{ack_mode, on_confrm}",
            "expected one of no_ack, on_publish, on_confirm, found on_confrm",
        ),
        ('{ack_mode, "on_confirm"}', 'found "on_confirm"'),
        ("{reconnect_delay, five}", "found five"),
        ("{delete_after, forever}", "expected never, 'queue-length' or a non-negative integer"),
        ("{add_forward_headers, 1}", "expected true or false, found 1"),
        (
            "{publish_properties, [{delivery_mod, 2}]}",
            "unknown field 'delivery_mod' of basic.properties",
        ),
        ("{publish_properties, [{priority, 256}]}", "priority: 256 is out of range 0..255"),
        ("{publish_properties, [{headers, 1}]}", "headers: expected a field table"),
        ("{publish_properties, [{content_type, text}]}", "expected a binary or string, found text"),
        ("{publish_properties, {delivery_mode, 2}}", "expected a property list"),
        ("{publish_fields, [{immediate, true}]}", "RabbitMQ does not support immediate"),
        ('{publish_fields, [{exchnage, <<"x">>}]}', "unknown field 'exchnage' of basic.publish"),
        ("{publish_fields, [exchange]}", "expected a binary or string, found true"),
        (
            '{publish_fields, [{exchange, <<"a">>}, {exchange, <<"b">>}]}',
            "'exchange' is given twice",
        ),
        ("{prefetch, 10}", "unknown clause 'prefetch' (expected one of sources, destinations"),
        ('{queue, <<"again">>}', "shovel 's': 'queue' is given twice"),
        ('{"queue", <<"q">>}', 'expected {key, Value} or an atom, found {"queue", <<"q">>}'),
        ("{queue, q, extra}", "expected {key, Value} or an atom"),
    ],
)
def test_bad_clauses(clauses: str, reason: str) -> None:
    err = error_of(shovel(clauses))
    assert err.reason.startswith("shovel 's': ")
    assert reason in err.reason
    assert err.source == "test.config"
    assert err.line == 4  # the clause's line, from the Erlang positions


@pytest.mark.parametrize(
    "sources, reason",
    [
        ('[{brokers, "amqp://a"}]', 'found the single string "amqp://a" (write {broker, "..."}'),
        ("[{brokers, []}]", "expected a non-empty list of URIs, found []"),
        ('[{broker, "amqp://a"}, {brokers, ["amqp://b"]}]', "give either brokers or broker"),
        ("[{declarations, []}]", "the mandatory brokers (or broker) clause is missing"),
        ('[{broker, "http://a"}]', "'http://a' is not an amqp:// or amqps:// URI"),
        ('[{broker, "amqp://a b"}]', "contains white space"),
        ("[{broker, amqp}]", "expected an AMQP URI string, found amqp"),
        ('[{brokers, ["amqp://a", 1]}]', "expected an AMQP URI string, found 1"),
        (
            '[{broker, "amqp://a"}, {declaration, []}]',
            "unknown clause 'declaration' (expected brokers",
        ),
        (
            "[{broker, \"amqp://a\"}, {declarations, 'queue.declare'}]",
            "expected a list of AMQP methods",
        ),
        ('[{broker, "amqp://a"}, {declarations, [<<"queue.declare">>]}]', "expected a method"),
        (
            "[{broker, \"amqp://a\"}, {declarations, ['queue.declar']}]",
            "unknown AMQP method 'queue.declar'",
        ),
        (
            "[{broker, \"amqp://a\"}, {declarations, [{'basic.publish', []}]}]",
            "unknown AMQP method",
        ),
        (
            '[{broker, "amqp://a"}, {declarations, [{\'queue.bind\', [{routingkey, <<"k">>}]}]}]',
            "unknown field 'routingkey' (expected one of queue, exchange, routing_key",
        ),
        (
            '[{broker, "amqp://a"}, {declarations, [{\'queue.bind\', {queue, <<"q">>}}]}]',
            "declarations: queue.bind: expected a property list",
        ),
        (
            "[{broker, \"amqp://a\"}, {declarations, [{'queue.declare', [{durable, yes}]}]}]",
            "queue.declare: durable: expected true or false, found yes",
        ),
        (
            '[{broker, "amqp://a"}, {declarations, [{\'queue.declare\', [{queue, <<"é">>}]}]}]',
            'is not valid UTF-8 (write non-ASCII text as <<"..."/utf8>>)',
        ),
        ('#{broker => "amqp://a"}', "expected a property list"),
    ],
)
def test_bad_endpoints(sources: str, reason: str) -> None:
    text = shovel("").replace('{sources, [{broker, "amqp://a"}]}', f"{{sources, {sources}}}")
    err = error_of(text)
    assert err.reason.startswith("shovel 's': clause 'sources'")
    assert reason in err.reason
    assert err.line == 2


def test_missing_mandatory_clauses() -> None:
    text = shovel("").replace('      {queue, <<"q">>}', "      {prefetch_count, 1}")
    err = error_of(text)
    assert err.reason == "shovel 's': the mandatory clause 'queue' is missing"
    assert (err.line, err.column) == (2, 7)  # the shovel's clause list
    text = shovel("").replace('{sources, [{broker, "amqp://a"}]},', "")
    assert "mandatory clause 'sources' is missing" in error_of(text).reason


def test_duplicate_shovel_names() -> None:
    text = (
        "[{rabbitmq_shovel, [{shovels, [\n"
        '  {same, [{sources, [{broker, "amqp://a"}]}, {destinations, [{broker, "amqp://b"}]},'
        " {queue, <<>>}]},\n"
        '  {same, [{sources, [{broker, "amqp://a"}]}, {destinations, [{broker, "amqp://b"}]},'
        " {queue, <<>>}]}\n"
        "]}]}]."
    )
    err = error_of(text)
    assert err.reason == "shovel 'same' is defined twice: shovel names must be distinct"
    assert (err.line, err.column) == (3, 3)
    assert str(err) == f"test.config:3:3: {err.reason}"


@pytest.mark.parametrize(
    "text, reason, position",
    [
        (
            "[{rabbit, []}, {rabbitmq_management, []}].",
            "no rabbitmq_shovel clause found (application clauses: rabbit, rabbitmq_management)",
            (1, 1),
        ),
        (
            '["/etc/rabbitmq/shovels.config", {rabbit, []}].',
            "the file includes /etc/rabbitmq/shovels.config: import that",
            (1, 1),
        ),
        ("[].", "no rabbitmq_shovel clause found (application clauses: none)", (1, 1)),
        (
            "[{rabbitmq_shovel, [{shovels, []}]}, {rabbitmq_shovel, []}].",
            "the rabbitmq_shovel clause appears more than once",
            (1, 38),
        ),
        ("[{rabbitmq_shovel, []}].", "has no {shovels, [...]} clause", (1, 20)),
        ("[{rabbitmq_shovel, [{shovels, x}]}].", "shovels: expected a list", (1, 31)),
        (
            '[{rabbitmq_shovel, [{shovels, [{<<"name">>, []}]}]}].',
            'expected {shovel_name, [...]} with an atom as the name, found {<<"name">>, []}',
            (1, 32),
        ),
        ("[{rabbitmq_shovel, [{shovels, [s]}]}].", "expected {shovel_name, [...]}", (1, 32)),
        (
            "[{rabbitmq_shovel, [{shovels, [{s, x}]}]}].",
            "shovel 's': expected a property list",
            (1, 36),
        ),
        ("[rabbit].", "expected an application clause {app_name, [...]}, found rabbit", (1, 2)),
        ("{rabbit, []}.", "or a {rabbitmq_shovel, [...]} clause, found {rabbit, []}", (1, 1)),
        ("rabbitmq_shovel.", "expected a list of application clauses", (1, 1)),
        ("[{rabbitmq_shovel, [{shovels, []}]}", "expected ',', '|' or ']' in a list", (1, 36)),
        ('[{rabbitmq_shovel, "unterminated}]', "unterminated string", (1, 20)),
    ],
)
def test_bad_files(text: str, reason: str, position: tuple[int, int]) -> None:
    err = error_of(text)
    assert reason in err.reason
    assert (err.line, err.column) == position


# --- the import-erlang command ----------------------------------------------------------------


def test_main_import_erlang_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main_import_erlang(str(DATA / "plugin_docs_example.config")) == 0
    out, err = capsys.readouterr()
    assert err.startswith("pumpd: import-erlang: warning: ") and err.count("\n") == 1
    assert "a server-named queue that is neither durable nor exclusive" in err
    assert out.endswith("}\n") and not out.endswith("\n\n")
    assert orjson.loads(out) == PLUGIN_DOCS_EXPECTED
    assert out.startswith('{\n  "shovels": {\n    "my_first_shovel": {\n')  # OPT_INDENT_2


def test_main_import_erlang_reports_one_error_line(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rabbitmq.config"
    path.write_text(shovel("{ack_mode, sometimes}"))
    assert main_import_erlang(str(path)) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"pumpd: import-erlang: {path}:4:36: shovel 's': clause 'ack_mode': expected one of "
        "no_ack, on_publish, on_confirm, found sometimes\n"
    )


def test_main_import_erlang_syntax_error(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "advanced.config"
    path.write_text("[{rabbitmq_shovel,\n  [{shovels, [}]}].")
    assert main_import_erlang(str(path)) == 2
    assert capsys.readouterr().err == (
        f"pumpd: import-erlang: {path}:2:15: expected a term, found '}}'\n"
    )


def test_main_import_erlang_unreadable_files(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.config"
    assert main_import_erlang(str(missing)) == 2
    assert capsys.readouterr().err == (
        f"pumpd: import-erlang: {missing}: No such file or directory\n"
    )
    latin1 = tmp_path / "latin1.config"
    latin1.write_bytes(b'[{rabbit, []},\n {x, "caf\xe9"}].')
    assert main_import_erlang(str(latin1)) == 2
    assert capsys.readouterr().err == (
        f"pumpd: import-erlang: {latin1}:2:10: the file is not valid UTF-8\n"
    )


# --- export_definitions ---------------------------------------------------------------------


def load_definitions() -> dict[str, Any]:
    return orjson.loads((DATA / "definitions.json").read_bytes())  # type: ignore[no-any-return]


def test_definitions_fixture_has_the_real_top_level_keys() -> None:
    keys = set(load_definitions())
    assert {
        "rabbit_version",
        "users",
        "vhosts",
        "permissions",
        "parameters",
        "policies",
        "queues",
        "exchanges",
        "bindings",
        "global_parameters",
    } <= keys


def test_definitions_import() -> None:
    result = import_definitions(load_definitions(), source="defs.json")
    assert result == DEFINITIONS_EXPECTED
    assert list(result["shovels"]) == ["move-orders", "orders:archive", "/:archive", "old-style"]


def test_definitions_ignore_other_parameters_and_sections() -> None:
    defs = load_definitions()
    components = {p["component"] for p in defs["parameters"]}
    assert components == {"shovel", "federation-upstream", "vhost-limits"}
    only_shovels = copy.deepcopy(defs)
    only_shovels["parameters"] = [p for p in defs["parameters"] if p["component"] == "shovel"]
    for key in ("users", "queues", "policies", "global_parameters"):
        del only_shovels[key]
    assert import_definitions(only_shovels, source="x") == DEFINITIONS_EXPECTED


def test_definitions_names_unique_per_vhost() -> None:
    def param(vhost: str, name: str) -> dict[str, Any]:
        value = {"src-uri": "amqp://a", "src-queue": "q", "dest-uri": "amqp://b"}
        return {"component": "shovel", "vhost": vhost, "name": name, "value": value}

    defs = {"parameters": [param("/", "x"), param("v1", "y"), param("v2", "y"), param("v3", "y")]}
    assert list(import_definitions(defs, source="d")["shovels"]) == ["x", "v1:y", "v2:y", "v3:y"]
    # "a:b" is a legal shovel name; it must not silently swallow vhost a's shovel b.
    clash = {"parameters": [param("x", "a:b"), param("a", "b"), param("c", "b")]}
    with pytest.raises(ConfigImportError, match="would be named 'a:b', which another shovel"):
        import_definitions(clash, source="d")


@pytest.mark.parametrize(
    "uri, explicit",
    [
        ("amqp://", "amqp:///%2F"),
        ("amqp://?heartbeat=5", "amqp:///%2F?heartbeat=5"),
        ("amqp://user:pw@", "amqp://user:pw@/%2F"),
        ("AMQP://", "AMQP:///%2F"),
        ("amqp:///", "amqp:///"),  # the empty vhost, stated
        ("amqp:///other", "amqp:///other"),
        ("amqp:///%2F", "amqp:///%2F"),
        ("amqp://host", "amqp://host"),
        ("amqp://host/v", "amqp://host/v"),
        ("amqp://:5672", "amqp://:5672"),
        ("amqp://[::1]", "amqp://[::1]"),
        ("amqps://", "amqps://"),
        ("not a uri", "not a uri"),
    ],
)
def test_host_less_uri_made_explicit(uri: str, explicit: str) -> None:
    assert explicit_local_uri(uri) == explicit


def test_host_less_uri_gets_vhost_slash_whatever_the_shovels_vhost() -> None:
    defs = {
        "parameters": [
            {
                "component": "shovel",
                "vhost": "other vhost",
                "name": "local",
                "value": {"src-uri": "amqp://", "src-queue": "q", "dest-uri": ["amqp://", 7]},
            }
        ]
    }
    value = import_definitions(defs, source="d")["shovels"]["local"]
    assert value["src-uri"] == "amqp:///%2F"
    assert value["dest-uri"] == ["amqp:///%2F", 7]  # not a URI: left for validation to report


def test_legacy_dynamic_names_are_renamed() -> None:
    value = {
        "src-uri": "amqp://a",
        "src-queue": "q",
        "dest-uri": "amqp://b",
        "prefetch-count": 10,
        "delete-after": "never",
        "add-forward-headers": True,
        "add-timestamp-header": True,
        "publish-properties": {"delivery_mode": 2},
        "dest-publish-properties": {"delivery_mode": 1},
    }
    defs = {"parameters": [{"component": "shovel", "vhost": "/", "name": "n", "value": value}]}
    assert import_definitions(defs, source="d")["shovels"]["n"] == {
        "src-uri": "amqp://a",
        "src-queue": "q",
        "dest-uri": "amqp://b",
        "src-prefetch-count": 10,
        "src-delete-after": "never",
        "dest-add-forward-headers": True,
        "dest-add-timestamp-header": True,
        "dest-publish-properties": {"delivery_mode": 1},  # the current name wins
    }


@pytest.mark.parametrize(
    "defs, reason",
    [
        ([], "expected a JSON object"),
        ({"users": []}, 'no shovels found: no entry of "parameters" has "component": "shovel"'),
        ({"parameters": []}, "no shovels found"),
        ({"parameters": [{"component": "federation-upstream", "name": "u"}]}, "no shovels found"),
        ({"parameters": {}}, '"parameters" is not a list'),
        (
            {"parameters": [{"component": "shovel", "vhost": "/", "value": {}}]},
            "parameters[0]: a shovel parameter without a name",
        ),
        (
            {"parameters": [{"component": "shovel", "name": "n", "value": {}}]},
            "shovel 'n': the parameter has no vhost",
        ),
        (
            {"parameters": [{"component": "shovel", "name": "n", "vhost": "/", "value": "x"}]},
            "shovel 'n' in vhost '/': \"value\" is not an object",
        ),
        (
            {
                "parameters": [
                    {"component": "shovel", "name": "n", "vhost": "/", "value": {}},
                    {"component": "shovel", "name": "n", "vhost": "/", "value": {}},
                ]
            },
            "shovel 'n' in vhost '/' appears twice",
        ),
    ],
)
def test_bad_definitions(defs: Any, reason: str) -> None:
    with pytest.raises(ConfigImportError) as info:
        import_definitions(defs, source="defs.json")
    assert reason in info.value.reason
    assert str(info.value).startswith("defs.json: ")


def test_main_import_definitions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main_import_definitions(str(DATA / "definitions.json")) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.endswith("}\n")
    assert orjson.loads(out) == DEFINITIONS_EXPECTED


def test_main_import_definitions_errors(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "defs.json"
    bad.write_text('{\n  "parameters": [,]\n}')
    assert main_import_definitions(str(bad)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pumpd: import-definitions: {bad}:2:")
    assert "not valid JSON" in err and err.count("\n") == 1
    empty = tmp_path / "empty.json"
    empty.write_text('{"rabbit_version": "3.12.4", "parameters": []}')
    assert main_import_definitions(str(empty)) == 2
    assert capsys.readouterr().err == (
        f'pumpd: import-definitions: {empty}: no shovels found: no entry of "parameters" has '
        '"component": "shovel"\n'
    )


def test_publish_fields_mandatory_is_imported() -> None:
    doc = imported(shovel("{publish_fields, [{mandatory, false}, {routing_key, <<\"k\">>}]}"))
    assert doc["shovels"]["s"]["publish_fields"] == {"mandatory": False, "routing_key": "k"}


# --- the current static format (RabbitMQ 3.7+), as its documentation and the plugin's
# amqp091_static_SUITE write it ---------------------------------------------------------------

CURRENT_FORMAT = """[{rabbitmq_shovel, [{shovels, [
  {my_first_shovel, [
    {source, [
      {protocol, amqp091},
      {uris, ["amqp://fred:secret@host1.domain/my_vhost",
              "amqp://john:secret@host2.domain/my_vhost"]},
      {declarations, [{'exchange.declare', [{exchange, <<"my_fanout">>}, {type, <<"fanout">>},
                                            durable]},
                      {'queue.declare', [{queue, <<"q">>}, durable,
                                         {arguments, [{<<"x-queue-type">>, longstr,
                                                       <<"quorum">>}]}]},
                      {'queue.bind', [{exchange, <<"my_fanout">>}, {queue, <<"q">>}]}]},
      {queue, <<"q">>},
      {prefetch_count, 10},
      {delete_after, 'queue-length'},
      {consumer_args, [{<<"x-priority">>, long, 3}]}
    ]},
    {destination, [
      {protocol, amqp091},
      {uris, ["amqp://"]},
      {declarations, [{'exchange.declare', [{exchange, <<"my_direct">>}, {type, <<"direct">>},
                                            durable]}]},
      {publish_properties, [{delivery_mode, 2}]},
      {publish_fields, [{exchange, <<"my_direct">>}, {routing_key, <<"from_shovel">>}]},
      {add_forward_headers, true},
      {add_timestamp_header, true}
    ]},
    {ack_mode, on_confirm},
    {reconnect_delay, 5}
  ]}
]}]}]."""


def test_current_format_imports() -> None:
    warnings: list[str] = []
    doc = import_erlang_config(CURRENT_FORMAT, source="c.config", warnings=warnings)
    s = doc["shovels"]["my_first_shovel"]
    assert s["sources"]["brokers"] == ["amqp://fred:secret@host1.domain/my_vhost",
                                       "amqp://john:secret@host2.domain/my_vhost"]
    assert s["sources"]["declarations"][1] == {"queue.declare": {
        "queue": "q", "durable": True, "arguments": {"x-queue-type": "quorum"}}}
    assert s["destinations"] == {"brokers": ["amqp://"], "declarations": [
        {"exchange.declare": {"exchange": "my_direct", "type": "direct", "durable": True}}]}
    assert (s["queue"], s["prefetch_count"], s["delete_after"]) == ("q", 10, "queue-length")
    assert s["consumer_args"] == {"x-priority": 3}
    assert s["publish_properties"] == {"delivery_mode": 2}
    assert s["publish_fields"] == {"exchange": "my_direct", "routing_key": "from_shovel"}
    assert s["add_forward_headers"] is True and s["add_timestamp_header"] is True
    assert (s["ack_mode"], s["reconnect_delay"]) == ("on_confirm", 5)
    assert warnings == []
    config = pytest.importorskip("pumpd.config.parse")
    parsed = config.parse_config(doc).shovels["my_first_shovel"]
    assert parsed.consumer_arguments == {"x-priority": 3} and parsed.queue == "q"


def test_current_format_defaults_are_its_own() -> None:
    """No ack_mode in the current format is no_ack (rabbit_shovel_config:parse_current), which
    loses messages: imported as such, and the import says so."""
    text = ("[{rabbitmq_shovel, [{shovels, [{s, [\n"
            '  {source, [{uris, ["amqp://a"]}, {queue, <<"q">>}]},\n'
            '  {destination, [{uris, ["amqp://b"]}]}]}]}]}].')
    warnings: list[str] = []
    s = import_erlang_config(text, source="c.config", warnings=warnings)["shovels"]["s"]
    assert s == {"sources": {"brokers": ["amqp://a"]}, "destinations": {"brokers": ["amqp://b"]},
                 "queue": "q", "ack_mode": "no_ack"}
    (warning,) = warnings
    assert warning.startswith("c.config:1:") and "no_ack LOSES the messages in flight" in warning


def test_current_format_main_prints_warnings(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "advanced.config"
    path.write_text("[{rabbitmq_shovel, [{shovels, [{s, [\n"
                    '  {source, [{uris, ["amqp://a"]}, {queue, <<"q">>}, '
                    "{delete_after_duration, 10}]},\n"
                    '  {destination, [{uris, ["amqp://b"]}]}, {reconnect_delay, 0.5}]}]}]}].')
    assert main_import_erlang(str(path)) == 0
    out, err = capsys.readouterr()
    assert orjson.loads(out)["shovels"]["s"]["delete_after_duration"] == 10
    lines = err.splitlines()
    assert len(lines) == 3 and all(ln.startswith("pumpd: import-erlang: warning: ") for ln in lines)
    assert "no_ack LOSES" in lines[0]
    assert "where the plugin never reconnects" in err and "raises any value under 60 s" in err


def test_topology_predeclared_checks_the_source_queue() -> None:
    text = ("[{rabbitmq_shovel, [{topology, [{predeclared, true}]}, {shovels, [{s, [\n"
            '  {source, [{uris, ["amqp://a"]}, {queue, <<"q">>}]},\n'
            '  {destination, [{uris, ["amqp://b"]}]}, {ack_mode, on_confirm}]}]}]}].')
    s = import_erlang_config(text, source="c")["shovels"]["s"]
    assert s["sources"]["declarations"] == [{"queue.declare": {"queue": "q", "passive": True}}]


def test_empty_shovels_list_is_no_shovels(capsys: pytest.CaptureFixture[str],
                                          tmp_path: pathlib.Path) -> None:
    path = tmp_path / "rabbitmq.config"
    path.write_text("[{rabbitmq_shovel, [{shovels, []}]}].")
    assert main_import_erlang(str(path)) == 0
    out, err = capsys.readouterr()
    assert orjson.loads(out) == {"shovels": {}}
    assert "no shovels to import" in err


@pytest.mark.parametrize("body, reason", [
    ('{source, [{protocol, amqp10}, {uris, ["amqp://a"]}, {queue, <<"q">>}]}, '
     '{destination, [{uris, ["amqp://b"]}]}',
     "clause 'source': the mandatory clause 'source_address' is missing"),
    ('{source, [{protocol, local}, {uris, ["amqp://a"]}, {queue, <<"q">>}]}, '
     '{destination, [{uris, ["amqp://b"]}]}', "local shovels run inside the broker"),
    ('{source, [{protocol, amqp1}, {uris, ["amqp://a"]}, {queue, <<"q">>}]}, '
     '{destination, [{uris, ["amqp://b"]}]}', "expected amqp091 or amqp10, found amqp1"),
    ('{source, [{protocol, amqp10}, {uris, ["amqp://a"]}, {source_adress, <<"q">>}]}, '
     '{destination, [{uris, ["amqp://b"]}]}', "unknown clause 'source_adress' (expected one of "
     "protocol, uris, source_address"),
    ('{source, [{uris, ["amqp://a"]}]}, {destination, [{uris, ["amqp://b"]}]}',
     "clause 'source': the mandatory clause 'queue' is missing"),
    ('{source, [{uris, ["amqp://a"]}, {queue, <<"q">>}]}',
     "the mandatory clause 'destination' is missing"),
    ('{sources, [{broker, "amqp://a"}]}, {source, [{uris, ["amqp://a"]}, {queue, <<"q">>}]}',
     "clause 'sources' does not belong to the current static-shovel format"),
    ('{source, [{uris, "amqp://a"}, {queue, <<"q">>}]}, {destination, [{uris, ["amqp://b"]}]}',
     "expected a non-empty list of URIs"),
    ('{source, [{uri, ["amqp://a"]}, {queue, <<"q">>}]}, {destination, [{uris, ["amqp://b"]}]}',
     "unknown clause 'uri' (expected one of protocol, uris"),
    ('{source, [{uris, ["amqp://a"]}, {queue, <<"q">>}, {delete_after_duration, 0}]}, '
     '{destination, [{uris, ["amqp://b"]}]}', "0 is out of range 1.."),
])
def test_current_format_refusals(body: str, reason: str) -> None:
    text = f"[{{rabbitmq_shovel, [{{shovels, [{{s, [{body}]}}]}}]}}]."
    with pytest.raises(ConfigImportError) as info:
        import_erlang_config(text, source="c")
    assert reason in info.value.reason
