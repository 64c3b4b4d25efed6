"""One Spark partition published with confirms: the part of the data source that runs in a task.

:class:`PartitionPublisher` takes Arrow record batches (the data source) or rows (the
``foreachPartition`` helper), publishes them with one :class:`pumpd.Publisher` per target
exchange (async mode, ``maxInFlight`` unconfirmed at most) and :meth:`~PartitionPublisher.finish`
returns only when every row is confirmed. Anything else (a nack, an unroutable return with
``mandatory``, a lost connection, no confirm within ``confirmTimeoutMs``) raises
:class:`PartitionFailed`, whose message says how many rows were confirmed: Spark then retries the
whole partition, so those rows arrive twice (at-least-once).

The hot path stays columnar where the data allows: with no per-row properties, routing keys or
exchanges, a batch's body column goes to :meth:`pumpd.Publisher.publish_arrow`, which hands the
column's offsets and data buffers to the native plane (no Python object per row), deterministic
message ids included (spliced natively into property bytes encoded once). Other per-row columns
cost a Python list per column and a property encoding per row.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ...publishing.publisher import LinkError, MessageIds, Publisher, PublishError
from .write_options import BODY_COLUMNS, KNOWN_COLUMNS, WriteOptions

log = logging.getLogger("pumpd.spark")

T = TypeVar("T")


@dataclass(frozen=True)
class PartitionCounts:
    """What one task attempt published and had confirmed (its commit message carries it)."""

    partition: int
    attempt: int
    rows: int
    confirmed: int
    skipped: int = 0  # rows a stream already had from an earlier attempt or run: not sent
    deduplicated: bool = False  # a stream write: the broker drops what is sent again


CONNECT_RETRY_FIRST = 0.25  # seconds before a failed connection is tried again...
CONNECT_RETRY_MOST = 5.0  # ...doubling up to this


def patiently(connect: Callable[[], T], wait: float, transient: Callable[[BaseException], bool],
              what: str) -> T:
    """``connect()``, tried again while it fails in a way ``transient`` says passes (a broker
    restarting or failing over refuses connections for a while), for up to ``wait`` seconds
    (the option connectWaitMs); then its last failure is raised. Any other failure is raised at
    once: a wrong password does not get better by waiting."""
    deadline = time.monotonic() + wait
    delay = CONNECT_RETRY_FIRST
    while True:
        try:
            return connect()
        except Exception as exc:
            left = deadline - time.monotonic()
            if left <= 0 or not transient(exc):
                raise
            log.warning("pumpd: %s: cannot connect (%s); trying again for up to %.0f s more",
                        what, exc, left)
            time.sleep(min(delay, left))
            delay = min(delay * 2, CONNECT_RETRY_MOST)


def _no_connection(exc: BaseException) -> bool:
    """No AMQP 0-9-1 connection for now: refused, reset, timed out, or closed by a broker
    shutting down (320 CONNECTION_FORCED), not a login or vhost the broker refused."""
    if isinstance(exc, LinkError):
        return exc.reply_code in (None, 320) and "refused for user" not in str(exc) \
            and "access refused" not in str(exc)
    return isinstance(exc, OSError)


class PartitionFailed(RuntimeError):
    """A task cannot vouch for every row: Spark retries the partition."""


# -- schema ---------------------------------------------------------------------------------------

_STRINGISH = ("string", "binary")
_INTS = ("tinyint", "smallint", "int", "bigint", "byte", "short", "integer", "long")


def check_schema(fields: Sequence[tuple[str, str]], options: WriteOptions) -> str:
    """Check column names and types (Spark's ``simpleString`` spellings); returns the body column.

    :raises ValueError: naming the column
    """
    names = [n.lower() for n, _ in fields]
    types = {n.lower(): t.lower() for n, t in fields}
    bodies = [n for n in BODY_COLUMNS if n in names]
    if not bodies:
        raise ValueError("pumpd: the DataFrame needs a column 'body' (binary or string; 'value' "
                         f"is accepted too); its columns: {', '.join(n for n, _ in fields)}")
    if len(bodies) > 1:
        raise ValueError("pumpd: both 'body' and 'value' columns: keep one as the body")
    body = bodies[0]
    if types[body] not in _STRINGISH:
        raise ValueError(f"pumpd: column {body!r} must be binary or string, not {types[body]}")
    if not options.ignore_unknown_columns:
        unknown = [n for n, _ in fields if n.lower() not in KNOWN_COLUMNS and n.lower() != body]
        if unknown:
            raise ValueError(
                f"pumpd: unknown column{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                f"known: body/value, {', '.join(KNOWN_COLUMNS)} (option ignoreUnknownColumns="
                "true skips the others)")
    for name, t in types.items():
        if name not in KNOWN_COLUMNS:
            continue
        if name == "headers":
            ok = t.startswith(("map<string,", "struct<"))
        elif name in ("delivery_mode", "priority"):
            ok = t in _INTS
        elif name == "timestamp":
            ok = t in _INTS or t.startswith("timestamp")
        else:
            ok = t in _STRINGISH
        if not ok:
            raise ValueError(f"pumpd: column {name!r} has type {t}, which AMQP's {name} cannot "
                             "carry (see the column table in docs/spark.md)")
    if options.to_streams:
        _check_stream_columns(names, options)
    if options.message_id == "deterministic" and "message_id" in names:
        raise ValueError("pumpd: option messageId=deterministic and a message_id column: pick one")
    return body


# Columns a stream write refuses: the exchange (it publishes to the stream itself)
STREAM_REFUSED_COLUMNS = ("exchange",)


def _check_stream_columns(names: Sequence[str], options: WriteOptions) -> None:
    refused = [n for n in STREAM_REFUSED_COLUMNS if n in names]
    if refused:
        option, name = (("superStream", options.super_stream) if options.super_stream
                        else ("stream", options.stream))
        raise ValueError(
            f"pumpd: column{'s' if len(refused) > 1 else ''} {', '.join(map(repr, refused))} "
            f"with option {option} {name!r}: a stream write publishes to the stream itself "
            "(drop the column)")


# -- publishing -----------------------------------------------------------------------------------


def row_chunks(rows: Iterable[Any], chunk: int, ignore_unknown: bool
               ) -> Iterator[tuple[list[bytes], dict[str, list[Any]]]]:
    """``pyspark.sql.Row`` objects or mappings as (bodies, a known column's name -> a value per
    row, None where a row has none), ``chunk`` rows at a time.

    :raises ValueError: for an unknown column, unless ``ignore_unknown``
    """
    bodies: list[bytes] = []
    columns: dict[str, list[Any]] = {}
    for row in rows:
        d = row.asDict() if hasattr(row, "asDict") else dict(row)
        d = {str(k).lower(): v for k, v in d.items()}
        b = next((d.pop(k) for k in BODY_COLUMNS if k in d), None)
        bodies.append(b"" if b is None else b.encode() if isinstance(b, str) else bytes(b))
        for k, v in d.items():
            if k in KNOWN_COLUMNS:
                columns.setdefault(k, [None] * (len(bodies) - 1)).append(v)
            elif not ignore_unknown:
                raise ValueError(f"pumpd: unknown column {k!r} (option "
                                 "ignoreUnknownColumns=true skips it)")
        for values in columns.values():
            if len(values) < len(bodies):
                values.append(None)
        if len(bodies) >= chunk:
            yield bodies, columns
            bodies, columns = [], {}
    if bodies:
        yield bodies, columns


class PartitionPublisher:
    """Publishes one partition; see the module docstring.

    :param id_prefix: ``{queryId|writeId}:{batchId}:{partition}:`` for deterministic message ids
    :param label: names the partition and attempt in errors and logs
    """

    def __init__(self, options: WriteOptions, *, partition: int = 0, attempt: int = 0,
                 id_prefix: str = "", client_name: str = "pumpd spark") -> None:
        self.options = options
        self.partition = partition
        self.attempt = attempt
        self.id_prefix = id_prefix.encode()
        self.client_name = client_name
        self.rows = 0
        self._publishers: dict[str, Publisher] = {}
        self._static: dict[str, Any] = {"delivery_mode": 2} if options.persistent else {}

    # -- connections ----------------------------------------------------------------------------

    def _publisher(self, exchange: str) -> Publisher:
        p = self._publishers.get(exchange)
        if p is None:
            o = self.options

            def publisher() -> Publisher:
                return Publisher(o.connect_uris(), exchange=exchange, routing_key=o.routing_key,
                                 mode="async", window=o.max_in_flight, mandatory=o.mandatory,
                                 declarations=o.declarations if not self._publishers else (),
                                 confirm_timeout=o.confirm_timeout,
                                 client_name=self.client_name)
            try:
                p = patiently(publisher, o.connect_wait, _no_connection,
                              f"partition {self.partition} (attempt {self.attempt})")
            except (LinkError, OSError) as exc:
                raise self._failed(f"cannot connect: {exc}") from exc
            self._publishers[exchange] = p
        return p

    @property
    def confirmed(self) -> int:
        return sum(p.confirmed for p in self._publishers.values())

    def _failed(self, why: str) -> PartitionFailed:
        confirmed = self.confirmed
        again = (f"; those {confirmed} will arrive twice when Spark retries the partition "
                 "(at-least-once" + (", same message ids)" if self.id_prefix else ")")
                 if confirmed else "")
        return PartitionFailed(
            f"pumpd: partition {self.partition} (attempt {self.attempt}): {confirmed} of "
            f"{self.rows} rows confirmed, then: {why}{again}")

    def _confirming(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``call(*args, **kwargs)``, a publisher's failure raised as :class:`PartitionFailed`."""
        try:
            return call(*args, **kwargs)
        except PublishError as exc:
            raise self._failed(str(exc)) from exc
        except (LinkError, OSError) as exc:
            raise self._failed(f"the connection failed: {exc}") from exc

    def _ids(self, first: int, n: int) -> MessageIds | None:
        if self.options.message_id != "deterministic":
            return None
        return MessageIds(self.id_prefix, range(first, first + n))

    def close(self, *, abort: bool = False) -> None:
        """Close every connection; with ``abort``, drop them (after a failure: see
        :meth:`pumpd.Publisher.abort`)."""
        for p in self._publishers.values():
            try:
                p.abort() if abort else p.close()
            except Exception:  # closing after a failure must not hide the failure
                log.debug("closing a publisher failed", exc_info=True)
        self._publishers.clear()

    # -- rows -----------------------------------------------------------------------------------

    def publish_arrow(self, batch: Any) -> None:
        """Publish one ``pyarrow.RecordBatch`` (columns as :func:`check_schema` allows)."""
        import pyarrow as pa

        cols = {name.lower(): batch.column(i) for i, name in enumerate(batch.schema.names)}
        body = cols["body"] if "body" in cols else cols["value"]
        if pa.types.is_string(body.type) or pa.types.is_large_string(body.type):
            body = body.cast(pa.large_binary() if pa.types.is_large_string(body.type)
                             else pa.binary())
        if body.null_count:
            body = body.fill_null(b"")
        per_row = {k: cols[k].to_pylist() for k in KNOWN_COLUMNS
                   if k in cols and (k != "message_id" or self.options.message_id != "none")}
        if not per_row:  # the hot path: frames encoded from the Arrow buffers, natively
            ids = self._ids(self.rows, len(body))
            self.rows += len(body)
            self._confirming(self._publisher(self.options.exchange).publish_arrow,
                             body, properties=self._static, message_ids=ids)
            return
        self._publish_columns(body.to_pylist(), per_row)

    def publish_rows(self, rows: Iterable[Any], chunk: int = 10_000) -> None:
        """Publish ``pyspark.sql.Row`` objects or mappings (the foreachPartition helper)."""
        for bodies, columns in row_chunks(rows, chunk, self.options.ignore_unknown_columns):
            self._publish_columns(bodies, columns)

    def _publish_columns(self, bodies: list[bytes], per_row: dict[str, list[Any]]) -> None:
        n = len(bodies)
        ids = self._ids(self.rows, n)
        self.rows += n
        exchanges = per_row.pop("exchange", None)
        routing_keys = per_row.pop("routing_key", None)
        if self.options.message_id == "none":
            per_row.pop("message_id", None)
        if "headers" in per_row:  # Arrow maps arrive as (key, value) lists
            per_row["headers"] = [dict(v) if isinstance(v, list) else v
                                  for v in per_row["headers"]]
        default = self.options.exchange
        groups: dict[str, list[int]] = {}
        for i in range(n):
            ex = exchanges[i] if exchanges is not None and exchanges[i] is not None else default
            groups.setdefault(ex, []).append(i)
        for ex, rows in groups.items():
            # this exchange's rows (with one exchange: all of them, uncopied)
            b, rks, cols, mids = (_select(rows, bodies, routing_keys, per_row, ids)
                                  if len(groups) > 1 else (bodies, routing_keys, per_row, ids))
            self._confirming(self._publisher(ex).publish_rows, b, routing_keys=rks,
                             properties=self._static, columns=cols, message_ids=mids)

    def finish(self) -> PartitionCounts:
        """Wait for every confirm; then close.

        :raises PartitionFailed: when a row was not confirmed (the message says how many were)
        """
        for p in self._publishers.values():
            self._confirming(p.flush)
        confirmed = self.confirmed
        self.close()
        return PartitionCounts(self.partition, self.attempt, self.rows, confirmed)


def _select(rows: list[int], bodies: list[bytes], routing_keys: list[Any] | None,
            per_row: dict[str, list[Any]], ids: MessageIds | None
            ) -> tuple[list[bytes], list[Any] | None, dict[str, list[Any]], MessageIds | None]:
    """The given rows of each per-row column."""
    return ([bodies[i] for i in rows],
            None if routing_keys is None else [routing_keys[i] for i in rows],
            {k: [col[i] for i in rows] for k, col in per_row.items()},
            None if ids is None else MessageIds(ids.prefix, [ids.rows[i] for i in rows]))
