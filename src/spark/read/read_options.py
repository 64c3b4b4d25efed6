"""The read side's options: parsed and checked on the driver, carried to the executors.

One of ``stream`` (a stream, or several separated by commas: each one a partition of the
offsets), ``superStream`` (a super stream, read as its partition streams) or ``queue`` (a
classic or quorum queue) says which reader Spark gets. Names follow the
Kafka source where Spark users know them (``startingOffsets``, ``endingOffsets``,
``maxRecordsPerTrigger``, ``failOnDataLoss``). Nothing here imports pyspark.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ...config.uri import parse_uri
from ..write.write_options import (
    CONNECTION_OPTIONS,
    SPARK_OPTIONS,
    STREAM_PORT,
    option_bool,
    option_int,
    stream_port,
)

Protocol = Literal["auto", "stream", "amqp"]
PROTOCOLS: tuple[Protocol, ...] = ("auto", "stream", "amqp")
# first / last / next are RabbitMQ's x-stream-offset words; earliest / latest are Kafka's
STARTS = {"first": "first", "earliest": "first", "last": "last", "next": "next", "latest": "next"}

PREFETCH_MAX = 65535  # basic.qos's prefetch_count is 16 bits
QUEUE_BATCH_MAX = PREFETCH_MAX // 2  # with the option prefetch, basic.qos is twice a micro-batch
# A queue's micro-batch bound without the option prefetch (no basic.qos: the reader bounds its
# read-ahead by it): large, as each micro-batch costs Spark a fixed few hundred ms (more on a
# loaded host) that the reading of the next must hide, and a backlog read in fewer micro-batches
# pays that cost fewer times; not larger, as acks come a micro-batch at a time and the
# read-ahead holds that many deliveries as Python objects (some 250 B each beside the body).
# A micro-batch's bodies are bounded in bytes too (BATCH_BYTES in queue/consumer.py). At most
# QUEUE_BATCH_LIMIT, as up to three micro-batches of deliveries are held at once.
QUEUE_BATCH_DEFAULT = 250_000
QUEUE_BATCH_LIMIT = 1_000_000

# name (lower case) -> (the documented spelling, default shown in errors and docs/spark.md)
READ_OPTIONS: dict[str, tuple[str, str]] = {
    **CONNECTION_OPTIONS,
    "stream": ("stream", "(stream, superStream or queue required)"),
    "superstream": ("superStream", "(stream, superStream or queue required)"),
    "queue": ("queue", "(stream, superStream or queue required)"),
    "protocol": ("protocol", "auto"),
    "streamport": ("streamPort", "5552 (5551 for amqps)"),
    "startingoffsets": ("startingOffsets", "first"),
    "startingtimestamp": ("startingTimestamp", "(none)"),
    "endingoffsets": ("endingOffsets", "next"),
    "maxrecordspertrigger": ("maxRecordsPerTrigger", "(none)"),
    "failondataloss": ("failOnDataLoss", "true"),
    "minpartitions": ("minPartitions", "1"),
    "prefetch": ("prefetch", "1000 (none for a queue)"),
    "pollTimeoutMs".lower(): ("pollTimeoutMs", "1000"),
}


@dataclass(frozen=True)
class ReadOptions:
    """What the reader on the driver and every read task need (the option table in docs/spark.md).

    ``starting`` / ``ending`` are a word of :data:`STARTS`, or an offset as a decimal string.
    """

    uris: tuple[str, ...] = field(repr=False)  # may carry a password
    streams: tuple[str, ...] = ()
    super_stream: str = ""  # its partitions become ``streams`` on the driver (reading.py)
    queue: str = ""
    protocol: Protocol = "auto"
    stream_port: int = STREAM_PORT  # STREAM_TLS_PORT by default for an amqps URI
    starting: str = "first"
    starting_timestamp: int | None = None  # milliseconds since the epoch
    ending: str = "next"
    max_records_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    min_partitions: int = 1
    prefetch: int = 1000  # 0: none (a queue's default: no basic.qos)
    poll_timeout: float = 1.0

    @property
    def uri(self) -> str:
        return self.uris[0]


def _with_password(uri: str, password: str) -> str:
    """The URI with its password replaced (percent-encoded), so it need not be written in it."""
    from urllib.parse import quote

    m = re.match(r"^(amqps?://)([^:@/]*)(?::[^@/]*)?@(.*)$", uri)
    if m is None:
        return uri
    return f"{m.group(1)}{m.group(2)}:{quote(password, safe='')}@{m.group(3)}"


def _offset_spec(name: str, value: str, words: tuple[str, ...]) -> str:
    v = value.strip().lower()
    if v in STARTS and STARTS[v] in words:
        return STARTS[v]
    try:
        n = int(v)
    except ValueError:
        raise ValueError(f"pumpd option {name}: one of {', '.join(words)} or an offset (an "
                         f"integer >= 0), got {value!r}") from None
    if n < 0:
        raise ValueError(f"pumpd option {name}: an offset must be at least 0, got {n}")
    return str(n)


def _names(opts: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in opts.items():
        k = str(key).lower()
        if k in SPARK_OPTIONS:
            continue
        if k == "path":
            k = "uri"
        if k not in READ_OPTIONS:
            raise ValueError(f"pumpd: unknown read option {key!r}; the read options: "
                             + ", ".join(s for s, _ in READ_OPTIONS.values()))
        out.setdefault(k, str(value))
    return out


def _uris(opts: Mapping[str, str]) -> tuple[str, ...]:
    """The option uri: one or more AMQP URIs (comma or space separated), each with the option
    password when it is given."""
    raw_uri = opts.get("uri", "").strip()
    if not raw_uri:
        raise ValueError('pumpd: option "uri" is required (amqp://user:pass@host:port/vhost)')
    uris = tuple(u for u in re.split(r"[\s,]+", raw_uri) if u)
    if "password" in opts:
        uris = tuple(_with_password(u, opts["password"]) for u in uris)
    for u in uris:
        try:
            parse_uri(u)
        except Exception as exc:
            raise ValueError(f"pumpd option uri: {exc}") from None
    return uris


def parse_read_options(options: Mapping[str, Any]) -> ReadOptions:
    """Check every read option (names case-insensitive).

    :raises ValueError: naming the option that is unknown, missing or malformed
    """
    opts = _names(options)
    uris = _uris(opts)
    streams = tuple(s.strip() for s in opts.get("stream", "").split(",") if s.strip())
    super_stream = opts.get("superstream", "").strip()
    queue = opts.get("queue", "").strip()
    if sum(map(bool, (streams, super_stream, queue))) != 1:
        raise ValueError("pumpd: give exactly one of the options stream (a stream, or several "
                         "separated by commas), superStream (a super stream: its partitions) "
                         "and queue (a classic or quorum queue)")
    for name in (*streams, super_stream, queue):
        if len(name.encode()) > 255:
            raise ValueError(f"pumpd option stream/queue: {name[:40]!r}... longer than 255 bytes")
    protocol = opts.get("protocol", "auto").strip().lower()
    if protocol not in PROTOCOLS:
        raise ValueError(f"pumpd option protocol: one of {', '.join(PROTOCOLS)}, got "
                         f"{opts['protocol']!r}")
    max_records = opts.get("maxrecordspertrigger")
    ts = opts.get("startingtimestamp")
    # a queue has no basic.qos unless the option prefetch is given (0: none; see queue_reader.py)
    prefetch = 0 if queue and "prefetch" not in opts else option_int(
        "prefetch", opts.get("prefetch", "1000"), 1, 1 << 31)
    if prefetch > PREFETCH_MAX:
        raise ValueError(f"pumpd option prefetch: at most {PREFETCH_MAX} (basic.qos), got "
                         f"{prefetch}")
    per_trigger = None if max_records is None else option_int(
        "maxRecordsPerTrigger", max_records, 1, 1_000_000_000)
    if queue and prefetch and (per_trigger or prefetch) > QUEUE_BATCH_MAX:
        name = "maxRecordsPerTrigger" if per_trigger else "prefetch"
        raise ValueError(f"pumpd option {name}: at most {QUEUE_BATCH_MAX} when reading a queue "
                         f"with the option prefetch (the consumer's basic.qos is twice it, at "
                         f"most {PREFETCH_MAX}), got {per_trigger or prefetch}")
    if queue and per_trigger and per_trigger > QUEUE_BATCH_LIMIT:
        raise ValueError(f"pumpd option maxRecordsPerTrigger: at most {QUEUE_BATCH_LIMIT} when "
                         f"reading a queue (up to three micro-batches are held unacknowledged), "
                         f"got {per_trigger}")
    return ReadOptions(
        uris=uris,
        streams=streams,
        super_stream=super_stream,
        queue=queue,
        protocol=protocol,  # type: ignore[arg-type]  # checked against PROTOCOLS above
        stream_port=stream_port(opts, uris[0]),
        starting=_offset_spec("startingOffsets", opts.get("startingoffsets", "first"),
                              ("first", "last", "next")),
        starting_timestamp=None if ts is None else option_int("startingTimestamp", ts, 0, (1 << 63) - 1),
        ending=_offset_spec("endingOffsets", opts.get("endingoffsets", "next"), ("next",)),
        max_records_per_trigger=per_trigger,
        fail_on_data_loss=option_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        min_partitions=option_int("minPartitions", opts.get("minpartitions", "1"), 1, 10_000),
        prefetch=prefetch,
        poll_timeout=option_int("pollTimeoutMs", opts.get("polltimeoutms", "1000"), 1, 3_600_000) / 1000,
    )

