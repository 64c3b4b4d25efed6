"""The readers' columns: one schema for streams and queues, and how header values become text.

``headers`` is a ``map<string,string>``: string values as they are, byte strings decoded as
UTF-8 (invalid bytes replaced), every other AMQP value (numbers, booleans, tables, arrays,
timestamps) as JSON. A map is what Spark SQL filters on directly (``headers['tenant']``); JSON
keeps the type for those who need it, and ``from_json`` reads it (one definition,
:func:`pumpd.dataplane.stream_sections_ref.header_text`, shared with the stream decoder). The
broker's own ``x-stream-offset`` header is the ``offset`` column instead. Nothing here imports
pyspark.
"""

from __future__ import annotations

from typing import Any

from ...dataplane.stream_sections_ref import header_text

COLUMNS: tuple[tuple[str, str], ...] = (
    ("body", "binary"),
    ("routing_key", "string"),
    ("exchange", "string"),
    ("content_type", "string"),
    ("content_encoding", "string"),
    ("headers", "map<string,string>"),
    ("delivery_mode", "int"),
    ("priority", "int"),
    ("correlation_id", "string"),
    ("reply_to", "string"),
    ("expiration", "string"),
    ("message_id", "string"),
    ("timestamp", "timestamp"),
    ("type", "string"),
    ("user_id", "string"),
    ("app_id", "string"),
    ("cluster_id", "string"),
    ("offset", "bigint"),
    ("stream", "string"),
    ("redelivered", "boolean"),
)

SCHEMA_DDL = ", ".join(f"`{n}` {t}" for n, t in COLUMNS)

PLAIN_PROPERTIES = ("content_type", "content_encoding", "correlation_id", "reply_to", "expiration",
          "message_id", "type", "user_id", "app_id", "cluster_id")


def headers_map(headers: dict[str, Any] | None) -> dict[str, str] | None:
    if not headers:
        return None
    out = {k: header_text(v) for k, v in headers.items() if k != "x-stream-offset"}
    return out or None

