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
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..dataplane.frames import PROPERTY_INDEX, PROPERTY_NAMES, shortstr
from ..dataplane.publish_ref import encode_properties
from ..publishing.publisher import LinkError, Publisher, PublishError
from .options import BODY_COLUMNS, KNOWN_COLUMNS, WriteOptions

log = logging.getLogger("pumpd.spark")

_MID = PROPERTY_INDEX["message_id"]


@dataclass(frozen=True)
class PartitionCounts:
    """What one task attempt published and had confirmed (its commit message carries it)."""

    partition: int
    attempt: int
    rows: int
    confirmed: int


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
                             "carry (see the README's column table)")
    if options.message_id == "deterministic" and "message_id" in names:
        raise ValueError("pumpd: option messageId=deterministic and a message_id column: pick one")
    return body


# -- publishing -----------------------------------------------------------------------------------


class _IdProperties:
    """Raw properties with a per-row message id spliced between bytes encoded once."""

    def __init__(self, static: Mapping[str, Any]) -> None:
        before = {k: v for k, v in static.items() if PROPERTY_INDEX[k] < _MID}
        after = {k: v for k, v in static.items() if PROPERTY_INDEX[k] > _MID}
        flags = 1 << (15 - _MID)
        for k, v in static.items():
            if v is not None:
                flags |= 1 << (15 - PROPERTY_INDEX[k])
        self.head = struct.pack(">H", flags) + encode_properties(before)[2:]
        self.tail = encode_properties(after)[2:]

    def of(self, message_id: bytes) -> bytes:
        return self.head + shortstr(message_id) + self.tail


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
        self._raw_static = encode_properties(self._static)
        self._ids = _IdProperties(self._static)

    # -- connections ----------------------------------------------------------------------------

    def _publisher(self, exchange: str) -> Publisher:
        p = self._publishers.get(exchange)
        if p is None:
            o = self.options
            try:
                p = Publisher(o.connect_uris(), exchange=exchange, routing_key=o.routing_key,
                              mode="async", window=o.max_in_flight, mandatory=o.mandatory,
                              declarations=o.declarations if not self._publishers else (),
                              confirm_timeout=o.confirm_timeout, client_name=self.client_name)
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
            first = self.rows
            self.rows += len(body)
            ids = (self.id_prefix, first) if self.options.message_id == "deterministic" else None
            try:
                self._publisher(self.options.exchange).publish_arrow(
                    body, properties=self._static, message_ids=ids)
            except PublishError as exc:
                raise self._failed(str(exc)) from exc
            except (LinkError, OSError) as exc:
                raise self._failed(f"the connection failed: {exc}") from exc
            return
        self._publish_columns(body.to_pylist(), per_row)

    def publish_rows(self, rows: Iterable[Any], chunk: int = 10_000) -> None:
        """Publish ``pyspark.sql.Row`` objects or mappings (the foreachPartition helper)."""
        bodies: list[bytes] = []
        columns: dict[str, list[Any]] = {}
        for row in rows:
            d = row.asDict() if hasattr(row, "asDict") else dict(row)
            d = {str(k).lower(): v for k, v in d.items()}
            b = d.pop("body", None) if "body" in d else d.pop("value", None)
            bodies.append(b"" if b is None else b.encode() if isinstance(b, str) else bytes(b))
            for k, v in d.items():
                if k in KNOWN_COLUMNS:
                    columns.setdefault(k, [None] * (len(bodies) - 1)).append(v)
                elif not self.options.ignore_unknown_columns:
                    raise ValueError(f"pumpd: unknown column {k!r} (option "
                                     "ignoreUnknownColumns=true skips it)")
            for values in columns.values():
                if len(values) < len(bodies):
                    values.append(None)
            if len(bodies) >= chunk:
                self._publish_columns(bodies, columns)
                bodies, columns = [], {}
        if bodies:
            self._publish_columns(bodies, columns)

    def _publish_columns(self, bodies: list[bytes], per_row: dict[str, list[Any]]) -> None:
        n = len(bodies)
        first = self.rows
        self.rows += n
        exchanges = per_row.pop("exchange", None)
        routing_keys = per_row.pop("routing_key", None)
        deterministic = self.options.message_id == "deterministic"
        if self.options.message_id == "none":
            per_row.pop("message_id", None)
        try:
            if not per_row and not deterministic and exchanges is None and routing_keys is None:
                self._publisher(self.options.exchange).publish_many(
                    bodies, properties=self._raw_static)
                return
            raws = self._properties(n, first, per_row, deterministic)
            groups: dict[str, list[tuple[bytes, str | None, bytes]]] = {}
            for i in range(n):
                ex = self.options.exchange
                if exchanges is not None and exchanges[i] is not None:
                    ex = exchanges[i]
                rk = routing_keys[i] if routing_keys is not None else None
                groups.setdefault(ex, []).append((bodies[i], rk, raws[i]))
            for ex, messages in groups.items():
                self._publisher(ex).publish_messages(messages)
        except PublishError as exc:
            raise self._failed(str(exc)) from exc
        except (LinkError, OSError) as exc:
            raise self._failed(f"the connection failed: {exc}") from exc

    def _properties(self, n: int, first: int, per_row: dict[str, list[Any]],
                    deterministic: bool) -> list[bytes]:
        if not per_row:
            if deterministic:
                prefix, of = self.id_prefix, self._ids.of
                return [of(prefix + str(first + i).encode()) for i in range(n)]
            return [self._raw_static] * n
        names = [k for k in PROPERTY_NAMES if k in per_row]
        cols = [per_row[k] for k in names]
        out: list[bytes] = []
        for i in range(n):
            props = dict(self._static)
            for name, col in zip(names, cols, strict=True):
                v = col[i]
                if v is None:
                    continue
                if name == "headers":
                    v = dict(v) if isinstance(v, list) else v  # Arrow maps are (key, value) lists
                props[name] = v
            if deterministic:
                props["message_id"] = self.id_prefix + str(first + i).encode()
            out.append(encode_properties(props))
        return out

    def finish(self) -> PartitionCounts:
        """Wait for every confirm; then close.

        :raises PartitionFailed: when a row was not confirmed (the message says how many were)
        """
        try:
            for p in self._publishers.values():
                p.flush()
        except PublishError as exc:
            raise self._failed(str(exc)) from exc
        except (LinkError, OSError) as exc:
            raise self._failed(f"the connection failed: {exc}") from exc
        confirmed = self.confirmed
        self.close()
        return PartitionCounts(self.partition, self.attempt, self.rows, confirmed)
