"""The validated, normalised shape of a shovel definition.

Both configuration forms (the static form's clauses and RabbitMQ's dynamic-shovel names) end up here;
nothing downstream of :mod:`pumpd.config.parse` ever sees raw JSON.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import quote, unquote

from .redaction import redact, register_secret
from .spec import CLUSTER, PUBLISH_FIELDS, SHOVEL, UNDELIVERABLE


def _reduce_through_init(obj: Any) -> tuple[Any, tuple[Any, ...]]:
    """Pickle a frozen dataclass so that unpickling runs ``__init__`` (and ``__post_init__``): a
    spawned worker or a Spark executor registers the secrets of what it receives."""
    return type(obj), tuple(getattr(obj, f.name) for f in fields(obj))


DEFAULT_PORTS = {"amqp": 5672, "amqps": 5671}
# amqp10_client's max_frame_size when the URI names none (amqp10_client_connection)
AMQP10_DEFAULT_MAX_FRAME_SIZE = 1_048_576
# Where a RabbitMQ 4 AMQP 1.0 address names a queue: "/queues/" and the name, percent-encoded
QUEUE_ADDRESS_PREFIX = "/queues/"


class Protocol(str, enum.Enum):
    """The protocol of one side of a shovel (src-protocol / dest-protocol)."""

    AMQP091 = "amqp091"
    AMQP10 = "amqp10"
    STREAM = "stream"  # a destination only: a RabbitMQ stream over the streams protocol


class SaslMechanism(str, enum.Enum):
    """How an AMQP 1.0 connection logs in (an AMQP 1.0 URI's ``sasl``)."""

    ANONYMOUS = "anon"
    PLAIN = "plain"  # the URI's user and password
    EXTERNAL = "external"  # the TLS client certificate's identity


class AckMode(str, enum.Enum):
    """When the source is told a message is done with (the clause ``ack_mode``)."""

    NO_ACK = "no_ack"
    ON_PUBLISH = "on_publish"
    ON_CONFIRM = "on_confirm"


@dataclass(frozen=True)
class TLSOptions:
    """The TLS query parameters of an ``amqps`` URI, any subset of them (amqp_uri.erl).

    ``None`` for a file means: not given (the system's CAs; no client certificate).
    """

    cacertfile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    verify: bool = True  # verify_peer -> True, verify_none -> False
    fail_if_no_peer_cert: bool = False  # a server-side option in Erlang: kept, not used
    password: str | None = None  # the private key's passphrase, never an AMQP password
    depth: int | None = None  # the most intermediate certificates accepted in the chain
    # The name sent as SNI and checked against the certificate; "disable" sends no SNI.
    server_name_indication: str | None = None
    customize_hostname_check: str | None = None  # only "https" (wildcards as for HTTPS)
    # The TLS versions allowed, oldest first ("tlsv1.2", "tlsv1.3"; an AMQP 1.0 URI's
    # versions=...); () lets the ssl library choose.
    versions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        register_secret(self.password)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _reduce_through_init(self)

    def query(self) -> list[tuple[str, str]]:
        """The URI query parameters that give these options (the passphrase included)."""
        query = [(name, value) for name in ("cacertfile", "certfile", "keyfile", "password")
                 if (value := getattr(self, name)) is not None]
        query.append(("verify", "verify_peer" if self.verify else "verify_none"))
        if self.fail_if_no_peer_cert:
            query.append(("fail_if_no_peer_cert", "true"))
        if self.depth is not None:
            query.append(("depth", str(self.depth)))
        if self.server_name_indication is not None:
            query.append(("server_name_indication", self.server_name_indication))
        if self.customize_hostname_check is not None:
            query.append(("customize_hostname_check", self.customize_hostname_check))
        if self.versions:
            query.append(("versions", ",".join(self.versions)))
        return query

    def __repr__(self) -> str:  # the key passphrase stays out of tracebacks
        return f"TLSOptions(cacertfile={self.cacertfile!r}, certfile={self.certfile!r}, ...)"

    __str__ = __repr__


@dataclass(frozen=True)
class BrokerURI:
    """One AMQP URI, parsed. ``host is None`` means the local broker (a host-less ``amqp://``)."""

    scheme: str  # "amqp" or "amqps"
    host: str | None
    port: int
    username: str
    password: str
    vhost: str
    heartbeat: int | None = None
    channel_max: int | None = None
    frame_max: int | None = None
    connection_timeout: float | None = None
    tls: TLSOptions | None = None
    # SASL mechanisms in the URI's order (auth_mechanism=...): "plain", "amqplain", "external".
    auth_mechanisms: tuple[str, ...] = ()

    @property
    def effective_host(self) -> str:
        """Where to connect: the local broker for a host-less URI."""
        return self.host if self.host is not None else "127.0.0.1"

    def __post_init__(self) -> None:
        register_secret(self.password)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _reduce_through_init(self)

    def redacted(self) -> str:
        """The URI as it may appear in a log line or a status: never with its password (nor the
        TLS key's), and any registered secret in it (a user named like a password) hidden."""
        user = f"{self.username}@" if self.username else ""
        host = self.host or ""
        port = f":{self.port}" if self.host is not None else ""
        vhost = quote(self.vhost, safe="") if self.vhost != "/" else "%2F"
        return redact(f"{self.scheme}://{user}{host}{port}/{vhost}")

    def text_with_password(self) -> str:
        """The full URI, password and TLS options included, that parses back to this one: for the
        state file and a connection, never for a log line or a message."""

        def enc(s: str) -> str:
            return quote(s, safe="")

        host = "" if self.host is None else f"[{self.host}]" if ":" in self.host else enc(
            self.host)
        port = "" if self.port == DEFAULT_PORTS[self.scheme] else f":{self.port}"
        query = [(name, str(getattr(self, name))) for name in ("heartbeat", "channel_max",
                                                               "frame_max")
                 if getattr(self, name) is not None]
        if self.connection_timeout is not None:
            query.append(("connection_timeout", str(round(self.connection_timeout * 1000))))
        if self.tls is not None:
            query += self.tls.query()
        query += [("auth_mechanism", m) for m in self.auth_mechanisms]
        q = "&".join(f"{k}={enc(v)}" for k, v in query)
        return (f"{self.scheme}://{enc(self.username)}:{enc(self.password)}@{host}{port}"
                f"/{enc(self.vhost)}" + (f"?{q}" if q else ""))

    def __repr__(self) -> str:  # keeps passwords out of tracebacks and debug logs
        return f"BrokerURI({self.redacted()!r})"

    def __str__(self) -> str:
        return self.redacted()


def _host_text(host: str) -> str:
    """A host as a URI writes it: an IPv6 literal in brackets, a name percent-encoded."""
    return f"[{host}]" if ":" in host else quote(host, safe="")


@dataclass(frozen=True)
class Amqp10URI:
    """One AMQP 1.0 URI, parsed as the plugin's client reads it (amqp10_client:parse_uri/1;
    :mod:`pumpd.config.amqp10_uri`): ``amqp[s]://[user:password@]host[:port][?query]``.

    An AMQP 1.0 URI has no vhost: RabbitMQ takes it from ``hostname`` (``vhost:NAME``). The
    user and password are those of SASL PLAIN, and empty with another mechanism.
    """

    scheme: str  # "amqp" or "amqps"
    host: str
    port: int
    sasl: SaslMechanism = SaslMechanism.ANONYMOUS
    username: str = ""
    password: str = ""
    # The open frame's hostname; None: the host, as amqp10_client sends it.
    hostname: str | None = None
    idle_time_out: int = 0  # milliseconds asked of the peer; 0: none
    max_frame_size: int = AMQP10_DEFAULT_MAX_FRAME_SIZE  # bytes, the largest frame received
    container_id: str | None = None  # the open frame's container-id; None: a generated one
    tls: TLSOptions | None = None

    @property
    def effective_host(self) -> str:
        """Where to connect (the same name as :attr:`BrokerURI.effective_host`)."""
        return self.host

    @property
    def effective_hostname(self) -> str:
        """The hostname the open frame carries."""
        return self.hostname if self.hostname is not None else self.host

    def __post_init__(self) -> None:
        register_secret(self.password)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _reduce_through_init(self)

    def redacted(self) -> str:
        """The URI as a log line or a status may show it: never with its password (nor the TLS
        key's), and any registered secret in it hidden."""
        user = f"{quote(self.username, safe='')}@" if self.username else ""
        hostname = (f"?hostname={quote(self.hostname, safe=':')}"
                    if self.hostname is not None else "")
        return redact(f"{self.scheme}://{user}{_host_text(self.host)}:{self.port}{hostname}")

    def text_with_password(self) -> str:
        """The full URI, password and TLS options included, that parses back to this one: for the
        state file and a connection, never for a log line or a message."""

        def enc(s: str) -> str:
            return quote(s, safe="")

        user = (f"{enc(self.username)}:{enc(self.password)}@"
                if self.sasl is SaslMechanism.PLAIN else "")
        port = "" if self.port == DEFAULT_PORTS[self.scheme] else f":{self.port}"
        query: list[tuple[str, str]] = [("sasl", self.sasl.value)]
        if self.hostname is not None:
            query.append(("hostname", self.hostname))
        if self.idle_time_out:
            query.append(("idle_time_out", str(self.idle_time_out)))
        if self.max_frame_size != AMQP10_DEFAULT_MAX_FRAME_SIZE:
            query.append(("max_frame_size", str(self.max_frame_size)))
        if self.container_id is not None:
            query.append(("container_id", self.container_id))
        if self.tls is not None:
            query += self.tls.query()
        q = "&".join(f"{k}={enc(v)}" for k, v in query)
        return f"{self.scheme}://{user}{_host_text(self.host)}{port}?{q}"

    def __repr__(self) -> str:  # keeps passwords out of tracebacks and debug logs
        return f"Amqp10URI({self.redacted()!r})"

    def __str__(self) -> str:
        return self.redacted()


@dataclass(frozen=True)
class Declaration:
    """One AMQP method issued after connecting, e.g. ``queue.declare`` with its fields.

    ``arguments`` uses the AMQP field names (exchange, type, queue, durable, routing_key,
    arguments, ...). A ``queue`` of ``""`` in anything but ``queue.declare`` means the queue most
    recently declared on that connection.
    """

    method: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    # queue.declare only: first a passive declare of the same queue; issue this declaration only
    # if that fails with 404 NOT_FOUND (on a fresh channel: the 404 closes the first one). This is
    # what the dynamic shovel does for src-queue / dest-queue, so that an existing queue is used
    # as it is whatever its properties, and a missing one is created durable.
    if_missing: bool = False


@dataclass(frozen=True)
class Endpoint:
    """``sources`` or ``destinations``: brokers to pick from at random, and what to declare.

    An AMQP 0-9-1 side (:attr:`protocol`) has :attr:`brokers` and :attr:`declarations`; an
    AMQP 1.0 side has :attr:`amqp10_brokers` and an :attr:`address` instead (its ``brokers``
    and ``declarations`` are empty).
    """

    brokers: tuple[BrokerURI, ...]
    declarations: tuple[Declaration, ...] = ()
    protocol: Protocol = Protocol.AMQP091
    amqp10_brokers: tuple[Amqp10URI, ...] = ()
    # AMQP 1.0: the source address a receiving link attaches to, or the target address a
    # sending link attaches to (src-address / dest-address); None on an AMQP 0-9-1 side.
    address: str | None = None
    # AMQP 1.0: before attaching, declare the queue that a RabbitMQ "/queues/NAME" address
    # names, best effort (RabbitMQ's AMQP management, default queue arguments): what a dynamic
    # shovel does unless src-predeclared / dest-predeclared; a static one never does.
    declare_address_queue: bool = False
    # A stream destination (protocol "stream"): the stream, and the streams protocol's port
    # on the brokers (None: 5552, 5551 for amqps); its brokers are AMQP URIs for the host,
    # credentials, vhost and TLS. On an AMQP 0-9-1 source (source_stream_port /
    # src-stream-port): the port a stream source's lag is read on.
    stream: str | None = None
    stream_port: int | None = None
    # or a super stream: its partitions (from the broker), one publisher each
    super_stream: str | None = None

    @property
    def uris(self) -> tuple[BrokerURI | Amqp10URI, ...]:
        """The side's brokers, whichever its protocol."""
        return (*self.brokers, *self.amqp10_brokers)

    @property
    def address_queue(self) -> str | None:
        """The queue a RabbitMQ ``/queues/NAME`` address names (percent-decoded), or None
        (no address, another kind of address, or a name that does not decode)."""
        if self.address is None or not self.address.startswith(QUEUE_ADDRESS_PREFIX):
            return None
        quoted = self.address[len(QUEUE_ADDRESS_PREFIX):]
        try:
            name = unquote(quoted, errors="strict")
        except UnicodeDecodeError:
            return None
        return name or None

    def describe(self) -> str:
        """The brokers, passwords redacted (and an AMQP 1.0 side's address), as status and
        ``pumpd check`` show them."""
        brokers = ", ".join(b.redacted() for b in self.uris)
        if self.stream is not None:
            return f"{brokers} stream {redact(self.stream)!r}"
        if self.super_stream is not None:
            return f"{brokers} super stream {redact(self.super_stream)!r}"
        if self.address is None:
            return brokers
        return f"{brokers} address {redact(self.address)!r}"


class Disposition(str, enum.Enum):
    """What happens to a message pumpd cannot forward (``undeliverable`` clause)."""

    PARK = "park"  # published unchanged to the park queue on the source broker, then acked
    DEAD_LETTER = "dead-letter"  # basic.reject(requeue=false): the source queue's DLX gets it
    STOP = "stop"  # the shovel terminates, the message stays first in the source queue
    DROP = "drop"  # unroutable messages only: confirmed by the destination and gone (the plugin)


# What a message pumpd cannot forward gets when the configuration names no policy: park, or for
# an AMQP 1.0 source (which parking cannot reach: the park queue is published to over the source's
# AMQP 0-9-1 connection) dead-letter, the rejected outcome -- what the plugin's AMQP 1.0 source
# does with a message the destination rejects.
AMQP10_SOURCE_POLICY = Disposition.DEAD_LETTER


# The defaults the configuration's spec declares, as the model's types.
DEFAULT_PARK_QUEUE = UNDELIVERABLE["park_queue"].str_default()
_DEFAULT_POLICY = Disposition(UNDELIVERABLE["policy"].str_default())
_DEFAULT_UNROUTABLE = Disposition(UNDELIVERABLE["unroutable"].str_default())


@dataclass(frozen=True)
class UndeliverablePolicy:
    """The ``undeliverable`` clause.

    ``policy`` applies to a message that cannot be forwarded at all (properties that cannot be
    parsed, a content header larger than the destination's frame_max, a message the destination
    refuses by closing the channel); ``unroutable`` to one the destination returns as unroutable
    (mandatory publish).
    """

    policy: Disposition = _DEFAULT_POLICY
    park_queue: str = DEFAULT_PARK_QUEUE
    unroutable: Disposition = _DEFAULT_UNROUTABLE

    @property
    def parks(self) -> bool:
        return Disposition.PARK in (self.policy, self.unroutable)


class DeleteAfter(str, enum.Enum):
    NEVER = "never"
    QUEUE_LENGTH = "queue-length"


_DEFAULT_ACK_MODE = AckMode(SHOVEL["ack_mode"].str_default())
_DEFAULT_DELETE_AFTER = DeleteAfter(SHOVEL["delete_after"].str_default())


@dataclass(frozen=True)
class ShovelConfig:
    """One shovel, every clause of the static form plus the dynamic-shovel extras.

    Each side is AMQP 0-9-1 or AMQP 1.0 (``source.protocol``, ``destination.protocol``): the
    fields of one side's protocol only (an AMQP 0-9-1 source's :attr:`queue`, an AMQP 0-9-1
    destination's ``publish_*``, an AMQP 1.0 destination's ``amqp10_*``) keep their defaults on
    a side of the other.
    """

    name: str
    source: Endpoint
    destination: Endpoint
    # "" = the queue most recently declared in the source declarations; "" for an AMQP 1.0
    # source, which receives from its address (source.address)
    queue: str
    prefetch_count: int = SHOVEL["prefetch_count"].int_default()  # 0 = unlimited
    ack_mode: AckMode = _DEFAULT_ACK_MODE
    # Basic properties set on every re-published message, by AMQP name (content_type, headers, ...).
    publish_properties: Mapping[str, Any] = field(default_factory=dict)
    # None = keep the message's original exchange / routing key.
    publish_exchange: str | None = None
    publish_routing_key: str | None = None
    # basic.publish's mandatory flag: unroutable messages come back and are counted as returned
    # (the plugin publishes without it, and such messages are lost silently). False saves the
    # broker some work per message.
    publish_mandatory: bool = PUBLISH_FIELDS["mandatory"].bool_default()
    reconnect_delay: float = SHOVEL["reconnect_delay"].float_default()  # 0 = stop for good
    # Restart a session that moved nothing for this many seconds while the source had
    # a backlog, or that got no confirm with messages outstanding (engine/stall.py); 0 = never.
    stall_timeout: float = SHOVEL["stall_timeout"].float_default()
    # Dynamic-shovel extras.
    delete_after: DeleteAfter | int = _DEFAULT_DELETE_AFTER
    add_forward_headers: bool = SHOVEL["add_forward_headers"].bool_default()
    add_timestamp_header: bool = SHOVEL["add_timestamp_header"].bool_default()
    # Competing consumers on the source queue (the daemon's --workers / per-shovel clause).
    workers: int = SHOVEL["workers"].int_default()
    # After a short read from the source, wait this long before reading it again, so that what
    # the broker sends meanwhile is handled in one go: a third to a half less of the pump's CPU
    # per message for at most this much added latency (docs/bench.md). 0 = read at once.
    source_read_hold_ms: int = SHOVEL["source_read_hold_ms"].int_default()
    # With the daemon's --shovels-per-process K > 1, still run this shovel's workers each in a
    # process of its own (a shovel that must not share an event loop with others).
    own_process: bool = SHOVEL["own_process"].bool_default()
    undeliverable: UndeliverablePolicy = field(default_factory=UndeliverablePolicy)
    # Stop after this many seconds of running (src-delete-after-duration, the plugin's
    # delete_after_duration); None = no time limit.
    delete_after_duration: float | None = None
    # basic.consume's arguments (src-consumer-args: x-stream-offset, x-priority, ...) and tag
    # (src-consumer-name; "" lets the broker choose).
    consumer_arguments: Mapping[str, Any] = field(default_factory=dict)
    consumer_tag: str = SHOVEL["consumer_name"].str_default()
    # An AMQP 1.0 destination (dest-properties, dest-application-properties,
    # dest-message-annotations): set on every message sent. Properties by the plugin's names
    # (user_id, content_type, ...) with their AMQP 1.0 values (str; int for the two timestamps,
    # in milliseconds, and group_sequence); application properties and message annotations by
    # key (an annotation's key is a symbol), each a str.
    amqp10_properties: Mapping[str, str | int] = field(default_factory=dict)
    amqp10_application_properties: Mapping[str, str] = field(default_factory=dict)
    amqp10_message_annotations: Mapping[str, str] = field(default_factory=dict)
    # A stream destination's publishing ids (engine/streams/publishing_ids.py): "source-offset",
    # "none", "message_id" or "header:NAME"; "" is the default: source-offset for a stream
    # source, none otherwise.
    publishing_id: str = ""
    # The plugin 4.x's protected shovels ("internal": true): the HTTP API deletes or replaces
    # one only when forced, as `rabbitmqctl delete_shovel --force`; "internal_owner" names the
    # queue or exchange it belongs to (information only).
    internal: bool = False
    internal_owner: ShovelOwner | None = None
    # What pumpd does differently from the plugin with this definition, said at check / import
    # time (never part of a shovel's identity: two shovels that differ only here are equal).
    warnings: tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class ShovelOwner:
    """A protected shovel's owner (the plugin's ``internal_owner``)."""

    kind: str  # "queue" or "exchange"
    name: str
    virtual_host: str

    def describe(self) -> str:
        """As rabbit_misc:rs/1 says it: ``queue 'src' in vhost '/'``."""
        return f"{self.kind} {self.name!r} in vhost {self.virtual_host!r}"


DEFAULT_LEASE_RETRY = CLUSTER["lease_retry"].float_default()


@dataclass(frozen=True)
class ClusterConfig:
    """A group of daemons.

    :param name: the group's name; members with the same name share the positions
    :param coordination_uri: the broker where members find each other (used by the group's
        spread of positions; None: not given)
    :param lease_retry: seconds between lease attempts of a position on standby (jittered
        by +-25 %)
    :param poll_interval: seconds between the group's looks at the coordination broker
    :param settle: seconds a newcomer stays in the view before positions move to it
    :param grace: seconds a position stays free before a member it is not meant for takes it
    """

    name: str
    coordination_uri: BrokerURI | None = None
    lease_retry: float = DEFAULT_LEASE_RETRY
    poll_interval: float = CLUSTER["poll_interval"].float_default()
    settle: float = CLUSTER["settle"].float_default()
    grace: float = CLUSTER["grace"].float_default()


@dataclass(frozen=True)
class PumpConfig:
    shovels: Mapping[str, ShovelConfig]
    # The file's "shovels_per_process": how many shovels one daemon worker process may host
    # (None: not set, the command line's --shovels-per-process or 1).
    shovels_per_process: int | None = None
    # The file's "cluster" clause (config/cluster.py): the group of daemons this one is in.
    cluster: ClusterConfig | None = None


def reads_stream(queue: str, consumer_arguments: Mapping[str, Any],
                 declarations: Any) -> bool:
    """Whether a shovel's source queue is a stream: its consumer arguments have
    ``x-stream-offset``, or its source declarations declare its queue with ``x-queue-type:
    stream``."""
    if "x-stream-offset" in consumer_arguments:
        return True
    for d in declarations:
        a = d.arguments
        if d.method == "queue.declare" and a.get("queue", "") in (queue, "") \
                and (a.get("arguments") or {}).get("x-queue-type") == "stream":
            return True
    return False
