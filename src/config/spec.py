"""Every clause of the configuration file, declared once: name, type, default, bound, unit, doc.

The readers (:mod:`.clauses`, :mod:`.dynamic`, :mod:`.cluster`, :mod:`.parse`) take their
defaults, bounds and accepted names from these tables, the model's dataclasses their defaults;
:func:`reference_markdown` writes the configuration reference page and :func:`json_schema` the
JSON Schema of the file from them and from nothing else. A clause added to the file is added
here first: a clause without a doc or a declared default fails the tests.

The numbers of the bounds live in :mod:`.limits` (the daemon, the CLI and the importers share
them); a clause names the one it is checked against.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .limits import (
    MAX_ADDRESS,
    MAX_BROKERS,
    MAX_CLUSTER_NAME,
    MAX_DECLARATIONS,
    MAX_DELETE_AFTER,
    MAX_DURATION,
    MAX_GROUP_SECONDS,
    MAX_PREFETCH,
    MAX_READ_HOLD_MS,
    MAX_RECONNECT_DELAY,
    MAX_SHORTSTR,
    MAX_SHOVEL_NAME,
    MAX_SHOVELS,
    MAX_SHOVELS_PER_PROCESS,
    MAX_STALL_TIMEOUT,
    MAX_TABLE_VALUES,
    MAX_UINT,
    MAX_URI,
    MAX_WORKERS,
)
from .vocabulary import (
    AMQP10_PROPERTIES,
    BASIC_PROPERTIES,
    BIT,
    DECLARATION_METHODS,
    DESTINATION_PROTOCOLS,
    INTERNAL_OWNER_KINDS,
    LONGLONG,
    OCTET,
    PROTOCOLS,
    REQUIRED_FIELDS,
    SHORTSTR,
    STREAM_PROTOCOL,
)

__all__ = ["CLUSTER", "DYNAMIC", "ENDPOINT", "FILE", "GROUPS", "INTERNAL_OWNER", "PUBLISH_FIELDS",
           "REQUIRED", "SHOVEL", "SIDES", "TYPES", "UNDECLARED", "UNDELIVERABLE", "Clause", "Group",
           "NoDefault", "cli_clause", "json_schema", "reference_markdown", "side_keys"]

SINCE = "0.1.0"


@dataclass(frozen=True)
class NoDefault:
    """A clause that has no default value: the file must give it (``required``), or leaving it out
    means what ``meaning`` says (no time limit, the message's own exchange, ...)."""

    meaning: str
    required: bool = False
    # Required with the one protocol its clause belongs to (Clause.protocol), refused with the
    # other: an AMQP 1.0 side's address, an AMQP 0-9-1 source's queue.
    required_with_protocol: bool = False


REQUIRED = NoDefault("required", required=True)
# What a clause's default is until its author declares one: the tests refuse it.
UNDECLARED = NoDefault("undeclared")

# The types a clause may have, with how the reference page names them.
TYPES: dict[str, str] = {
    "integer": "integer",
    "number": "number",
    "boolean": "boolean",
    "string": "string",
    "enum": "string",
    "uri": "AMQP URI (string)",
    "uris": "list of AMQP URIs",
    "uri or uris": "AMQP URI, or a list of them",
    "declarations": "list of declarations",
    "table": "object (an AMQP field table)",
    "properties": "object of basic properties",
    "object": "object",
    "shovels": "object: shovel name → shovel",
    "names": "list of strings",
    "delete_after": '"never", "queue-length" or integer',
    "undeliverable": "string (a policy) or object",
    "amqp10 properties": "object of AMQP 1.0 properties",
    "strings": "object: key → string",
}

# A shovel's two sides, and the names the file's two forms give each: the static form's
# endpoint clause, and the dynamic form's key prefix and protocol key.
SIDES: dict[str, tuple[str, str, str]] = {
    "source": ("sources", "src-", "src-protocol"),
    "destination": ("destinations", "dest-", "dest-protocol"),
}


@dataclass(frozen=True)
class Clause:
    """One clause: how it is written, what it holds, and what leaving it out means.

    ``minimum`` / ``maximum`` bound a number, or the length of a string in ``unit``;
    ``dynamic`` is the clause's name in a dynamic shovel (the same name for pumpd's own clauses
    that both forms share), ``legacy`` its pre-3.7 dynamic name, ``dynamic_enum`` its values as
    the dynamic form spells them; ``cli`` the daemon's options that give it on the command line (the first is its name, the
    others aliases);
    ``group`` the clauses of an ``object`` (or of an ``undeliverable`` object);
    ``protocol`` the one protocol of a side the clause belongs to ("amqp091", "amqp10" or
    "stream", a destination's only; None:
    both), and ``side`` that side ("source" or "destination") for a shovel's clause (an
    endpoint's clause is its endpoint's; a dynamic key's side is its prefix's). A clause of one
    protocol is refused by name on a side of the other.
    """

    name: str
    type: str
    doc: str
    default: object = UNDECLARED
    minimum: int | float | None = None
    maximum: int | float | None = None
    enum: tuple[str, ...] = ()
    unit: str = ""
    pattern: str | None = None
    dynamic: str | None = None
    legacy: str | None = None
    dynamic_enum: tuple[str, ...] = ()
    empty_list: bool = False  # [] reads as "none" (how a definitions export writes {})
    cli: tuple[str, ...] = ()
    group: str | None = None
    since: str = SINCE
    protocol: str | None = None
    side: str | None = None

    @property
    def required(self) -> bool:
        return isinstance(self.default, NoDefault) and self.default.required

    @property
    def required_with_protocol(self) -> bool:
        """Required on a side of :attr:`protocol` (and refused on a side of the other)."""
        return isinstance(self.default, NoDefault) and self.default.required_with_protocol

    @property
    def has_value_default(self) -> bool:
        """A default value the reader supplies when the clause is left out."""
        return not isinstance(self.default, NoDefault)

    def default_value(self) -> object:
        """The default as a reader hands it on: a copy, so that no two shovels share one
        ``{}``."""
        return copy.deepcopy(self.default)

    def int_default(self) -> int:
        assert isinstance(self.default, int) and not isinstance(self.default, bool), self
        return self.default

    def float_default(self) -> float:
        assert isinstance(self.default, (int, float)) and not isinstance(self.default, bool), self
        return float(self.default)

    def str_default(self) -> str:
        assert isinstance(self.default, str), self
        return self.default

    def bool_default(self) -> bool:
        assert isinstance(self.default, bool), self
        return self.default

    def dynamic_default(self) -> str:
        """The default of an enum clause as the dynamic form spells it: hyphens for
        underscores."""
        value = self.str_default().replace("_", "-")
        assert value in self.dynamic_enum, self
        return value

    def int_bounds(self) -> tuple[int, int]:
        """[minimum, maximum] of an integer clause."""
        assert isinstance(self.minimum, int) and isinstance(self.maximum, int), self
        return self.minimum, self.maximum

    def int_max(self) -> int:
        """The maximum of an integer clause, or of a list's or a string's length."""
        assert isinstance(self.maximum, int), self
        return self.maximum

    def low(self) -> float:
        """The minimum of a number clause."""
        assert self.minimum is not None, self
        return float(self.minimum)

    def high(self) -> float:
        """The maximum of a number clause (seconds, for every number clause)."""
        assert self.maximum is not None, self
        return float(self.maximum)


@dataclass(frozen=True)
class Group:
    """Clauses written side by side in one JSON object.

    ``exactly_one`` / ``at_most_one``: sets of clauses of which the object must give exactly
    one, or may give at most one.
    """

    key: str
    title: str
    doc: str
    clauses: tuple[Clause, ...]
    exactly_one: tuple[tuple[str, ...], ...] = ()
    at_most_one: tuple[tuple[str, ...], ...] = ()

    def __getitem__(self, name: str) -> Clause:
        for clause in self.clauses:
            if clause.name == name:
                return clause
        raise KeyError(name)

    def __iter__(self) -> Iterator[Clause]:
        return iter(self.clauses)

    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.clauses)


_SECONDS = "seconds"
#: what a publishing_id clause holds (engine/streams/publishing_ids.py reads it)
PUBLISHING_ID_PATTERN = "^(source-offset|none|message_id|header:.+)$"
_BYTES = "bytes of UTF-8"

FILE = Group("file", "The file", (
    'A JSON object: "shovels", and optionally "shovels_per_process" and "group" beside it.'), (
    Clause("shovels", "shovels", "The shovels this daemon runs, by name; each is written in "
           "the static shovel's clauses or in a dynamic shovel's flat names, never a mix of "
           "both.",
           REQUIRED, maximum=MAX_SHOVELS, unit="shovels"),
    Clause("shovels_per_process", "integer", "How many shovels' workers one worker process "
           "runs on its event loop.",
           NoDefault("the command line's --shovels-per-process, else 1"), 1,
           MAX_SHOVELS_PER_PROCESS, unit="shovels", cli=("--shovels-per-process",)),
    Clause("group", "object", "The group of daemons this one belongs to (several pumpd "
           "daemons sharing its shovels, not a RabbitMQ cluster).", NoDefault("not in a group"),
           group="cluster"),
    Clause("cluster", "object", 'The same clause as "group", under its earlier name.',
           NoDefault("not in a group"), group="cluster"),
    Clause("paused", "names", "The shovels paused at run time: written by the daemon into its "
           "state file, and ignored in a configuration file.", NoDefault("nothing paused")),
), at_most_one=(("group", "cluster"),))

CLUSTER = Group("cluster", 'The "group" clause: a group of daemons', (
    "Every daemon started with the same configuration and the same group name runs each "
    "worker position in one member at a time."), (
    Clause("name", "string", "The group's name, the same on every member.", REQUIRED,
           1, MAX_CLUSTER_NAME, unit="characters", pattern=rf"^[A-Za-z0-9_-]{{1,{MAX_CLUSTER_NAME}}}$",
           cli=("--group", "--cluster")),
    Clause("coordination_uri", "uri", "The broker where the members find each other and spread "
           "the positions between them.", NoDefault("no spread: each position's lease decides"),
           maximum=MAX_URI, unit="characters"),
    Clause("lease_retry", "number", "Seconds between the lease attempts of a position on "
           "standby, jittered by 25 %.", 2.0, 0.1, MAX_GROUP_SECONDS, unit=_SECONDS),
    Clause("poll_interval", "number", "Seconds between the group's looks at the coordination "
           "broker.", 1.0, 0.1, MAX_GROUP_SECONDS, unit=_SECONDS),
    Clause("settle", "number", "Seconds a newcomer stays in the view before positions move to "
           "it.", 10.0, 0, MAX_GROUP_SECONDS, unit=_SECONDS),
    Clause("grace", "number", "Seconds a position stays free before a member it is not meant "
           "for takes it.", 10.0, 0, MAX_GROUP_SECONDS, unit=_SECONDS),
))

SHOVEL = Group("shovel", "A shovel", (
    "A shovel in the clauses of the plugin's static shovels (rabbit_shovel_config), with "
    "pumpd's own; a clause's name in the dynamic form is given beside it."), (
    Clause("sources", "object", "Where messages come from: the source brokers and what to "
           "declare on them.", REQUIRED, group="endpoint"),
    Clause("destinations", "object", "Where messages go: the destination brokers and what to "
           "declare on them.", REQUIRED, group="endpoint"),
    Clause("queue", "string", 'The source queue to consume from; "" means the queue the '
           "source declarations declared last.",
           NoDefault("required with an AMQP 0-9-1 source; an AMQP 1.0 source has its address "
                     "instead", required_with_protocol=True), 0, MAX_SHORTSTR, unit=_BYTES,
           protocol="amqp091", side="source"),
    Clause("prefetch_count", "integer", "The source channel's basic.qos prefetch count, 0 "
           "meaning unlimited; for an AMQP 1.0 source the link credit, at least 1.", 1000, 0,
           MAX_PREFETCH, unit="messages", dynamic="src-prefetch-count", legacy="prefetch-count"),
    Clause("ack_mode", "enum", "When the source is told a message is done with: at delivery "
           "(no_ack), once it is published (on_publish), or once the destination confirms it "
           "(on_confirm).", "on_confirm",
           enum=("no_ack", "on_publish", "on_confirm"), dynamic="ack-mode",
           dynamic_enum=("on-confirm", "on-publish", "no-ack")),
    Clause("publish_properties", "properties", "Basic properties set on every message "
           "published, by AMQP name.", {}, dynamic="dest-publish-properties",
           legacy="publish-properties", empty_list=True, protocol="amqp091",
           side="destination"),
    Clause("publish_fields", "object", "basic.publish's exchange, routing key and mandatory "
           "flag for every message published.", {}, group="publish_fields",
           protocol="amqp091", side="destination"),
    Clause("reconnect_delay", "number", "Seconds between a failure and the next connection "
           "attempt; 0 stops the shovel for good after its first failure.", 5.0, 0,
           MAX_RECONNECT_DELAY, unit=_SECONDS, dynamic="reconnect-delay"),
    Clause("delete_after", "delete_after", 'When the shovel stops by itself: "never", '
           '"queue-length" (the messages in the queue when it started; an AMQP 0-9-1 source '
           "only) or a number of messages.", "never", 0, MAX_DELETE_AFTER, unit="messages",
           dynamic="src-delete-after", legacy="delete-after"),
    Clause("add_forward_headers", "boolean", "Add the x-shovelled header, which says where a "
           "message came from.", False, dynamic="dest-add-forward-headers",
           legacy="add-forward-headers"),
    Clause("add_timestamp_header", "boolean", "Add the x-shovelled-timestamp header, the time "
           "the message was forwarded.", False, dynamic="dest-add-timestamp-header",
           legacy="add-timestamp-header"),
    Clause("delete_after_duration", "integer", "Stop the shovel after this many seconds of "
           "running.", NoDefault("no time limit"), 1, MAX_DURATION, unit=_SECONDS,
           dynamic="src-delete-after-duration"),
    Clause("consumer_args", "table", "basic.consume's arguments (x-stream-offset, x-priority, "
           "...); for an AMQP 1.0 source the receiving link's filters, x-stream-offset as "
           "rabbitmq:stream-offset-spec.", {}, dynamic="src-consumer-args", empty_list=True),
    Clause("consumer_name", "string", 'basic.consume\'s consumer tag, "" letting the broker '
           'choose one; for an AMQP 1.0 source the link\'s name, "" a generated one.', "", 0,
           MAX_SHORTSTR, unit=_BYTES, dynamic="src-consumer-name"),
    Clause("amqp10_properties", "amqp10 properties", "AMQP 1.0 properties set on every message "
           "sent, by the plugin's names (user_id, content_type, creation_time, ...).", {},
           dynamic="dest-properties", empty_list=True, protocol="amqp10", side="destination"),
    Clause("amqp10_application_properties", "strings", "AMQP 1.0 application properties set on "
           "every message sent.", {}, dynamic="dest-application-properties", empty_list=True,
           protocol="amqp10", side="destination"),
    Clause("amqp10_message_annotations", "strings", "AMQP 1.0 message annotations set on every "
           "message sent, by symbol.", {}, dynamic="dest-message-annotations", empty_list=True,
           protocol="amqp10", side="destination"),
    Clause("publishing_id", "string", "A stream destination's publishing ids, by which the "
           'stream drops what it stored before: "source-offset" (a stream source\'s offset '
           'plus 1), "message_id", "header:NAME" (a strictly increasing integer per source), '
           'or "none" (no deduplication).',
           NoDefault('"source-offset" for a stream source, "none" otherwise'), 4,
           MAX_SHORTSTR, unit=_BYTES, pattern=PUBLISHING_ID_PATTERN,
           dynamic="dest-publishing-id", protocol=STREAM_PROTOCOL, side="destination"),
    Clause("source_stream_port", "integer", "The streams protocol's port on the source brokers, "
           "where a stream source's lag is read: its last offset, and when the chunk of the "
           "first message not yet forwarded was written.",
           NoDefault("5552, or 5551 with an amqps URI"), 1, 65535, unit="port",
           dynamic="src-stream-port", protocol="amqp091", side="source"),
    Clause("workers", "integer", "Worker positions of this shovel, competing consumers on its "
           "source queue (a process each, by default).", 1, 1, MAX_WORKERS, unit="positions",
           dynamic="workers", cli=("--workers",)),
    Clause("source_read_hold_ms", "integer", "After a short read from the source, wait this "
           "long before reading again; 0 reads at once.", 1, 0, MAX_READ_HOLD_MS,
           unit="milliseconds", dynamic="source_read_hold_ms"),
    Clause("undeliverable", "undeliverable", "What happens to a message pumpd cannot forward, "
           "or that the destination returns: a policy, or an object.", {},
           dynamic="undeliverable", group="undeliverable"),
    Clause("own_process", "boolean", "Run this shovel's workers each in a process of its own, "
           "whatever --shovels-per-process says.", False, dynamic="own_process"),
    Clause("stall_timeout", "number", "Restart a session that moved nothing for this many "
           "seconds while its source had a backlog, or got no confirm with messages "
           "outstanding; 0 never does.", 60.0, 0, MAX_STALL_TIMEOUT, unit=_SECONDS,
           dynamic="stall-timeout"),
))

ENDPOINT = Group("endpoint", '"sources" and "destinations"', (
    "The brokers of one side, picked from at random on each connection, and the declarations "
    "made on each connection (AMQP 0-9-1), or the address to attach to (AMQP 1.0)."), (
    Clause("protocol", "enum", 'The side\'s protocol; "stream" (a RabbitMQ stream, over the '
           "streams protocol) for a destination only.", PROTOCOLS[0],
           enum=DESTINATION_PROTOCOLS),
    Clause("brokers", "uris", "The side's brokers, AMQP URIs of its protocol (a stream "
           "destination's: AMQP 0-9-1 URIs, for the host, credentials, vhost and TLS).",
           NoDefault('give "brokers" or "broker"'), 1, MAX_BROKERS, unit="URIs"),
    Clause("broker", "uri", "The side's one broker.", NoDefault('give "brokers" or "broker"'),
           maximum=MAX_URI, unit="characters"),
    Clause("declarations", "declarations", "AMQP methods issued in order after connecting: "
           '"queue.declare" or {"queue.bind": {...}}.', [], maximum=MAX_DECLARATIONS,
           unit="declarations", protocol="amqp091"),
    Clause("address", "string", "The AMQP 1.0 address a source's link receives from, or a "
           'destination\'s link sends to (RabbitMQ: "/queues/NAME", "/exchanges/NAME/KEY").',
           NoDefault("required with protocol amqp10", required_with_protocol=True), 1,
           MAX_ADDRESS, unit=_BYTES, protocol="amqp10"),
    Clause("predeclared", "boolean", 'Leave the queue that a "/queues/NAME" address names as it '
           "is; false declares it before attaching, as a dynamic shovel does.", True,
           protocol="amqp10"),
    Clause("stream", "string", "The stream a stream destination publishes to; it must exist.",
           NoDefault('required with protocol stream, unless "super_stream" is given',
                     required_with_protocol=True), 1,
           MAX_SHORTSTR, unit=_BYTES, protocol=STREAM_PROTOCOL, side="destination"),
    Clause("super_stream", "string", "Instead of a stream, the super stream whose partitions a "
           "stream destination publishes to, each message to the partition its routing key "
           "hashes to.", NoDefault('give "stream" or "super_stream"'), 1, MAX_SHORTSTR,
           unit=_BYTES, protocol=STREAM_PROTOCOL, side="destination"),
    Clause("stream_port", "integer", "The streams protocol's port on the destination brokers.",
           NoDefault("5552, or 5551 with an amqps URI"), 1, 65535, unit="port",
           protocol=STREAM_PROTOCOL, side="destination"),
), exactly_one=(("brokers", "broker"),))

PUBLISH_FIELDS = Group("publish_fields", '"publish_fields"', (
    "basic.publish's fields for every message published."), (
    Clause("exchange", "string", 'The exchange to publish to; "" is the default exchange.',
           NoDefault("the message's own exchange"), 0, MAX_SHORTSTR, unit=_BYTES),
    Clause("routing_key", "string", "The routing key to publish with.",
           NoDefault("the message's own routing key"), 0, MAX_SHORTSTR, unit=_BYTES),
    Clause("mandatory", "boolean", "Publish with the mandatory flag, so that an unroutable "
           "message comes back and is counted as returned.", True),
))

_POLICIES = ("park", "dead-letter", "stop")

UNDELIVERABLE = Group("undeliverable", '"undeliverable"', (
    'What happens to a message pumpd cannot forward; "undeliverable": "stop" is short for '
    '{"policy": "stop"}.'), (
    Clause("policy", "enum", "For a message that cannot be forwarded at all: park it, "
           "dead-letter it (reject it to the source queue's dead-letter exchange; an AMQP 1.0 "
           "source settles it as rejected), or stop the shovel; an AMQP 1.0 source cannot park "
           "and dead-letters by default.", "park", enum=_POLICIES),
    Clause("park_queue", "string", "The queue on the source broker where parked messages go "
           "(over AMQP 0-9-1).",
           "pumpd.parked", 1, MAX_SHORTSTR, unit=_BYTES),
    Clause("unroutable", "enum", "For a message the destination returns as unroutable: drop "
           "it (as the plugin does), park it, or stop the shovel.", "drop",
           enum=("drop", "park", "stop")),
))

_SRC, _DEST = "source", "destination"
_091, _10 = PROTOCOLS

DYNAMIC = Group("dynamic", "A shovel in a dynamic shovel's names", (
    "A shovel in RabbitMQ's dynamic-shovel names, read as the plugin reads it; each side AMQP "
    "0-9-1 or AMQP 1.0, and a key of one protocol is refused on a side of the other. The "
    "clauses of a shovel that have a dynamic name are accepted under it too."), (
    Clause("src-uri", "uri or uris", "The source broker, or a list of them.", REQUIRED,
           1, MAX_BROKERS, unit="URIs"),
    Clause("src-protocol", "enum", "The source's protocol.", _091, enum=PROTOCOLS),
    Clause("src-queue", "string", "The source queue, declared durable when missing.",
           NoDefault('give "src-queue" or "src-exchange"'), 1, MAX_SHORTSTR, unit=_BYTES,
           protocol=_091, side=_SRC),
    Clause("src-queue-args", "table", "The source queue's arguments, when pumpd declares it.",
           {}, empty_list=True, protocol=_091, side=_SRC),
    Clause("src-exchange", "string", "Consume from a server-named queue bound to this exchange.",
           NoDefault('give "src-queue" or "src-exchange"'), 1, MAX_SHORTSTR, unit=_BYTES,
           protocol=_091, side=_SRC),
    Clause("src-exchange-key", "string", "The routing key of that binding.", "", 0,
           MAX_SHORTSTR, unit=_BYTES, protocol=_091, side=_SRC),
    Clause("src-address", "string", "The AMQP 1.0 address the source's link receives from.",
           NoDefault("required with src-protocol amqp10", required_with_protocol=True), 1,
           MAX_ADDRESS, unit=_BYTES, protocol=_10, side=_SRC),
    Clause("src-predeclared", "boolean", "Only check that the source queue exists, never "
           'declare it; AMQP 1.0: leave the queue a "/queues/NAME" address names alone.',
           False),
    Clause("dest-uri", "uri or uris", "The destination broker, or a list of them.", REQUIRED,
           1, MAX_BROKERS, unit="URIs"),
    Clause("dest-protocol", "enum", 'The destination\'s protocol; "stream" is a RabbitMQ '
           "stream over the streams protocol.", _091, enum=DESTINATION_PROTOCOLS),
    Clause("dest-queue", "string", "Publish to this queue through the default exchange; it is "
           "declared durable when missing.", NoDefault("the message's own routing"), 1,
           MAX_SHORTSTR, unit=_BYTES, protocol=_091, side=_DEST),
    Clause("dest-queue-args", "table", "The destination queue's arguments, when pumpd declares "
           "it.", {}, empty_list=True, protocol=_091, side=_DEST),
    Clause("dest-exchange", "string", "The exchange to publish to.",
           NoDefault("the message's own exchange"), 0, MAX_SHORTSTR, unit=_BYTES,
           protocol=_091, side=_DEST),
    Clause("dest-exchange-key", "string", "The routing key to publish with.",
           NoDefault("the message's own routing key"), 0, MAX_SHORTSTR, unit=_BYTES,
           protocol=_091, side=_DEST),
    Clause("dest-address", "string", "The AMQP 1.0 address the destination's link sends to.",
           NoDefault("required with dest-protocol amqp10", required_with_protocol=True), 1,
           MAX_ADDRESS, unit=_BYTES, protocol=_10, side=_DEST),
    Clause("dest-stream", "string", "The stream a stream destination publishes to; it must "
           "exist.", NoDefault('required with dest-protocol stream, unless "dest-super-stream" '
                               "is given", required_with_protocol=True),
           1, MAX_SHORTSTR, unit=_BYTES, protocol=STREAM_PROTOCOL, side=_DEST),
    Clause("dest-super-stream", "string", "Instead of a stream, the super stream whose "
           "partitions a stream destination publishes to, each message to the partition its "
           "routing key hashes to.", NoDefault('give "dest-stream" or "dest-super-stream"'), 1,
           MAX_SHORTSTR, unit=_BYTES, protocol=STREAM_PROTOCOL, side=_DEST),
    Clause("dest-stream-port", "integer", "The streams protocol's port on the destination "
           "brokers.", NoDefault("5552, or 5551 with an amqps URI"), 1, 65535, unit="port",
           protocol=STREAM_PROTOCOL, side=_DEST),
    Clause("dest-predeclared", "boolean", "Only check that the destination queue exists, never "
           'declare it; AMQP 1.0: leave the queue a "/queues/NAME" address names alone.',
           False),
    Clause("internal", "boolean", "A protected shovel: the HTTP API deletes or replaces it only "
           "when forced.", False),
    Clause("internal_owner", "object", "The queue or exchange a protected shovel belongs to "
           "(information only).", NoDefault("no owner"), group="internal_owner"),
), exactly_one=(("src-queue", "src-exchange"),), at_most_one=(("dest-queue", "dest-exchange"),))

INTERNAL_OWNER = Group("internal_owner", '"internal_owner"', (
    "A protected shovel's owner; every field is required."), (
    Clause("name", "string", "The owner's name.", REQUIRED, 0, MAX_SHORTSTR, unit=_BYTES),
    Clause("kind", "enum", "What the owner is.", REQUIRED, enum=INTERNAL_OWNER_KINDS),
    Clause("virtual_host", "string", "The owner's virtual host.", REQUIRED, 0, MAX_SHORTSTR,
           unit=_BYTES),
))

GROUPS: tuple[Group, ...] = (FILE, SHOVEL, ENDPOINT, PUBLISH_FIELDS, UNDELIVERABLE, DYNAMIC,
                             INTERNAL_OWNER, CLUSTER)
_BY_KEY = {g.key: g for g in GROUPS}


def static_names() -> tuple[str, ...]:
    """The clauses of a shovel in the static form."""
    return SHOVEL.names()


def common_names() -> tuple[str, ...]:
    """pumpd's own clauses, named alike in both forms."""
    return tuple(c.name for c in SHOVEL if c.dynamic == c.name)


def dynamic_names() -> tuple[str, ...]:
    """Every key a shovel in the dynamic form may have: its own, the clauses' dynamic names,
    and their legacy names."""
    return (DYNAMIC.names() + tuple(c.dynamic for c in SHOVEL if c.dynamic)
            + tuple(c.legacy for c in SHOVEL if c.legacy))


def _key_side(key: str) -> str | None:
    """The side a dynamic key's prefix names."""
    for side, (_, prefix, _) in SIDES.items():
        if key.startswith(prefix):
            return side
    return None


def side_keys(side: str, protocol: str, *, dynamic: bool) -> tuple[str, ...]:
    """The keys only a ``side`` of ``protocol`` has: in the dynamic form, the flat keys (a
    pre-3.7 legacy name is AMQP 0-9-1's, whatever its clause); in the static form, the shovel's
    clauses (an endpoint's own are :func:`endpoint_keys`)."""
    if not dynamic:
        return tuple(c.name for c in SHOVEL if c.side == side and c.protocol == protocol)
    keys = [c.name for c in DYNAMIC if c.side == side and c.protocol == protocol]
    keys += [c.dynamic for c in SHOVEL
             if c.dynamic and c.side == side and c.protocol == protocol]
    if protocol == PROTOCOLS[0]:
        keys += [c.legacy for c in SHOVEL if c.legacy and _key_side(c.legacy) is None
                 and c.dynamic and _key_side(c.dynamic) == side]
    return tuple(keys)


def endpoint_keys(protocol: str) -> tuple[str, ...]:
    """The clauses of ``"sources"`` / ``"destinations"`` that only a side of ``protocol`` has."""
    return tuple(c.name for c in ENDPOINT if c.protocol == protocol)


def cli_clause(option: str) -> Clause:
    """The clause a daemon's command-line option gives (``--workers``, ``--group``, ...).

    :raises KeyError: when no clause has that option
    """
    for group in GROUPS:
        for clause in group:
            if option in clause.cli:
                return clause
    raise KeyError(option)


# --- the reference page ------------------------------------------------------------------------


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _default_text(clause: Clause) -> str:
    if isinstance(clause.default, NoDefault):
        return "required" if clause.required else f"none: {clause.default.meaning}"
    value = clause.default
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # as a user writes it: 5, not 5.0
    return f"`{_json(value)}`"


def _number(value: int | float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _bound_text(clause: Clause) -> str:
    parts = []
    if clause.enum:
        parts.append("one of " + ", ".join(f"`{_json(v)}`" for v in clause.enum))
    if clause.dynamic_enum:
        parts.append("dynamic form: " + ", ".join(f"`{_json(v)}`" for v in clause.dynamic_enum))
    low, high = clause.minimum, clause.maximum
    unit = f" {clause.unit}" if clause.unit else ""
    if low is not None and high is not None:
        parts.append(f"{_number(low)} to {_number(high)}{unit}")
    elif high is not None:
        parts.append(f"at most {_number(high)}{unit}")
    elif low is not None:
        parts.append(f"at least {_number(low)}{unit}")
    if clause.pattern:
        parts.append(f"matches `{clause.pattern}`")
    return "; ".join(parts) or "—"


def _names_text(clause: Clause) -> str:
    names = []
    if clause.dynamic and clause.dynamic != clause.name:
        names.append(f"dynamic form: `{clause.dynamic}`")
    elif clause.dynamic == clause.name:
        names.append("the same in the dynamic form")
    if clause.legacy:
        names.append(f"legacy dynamic name: `{clause.legacy}`")
    if clause.cli:
        first, *aliases = clause.cli
        also = "".join(f" (alias `{a}`)" for a in aliases)
        names.append(f"command line: `{first}`{also}")
    return "; ".join(names)


_PROTOCOL_NAMES = {"amqp091": "AMQP 0-9-1", "amqp10": "AMQP 1.0", STREAM_PROTOCOL: "stream"}


def _only_text(clause: Clause) -> str:
    """Which side a clause of one protocol belongs to, in words."""
    assert clause.protocol is not None
    return (f"an {_PROTOCOL_NAMES[clause.protocol]} {clause.side or 'side'}; refused on a side "
            "of the other protocol")


def reference_markdown() -> str:
    """The configuration reference page: one section per group of clauses, one entry per
    clause (type, default, bound and unit, other names, since), generated from the spec."""
    lines = ["# Configuration reference", "",
             "The configuration file is JSON. This page is generated from `pumpd.config.spec`; "
             "`pumpd schema` prints the same clauses as a JSON Schema.", ""]
    for group in GROUPS:
        lines += [f"## {group.title}", "", group.doc, ""]
        for names in group.exactly_one:
            lines += ["Give exactly one of " + " and ".join(f"`{n}`" for n in names) + ".", ""]
        for names in group.at_most_one:
            lines += ["Give at most one of " + " and ".join(f"`{n}`" for n in names) + ".", ""]
        for clause in group:
            lines += [f"### `{clause.name}`", "", clause.doc, "",
                      f"- Type: {TYPES[clause.type]}",
                      f"- Default: {_default_text(clause)}",
                      f"- Bound: {_bound_text(clause)}"]
            if clause.group is not None:
                target = _BY_KEY[clause.group]
                lines.append(f"- Clauses: see [{target.title}](#{_anchor(target.title)})")
            if other := _names_text(clause):
                lines.append(f"- Other names: {other}")
            if clause.protocol is not None:
                lines.append(f"- Only: {_only_text(clause)}")
            lines += [f"- Since: {clause.since}", ""]
    return "\n".join(lines)


def _anchor(title: str) -> str:
    """The anchor a Markdown renderer (Python-Markdown's toc, GitHub) gives a heading."""
    import re

    text = re.sub(r"[^\w\s-]", "", title).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


# --- the JSON Schema ---------------------------------------------------------------------------

_AMQP_TYPES: dict[str, dict[str, Any]] = {
    BIT: {"type": "boolean"},
    SHORTSTR: {"type": "string", "maxLength": MAX_SHORTSTR},
    OCTET: {"type": "integer", "minimum": 0, "maximum": 255},
    LONGLONG: {"type": "integer", "minimum": 0},
    "table": {"$ref": "#/$defs/table"},
}


def _declaration_schema() -> dict[str, Any]:
    """A declaration: a method without required fields by name, or ``{method: {fields}}`` with
    ``if_missing`` beside it."""
    methods: list[dict[str, Any]] = []
    for method, fields in DECLARATION_METHODS.items():
        body: dict[str, Any] = {
            "type": "object",
            "properties": {name: _AMQP_TYPES[kind] for name, kind in fields.items()},
            "additionalProperties": False,
        }
        needed = REQUIRED_FIELDS.get(method, ())
        if needed:
            body["required"] = list(needed)
            for name in needed:
                body["properties"][name] = {"type": "string", "minLength": 1,
                                            "maxLength": MAX_SHORTSTR}
        methods.append({
            "type": "object",
            "properties": {method: body, "if_missing": {"type": "boolean"}},
            "required": [method],
            "additionalProperties": False,
        })
    bare = [m for m in DECLARATION_METHODS if m not in REQUIRED_FIELDS]
    return {"anyOf": [{"enum": bare}, *methods]}


def _clause_schema(clause: Clause, dynamic: bool = False) -> dict[str, Any]:
    """The schema of one clause's value, with its doc and default for an editor's hints."""
    kind = clause.type
    out: dict[str, Any]
    if kind in ("integer", "number"):
        out = {"type": kind}
        if clause.minimum is not None:
            out["minimum"] = clause.minimum
        if clause.maximum is not None:
            out["maximum"] = clause.maximum
    elif kind == "boolean":
        out = {"type": "boolean"}
    elif kind == "string":
        out = {"type": "string"}
        if clause.minimum:
            out["minLength"] = clause.minimum
        if clause.maximum is not None:
            out["maxLength"] = clause.maximum
        if clause.pattern is not None:
            out["pattern"] = clause.pattern
    elif kind == "enum":
        out = {"enum": list(clause.dynamic_enum if dynamic and clause.dynamic_enum
                            else clause.enum)}
    elif kind == "uri":
        out = {"$ref": "#/$defs/uri"}
    elif kind == "uris":
        out = {"type": "array", "items": {"$ref": "#/$defs/uri"}, "minItems": clause.minimum,
               "maxItems": clause.maximum}
    elif kind == "uri or uris":
        out = {"anyOf": [{"$ref": "#/$defs/uri"},
                         {"type": "array", "items": {"$ref": "#/$defs/uri"},
                          "minItems": clause.minimum, "maxItems": clause.maximum}]}
    elif kind == "declarations":
        out = {"type": "array", "items": {"$ref": "#/$defs/declaration"},
               "maxItems": clause.maximum}
    elif kind == "table":
        out = {"$ref": "#/$defs/table"}
    elif kind == "properties":
        out = {"$ref": "#/$defs/basic_properties"}
    elif kind == "object":
        out = {"$ref": f"#/$defs/{clause.group}"}
    elif kind == "shovels":
        out = {"type": "object", "maxProperties": clause.maximum,
               "propertyNames": {"minLength": 1, "maxLength": MAX_SHOVEL_NAME},
               "additionalProperties": {"$ref": "#/$defs/shovel"}}
    elif kind == "names":
        out = {"type": "array", "items": {"type": "string"}}
    elif kind == "delete_after":
        out = {"anyOf": [{"enum": ["never", "queue-length"]},
                         {"type": "integer", "minimum": clause.minimum,
                          "maximum": clause.maximum}]}
    elif kind == "undeliverable":
        out = {"anyOf": [{"enum": list(UNDELIVERABLE["policy"].enum)},
                         {"$ref": f"#/$defs/{clause.group}"}]}
    elif kind == "amqp10 properties":
        out = {"$ref": "#/$defs/amqp10_properties"}
    elif kind == "strings":
        out = {"type": "object", "maxProperties": MAX_TABLE_VALUES,
               "propertyNames": {"minLength": 1, "maxLength": MAX_SHORTSTR},
               "additionalProperties": {"type": "string"}}
    else:
        raise ValueError(f"clause {clause.name!r}: unknown type {kind!r}")
    if clause.empty_list:
        out = {"anyOf": [out, {"type": "array", "maxItems": 0}]}
    out["description"] = clause.doc
    if clause.has_value_default:
        out["default"] = clause.default
    return out


def _object_schema(clauses: list[tuple[str, Clause]], *, dynamic: bool = False,
                   group: Group | None = None, group_rules: bool = True) -> dict[str, Any]:
    """A JSON object of these clauses (by the name each is written with), nothing else; with
    the group's exactly-one / at-most-one rules unless ``group_rules`` is false (the caller
    places them)."""
    out: dict[str, Any] = {
        "type": "object",
        "properties": {name: _clause_schema(c, dynamic) for name, c in clauses},
        "additionalProperties": False,
    }
    required = [name for name, c in clauses if c.required]
    if required:
        out["required"] = required
    if group is not None:
        out["description"] = group.doc
        rules = _group_rules(group) if group_rules else []
        if rules:
            out["allOf"] = rules
    return out


def _group_rules(group: Group, names: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """The group's exactly-one and at-most-one rules (those among ``names`` only, if given)."""
    def wanted(rule: tuple[str, ...]) -> bool:
        return names is None or set(rule) <= set(names)

    rules: list[dict[str, Any]] = [{"oneOf": [{"required": [n]} for n in rule]}
                                   for rule in group.exactly_one if wanted(rule)]
    rules += [{"not": {"required": list(rule)}} for rule in group.at_most_one if wanted(rule)]
    return rules


def _forbidden(names: list[str]) -> list[dict[str, Any]]:
    return [{"not": {"anyOf": [{"required": [n]} for n in names]}}] if names else []


def _protocol_rule(is_amqp10: dict[str, Any], amqp091: list[tuple[str, Clause]],
                   amqp10: list[tuple[str, Clause]], amqp091_rules: list[dict[str, Any]],
                   amqp10_rules: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One side's keys by protocol: with AMQP 1.0 its own keys (the required ones required)
    and none of AMQP 0-9-1's, and ``amqp10_rules``; else the other way round, with AMQP
    0-9-1's rules."""
    def branch(own: list[tuple[str, Clause]], other: list[tuple[str, Clause]],
               rules: list[dict[str, Any]]) -> dict[str, Any]:
        parts = _forbidden([n for n, _ in other]) + rules
        required = [n for n, c in own if c.required_with_protocol]
        if required:
            parts.append({"required": required})
        return {"allOf": parts} if parts else {}

    return {"if": is_amqp10, "then": branch(amqp10, amqp091, amqp10_rules or []),
            "else": branch(amqp091, amqp10, amqp091_rules)}


def _amqp10_source_rules(prefetch: str, delete_after: str) -> list[dict[str, Any]]:
    """What an AMQP 1.0 source refuses among values its clauses otherwise take: a link credit of
    0, "queue-length", and parking."""
    park = {"const": "park"}
    parks = {"anyOf": [park, {"properties": {"policy": park}, "required": ["policy"]},
                       {"properties": {"unroutable": park}, "required": ["unroutable"]},
                       {"type": "object", "required": ["park_queue"]}]}
    return [{"properties": {prefetch: {"minimum": 1},
                            delete_after: {"not": {"const": "queue-length"}},
                            "undeliverable": {"not": parks}}}]


def _is_amqp10(key: str) -> dict[str, Any]:
    return {"properties": {key: {"const": PROTOCOLS[1]}}, "required": [key]}


def _stream_rule(is_stream: dict[str, Any], own: list[tuple[str, Clause]],
                 others: list[str]) -> dict[str, Any]:
    """A stream destination's keys: with protocol stream its own (the required ones required)
    and none of the other protocols'; else none of its own."""
    then = _forbidden(others)
    names = {n for n, _ in own}
    required = [n for n, c in own if c.required_with_protocol]
    for target, instead in _STREAM_TARGETS:
        if target in required and instead in names:  # one or the other
            required.remove(target)
            then.append({"oneOf": [{"required": [target]}, {"required": [instead]}]})
    if required:
        then.append({"required": required})
    return {"if": is_stream, "then": {"allOf": then} if then else {},
            "else": {"allOf": _forbidden([n for n, _ in own])}}


# a stream destination's target: a stream, or instead a super stream
_STREAM_TARGETS = (("stream", "super_stream"), ("dest-stream", "dest-super-stream"))


def _is_stream(key: str) -> dict[str, Any]:
    return {"properties": {key: {"const": STREAM_PROTOCOL}}, "required": [key]}


def _static_shovel() -> dict[str, Any]:
    schema = _object_schema([(c.name, c) for c in SHOVEL], group=SHOVEL)
    rules = schema.setdefault("allOf", [])
    for side, (clause, _, _) in SIDES.items():
        is_amqp10 = {"properties": {clause: _is_amqp10("protocol")}, "required": [clause]}
        rules.append(_protocol_rule(
            is_amqp10, [(n, SHOVEL[n]) for n in side_keys(side, PROTOCOLS[0], dynamic=False)],
            [(n, SHOVEL[n]) for n in side_keys(side, PROTOCOLS[1], dynamic=False)], [],
            _amqp10_source_rules("prefetch_count", "delete_after") if side == "source"
            else None))
    rules.append(_stream_rule(
        {"properties": {"destinations": _is_stream("protocol")}, "required": ["destinations"]},
        [(n, SHOVEL[n]) for n in side_keys("destination", STREAM_PROTOCOL, dynamic=False)],
        [n for p in PROTOCOLS for n in side_keys("destination", p, dynamic=False)]))
    return schema


def _endpoint() -> dict[str, Any]:
    schema = _object_schema([(c.name, c) for c in ENDPOINT], group=ENDPOINT)
    schema.setdefault("allOf", []).append(_protocol_rule(
        _is_amqp10("protocol"), [(n, ENDPOINT[n]) for n in endpoint_keys(PROTOCOLS[0])],
        [(n, ENDPOINT[n]) for n in endpoint_keys(PROTOCOLS[1])], []))
    schema["allOf"].append(_stream_rule(
        _is_stream("protocol"), [(n, ENDPOINT[n]) for n in endpoint_keys(STREAM_PROTOCOL)],
        [n for p in PROTOCOLS for n in endpoint_keys(p)]))
    return schema


def _dynamic_shovel() -> dict[str, Any]:
    clauses = [(c.name, c) for c in DYNAMIC]
    clauses += [(c.dynamic, c) for c in SHOVEL if c.dynamic]
    clauses += [(c.legacy, c) for c in SHOVEL if c.legacy]
    by_name = dict(clauses)
    schema = _object_schema(clauses, dynamic=True, group=DYNAMIC, group_rules=False)
    # a legacy name and its current name are never given together
    rules: list[dict[str, Any]] = [
        {"not": {"required": [c.dynamic, c.legacy]}} for c in SHOVEL if c.legacy]
    for side, (_, _, protocol_key) in SIDES.items():
        amqp091 = side_keys(side, PROTOCOLS[0], dynamic=True)
        rules.append(_protocol_rule(
            _is_amqp10(protocol_key), [(n, by_name[n]) for n in amqp091],
            [(n, by_name[n]) for n in side_keys(side, PROTOCOLS[1], dynamic=True)],
            _group_rules(DYNAMIC, amqp091),
            _amqp10_source_rules("src-prefetch-count", "src-delete-after") if side == "source"
            else None))
    rules.append(_stream_rule(
        _is_stream("dest-protocol"),
        [(n, by_name[n]) for n in side_keys("destination", STREAM_PROTOCOL, dynamic=True)],
        [n for p in PROTOCOLS for n in side_keys("destination", p, dynamic=True)]))
    schema["allOf"] = rules
    return schema


_AMQP10_TYPES: dict[str, dict[str, Any]] = {
    "string": {"type": "string"},
    "binary": {"type": "string"},
    "symbol": {"type": "string", "pattern": "^[\\x00-\\x7f]*$"},
    "timestamp": {"anyOf": [{"type": "integer", "minimum": 0},
                            {"type": "string", "pattern": "^[0-9]{1,19}$"}]},
    "uint": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": MAX_UINT},
                       {"type": "string", "pattern": "^[0-9]{1,10}$"}]},
}


def json_schema() -> dict[str, Any]:
    """A JSON Schema (draft 2020-12) of the configuration file, for editors: every clause with
    its type, bound, default and doc, generated from the spec."""
    defs: dict[str, Any] = {
        "shovel": {"oneOf": [{"$ref": "#/$defs/static_shovel"},
                             {"$ref": "#/$defs/dynamic_shovel"}]},
        "static_shovel": _static_shovel(),
        "dynamic_shovel": _dynamic_shovel(),
        "uri": {"type": "string", "pattern": "^amqps?://", "maxLength": MAX_URI,
                "description": "An AMQP URI: amqp:// or amqps://, with its query parameters (an "
                               "AMQP 0-9-1 or an AMQP 1.0 URI, as its side's protocol)."},
        "table": {"type": "object", "description": "An AMQP field table."},
        "declaration": _declaration_schema(),
        "basic_properties": {
            "type": "object",
            "properties": {
                **{name: _AMQP_TYPES[kind] for name, kind in BASIC_PROPERTIES.items()},
                "delivery_mode": {"enum": [1, 2]},
                "expiration": {"type": "string", "pattern": "^[0-9]+$"},
            },
            "additionalProperties": False,
        },
        "amqp10_properties": {
            "type": "object",
            "properties": {name: _AMQP10_TYPES[kind] for name, kind in AMQP10_PROPERTIES.items()},
            "additionalProperties": False,
        },
        "endpoint": _endpoint(),
    }
    for group in (PUBLISH_FIELDS, UNDELIVERABLE, INTERNAL_OWNER, CLUSTER):
        defs[group.key] = _object_schema([(c.name, c) for c in group], group=group)
    schema = _object_schema([(c.name, c) for c in FILE], group=FILE)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "pumpd configuration",
        **schema,
        "$defs": defs,
    }


def json_schema_text() -> str:
    """:func:`json_schema` as a file holds it: what ``pumpd schema`` prints and the
    documentation ships."""
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"
