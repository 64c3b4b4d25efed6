"""A shovel in the flat names of a RabbitMQ dynamic shovel (``src-uri``, ``dest-exchange``, ...).

AMQP 0-9-1 only, normalised the way ``rabbit_amqp091_shovel:parse_source/parse_dest`` does; the
values are checked as the static form's clauses are (:mod:`.clauses`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .clauses import (
    read_common_clauses,
    read_consumer,
    read_delete_after,
    read_delete_after_duration,
    read_publish_properties,
    read_reconnect_delay,
    read_stall_timeout,
    read_uri,
    read_uri_list,
)
from .model import AckMode, BrokerURI, Declaration, Endpoint, ShovelConfig, ShovelOwner
from .spec import DYNAMIC, INTERNAL_OWNER, SHOVEL, dynamic_names
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
from .vocabulary import (
    AMQP10_KEYS,
    LEGACY_DYNAMIC_KEYS,
)

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

    Replicates rabbit_amqp091_shovel:parse_source/parse_dest: ``src-queue`` is checked with a
    passive declare and created durable (with ``src-queue-args``) when missing, or only checked
    with ``src-predeclared``; ``src-exchange`` gets a server-named exclusive queue bound with
    ``src-exchange-key`` (default ""); ``dest-queue`` is ensured the same way and published to
    through the default exchange with the queue name as routing key; ``dest-exchange`` and
    ``dest-exchange-key`` each replace the original exchange / routing key when given.

    :raises ConfigError: on the first bad key.
    """
    _check_dynamic_keys(ctx, obj)
    _warn_dynamic_ignored(ctx, obj)

    def where(key: str) -> str:
        """The name this definition uses for ``key``: the current one or its legacy one."""
        legacy = _LEGACY_NAME.get(key)
        return legacy if legacy is not None and legacy in obj else key

    def get(key: str, default: object) -> object:
        return obj.get(where(key), default)

    queue, src_decls = _dynamic_source(ctx, obj)
    dest_decls, publish_exchange, publish_routing_key = _dynamic_destination(ctx, obj)
    modes = SHOVEL["ack_mode"]
    ack_mode = enum_value(ctx, "ack-mode", obj.get("ack-mode", modes.dynamic_default()),
                          modes.dynamic_enum)
    consumer_args, consumer_tag = read_consumer(ctx, "src-consumer-args", "src-consumer-name", obj)
    return ShovelConfig(
        name=ctx.shovel or "",
        source=Endpoint(_uri_list(ctx, "src-uri", obj["src-uri"]), src_decls),
        destination=Endpoint(_uri_list(ctx, "dest-uri", obj["dest-uri"]), dest_decls),
        queue=queue,
        prefetch_count=int_value(ctx, where("src-prefetch-count"),
                                 get("src-prefetch-count", _default("src-prefetch-count")),
                                 *SHOVEL["prefetch_count"].int_bounds()),
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
        delete_after=read_delete_after(ctx, where("src-delete-after"),
                                       get("src-delete-after", _default("src-delete-after"))),
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
        **read_common_clauses(ctx, obj),
    )


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


def _check_dynamic_keys(ctx: Context, obj: Mapping[str, Any]) -> None:
    """The keys a dynamic shovel may have, which it must have, and which exclude each other.

    :raises ConfigError: on the first key that is unknown, missing, or in conflict.
    """
    amqp10 = [k for k in obj if k in AMQP10_KEYS]
    if amqp10:
        ctx.fail(amqp10[0], "is an AMQP 1.0 shovel's key: pumpd speaks AMQP 0-9-1 only (an "
                            "AMQP 1.0 source or destination cannot be moved to pumpd)")
    check_keys(ctx, "", obj, DYNAMIC_ALL, "unknown key")
    for key in ("src-protocol", "dest-protocol"):
        if key in obj and obj[key] != "amqp091":
            if obj[key] in ("amqp10", "local"):
                ctx.fail(key, f"{obj[key]} shovels are not supported: pumpd speaks AMQP 0-9-1 only "
                              '(use "amqp091")')
            ctx.fail(key, f'must be "amqp091", got {show(obj[key])}')
    for legacy, current in LEGACY_DYNAMIC_KEYS.items():
        if legacy in obj and current in obj:
            ctx.fail(legacy, f"give {current!r} or its legacy name {legacy!r}, not both")
    for key in ("src-uri", "dest-uri"):
        if key not in obj:
            ctx.fail(key, "missing (it is mandatory)")
    if ("src-queue" in obj) == ("src-exchange" in obj):
        ctx.fail("src-queue", "give exactly one of 'src-queue' and 'src-exchange'")
    if "dest-queue" in obj and "dest-exchange" in obj:
        ctx.fail("dest-queue", "give at most one of 'dest-queue' and 'dest-exchange'")


def _warn_dynamic_ignored(ctx: Context, obj: Mapping[str, Any]) -> None:
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


def _uri_list(ctx: Context, clause: str, value: object) -> tuple[BrokerURI, ...]:
    """``src-uri`` / ``dest-uri``: one URI, or a list of them."""
    if isinstance(value, str):
        return (read_uri(ctx, clause, value),)
    return read_uri_list(ctx, clause, value, "a URI or a non-empty list of URIs")
