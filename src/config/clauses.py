"""The clauses of a shovel, each read and checked, and a shovel in the static form's clauses.

The dynamic form (:mod:`.dynamic`) reads the same values under RabbitMQ's flat names with the
same checks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, NoReturn

from .amqp10_clauses import (
    read_address,
    read_amqp10_message_maps,
    read_amqp10_prefetch,
    read_amqp10_uri_list,
    read_one_amqp10_uri,
    refuse_queue_length,
    warn_undeclared,
)
from .json_input import INT64_BOUND
from .model import (
    AMQP10_SOURCE_POLICY,
    AckMode,
    Amqp10URI,
    BrokerURI,
    Declaration,
    DeleteAfter,
    Disposition,
    Endpoint,
    Protocol,
    ShovelConfig,
    UndeliverablePolicy,
)
from .spec import (
    ENDPOINT,
    PUBLISH_FIELDS,
    PUBLISHING_ID_PATTERN,
    SHOVEL,
    UNDELIVERABLE,
    common_names,
    endpoint_keys,
    side_keys,
    static_names,
)
from .uri import URIError, parse_uri, uri_notes
from .values import (
    Context,
    bool_value,
    check_keys,
    enum_value,
    int_value,
    is_finite_number,
    is_int,
    object_value,
    seconds_value,
    shortstr_value,
    show,
    suggest,
    table_value,
)
from .vocabulary import (
    BASIC_PROPERTIES,
    BIT,
    DECLARATION_METHODS,
    LEGACY_DYNAMIC_KEYS,
    PROTOCOLS,
    REQUIRED_FIELDS,
    SHORTSTR,
    USES_LAST_QUEUE,
)

_SHORTSTR_PROPERTIES = tuple(name for name, kind in BASIC_PROPERTIES.items()
                             if kind == SHORTSTR and name != "expiration")

# pumpd's own: allowed in both forms
COMMON_CLAUSES = common_names()
# Every clause of a shovel in the static form
STATIC_ALL = static_names()
# The plugin's floor for delete_after_duration (rabbit_shovel.hrl, SOFT_..._FLOOR), in seconds.
PLUGIN_DURATION_FLOOR = 60

DEFAULT_PREFETCH = SHOVEL["prefetch_count"].int_default()
DEFAULT_RECONNECT_DELAY = SHOVEL["reconnect_delay"].float_default()
DEFAULT_STALL_TIMEOUT = SHOVEL["stall_timeout"].float_default()


def read_reconnect_delay(ctx: Context, clause: str, value: object) -> float:
    """The plugin restarts a worker only for a positive integer delay (rabbit_shovel_worker_sup,
    rabbit_shovel_dyn_worker_sup): anything else means "never reconnect" there."""
    if is_finite_number(value) and isinstance(value, (int, float)) and value < 0:
        ctx.warn(clause, f"{value:g} is read as 0, as the plugin does: the shovel stops for good "
                         "after its first failure")
        return 0.0
    delay = seconds_value(ctx, clause, value, SHOVEL["reconnect_delay"].high())
    if delay > 0 and not float(delay).is_integer():
        ctx.warn(clause, f"{delay:g} s: pumpd reconnects after {delay:g} s, where the plugin "
                         "never reconnects (it restarts a shovel only for a whole number of "
                         "seconds)")
    return delay


def read_stall_timeout(ctx: Context, clause: str, value: object) -> float:
    """pumpd's own: seconds without movement before a stalled session restarts; 0 = never."""
    return seconds_value(ctx, clause, value, SHOVEL["stall_timeout"].high())


def read_delete_after_duration(ctx: Context, clause: str, value: object) -> float | None:
    """delete_after_duration: a positive whole number of seconds, as the plugin validates it."""
    if value is None:
        return None
    low, high = SHOVEL["delete_after_duration"].int_bounds()
    if not is_int(value) or not isinstance(value, int) or value < low:
        ctx.fail(clause, f"must be a positive integer (seconds), got {show(value)}")
    if value > high:
        ctx.fail(clause, f"must be at most {high} seconds, got {show(value)}")
    if value < PLUGIN_DURATION_FLOOR:
        ctx.warn(clause, f"{value} s: pumpd stops after {value} s; the plugin raises any value "
                         f"under {PLUGIN_DURATION_FLOOR} s to {PLUGIN_DURATION_FLOOR} s "
                         "(delete_after_duration_floor)")
    return float(value)


def read_consumer(ctx: Context, args_clause: str, name_clause: str,
                  obj: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """basic.consume's arguments (an AMQP table; [] is the plugin's "none") and tag."""
    raw = obj.get(args_clause, SHOVEL["consumer_args"].default_value())
    args = {} if raw == [] else table_value(ctx, args_clause, raw)
    priority = args.get("x-priority")
    if priority is not None and not is_int(priority):
        ctx.fail(f"{args_clause}.x-priority", f"must be an integer, got {show(priority)}")
    offset = args.get("x-stream-offset")
    if offset is not None and not (is_int(offset) or isinstance(offset, str)):
        ctx.fail(f"{args_clause}.x-stream-offset",
                 'must be "first", "last", "next", an offset (integer) or an interval such as '
                 f'"1h", got {show(offset)}')
    tag = shortstr_value(ctx, name_clause, obj.get(name_clause,
                                                   SHOVEL["consumer_name"].default_value()))
    return args, tag


def _declaration(ctx: Context, clause: str, item: object, declared_queue: bool) -> Declaration:
    """One element of a ``declarations`` list: ``"queue.declare"`` or ``{"queue.bind": {...}}``.

    pumpd extension: ``{"queue.declare": {...}, "if_missing": true}`` (see
    :attr:`Declaration.if_missing`).

    :param declared_queue: whether a queue.declare comes earlier in the same list.
    :raises ConfigError: on an unknown method or field, a wrong type, or a missing field.
    """
    if_missing = False
    if isinstance(item, str):
        method, fields_obj = item, {}
    elif isinstance(item, dict):
        keys = [k for k in item if k != "if_missing"]
        if len(keys) != 1:
            ctx.fail(clause, "a declaration object must have exactly one key, the method name "
                             f"(e.g. {{\"queue.declare\": {{...}}}}), got {len(keys)}")
        method = keys[0]
        if "if_missing" in item:
            if_missing = bool_value(ctx, f"{clause}.if_missing", item["if_missing"])
            if if_missing and method != "queue.declare":
                ctx.fail(f"{clause}.if_missing", "applies to queue.declare only")
        fields_obj = item[method]
        if not isinstance(fields_obj, dict):
            ctx.fail(clause, f"the fields of {method} must be an object, got {show(fields_obj)}")
    else:
        ctx.fail(clause, f"a declaration is a method name or an object, got {show(item)}")
    if method not in DECLARATION_METHODS:
        ctx.fail(clause, f"unsupported method {method!r}"
                         f"{suggest(method, list(DECLARATION_METHODS))}; "
                         f"supported: {', '.join(DECLARATION_METHODS)}")
    spec = DECLARATION_METHODS[method]
    fields: dict[str, Any] = {}
    for name, value in fields_obj.items():
        where = f"{clause}.{method}.{name}"
        if name not in spec:
            ctx.fail(where, f"{method} has no field {name!r}{suggest(name, list(spec))}; "
                            f"its fields: {', '.join(spec)}")
        kind = spec[name]
        if kind == BIT:
            fields[name] = bool_value(ctx, where, value)
        elif kind == SHORTSTR:
            fields[name] = shortstr_value(ctx, where, value)
        else:
            fields[name] = table_value(ctx, where, value)
    for name in REQUIRED_FIELDS.get(method, ()):
        if not fields.get(name):
            ctx.fail(clause, f"{method} needs a non-empty {name!r}")
    if method in USES_LAST_QUEUE and not fields.get("queue") and not declared_queue:
        ctx.fail(clause, f"{method} with queue \"\" means the most recently declared queue, but "
                         "no queue.declare comes before it")
    return Declaration(method, fields, if_missing=if_missing)


# How messages name a protocol, and the other protocol of each wire.
PROTOCOL_NAMES = {Protocol.AMQP091: "AMQP 0-9-1", Protocol.AMQP10: "AMQP 1.0",
                  Protocol.STREAM: "stream"}
OTHER_PROTOCOL = {Protocol.AMQP091: Protocol.AMQP10, Protocol.AMQP10: Protocol.AMQP091}


def other_protocols(protocol: Protocol) -> tuple[Protocol, ...]:
    """Every protocol but ``protocol``: their keys are refused on its side."""
    return tuple(p for p in Protocol if p is not protocol)
# What a side of the other protocol has instead of a key, where a hint helps.
_INSTEAD = {
    "queue": "an AMQP 1.0 source receives from its address",
    "declarations": "an AMQP 1.0 side declares nothing (the plugin ignores declarations there)",
    "publish_fields": "an AMQP 1.0 destination sends to its address",
    "publish_properties": "use amqp10_properties and amqp10_application_properties",
    "address": "an AMQP 0-9-1 side has declarations, and a source its queue",
    "src-queue": "use src-address", "src-exchange": "use src-address",
    "dest-queue": "use dest-address", "dest-exchange": "use dest-address",
    "dest-publish-properties": "use dest-properties and dest-application-properties",
    "src-address": "use src-queue or src-exchange",
    "dest-address": "use dest-queue or dest-exchange, or neither",
    "dest-properties": "use dest-publish-properties",
    **{legacy: f"use {current}" for legacy, current in LEGACY_DYNAMIC_KEYS.items()},
}


def refuse_other_protocol(ctx: Context, where: str, key: str, side: str,
                          protocol: Protocol, owner: Protocol | None = None) -> NoReturn:
    """A key of another protocol (``owner``; None: the other wire's) given on a side of
    ``protocol``: refused by name (as the plugin refuses it: it validates each side against its
    protocol's keys)."""
    other = PROTOCOL_NAMES[owner if owner is not None else OTHER_PROTOCOL[protocol]]
    article = "an" if other.startswith("AMQP") else "a"
    hint = f" ({_INSTEAD[key]})" if key in _INSTEAD else ""
    ctx.fail(where, f"belongs to {article} {other} {side}, and this {side}'s protocol is "
                    f"{protocol.value}{hint}")


def read_protocol(ctx: Context, clause: str, value: object, side: str = "destination"
                  ) -> Protocol:
    """A side's protocol: amqp091 or amqp10, or for a destination stream (the plugin's 4.x
    "local" runs inside the broker)."""
    allowed = ENDPOINT["protocol"].enum if side == "destination" else PROTOCOLS
    if value == "local":
        ctx.fail(clause, "local shovels run inside the broker (the plugin's in-broker protocol): "
                         f"pumpd connects over the network; use {' or '.join(allowed)}")
    if value == Protocol.STREAM.value and side == "source":
        ctx.fail(clause, "a stream is a destination only: read a stream source as an AMQP 0-9-1 "
                         "queue (consumer_args x-stream-offset) or an AMQP 1.0 address")
    return Protocol(enum_value(ctx, clause, value, allowed))


def read_publishing_id(ctx: Context, clause: str, value: object) -> str:
    """A stream destination's publishing ids: "source-offset", "none", "message_id" or
    "header:NAME"."""
    text = shortstr_value(ctx, clause, value)
    if not re.match(PUBLISHING_ID_PATTERN, text):
        ctx.fail(clause, f"{text!r} is not a publishing id: give \"source-offset\", \"none\", "
                         "\"message_id\" or \"header:NAME\"")
    return text


def read_stream_port(ctx: Context, clause: str, value: object) -> int | None:
    if value is None:
        return None
    return int_value(ctx, clause, value, *ENDPOINT["stream_port"].int_bounds())


def read_stream_name(ctx: Context, clause: str, value: object) -> str:
    name = shortstr_value(ctx, clause, value)
    if not name:
        ctx.fail(clause, "must not be empty")
    return name


def read_stream_target(ctx: Context, prefix: str, obj: Mapping[str, Any], stream: str,
                       super_stream: str) -> tuple[str | None, str | None]:
    """A stream destination's stream or super stream (exactly one), under the keys
    ``stream`` / ``super_stream`` (``prefix`` names where they are, for errors)."""
    if (stream in obj) == (super_stream in obj):
        ctx.fail(f"{prefix}{stream}", f"give exactly one of '{stream}' (a stream) and "
                                      f"'{super_stream}' (a super stream) with a stream "
                                      "destination")
    if stream in obj:
        return read_stream_name(ctx, f"{prefix}{stream}", obj[stream]), None
    return None, read_stream_name(ctx, f"{prefix}{super_stream}", obj[super_stream])


def _endpoint(ctx: Context, clause: str, side: str, value: object) -> Endpoint:
    """``sources`` / ``destinations``: ``protocol``, ``brokers`` (or ``broker``), and
    ``declarations`` (AMQP 0-9-1) or ``address`` and ``predeclared`` (AMQP 1.0).

    :raises ConfigError: on a bad shape, an unknown key or one of the other protocol, a malformed
        URI or declaration.
    """
    obj = object_value(ctx, clause, value)
    check_keys(ctx, f"{clause}.", obj, ENDPOINT.names(), "unknown key")
    protocol = read_protocol(ctx, f"{clause}.protocol",
                             obj.get("protocol", ENDPOINT["protocol"].default_value()), side)
    for other in other_protocols(protocol):
        for key in endpoint_keys(other.value):
            if key in obj:
                refuse_other_protocol(ctx, f"{clause}.{key}", key, side, protocol, other)
    if "brokers" in obj and "broker" in obj:
        ctx.fail(clause, "give 'brokers' (a list) or 'broker' (one URI), not both")
    if "brokers" not in obj and "broker" not in obj:
        ctx.fail(clause, "missing 'brokers' (a list of URIs) or 'broker' (one URI)")
    if protocol is Protocol.STREAM:
        stream, super_stream = read_stream_target(ctx, f"{clause}.", obj, "stream",
                                                  "super_stream")
        return Endpoint(
            brokers=(read_uri_list(ctx, f"{clause}.brokers", obj["brokers"]) if "brokers" in obj
                     else (read_uri(ctx, f"{clause}.broker", obj["broker"]),)),
            protocol=protocol, stream=stream, super_stream=super_stream,
            stream_port=read_stream_port(ctx, f"{clause}.stream_port", obj.get("stream_port")))
    if protocol is Protocol.AMQP10:
        amqp10_brokers = (read_amqp10_uri_list(ctx, f"{clause}.brokers", obj["brokers"])
                          if "brokers" in obj
                          else (read_one_amqp10_uri(ctx, f"{clause}.broker", obj["broker"]),))
        if "address" not in obj:
            ctx.fail(clause, f"missing 'address' (the AMQP 1.0 address the {side}'s link "
                             "attaches to)")
        predeclared = bool_value(ctx, f"{clause}.predeclared",
                                 obj.get("predeclared", ENDPOINT["predeclared"].default_value()))
        return warn_undeclared(ctx, f"{clause}.address", Endpoint(
            brokers=(), protocol=protocol, amqp10_brokers=amqp10_brokers,
            address=read_address(ctx, f"{clause}.address", obj["address"]),
            declare_address_queue=not predeclared))
    if "brokers" in obj:
        brokers = read_uri_list(ctx, f"{clause}.brokers", obj["brokers"])
    else:
        brokers = (read_uri(ctx, f"{clause}.broker", obj["broker"]),)
    raw_decls = obj.get("declarations", ENDPOINT["declarations"].default_value())
    if not isinstance(raw_decls, list):
        ctx.fail(f"{clause}.declarations", f"must be a list, got {show(raw_decls)}")
    declarations = declaration_list(ctx, f"{clause}.declarations", raw_decls)
    return Endpoint(brokers=brokers, declarations=declarations)


def side_uris(ctx: Context, clause: str, value: object, protocol: Protocol,
              expected: str) -> tuple[tuple[BrokerURI, ...], tuple[Amqp10URI, ...]]:
    """A dynamic shovel's ``src-uri`` / ``dest-uri`` (one URI, or a list of them), read as URIs
    of the side's protocol: (AMQP 0-9-1 URIs, AMQP 1.0 URIs), one of them empty."""
    if protocol is Protocol.AMQP10:
        if isinstance(value, str):
            return (), (read_one_amqp10_uri(ctx, clause, value),)
        return (), read_amqp10_uri_list(ctx, clause, value, expected)
    if isinstance(value, str):
        return (read_uri(ctx, clause, value),), ()
    return read_uri_list(ctx, clause, value, expected), ()


def declaration_list(ctx: Context, clause: str, items: list[object]) -> tuple[Declaration, ...]:
    """A ``declarations`` list: at most the spec's bound of declarations, each checked in order
    (a binding to queue "" needs a queue.declare before it).

    :raises ConfigError: naming the list or the element
    """
    most = ENDPOINT["declarations"].int_max()
    if len(items) > most:
        ctx.fail(clause, f"at most {most} declarations, got {len(items)}")
    out: list[Declaration] = []
    for i, item in enumerate(items):
        declared = any(d.method == "queue.declare" for d in out)
        out.append(_declaration(ctx, f"{clause}[{i}]", item, declared))
    return tuple(out)


def read_declarations(items: list[object], source: str) -> tuple[Declaration, ...]:
    """A ``declarations`` list given on its own, outside a file (the Spark data source's
    option); errors name ``source`` and the clause ``declarations``.

    :raises ConfigError: as :func:`declaration_list`
    """
    return declaration_list(Context(source), "declarations", items)


def read_uri(ctx: Context, clause: str, value: object) -> BrokerURI:
    """One AMQP URI, parsed; what pumpd reads differently from the plugin becomes a warning."""
    if not isinstance(value, str):
        ctx.fail(clause, f"must be an AMQP URI string, got {show(value)}")
    most = ENDPOINT["broker"].int_max()
    if len(value) > most:
        ctx.fail(clause, f"a URI of at most {most} characters, got {len(value)}")
    try:
        uri = parse_uri(value)
    except URIError as exc:
        ctx.fail(clause, str(exc))
    for note in uri_notes(uri):
        ctx.warn(clause, note)
    return uri


def read_uri_list(ctx: Context, clause: str, value: object,
                  expected: str = "a non-empty list of URIs") -> tuple[BrokerURI, ...]:
    """A non-empty list of URIs, at most the spec's bound, each read as :func:`read_uri` does.

    :param expected: what the clause takes, for the message when ``value`` is not such a list.
    """
    if not isinstance(value, list) or not value:
        ctx.fail(clause, f"must be {expected}, got {show(value)}")
    most = ENDPOINT["brokers"].int_max()
    if len(value) > most:
        ctx.fail(clause, f"at most {most} URIs, got {len(value)}")
    return tuple(read_uri(ctx, f"{clause}[{i}]", u) for i, u in enumerate(value))


def read_publish_properties(ctx: Context, clause: str, value: object) -> dict[str, Any]:
    """The basic properties to set on every re-published message, each type-checked.

    :raises ConfigError: on an unknown property or a value the property cannot hold.
    """
    # [] is how an export writes "none" (an empty Erlang property list)
    obj = object_value(ctx, clause, {} if value == [] else value)
    check_keys(ctx, f"{clause}.", obj, tuple(BASIC_PROPERTIES), "not a basic property")
    props: dict[str, Any] = {}
    for name, v in obj.items():
        where = f"{clause}.{name}"
        if name in _SHORTSTR_PROPERTIES:
            props[name] = shortstr_value(ctx, where, v)
        elif name == "expiration":  # RabbitMQ wants milliseconds as a string of digits
            s = shortstr_value(ctx, where, v, 'must be a string of digits (milliseconds), e.g. "60000"')
            if not (s.isascii() and s.isdigit()):
                ctx.fail(where, f'must be a string of digits (milliseconds), got {show(s)}')
            props[name] = s
        elif name == "delivery_mode":
            if not is_int(v) or v not in (1, 2):
                ctx.fail(where, f"must be 1 (transient) or 2 (persistent), got {show(v)}")
            props[name] = v
        elif name == "priority":
            props[name] = int_value(ctx, where, v, 0, 255)
        elif name == "timestamp":  # seconds since the epoch, an AMQP 64-bit timestamp
            props[name] = int_value(ctx, where, v, 0, INT64_BOUND - 1)
        else:  # headers
            props[name] = table_value(ctx, where, v)
    return props


def _publish_fields(
    ctx: Context, clause: str, value: object
) -> tuple[str | None, str | None, bool]:
    obj = object_value(ctx, clause, value)
    check_keys(ctx, f"{clause}.", obj, PUBLISH_FIELDS.names(), "not a publish field")
    exchange = routing_key = None
    if "exchange" in obj:  # "" is the default exchange
        exchange = shortstr_value(ctx, f"{clause}.exchange", obj["exchange"])
    if "routing_key" in obj:
        routing_key = shortstr_value(ctx, f"{clause}.routing_key", obj["routing_key"])
    mandatory = bool_value(ctx, f"{clause}.mandatory",
                           obj.get("mandatory", PUBLISH_FIELDS["mandatory"].default_value()))
    return exchange, routing_key, mandatory


def read_delete_after(ctx: Context, clause: str, value: object) -> DeleteAfter | int:
    """``delete_after``: ``"never"``, ``"queue-length"`` or a number of messages."""
    if value in ("never", "queue-length"):
        return DeleteAfter(value)
    low, high = SHOVEL["delete_after"].int_bounds()
    if isinstance(value, int) and not isinstance(value, bool) and value >= low:
        if value > high:
            ctx.fail(clause, f"must be at most {high} messages, got {show(value)}")
        return value
    ctx.fail(clause, f'must be "never", "queue-length" or a non-negative integer, '
                     f"got {show(value)}")


_POLICIES = UNDELIVERABLE["policy"].enum
_UNROUTABLE_POLICIES = UNDELIVERABLE["unroutable"].enum


def _undeliverable(ctx: Context, value: object, source: Protocol) -> UndeliverablePolicy:
    """``"undeliverable": "stop"`` or ``{"policy": ..., "park_queue": ..., "unroutable": ...}``.

    An AMQP 1.0 source cannot park (the park queue is published to over the source broker's
    AMQP 0-9-1 connection): park is refused there, and the policy left out is dead-letter.
    """
    clause = "undeliverable"
    if isinstance(value, str):
        value = {"policy": value}
    obj = object_value(ctx, clause, value)
    check_keys(ctx, f"{clause}.", obj, UNDELIVERABLE.names())
    amqp10 = source is Protocol.AMQP10
    default_policy = (AMQP10_SOURCE_POLICY.value if amqp10
                      else UNDELIVERABLE["policy"].default_value())
    policy = enum_value(ctx, f"{clause}.policy", obj.get("policy", default_policy), _POLICIES)
    unroutable = enum_value(ctx, f"{clause}.unroutable",
                            obj.get("unroutable", UNDELIVERABLE["unroutable"].default_value()),
                            _UNROUTABLE_POLICIES)
    if amqp10:
        if policy == Disposition.PARK.value:
            ctx.fail(f"{clause}.policy", _NO_PARK + ": use dead-letter (the message is settled as "
                                         "rejected at the source: RabbitMQ dead-letters it, "
                                         "ActiveMQ moves it to its DLQ) or stop")
        if unroutable == Disposition.PARK.value:
            ctx.fail(f"{clause}.unroutable", _NO_PARK + ": use drop or stop")
        if "park_queue" in obj:
            ctx.fail(f"{clause}.park_queue", _NO_PARK)
    park_queue = shortstr_value(ctx, f"{clause}.park_queue",
                                obj.get("park_queue", UNDELIVERABLE["park_queue"].default_value()))
    if not park_queue:
        ctx.fail(f"{clause}.park_queue", "must name a queue (the server-named \"\" cannot be "
                                         "found again)")
    return UndeliverablePolicy(Disposition(policy), park_queue, Disposition(unroutable))


_NO_PARK = ("parking publishes the message to a queue on the source broker over AMQP 0-9-1, "
            "and this shovel's source is AMQP 1.0")


def read_common_clauses(ctx: Context, obj: Mapping[str, Any],
                        source: Protocol) -> dict[str, Any]:
    """pumpd's own clauses, named alike in both forms, as :class:`ShovelConfig` fields
    (``source``: the source's protocol, which decides what ``undeliverable`` may say)."""
    return {
        "workers": int_value(ctx, "workers", obj.get("workers", SHOVEL["workers"].default_value()),
                             *SHOVEL["workers"].int_bounds()),
        "source_read_hold_ms": int_value(ctx, "source_read_hold_ms",
                                         obj.get("source_read_hold_ms",
                                                 SHOVEL["source_read_hold_ms"].default_value()),
                                         *SHOVEL["source_read_hold_ms"].int_bounds()),
        "own_process": bool_value(ctx, "own_process",
                                  obj.get("own_process", SHOVEL["own_process"].default_value())),
        "undeliverable": _undeliverable(ctx, obj.get("undeliverable",
                                                     SHOVEL["undeliverable"].default_value()),
                                        source),
    }


def read_static_shovel(ctx: Context, obj: Mapping[str, Any]) -> ShovelConfig:
    """A shovel in the static form's clauses (the plugin's static shovels, and pumpd's own).

    :raises ConfigError: on the first bad clause.
    """
    check_keys(ctx, "", obj, STATIC_ALL)
    for clause in (c.name for c in SHOVEL if c.required):
        if clause not in obj:
            ctx.fail(clause, "missing (it is mandatory)")
    source = _endpoint(ctx, "sources", "source", obj["sources"])
    destination = _endpoint(ctx, "destinations", "destination", obj["destinations"])
    for side, endpoint in (("source", source), ("destination", destination)):
        for other in other_protocols(endpoint.protocol):
            for key in side_keys(side, other.value, dynamic=False):
                if key in obj:
                    refuse_other_protocol(ctx, key, key, side, endpoint.protocol, other)
    amqp10_source = source.protocol is Protocol.AMQP10
    if not amqp10_source and "queue" not in obj:
        ctx.fail("queue", "missing (it is mandatory): the AMQP 0-9-1 source queue to consume "
                          "from")
    queue = "" if amqp10_source else shortstr_value(ctx, "queue", obj["queue"])
    exchange, routing_key, mandatory = _publish_fields(
        ctx, "publish_fields", obj.get("publish_fields", SHOVEL["publish_fields"].default_value())
    )
    ack_mode = SHOVEL["ack_mode"]
    consumer_args, consumer_tag = read_consumer(ctx, "consumer_args", "consumer_name", obj)
    prefetch = obj.get("prefetch_count", DEFAULT_PREFETCH)
    delete_after = read_delete_after(ctx, "delete_after",
                                     obj.get("delete_after", SHOVEL["delete_after"].default_value()))
    if amqp10_source:
        refuse_queue_length(ctx, "delete_after", delete_after)
    if "source_stream_port" in obj:
        source = replace(source, stream_port=read_stream_port(ctx, "source_stream_port",
                                                              obj["source_stream_port"]))
    return ShovelConfig(
        name=ctx.shovel or "",
        source=source,
        destination=destination,
        queue=queue,
        prefetch_count=(read_amqp10_prefetch(ctx, "prefetch_count", prefetch) if amqp10_source
                        else int_value(ctx, "prefetch_count", prefetch,
                                       *SHOVEL["prefetch_count"].int_bounds())),
        ack_mode=AckMode(enum_value(ctx, "ack_mode", obj.get("ack_mode", ack_mode.default),
                                    ack_mode.enum)),
        publish_properties=read_publish_properties(
            ctx, "publish_properties", obj.get("publish_properties",
                                               SHOVEL["publish_properties"].default_value())),
        publish_exchange=exchange,
        publish_routing_key=routing_key,
        publish_mandatory=mandatory,
        reconnect_delay=read_reconnect_delay(ctx, "reconnect_delay",
                                             obj.get("reconnect_delay", DEFAULT_RECONNECT_DELAY)),
        stall_timeout=read_stall_timeout(ctx, "stall_timeout",
                                         obj.get("stall_timeout", DEFAULT_STALL_TIMEOUT)),
        delete_after=delete_after,
        delete_after_duration=read_delete_after_duration(ctx, "delete_after_duration",
                                                         obj.get("delete_after_duration")),
        consumer_arguments=consumer_args,
        consumer_tag=consumer_tag,
        add_forward_headers=bool_value(ctx, "add_forward_headers",
                                       obj.get("add_forward_headers",
                                               SHOVEL["add_forward_headers"].default_value())),
        add_timestamp_header=bool_value(ctx, "add_timestamp_header",
                                        obj.get("add_timestamp_header",
                                                SHOVEL["add_timestamp_header"].default_value())),
        **read_amqp10_message_maps(ctx, obj, {name: name for name in AMQP10_MESSAGE_MAPS}),
        publishing_id=(read_publishing_id(ctx, "publishing_id", obj["publishing_id"])
                       if "publishing_id" in obj else ""),
        **read_common_clauses(ctx, obj, source.protocol),
    )


# The ShovelConfig fields of what an AMQP 1.0 destination sets on every message: named alike
# in the static form.
AMQP10_MESSAGE_MAPS = ("amqp10_properties", "amqp10_application_properties",
                       "amqp10_message_annotations")
