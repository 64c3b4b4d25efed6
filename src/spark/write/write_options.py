"""The data source's options: parsed and checked on the driver, carried to the executors.

Spark hands options over as strings with case-insensitive names; :func:`parse_options` turns
them into a :class:`WriteOptions` (a frozen, picklable dataclass: it is part of the writer that
Spark pickles and ships) or raises :class:`ValueError` naming the option. Nothing here imports
pyspark or pyarrow, so :func:`pumpd.spark.publish_partition` shares it on Spark 3.x.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

import orjson

from ...config.clauses import read_declarations
from ...config.limits import MAX_TABLE_DEPTH
from ...config.model import Declaration
from ...config.redaction import redact_uri, register_secret, register_uri_secrets, split_userinfo
from ...config.uri import parse_uri
from ...config.values import ConfigError, check_nesting
from ...config.vocabulary import BASIC_PROPERTIES

MessageIdMode = Literal["column", "deterministic", "none"]
MESSAGE_ID_MODES: tuple[MessageIdMode, ...] = ("column", "deterministic", "none")

# name (lower case) -> (the documented spelling, default shown in errors and docs/spark.md);
# the connection's options are the same for writing and reading (read_options.py)
CONNECTION_OPTIONS: dict[str, tuple[str, str]] = {
    "uri": ("uri", "(required)"),
    "password": ("password", "(the URI's)"),
}
OPTIONS: dict[str, tuple[str, str]] = {
    **CONNECTION_OPTIONS,
    "exchange": ("exchange", '""'),
    "routingkey": ("routingKey", '""'),
    "mandatory": ("mandatory", "false"),
    "persistent": ("persistent", "false"),
    "maxinflight": ("maxInFlight", "5000"),
    "confirmtimeoutms": ("confirmTimeoutMs", "30000"),
    "connectwaitms": ("connectWaitMs", "60000"),
    "messageid": ("messageId", "column"),
    "declarations": ("declarations", "[]"),
    "ignoreunknowncolumns": ("ignoreUnknownColumns", "false"),
    "checktarget": ("checkTarget", "true"),
    "stream": ("stream", '""'),
    "superstream": ("superStream", '""'),
    "streamport": ("streamPort", "5552 (5551 for amqps)"),
    "producername": ("producerName", "(one per write)"),
}

# RabbitMQ's streams listeners: stream.listeners.tcp / stream.listeners.ssl
STREAM_PORT, STREAM_TLS_PORT = 5552, 5551
# The streams protocol's limit on a producer's reference (in bytes); pumpd appends the partition
PRODUCER_NAME_MAX = 200
# maxInFlight when writing to a stream: the broker's confirms of that many messages (8 bytes
# each) must fit the sockets' buffers while the task is still sending
STREAM_IN_FLIGHT_MAX = 65_536

# Spark's own options, which it hands to the data source too
SPARK_OPTIONS = ("checkpointlocation", "queryname", "__checkpointlocation")

BODY_COLUMNS = ("body", "value")
# Columns beside the body; the basic properties keep their AMQP names.
KNOWN_COLUMNS: tuple[str, ...] = ("routing_key", "exchange", *BASIC_PROPERTIES)


@dataclass(frozen=True)
class WriteOptions:
    """What every task of one write needs (see the option table in docs/spark.md).

    ``uris`` as given; ``password``, when given, replaces their passwords (:meth:`connect_uris`).
    The repr shows neither password; building or unpickling one (on an executor) registers both
    with :mod:`pumpd.config.redaction`, so that the task's errors are redacted by value.
    """

    uris: tuple[str, ...]
    exchange: str = ""
    routing_key: str = ""
    mandatory: bool = False
    persistent: bool = False
    max_in_flight: int = 5000
    confirm_timeout: float = 30.0
    connect_wait: float = 60.0  # how long a task tries again to connect to a broker that is away
    message_id: MessageIdMode = "column"
    declarations: tuple[Declaration, ...] = field(default_factory=tuple)
    ignore_unknown_columns: bool = False
    check_target: bool = True
    password: str | None = None
    stream: str = ""  # a stream written over the streams protocol, effectively once
    super_stream: str = ""  # ... or a super stream, each row to a partition by its routing key
    stream_port: int = STREAM_PORT
    producer_name: str = ""  # a batch write's producer names, instead of one made per write

    def __post_init__(self) -> None:
        for u in self.uris:
            register_uri_secrets(u)
        register_secret(self.password)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return type(self), tuple(getattr(self, f.name) for f in fields(self))

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)
                          if f.name not in ("uris", "password"))
        uris = ", ".join(redact_uri(u) for u in self.uris)
        password = ", password='***'" if self.password is not None else ""
        return f"WriteOptions(uris=({uris}){password}, {shown})"

    __str__ = __repr__

    @property
    def to_streams(self) -> bool:
        """A write over the streams protocol: to a stream or a super stream."""
        return bool(self.stream or self.super_stream)

    @property
    def target(self) -> str:
        """A streams write's target in words, as errors name it: ``stream 's'`` or
        ``super stream 's'``."""
        return (f"super stream {self.super_stream!r}" if self.super_stream
                else f"stream {self.stream!r}")

    def connect_uris(self) -> list[str]:
        """The URIs to connect to, with the ``password`` option in them: never for a message."""
        if self.password is None:
            return list(self.uris)
        return [replace(parse_uri(u), password=self.password).text_with_password()
                for u in self.uris]


def option_bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "1", "yes", "on"):
        return True
    if v in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"pumpd option {name}: expected true or false, got {value!r}")


MAX_IN_FLIGHT = 1_000_000  # maxInFlight: unconfirmed messages held by one task
MAX_CONFIRM_TIMEOUT_MS = 86_400_000  # confirmTimeoutMs: one day
MAX_CONNECT_WAIT_MS = 3_600_000  # connectWaitMs: one hour


def option_int(name: str, value: str, low: int, high: int) -> int:
    text = value.strip()
    try:
        n = int(text) if len(text) <= 20 else None
    except ValueError:
        n = None
    if n is None:
        raise ValueError(f"pumpd option {name}: expected an integer, got {value[:40]!r}")
    if not low <= n <= high:
        raise ValueError(f"pumpd option {name}: must be from {low} to {high}, got {n}")
    return n


def _declarations(text: str) -> tuple[Declaration, ...]:
    try:
        items = orjson.loads(text)
    except orjson.JSONDecodeError as exc:  # its own depth limit included
        raise ValueError(f"pumpd option declarations: not JSON ({exc})") from None
    if not isinstance(items, list):
        raise ValueError("pumpd option declarations: expected a JSON list, as a shovel's "
                         "destination declarations")
    try:
        # a declaration's arguments are the 4th level, [ {method: {arguments: {...}}} ]: the
        # table's own check, with its own bound, sees any table that fits
        check_nesting(items, "declarations", 4 + MAX_TABLE_DEPTH)
        return read_declarations(items, "declarations")
    except ConfigError as exc:
        raise ValueError(f"pumpd option {exc}") from None


def _json_text(name: str, value: object) -> str:
    try:  # orjson: a depth limit of its own where json.dumps recurses
        return orjson.dumps(value).decode()
    except (orjson.JSONEncodeError, TypeError) as exc:
        raise ValueError(f"pumpd option {name}: not JSON ({exc})") from None


def parse_options(options: Mapping[str, Any]) -> WriteOptions:
    """Check every option (names case-insensitive, values strings or plain Python values).

    :raises ValueError: naming the option that is unknown, missing or malformed
    """
    opts: dict[str, str] = {}
    for key, value in options.items():
        k = str(key).lower()
        if k in SPARK_OPTIONS:
            continue
        if k == "path":  # .save("...") puts its argument here; the option spelling wins
            k = "uri"
        if k not in OPTIONS:
            close = [spelled for low, (spelled, _) in OPTIONS.items() if low[:4] == k[:4]]
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ValueError(f"pumpd: unknown option {key!r}{hint}; the options: "
                             + ", ".join(s for s, _ in OPTIONS.values()))
        opts.setdefault(k, value if isinstance(value, str) else _json_text(k, value)
                        if isinstance(value, (list, dict)) else str(value))
    raw_uri = opts.get("uri", "").strip()
    if not raw_uri:
        raise ValueError('pumpd: option "uri" is required (amqp://user:pass@host:port/vhost, '
                         "several separated by spaces or commas)")
    uris = tuple(u for u in re.split(r"[\s,]+", raw_uri) if u)
    password = opts.get("password")
    register_secret(password)
    for u in uris:
        try:
            parse_uri(u)
        except Exception as exc:
            raise ValueError(f"pumpd option uri: {exc}") from None
        if password is None:
            _warn_if_password_in(u)
    mode = opts.get("messageid", "column").strip().lower()
    if mode not in MESSAGE_ID_MODES:
        raise ValueError(f"pumpd option messageId: one of {', '.join(MESSAGE_ID_MODES)}, "
                         f"got {opts['messageid']!r}")
    exchange = opts.get("exchange", "")
    routing_key = opts.get("routingkey", "")
    stream = opts.get("stream", "").strip()
    super_stream = opts.get("superstream", "").strip()
    for name, value in (("exchange", exchange), ("routingKey", routing_key), ("stream", stream),
                        ("superStream", super_stream)):
        if len(value.encode()) > 255:
            raise ValueError(f"pumpd option {name}: longer than 255 bytes")
    _check_stream_options(opts, stream, super_stream)
    return WriteOptions(
        uris=uris,
        exchange=exchange,
        routing_key=routing_key,
        mandatory=option_bool("mandatory", opts.get("mandatory", "false")),
        persistent=option_bool("persistent", opts.get("persistent", "false")),
        max_in_flight=option_int("maxInFlight", opts.get("maxinflight", "5000"), 1, MAX_IN_FLIGHT),
        confirm_timeout=option_int("confirmTimeoutMs", opts.get("confirmtimeoutms", "30000"), 1,
                             MAX_CONFIRM_TIMEOUT_MS) / 1000,
        connect_wait=option_int("connectWaitMs", opts.get("connectwaitms", "60000"), 0,
                                MAX_CONNECT_WAIT_MS) / 1000,
        message_id=mode,  # type: ignore[arg-type]  # checked against MESSAGE_ID_MODES above
        declarations=_declarations(opts.get("declarations", "[]")),
        ignore_unknown_columns=option_bool("ignoreUnknownColumns",
                                     opts.get("ignoreunknowncolumns", "false")),
        check_target=option_bool("checkTarget", opts.get("checktarget", "true")),
        password=password,
        stream=stream,
        super_stream=super_stream,
        stream_port=stream_port(opts, uris[0]),
        producer_name=opts.get("producername", "").strip(),
    )


# the options of an AMQP 0-9-1 publish that a stream write has no use for, and why
_QUEUE_ONLY = {
    "exchange": "publishes to the stream itself",
    "mandatory": "publishes to the stream itself",
    "declarations": "declares nothing",
    "persistent": "keeps every message on disk already",
}


# ... and why a super stream write has no use for them, where it differs
_SUPER_STREAM_ONLY = {
    "exchange": "sends each row to the partition its routing key's hash picks",
    "mandatory": "sends each row to the partition its routing key's hash picks",
}


def _check_stream_options(opts: Mapping[str, str], stream: str, super_stream: str) -> None:
    """A write goes to one stream, one super stream, or an exchange; a streams write takes no
    exchange options, and the streams options need a stream or a super stream."""
    if stream and super_stream:
        raise ValueError(f"pumpd options stream and superStream: a write goes to one of them, "
                         f"not to stream {stream!r} and super stream {super_stream!r} both")
    if not stream and not super_stream:
        for name in ("streamport", "producername"):
            if name in opts:
                raise ValueError(f"pumpd option {OPTIONS[name][0]}: only for a stream write "
                                 "(option stream or superStream)")
        return
    for name, why in _QUEUE_ONLY.items():
        if name not in opts:
            continue
        if super_stream:
            raise ValueError(f"pumpd option {OPTIONS[name][0]} and option superStream: not for a "
                             f"super stream write (a write to super stream {super_stream!r} "
                             f"{_SUPER_STREAM_ONLY.get(name, why)})")
        raise ValueError(f"pumpd option {OPTIONS[name][0]}: not for a stream write (a write "
                         f"to stream {stream!r} {why})")
    producer = opts.get("producername", "")
    if len(producer.encode()) > PRODUCER_NAME_MAX:
        raise ValueError(f"pumpd option producerName: longer than {PRODUCER_NAME_MAX} bytes")
    if "maxinflight" in opts and option_int("maxInFlight", opts["maxinflight"], 1,
                                            MAX_IN_FLIGHT) > STREAM_IN_FLIGHT_MAX:
        raise ValueError(f"pumpd option maxInFlight: at most {STREAM_IN_FLIGHT_MAX} for a stream "
                         f"write, got {opts['maxinflight'].strip()}")


def stream_port(opts: Mapping[str, str], uri: str) -> int:
    """The option streamPort, else the streams TLS port for an amqps URI (the streams
    connection is TLS exactly when the AMQP one would be), else the plain one."""
    if "streamport" in opts:
        return option_int("streamPort", opts["streamport"], 1, 65535)
    return STREAM_TLS_PORT if parse_uri(uri).scheme == "amqps" else STREAM_PORT


_warned_uri_password = False


def _warn_if_password_in(uri: str) -> None:
    """Once per process: a password in ``uri`` works, but Spark may show it (see docs/spark.md)."""
    global _warned_uri_password
    userinfo, _, _ = split_userinfo(uri.partition("://")[2])
    if _warned_uri_password or userinfo is None or ":" not in userinfo:
        return
    _warned_uri_password = True
    warnings.warn(f"pumpd option uri: {redact_uri(uri)} carries a password, which Spark may show "
                  "in query plans, the UI and event logs (spark.redaction.regex does not match "
                  "'uri'): give it in the option 'password' instead", stacklevel=3)
