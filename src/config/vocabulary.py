"""The Shovel plugin's and AMQP 0-9-1's vocabulary, written once.

The configuration parser, the Erlang-config importer, the engine's declarations and the data
plane's property encoding all read these tables, so a method, a field or a property added here
is known to all of them. This module imports nothing: it sits at the bottom of the layer stack.
"""

from __future__ import annotations

__all__ = [
    "AMQP10_KEYS",
    "BASIC_PROPERTIES",
    "BIT",
    "DECLARATION_METHODS",
    "DYNAMIC_KEYS",
    "INTERNAL_OWNER_FIELDS",
    "INTERNAL_OWNER_KINDS",
    "LEGACY_DYNAMIC_KEYS",
    "LONGLONG",
    "OCTET",
    "PUBLISH_FIELDS",
    "REQUIRED_FIELDS",
    "SHORTSTR",
    "STATIC_CLAUSES",
    "STATIC_EXTRAS",
    "TABLE",
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
# Keys only an AMQP 1.0 shovel has (rabbit_amqp10_shovel).
AMQP10_KEYS = ("src-address", "dest-address", "dest-application-properties",
               "dest-message-annotations", "dest-properties")
