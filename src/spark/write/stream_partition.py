"""One Spark partition written to a stream over the streams protocol, effectively once.

The task publishes as a *named producer*: the broker stores, per producer reference, the last
publishing id it wrote, and drops a message whose id is not above it. The reference and the ids
are functions of the write and the partition's rows, so a retried task, a replayed micro-batch
or a rerun job publishes the same rows under the same ids:

* reference: ``{producer}-{partition}``, the producer the query id (streaming: kept in the
  checkpoint), one id made on the driver per batch write, or the option ``producerName``;
* publishing id: ``(batch + 1) << 32 | (row + 1)``, ``batch`` the micro-batch id (0 for a batch
  write) and ``row`` the row's place in the partition: increasing within a partition and from one
  micro-batch to the next.

To a super stream (option ``superStream``), each row goes to the partition RabbitMQ's stream
clients pick for its routing key (:func:`pumpd.streams.routing.partition`, over the partitions
in the order the broker lists them), and the task publishes to every partition as the same
named producer: the broker keeps a producer's last id per stream, so each (Spark partition,
stream partition) pair is a producer of its own, whose ids are the increasing subset of the
partition's ids its rows take. A row's routing key is its ``routing_key`` column, else the
option ``routingKey``, else the empty string, which is hashed as any other key.

At the start the task asks the broker for each producer's last id and does not send the rows up
to it (the broker would drop them anyway); :meth:`StreamPartitionPublisher.finish` returns once
every row sent is confirmed. A refused message, a lost connection or no confirm within
``confirmTimeoutMs`` raises :class:`~pumpd.spark.write.partition.PartitionFailed`, and Spark's
retry sends only what the broker lacks. This holds only when a retry or replay of a partition
has the same rows in the same order (docs/spark.md says what breaks it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from ...config.tls import ssl_context, tls_server_name
from ...config.uri import parse_uri
from ...streams.amqp091_form import stores_container_form
from ...streams.codes import STREAM_NOT_AVAILABLE, code_name
from ...streams.routing import MAX_PARTITIONS, partition
from ...streams.wire import PUBLISH_OVERHEAD
from ..read.streams.wire import ENTRY_OVERHEAD, StreamsConnectError, StreamsConnection, StreamsError
from .partition import PartitionCounts, PartitionFailed, patiently, row_chunks
from .stream_messages import RowRefused, StreamMessages
from .write_options import KNOWN_COLUMNS, WriteOptions

log = logging.getLogger("pumpd.spark")

ROW_BITS = 32  # a partition's rows are numbered 1 .. 2**32 - 1 in the low bits of an id
MAX_ROWS = (1 << ROW_BITS) - 1
MAX_BATCH = (1 << (64 - ROW_BITS)) - 2  # (batch + 1) << 32 must stay within 64 bits
# the largest PUBLISH frame sent, below the broker's frame size when that is larger: one frame
# is one write of the broker's, and larger ones only delay the first confirm
FRAME_BYTES = 1 << 20
# distinct routing keys whose partition a task remembers (a key costs one hash otherwise)
ROUTES_KEPT = 65_536


def connect(options: WriteOptions, name: str, timeout: float) -> StreamsConnection:
    """A streams connection at ``streamPort`` of the first URI's host that answers: over TLS
    for an amqps URI, with the TLS settings the AMQP 0-9-1 side would use.

    It asks for no heartbeats: the task reads the socket only while it waits for confirms, and
    between two Arrow batches Spark may compute for longer than the broker's heartbeat
    timeout. A dead peer is noticed by a failed send, or by ``confirmTimeoutMs`` while
    waiting."""
    failure: StreamsConnectError | None = None
    for text in options.connect_uris():
        u = parse_uri(text)
        tls = ssl_context(u) if u.scheme == "amqps" else None
        try:
            return StreamsConnection(u.effective_host, options.stream_port, u.username,
                                     u.password, u.vhost, name=name, timeout=timeout, tls=tls,
                                     server_hostname=tls_server_name(u) if tls else None,
                                     heartbeat=0)
        except StreamsConnectError as exc:
            failure = exc
    assert failure is not None  # parse_options requires a URI
    raise failure


def check_stream(options: WriteOptions) -> None:
    """On the driver: the stream (or every partition of the super stream) exists and the user
    may write to it (a publisher declared and deleted), so that a typo fails ``save()`` /
    ``start()`` before any task runs.

    :raises ValueError: naming the option, the stream or super stream and the broker's reason
    """
    option = "superStream" if options.super_stream else "stream"
    try:
        with connect(options, "pumpd spark write check", options.confirm_timeout) as conn:
            for stream in target_streams(conn, options):
                conn.declare_publisher(stream)
                conn.delete_publisher()
    except (StreamsError, StreamsConnectError, ConnectionError, TimeoutError) as exc:
        raise ValueError(f"pumpd option {option} "
                         f"{options.super_stream or options.stream!r}: {exc}") from None


def target_streams(conn: StreamsConnection, options: WriteOptions) -> list[str]:
    """The streams a write publishes to: the stream, or the super stream's partitions in the
    order the broker lists them (its bindings' ``x-stream-partition-order``).

    :raises StreamsError: the super stream missing (its code by name), without partitions or
        with more than one connection publishes to
    """
    if not options.super_stream:
        return [options.stream]
    streams = conn.partitions(options.super_stream)
    if not 1 <= len(streams) <= MAX_PARTITIONS:
        raise StreamsError(f"{conn.where}: super stream {options.super_stream!r} has "
                           f"{len(streams)} partitions (1 to {MAX_PARTITIONS} can be written to)")
    return streams


def producer_id(batch: int, row: int) -> int:
    """The publishing id of the partition's row ``row`` (from 0) in micro-batch ``batch``."""
    return ((batch + 1) << ROW_BITS) | (row + 1)


class StreamPartitionPublisher:
    """Publishes one partition to ``options.stream`` or ``options.super_stream``; see the
    module docstring.

    :param producer: the write's producer name (the partition is appended)
    :param batch: the micro-batch id (0 for a batch write)
    """

    def __init__(self, options: WriteOptions, *, producer: str, batch: int,
                 partition: int = 0, attempt: int = 0) -> None:
        if not 0 <= batch <= MAX_BATCH:
            raise ValueError(f"pumpd: micro-batch id {batch} is beyond what a stream write's "
                             f"publishing ids hold (0 to {MAX_BATCH})")
        self.options = options
        self.target = options.target  # as errors name it
        self.partition = partition
        self.attempt = attempt
        self.reference = f"{producer}-{partition}"
        self.batch = batch
        self.rows = 0  # the partition's rows seen so far
        self.skipped = 0  # ... of which the broker had already
        self.sent = 0
        self.confirmed = 0
        self._id_prefix = f"{self.reference}:{batch}:".encode()
        self._routes: dict[str | None, int] = {}  # a routing key's partition, as computed
        # publisher i publishes to streams[i] as the producer ``reference``; last[i] is the
        # last publishing id the broker holds of it
        self.streams: list[str] = []
        self.last: list[int] = []
        self.conn: StreamsConnection | None = None
        try:
            self.conn = patiently(self._open, options.connect_wait, self._transient,
                                  f"partition {partition} (attempt {attempt}) to {self.target}")
        except (StreamsError, StreamsConnectError, ConnectionError, TimeoutError) as exc:
            self.close()
            raise self._failed(str(exc)) from None
        # the stored x-routing-key of a row without its own: to a stream, the stream's name
        # unless routingKey is set (a publish through the default exchange); to a super stream,
        # the key it was routed by
        self._messages = StreamMessages(
            options.routing_key if options.super_stream else options.routing_key or options.stream,
            container=stores_container_form(self.conn.server_properties.get("version", "")))
        frame_max = self.conn.tuned_frame_max or FRAME_BYTES
        self._frame_bytes = min(frame_max, FRAME_BYTES) - PUBLISH_OVERHEAD
        self._frame_max = frame_max

    def _open(self) -> StreamsConnection:
        """Connect, declare a publisher per stream and ask each for its last id."""
        self.close()
        self.conn = conn = connect(self.options, f"pumpd spark write {self.target}",
                                   self.options.confirm_timeout)
        self.streams = target_streams(conn, self.options)
        self.last = []
        for i, stream in enumerate(self.streams):
            conn.declare_publisher(stream, self.reference, i)
            self.last.append(conn.query_publisher_sequence(stream, self.reference))
        return conn

    @staticmethod
    def _transient(exc: BaseException) -> bool:
        """A failure that a broker restarting or failing over causes for a while: no
        connection, or a stream without a leader yet."""
        if isinstance(exc, StreamsError):
            return exc.code == STREAM_NOT_AVAILABLE
        return isinstance(exc, ConnectionError | TimeoutError)

    # -- failures -------------------------------------------------------------------------------

    def _failed(self, why: str) -> PartitionFailed:
        return PartitionFailed(
            f"pumpd: partition {self.partition} (attempt {self.attempt}) to {self.target} as "
            f"producer {self.reference!r}: {self.confirmed} of {self.sent} rows sent "
            f"confirmed, then: {why} (a retry sends only what the stream lacks)")

    def close(self, *, abort: bool = False) -> None:
        """Close the connection; the broker forgets the publishers with it (and keeps each
        producer's last id, which the next attempt asks for)."""
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:  # closing after a failure must not hide the failure
                log.debug("closing a streams connection failed", exc_info=True)
            self.conn = None

    # -- rows -----------------------------------------------------------------------------------

    def _take(self, n: int) -> tuple[int, int]:
        """Number ``n`` more rows: (the first one's row index, how many of them to skip).

        The rows skipped here are those every producer holds; to a super stream, the others
        are sorted out row by row (:meth:`_route`)."""
        if self.rows + n > MAX_ROWS:
            raise ValueError(f"pumpd: partition {self.partition} has more than {MAX_ROWS} rows, "
                             "more than a stream write numbers (repartition into more "
                             "partitions)")
        first = self.rows
        self.rows += n
        skip = min(max(min(self.last) - producer_id(self.batch, first) + 1, 0), n)
        self.skipped += skip
        return first, skip

    def _ids(self, first: int, n: int) -> list[bytes] | None:
        if self.options.message_id != "deterministic":
            return None
        return [self._id_prefix + str(r).encode() for r in range(first, first + n)]

    def publish_arrow(self, batch: Any) -> None:
        """Publish one ``pyarrow.RecordBatch`` (columns as :func:`check_schema` allows)."""
        import pyarrow as pa

        cols = {name.lower(): batch.column(i) for i, name in enumerate(batch.schema.names)}
        body = cols["body"] if "body" in cols else cols["value"]
        first, skip = self._take(len(body))
        if skip == len(body):
            return
        if skip:
            body = body.slice(skip)
            cols = {k: v.slice(skip) for k, v in cols.items()}
        if pa.types.is_string(body.type) or pa.types.is_large_string(body.type):
            body = body.cast(pa.large_binary() if pa.types.is_large_string(body.type)
                             else pa.binary())
        if body.null_count:
            body = body.fill_null(b"")
        per_row = {k: cols[k].to_pylist() for k in KNOWN_COLUMNS
                   if k in cols and (k != "message_id" or self.options.message_id != "none")}
        self._publish(first + skip, body.to_pylist(), per_row)

    def publish_rows(self, rows: Iterable[Any], chunk: int = 10_000) -> None:
        """Publish ``pyspark.sql.Row`` objects or mappings (Spark 4.0's streaming writer)."""
        for bodies, columns in row_chunks(rows, chunk, self.options.ignore_unknown_columns):
            self._publish_chunk(bodies, columns)

    def _publish_chunk(self, bodies: list[bytes], columns: dict[str, list[Any]]) -> None:
        first, skip = self._take(len(bodies))
        if skip < len(bodies):
            self._publish(first + skip, bodies[skip:],
                          {k: v[skip:] for k, v in columns.items()})

    def _publish(self, first: int, bodies: list[bytes], per_row: dict[str, list[Any]]) -> None:
        """Rows ``first`` .. of the partition, none of them skipped."""
        per_row.pop("exchange", None)  # check_schema refuses it for a stream write
        routing_keys = per_row.pop("routing_key", None)
        if self.options.message_id == "none":
            per_row.pop("message_id", None)
        if "headers" in per_row:  # Arrow maps arrive as (key, value) lists
            per_row["headers"] = [dict(v) if isinstance(v, list) else v
                                  for v in per_row["headers"]]
        ids = self._ids(first, len(bodies))
        pid = producer_id(self.batch, first)
        try:
            if per_row or ids is not None or routing_keys is not None:
                entries = self._messages.entries_of_rows(pid, bodies, per_row, ids, routing_keys)
            else:
                entries = self._messages.entries(pid, bodies)
        except RowRefused as exc:
            raise ValueError(f"pumpd: partition {self.partition}, row {first + exc.row}: "
                             f"{exc}") from None
        for i, entry in enumerate(entries):
            if len(entry) + PUBLISH_OVERHEAD > self._frame_max:
                raise ValueError(
                    f"pumpd: partition {self.partition}, row {first + i}: a message of "
                    f"{len(entry) - ENTRY_OVERHEAD} bytes is larger than the broker's frame "
                    f"size ({self._frame_max} bytes) allows")
        if len(self.streams) == 1:
            self._send(entries, 0)
            return
        for publisher, part in enumerate(self._route(pid, entries, routing_keys)):
            if part:
                self._send(part, publisher)

    def _route(self, first_id: int, entries: list[bytes],
               routing_keys: list[str | None] | None) -> list[list[bytes]]:
        """Each partition's entries, in order, but for those its producer holds already: a row
        goes where its routing key's hash picks (the option routingKey for a row without)."""
        parts: list[list[bytes]] = [[] for _ in self.streams]
        routes, last, n = self._routes, self.last, len(self.streams)
        default = self.options.routing_key
        for i, entry in enumerate(entries):
            key = routing_keys[i] if routing_keys is not None else None
            p = routes.get(key)
            if p is None:
                p = partition((default if key is None else key).encode(), n)
                if len(routes) < ROUTES_KEPT:
                    routes[key] = p
            if first_id + i > last[p]:
                parts[p].append(entry)
            else:
                self.skipped += 1
        return parts

    # -- the wire -------------------------------------------------------------------------------

    def _send(self, entries: list[bytes], publisher: int) -> None:
        """PUBLISH frames of ``publisher``, of whole entries within the frame size, no more
        than ``maxInFlight`` unconfirmed on the connection at any time."""
        conn = self.conn
        assert conn is not None
        window = self.options.max_in_flight
        limit = self._frame_bytes
        start, size, n = 0, 0, len(entries)
        for i in range(n + 1):
            length = len(entries[i]) if i < n else 0
            if i == n or (i > start and (size + length > limit or i - start >= window)):
                if i > start:
                    self._wait(window - (i - start))
                    try:
                        conn.publish(entries[start:i], i - start, publisher)
                    except OSError as exc:
                        raise self._failed(f"the connection failed: {exc}") from None
                    self.sent += i - start
                start, size = i, 0
            size += length

    def _wait(self, most: int) -> None:
        """Read confirms until no more than ``most`` messages are unconfirmed.

        :raises PartitionFailed: a message refused (its stream, and its code by name), the
            connection lost, or nothing confirmed within ``confirmTimeoutMs``
        """
        conn = self.conn
        assert conn is not None
        while self.sent - self.confirmed > most:
            try:
                publisher, confirmed, errors = conn.next_outcome()
            except TimeoutError:
                raise self._failed(f"no confirm within confirmTimeoutMs "
                                   f"({self.options.confirm_timeout:g} s)") from None
            except (StreamsError, ConnectionError, OSError) as exc:
                raise self._failed(str(exc)) from None
            if publisher >= len(self.streams):
                continue  # no publisher of this task's
            if errors:
                pid, code = errors[0]
                where = (f" of partition {self.streams[publisher]!r}"
                         if self.options.super_stream else "")
                raise self._failed(f"the broker refused {len(errors)} message"
                                   f"{'s' if len(errors) > 1 else ''}{where}, the first with "
                                   f"publishing id {pid} ({code_name(code)})")
            self.confirmed += confirmed

    def finish(self) -> PartitionCounts:
        """Wait for every confirm; then end the publishers and close.

        :raises PartitionFailed: when a row sent was not confirmed
        """
        self._wait(0)
        conn = self.conn
        assert conn is not None
        try:
            for publisher in range(len(self.streams)):
                conn.delete_publisher(publisher)
        except (StreamsError, ConnectionError, OSError, TimeoutError):
            log.debug("ending a confirmed publisher failed", exc_info=True)
        self.close()
        return PartitionCounts(self.partition, self.attempt, self.rows, self.confirmed,
                               skipped=self.skipped, deduplicated=True)
