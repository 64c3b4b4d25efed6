"""The Shovel plugin's and AMQP 0-9-1's vocabulary, written once.

The configuration parser, the Erlang-config importer, the engine's declarations and the data
plane's property encoding all read these tables, so a method, a field or a property added here
is known to all of them. This module imports nothing: it sits at the bottom of the layer stack.
"""

from __future__ import annotations

__all__ = [
    "AMQP091_DEST_KEYS",
    "AMQP091_SOURCE_KEYS",
    "AMQP10_DEST_KEYS",
    "AMQP10_KEYS",
    "AMQP10_PROPERTIES",
    "AMQP10_SASL",
    "AMQP10_SOURCE_KEYS",
    "AMQP10_STATIC_DEST",
    "AMQP10_STATIC_SOURCE",
    "BASIC_PROPERTIES",
    "BIT",
    "DECLARATION_METHODS",
    "DESTINATION_PROTOCOLS",
    "DYNAMIC_KEYS",
    "INTERNAL_OWNER_FIELDS",
    "INTERNAL_OWNER_KINDS",
    "LEGACY_DYNAMIC_KEYS",
    "LONGLONG",
    "OCTET",
    "PROTOCOLS",
    "PUBLISH_FIELDS",
    "PUMPD_AMQP091_SOURCE_KEYS",
    "REQUIRED_FIELDS",
    "SHORTSTR",
    "STATIC_CLAUSES",
    "STATIC_EXTRAS",
    "STREAM_PROTOCOL",
    "TABLE",
    "TLS_VERSIONS",
    "USES_LAST_QUEUE",
]

# AMQP 0-9-1 field types (the domains of the specification that the vocabulary uses).
BIT, SHORTSTR, TABLE, OCTET, LONGLONG = "bit", "shortstr", "table", "octet", "longlong"

_BIND_FIELDS = {"routing_key": SHORTSTR, "nowait": BIT, "arguments": TABLE}
# The methods that make sense as declarations, each with its fields in the specification's
# order (the reserved "ticket" field left out: brokers ignore it).
DECLARATION_METHODS: dict[str, dict[str, str]] = {
    "exchange.declare": {"exchange": SHORTSTR, "type": SHORTSTR, "passive": BIT, "durable": BIT,
                         "auto_delete": BIT, "internal": BIT, "nowait": BIT, "arguments": TABLE},
    "exchange.delete": {"exchange": SHORTSTR, "if_unused": BIT, "nowait": BIT},
    "exchange.bind": {"destination": SHORTSTR, "source": SHORTSTR, **_BIND_FIELDS},
    "exchange.unbind": {"destination": SHORTSTR, "source": SHORTSTR, **_BIND_FIELDS},
    "queue.declare": {"queue": SHORTSTR, "passive": BIT, "durable": BIT, "exclusive": BIT,
                      "auto_delete": BIT, "nowait": BIT, "arguments": TABLE},
    "queue.bind": {"queue": SHORTSTR, "exchange": SHORTSTR, **_BIND_FIELDS},
    "queue.unbind": {"queue": SHORTSTR, "exchange": SHORTSTR, "routing_key": SHORTSTR,
                     "arguments": TABLE},
    "queue.purge": {"queue": SHORTSTR, "nowait": BIT},
    "queue.delete": {"queue": SHORTSTR, "if_unused": BIT, "if_empty": BIT, "nowait": BIT},
}
# Fields whose AMQP default ("") the broker always refuses.
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "exchange.declare": ("exchange",),
    "exchange.delete": ("exchange",),
    "exchange.bind": ("destination", "source"),
    "exchange.unbind": ("destination", "source"),
    "queue.bind": ("exchange",),
    "queue.unbind": ("exchange",),
}
# The methods whose "queue": "" (or no queue) means the queue most recently declared.
USES_LAST_QUEUE = ("queue.bind", "queue.unbind", "queue.purge", "queue.delete")

# The 14 basic properties in wire order (flag bit 15 - i for the i-th), with their types.
BASIC_PROPERTIES: dict[str, str] = {
    "content_type": SHORTSTR, "content_encoding": SHORTSTR, "headers": TABLE,
    "delivery_mode": OCTET, "priority": OCTET, "correlation_id": SHORTSTR, "reply_to": SHORTSTR,
    "expiration": SHORTSTR, "message_id": SHORTSTR, "timestamp": LONGLONG, "type": SHORTSTR,
    "user_id": SHORTSTR, "app_id": SHORTSTR, "cluster_id": SHORTSTR,
}
# basic.publish's fields that a shovel may set.
PUBLISH_FIELDS: dict[str, str] = {"exchange": SHORTSTR, "routing_key": SHORTSTR,
                                  "mandatory": BIT}

# The clauses of the plugin's static shovels (rabbit_shovel_config), in its order.
STATIC_CLAUSES = ("sources", "destinations", "queue", "prefetch_count", "ack_mode",
                  "publish_properties", "publish_fields", "reconnect_delay")
# Clauses the plugin (3.7+, rabbit_shovel_config:convert_from_legacy) also reads in the legacy
# static format (sources: [...]); the last two only in its current static format (source: [...]).
STATIC_EXTRAS = ("delete_after", "add_forward_headers", "add_timestamp_header",
                 "delete_after_duration", "consumer_args", "consumer_name")

# Dynamic-shovel keys (AMQP 0-9-1), as rabbit_amqp091_shovel validates them.
DYNAMIC_KEYS = ("src-uri", "src-protocol", "src-queue", "src-queue-args", "src-exchange",
                "src-exchange-key", "src-prefetch-count", "src-delete-after", "src-predeclared",
                "src-delete-after-duration", "src-consumer-args", "src-consumer-name",
                "dest-uri", "dest-protocol", "dest-queue", "dest-queue-args", "dest-exchange",
                "dest-exchange-key", "dest-publish-properties", "dest-add-forward-headers",
                "dest-add-timestamp-header", "dest-predeclared", "ack-mode", "reconnect-delay",
                "internal", "internal_owner")
# The fields of "internal_owner" (rabbit_shovel_parameters:validate_internal_owner/2), all
# mandatory, and the kinds of owner.
INTERNAL_OWNER_FIELDS = ("name", "kind", "virtual_host")
INTERNAL_OWNER_KINDS = ("exchange", "queue")
# The pre-3.7 dynamic-shovel names and their current names (rabbit_shovel_parameters reads the
# current one first: when both are set, the current one wins).
LEGACY_DYNAMIC_KEYS = {"prefetch-count": "src-prefetch-count", "delete-after": "src-delete-after",
                       "publish-properties": "dest-publish-properties",
                       "add-forward-headers": "dest-add-forward-headers",
                       "add-timestamp-header": "dest-add-timestamp-header"}

# The protocols of a shovel's side (src-protocol / dest-protocol, the static format's
# {protocol, ...}), the first the default. The plugin 4.x also has "local" (inside the broker).
PROTOCOLS = ("amqp091", "amqp10")
# pumpd's own protocol of a destination: a RabbitMQ stream over the streams protocol (its
# brokers given by AMQP URIs), and the protocols a destination may have.
STREAM_PROTOCOL = "stream"
DESTINATION_PROTOCOLS = (*PROTOCOLS, STREAM_PROTOCOL)
# Keys only a side of one protocol has: the plugin validates each side against its protocol's
# list (rabbit_amqp091_shovel / rabbit_amqp10_shovel: validate_src_funs, validate_dest_funs) and
# refuses any other key as unrecognised. The legacy pre-3.7 names are AMQP 0-9-1's only.
AMQP091_SOURCE_KEYS = ("src-queue", "src-queue-args", "src-exchange", "src-exchange-key",
                       "prefetch-count", "delete-after")
# pumpd's own key of an AMQP 0-9-1 source: the streams port a stream source's lag is read on
PUMPD_AMQP091_SOURCE_KEYS = ("src-stream-port",)
AMQP091_DEST_KEYS = ("dest-queue", "dest-queue-args", "dest-exchange", "dest-exchange-key",
                     "dest-publish-properties", "publish-properties", "add-forward-headers",
                     "add-timestamp-header")
AMQP10_SOURCE_KEYS = ("src-address",)
AMQP10_DEST_KEYS = ("dest-address", "dest-application-properties", "dest-message-annotations",
                    "dest-properties")
AMQP10_KEYS = AMQP10_SOURCE_KEYS + AMQP10_DEST_KEYS
# The fields of AMQP 1.0's properties section (dest-properties) in the plugin's spelling, with
# their AMQP 1.0 types (amqp10_msg:set_properties/2).
AMQP10_PROPERTIES: dict[str, str] = {
    "message_id": "string", "user_id": "binary", "to": "string", "subject": "string",
    "reply_to": "string", "correlation_id": "string", "content_type": "symbol",
    "content_encoding": "symbol", "absolute_expiry_time": "timestamp",
    "creation_time": "timestamp", "group_id": "string", "group_sequence": "uint",
    "reply_to_group_id": "string",
}
# The clauses of an AMQP 1.0 source and destination in the plugin's static format
# (rabbit_amqp10_shovel:parse/2; it reads these and ignores any other).
AMQP10_STATIC_SOURCE = ("protocol", "uris", "source_address", "prefetch_count", "delete_after",
                        "delete_after_duration", "consumer_args", "consumer_name")
AMQP10_STATIC_DEST = ("protocol", "uris", "target_address", "properties",
                      "application_properties", "delivery_annotations", "message_annotations",
                      "add_forward_headers", "add_timestamp_header")
# An AMQP 1.0 URI's SASL mechanisms (amqp10_client:parse_uri/1's sasl=...)
AMQP10_SASL = ("anon", "plain", "external")
# The TLS versions an AMQP 1.0 URI may name (versions=tlsv1.2,tlsv1.3), oldest first
TLS_VERSIONS = ("tlsv1", "tlsv1.1", "tlsv1.2", "tlsv1.3")
