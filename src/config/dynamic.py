"""A shovel in the flat names of a RabbitMQ dynamic shovel (``src-uri``, ``dest-exchange``, ...).

Each side AMQP 0-9-1 or AMQP 1.0 (``src-protocol`` / ``dest-protocol``): an AMQP 0-9-1 side
normalised the way ``rabbit_amqp091_shovel:parse_source/parse_dest`` does, an AMQP 1.0 side read
as ``rabbit_amqp10_shovel`` reads it, and a key of one protocol refused by name on a side of the
other, as the plugin refuses it. The values are checked as the static form's clauses are
(:mod:`.clauses`, :mod:`.amqp10_clauses`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .amqp10_clauses import (
    read_address,
    read_amqp10_message_maps,
    read_amqp10_prefetch,
    refuse_queue_length,
    warn_undeclared,
)
from .clauses import (
    other_protocols,
    read_common_clauses,
    read_consumer,
    read_delete_after,
    read_delete_after_duration,
    read_protocol,
    read_publish_properties,
    read_publishing_id,
    read_reconnect_delay,
    read_stall_timeout,
    read_stream_port,
    read_stream_target,
    refuse_other_protocol,
    side_uris,
)
from .model import AckMode, Declaration, Endpoint, Protocol, ShovelConfig, ShovelOwner
from .spec import DYNAMIC, INTERNAL_OWNER, SHOVEL, SIDES, dynamic_names, side_keys
from .values import (
    Context,
    bool_value,
    check_keys,
    enum_value,
    int_value,
    shortstr_value,
    show,
    table_value,
)
from .vocabulary import LEGACY_DYNAMIC_KEYS

# The legacy pre-3.7 dynamic names are accepted as the plugin does, but not together with their
# current name.
_LEGACY_NAME = {c.dynamic: c.legacy for c in SHOVEL if c.dynamic and c.legacy}
# Every key of a shovel in the dynamic form
DYNAMIC_ALL = dynamic_names()
_INTERNAL_OWNER_FIELDS = INTERNAL_OWNER.names()


def _default(key: str) -> object:
    """What leaving out ``key`` means: the spec's default of the clause the key names."""
    for clause in SHOVEL:
        if clause.dynamic == key:
            return clause.default_value()
    return DYNAMIC[key].default_value()


def read_dynamic_shovel(ctx: Context, obj: Mapping[str, Any]) -> ShovelConfig:
    """A shovel in RabbitMQ's dynamic-shovel names, normalised as the plugin does.

    An AMQP 0-9-1 side replicates rabbit_amqp091_shovel:parse_source/parse_dest: ``src-queue``
    is checked with a passive declare and created durable (with ``src-queue-args``) when
    missing, or only checked with ``src-predeclared``; ``src-exchange`` gets a server-named
    exclusive queue bound with ``src-exchange-key`` (default ""); ``dest-queue`` is ensured the
    same way and published to through the default exchange with the queue name as routing key;
    ``dest-exchange`` and ``dest-exchange-key`` each replace the original exchange / routing key
    when given. An AMQP 1.0 side (rabbit_amqp10_shovel) attaches to ``src-address`` /
    ``dest-address``, having declared the queue a ``/queues/NAME`` address names unless
    ``src-predeclared`` / ``dest-predeclared``.

    :raises ConfigError: on the first bad key.
    """
    protocols = {side: read_protocol(ctx, key, obj.get(key, _default(key)), side)
                 for side, (_, _, key) in SIDES.items()}
    _check_dynamic_keys(ctx, obj, protocols)
    _warn_dynamic_ignored(ctx, obj, protocols)

    def where(key: str) -> str:
        """The name this definition uses for ``key``: the current one or its legacy one."""
        legacy = _LEGACY_NAME.get(key)
        return legacy if legacy is not None and legacy in obj else key

    def get(key: str, default: object) -> object:
        return obj.get(where(key), default)

    amqp10_source = protocols["source"] is Protocol.AMQP10
    if amqp10_source:
        queue, source = "", _amqp10_side(ctx, obj, "src", Protocol.AMQP10)
    else:
        queue, src_decls = _dynamic_source(ctx, obj)
        source = Endpoint(side_uris(ctx, "src-uri", obj["src-uri"], Protocol.AMQP091,
                                    _URIS)[0], src_decls,
                          stream_port=read_stream_port(ctx, "src-stream-port",
                                                       obj.get("src-stream-port")))
    publish_exchange = publish_routing_key = None
    if protocols["destination"] is Protocol.AMQP10:
        destination = _amqp10_side(ctx, obj, "dest", Protocol.AMQP10)
    elif protocols["destination"] is Protocol.STREAM:
        stream, super_stream = read_stream_target(ctx, "", obj, "dest-stream",
                                                  "dest-super-stream")
        destination = Endpoint(
            side_uris(ctx, "dest-uri", obj["dest-uri"], Protocol.AMQP091, _URIS)[0],
            protocol=Protocol.STREAM, stream=stream, super_stream=super_stream,
            stream_port=read_stream_port(ctx, "dest-stream-port", obj.get("dest-stream-port")))
    else:
        dest_decls, publish_exchange, publish_routing_key = _dynamic_destination(ctx, obj)
        destination = Endpoint(side_uris(ctx, "dest-uri", obj["dest-uri"], Protocol.AMQP091,
                                         _URIS)[0], dest_decls)
    modes = SHOVEL["ack_mode"]
    ack_mode = enum_value(ctx, "ack-mode", obj.get("ack-mode", modes.dynamic_default()),
                          modes.dynamic_enum)
    consumer_args, consumer_tag = read_consumer(ctx, "src-consumer-args", "src-consumer-name", obj)
    prefetch = get("src-prefetch-count", _default("src-prefetch-count"))
    delete_after = read_delete_after(ctx, where("src-delete-after"),
                                     get("src-delete-after", _default("src-delete-after")))
    if amqp10_source:
        refuse_queue_length(ctx, "src-delete-after", delete_after)
    return ShovelConfig(
        name=ctx.shovel or "",
        source=source,
        destination=destination,
        queue=queue,
        prefetch_count=(read_amqp10_prefetch(ctx, "src-prefetch-count", prefetch)
                        if amqp10_source
                        else int_value(ctx, where("src-prefetch-count"), prefetch,
                                       *SHOVEL["prefetch_count"].int_bounds())),
        ack_mode=AckMode(ack_mode.replace("-", "_")),
        publish_properties=read_publish_properties(ctx, where("dest-publish-properties"),
                                                   get("dest-publish-properties",
                                                       _default("dest-publish-properties"))),
        publish_exchange=publish_exchange,
        publish_routing_key=publish_routing_key,
        reconnect_delay=read_reconnect_delay(ctx, "reconnect-delay",
                                             obj.get("reconnect-delay",
                                                     _default("reconnect-delay"))),
        stall_timeout=read_stall_timeout(ctx, "stall-timeout",
                                         obj.get("stall-timeout", _default("stall-timeout"))),
        delete_after=delete_after,
        delete_after_duration=read_delete_after_duration(ctx, "src-delete-after-duration",
                                                         obj.get("src-delete-after-duration")),
        consumer_arguments=consumer_args,
        consumer_tag=consumer_tag,
        add_forward_headers=bool_value(ctx, where("dest-add-forward-headers"),
                                       get("dest-add-forward-headers",
                                           _default("dest-add-forward-headers"))),
        add_timestamp_header=bool_value(ctx, where("dest-add-timestamp-header"),
                                        get("dest-add-timestamp-header",
                                            _default("dest-add-timestamp-header"))),
        internal=bool_value(ctx, "internal", obj.get("internal", _default("internal"))),
        internal_owner=_internal_owner(ctx, obj.get("internal_owner")),
        **read_amqp10_message_maps(ctx, obj, _AMQP10_MESSAGE_MAPS),
        publishing_id=(read_publishing_id(ctx, "dest-publishing-id", obj["dest-publishing-id"])
                       if "dest-publishing-id" in obj else ""),
        **read_common_clauses(ctx, obj, protocols["source"]),
    )


# What src-uri / dest-uri take
_URIS = "a URI or a non-empty list of URIs"
# The ShovelConfig fields of what an AMQP 1.0 destination sets on every message, by key
_AMQP10_MESSAGE_MAPS = {c.name: c.dynamic for c in SHOVEL
                        if c.protocol == Protocol.AMQP10.value and c.dynamic}


def _amqp10_side(ctx: Context, obj: Mapping[str, Any], prefix: str,
                 protocol: Protocol) -> Endpoint:
    """An AMQP 1.0 side (rabbit_amqp10_shovel:parse_source / parse_dest): its URIs, its
    address, and whether the queue a ``/queues/NAME`` address names is declared first."""
    _, amqp10_brokers = side_uris(ctx, f"{prefix}-uri", obj[f"{prefix}-uri"], protocol, _URIS)
    predeclared = f"{prefix}-predeclared"
    return warn_undeclared(ctx, f"{prefix}-address", Endpoint(
        brokers=(), protocol=protocol, amqp10_brokers=amqp10_brokers,
        address=read_address(ctx, f"{prefix}-address", obj[f"{prefix}-address"]),
        declare_address_queue=not bool_value(ctx, predeclared,
                                             obj.get(predeclared, _default(predeclared)))))


def _internal_owner(ctx: Context, value: object) -> ShovelOwner | None:
    """The plugin's ``internal_owner``: ``{"name", "kind": "queue"|"exchange",
    "virtual_host"}``, every field mandatory."""
    if value is None:
        return None
    if not isinstance(value, dict):
        ctx.fail("internal_owner", f"must be an object with {', '.join(_INTERNAL_OWNER_FIELDS)}, "
                                   f"got {show(value)}")
    check_keys(ctx, "internal_owner.", value, _INTERNAL_OWNER_FIELDS, "unknown field")
    for key in _INTERNAL_OWNER_FIELDS:
        if key not in value:
            ctx.fail(f"internal_owner.{key}", "missing (it is mandatory)")
    kind = enum_value(ctx, "internal_owner.kind", value["kind"], INTERNAL_OWNER["kind"].enum)
    return ShovelOwner(kind, shortstr_value(ctx, "internal_owner.name", value["name"]),
                       shortstr_value(ctx, "internal_owner.virtual_host", value["virtual_host"]))


def _check_dynamic_keys(ctx: Context, obj: Mapping[str, Any],
                        protocols: Mapping[str, Protocol]) -> None:
    """The keys a dynamic shovel may have, which it must have, and which exclude each other.

    :raises ConfigError: on the first key that is unknown, of the other protocol on its side,
        missing, or in conflict.
    """
    check_keys(ctx, "", obj, DYNAMIC_ALL, "unknown key")
    for side, protocol in protocols.items():
        for other in other_protocols(protocol):
            for key in side_keys(side, other.value, dynamic=True):
                if key in obj:
                    refuse_other_protocol(ctx, key, key, side, protocol, other)
    for legacy, current in LEGACY_DYNAMIC_KEYS.items():
        if legacy in obj and current in obj:
            ctx.fail(legacy, f"give {current!r} or its legacy name {legacy!r}, not both")
    for key in ("src-uri", "dest-uri"):
        if key not in obj:
            ctx.fail(key, "missing (it is mandatory)")
    for side, protocol in protocols.items():
        _, prefix, protocol_key = SIDES[side]
        if protocol is Protocol.AMQP10 and f"{prefix}address" not in obj:
            ctx.fail(f"{prefix}address", f"missing (it is mandatory with {protocol_key} amqp10)")
    if protocols["source"] is Protocol.AMQP091 and ("src-queue" in obj) == ("src-exchange" in obj):
        ctx.fail("src-queue", "give exactly one of 'src-queue' and 'src-exchange'")
    if "dest-queue" in obj and "dest-exchange" in obj:
        ctx.fail("dest-queue", "give at most one of 'dest-queue' and 'dest-exchange'")


def _warn_dynamic_ignored(ctx: Context, obj: Mapping[str, Any],
                          protocols: Mapping[str, Protocol]) -> None:
    """Keys the plugin silently ignores in these combinations. The broker accepted them, so a
    definitions export has them: said at check time, not refused."""
    # (dest-exchange-key alone is meaningful: it replaces the routing key, keeping the exchange.)
    for key, needs in (("src-exchange-key", "src-exchange"), ("src-queue-args", "src-queue"),
                       ("dest-queue-args", "dest-queue")):
        if key in obj and needs not in obj:
            ctx.warn(key, f"ignored, as the plugin does: it only applies together with {needs!r}")
    if "dest-exchange-key" in obj and "dest-queue" in obj:
        ctx.warn("dest-exchange-key", "ignored, as the plugin does: with 'dest-queue' messages go "
                                      "to that queue through the default exchange")
    for side in ("src", "dest"):
        key = f"{side}-predeclared"
        if protocols["source" if side == "src" else "destination"] is Protocol.AMQP10:
            continue  # an AMQP 1.0 side's address is what it leaves alone
        if bool_value(ctx, key, obj.get(key, _default(key))):
            if f"{side}-queue" not in obj:
                ctx.warn(key, f"ignored, as the plugin does: it only applies together with "
                              f"'{side}-queue'")
            elif f"{side}-queue-args" in obj:  # the plugin's check_queue ignores them
                ctx.warn(f"{side}-queue-args", f"ignored with {key}, as the plugin does: the "
                                               "queue is only checked, never declared")


def _dynamic_source(ctx: Context, obj: Mapping[str, Any]) -> tuple[str, tuple[Declaration, ...]]:
    """The queue to consume from and the source's declarations (parse_source)."""
    if "src-queue" in obj:
        queue = shortstr_value(ctx, "src-queue", obj["src-queue"])
        if not queue:
            ctx.fail("src-queue", "must not be empty")
        return queue, (_ensure_queue(ctx, "src", obj, queue),)
    exchange = shortstr_value(ctx, "src-exchange", obj["src-exchange"])
    if not exchange:
        ctx.fail("src-exchange", "must not be empty (the default exchange cannot be bound)")
    key = shortstr_value(ctx, "src-exchange-key",
                         obj.get("src-exchange-key", _default("src-exchange-key")))
    # "": the server-named queue declared just before
    return "", (Declaration("queue.declare", {"exclusive": True}),
                Declaration("queue.bind", {"queue": "", "exchange": exchange, "routing_key": key}))


def _dynamic_destination(
    ctx: Context, obj: Mapping[str, Any]
) -> tuple[tuple[Declaration, ...], str | None, str | None]:
    """The destination's declarations, and the exchange and routing key to publish with
    (parse_dest; None keeps the message's own)."""
    if "dest-queue" in obj:
        dest_queue = shortstr_value(ctx, "dest-queue", obj["dest-queue"])
        if not dest_queue:
            ctx.fail("dest-queue", "must not be empty")
        return (_ensure_queue(ctx, "dest", obj, dest_queue),), "", dest_queue
    exchange = routing_key = None
    if "dest-exchange" in obj:
        exchange = shortstr_value(ctx, "dest-exchange", obj["dest-exchange"])
    if "dest-exchange-key" in obj:
        routing_key = shortstr_value(ctx, "dest-exchange-key", obj["dest-exchange-key"])
    return (), exchange, routing_key


def _ensure_queue(ctx: Context, side: str, obj: Mapping[str, Any], queue: str) -> Declaration:
    """The plugin's ensure_queue (passive, then durable if missing) or check_queue (predeclared)."""
    if obj.get(f"{side}-predeclared", _default(f"{side}-predeclared")):
        return Declaration("queue.declare", {"queue": queue, "passive": True})
    fields: dict[str, Any] = {"queue": queue, "durable": True}
    if obj.get(f"{side}-queue-args") not in (None, [], {}):
        fields["arguments"] = table_value(ctx, f"{side}-queue-args", obj[f"{side}-queue-args"])
    return Declaration("queue.declare", fields, if_missing=True)
