"""An AMQP 0-9-1 message in the AMQP 1.0 form RabbitMQ 3.x stores in a stream when a 0-9-1
client publishes it (``rabbit_msg_record:from_amqp091``), so that a 0-9-1 consumer of the
stream reads back what it would have read had the message been published there over 0-9-1.

That form differs from the general mapping (``pumpd.amqp10.mapping``), which RabbitMQ 3.x
streams cannot read back: no header section (a 3.x stream's 0-9-1 reader fails on one); the
delivery mode, priority and expiration as the message annotations ``x-basic-delivery-mode``,
``x-basic-priority`` and ``x-basic-expiration``; the type and app id as the application
properties ``x-basic-type`` and ``x-basic-app-id``; every header, ``x-`` ones included, an
application property of the same type; the timestamp as the creation time in milliseconds; the
exchange and routing key as ``x-exchange`` and ``x-routing-key``.

A header RabbitMQ 3.x cannot store in a stream (a table, an array, a decimal: it drops the first
two and fails on the third) and a ``cluster_id`` are refused, naming them: nothing is dropped
silently. The ``x-stream-offset`` header a stream source's broker adds to each delivery is its
reading position, not part of the message: it is left out.
"""

from __future__ import annotations

import struct
from typing import Any

from ..amqp10.message import Message, Properties, encode_message
from ..amqp10.values import Byte, Float, Int, Short, Symbol, Timestamp, UByte, UInt, ULong, UShort
from ..dataplane.properties import FrameError, split_properties, table_entries

__all__ = ["OFFSET_HEADER", "UnstorableMessage", "stored_form"]

#: the header a stream adds to each 0-9-1 delivery: its offset
OFFSET_HEADER = "x-stream-offset"


class UnstorableMessage(ValueError):
    """A 0-9-1 message a RabbitMQ 3.x stream cannot store as it is; the text names the field."""


_FIXED: dict[int, tuple[str, Any]] = {
    ord("b"): (">b", Byte), ord("B"): (">B", UByte), ord("s"): (">h", Short),
    ord("u"): (">H", UShort), ord("I"): (">i", Int), ord("i"): (">I", UInt),
    ord("l"): (">q", int), ord("L"): (">Q", ULong), ord("f"): (">f", Float),
    ord("d"): (">d", float),
}
_REFUSED = {ord("F"): "a table", ord("A"): "an array", ord("D"): "a decimal"}


def _value(table: bytes, vpos: int, end: int, where: str) -> Any:
    kind = table[vpos]
    fixed = _FIXED.get(kind)
    if fixed is not None:
        fmt, wrap = fixed
        return wrap(struct.unpack_from(fmt, table, vpos + 1)[0])
    if kind == ord("t"):
        return table[vpos + 1] != 0
    if kind == ord("T"):
        return Timestamp(struct.unpack_from(">Q", table, vpos + 1)[0] * 1000)
    if kind == ord("V"):
        return None
    if kind in (ord("S"), ord("x")):
        raw = table[vpos + 5:end]
        if kind == ord("x"):
            return bytes(raw)
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise UnstorableMessage(f"{where}: a long string that is not UTF-8") from None
    why = _REFUSED.get(kind, f"a field of type {chr(kind)!r}")
    raise UnstorableMessage(f"{where}: {why}, which a RabbitMQ 3.x stream cannot store")


def _headers(table: bytes | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if table is None:
        return out
    for key, _start, vpos, end in table_entries(table):
        name = key.decode("utf-8", "replace")
        if name == OFFSET_HEADER:
            continue
        out[name] = _value(table, vpos, end, f"headers[{name!r}]")
    return out


def _text(raw: bytes | None, where: str) -> str | None:
    if raw is None:
        return None
    try:
        return raw[1:].decode()
    except UnicodeDecodeError:
        raise UnstorableMessage(f"{where}: not UTF-8") from None


def stored_form(exchange: bytes, routing_key: bytes, properties: bytes, body: bytes) -> bytes:
    """The encoded AMQP 1.0 message a RabbitMQ 3.x stream stores for this 0-9-1 message.

    :raises UnstorableMessage: naming what a 3.x stream cannot store
    """
    try:
        (content_type, content_encoding, table, delivery_mode, priority, correlation_id,
         reply_to, expiration, message_id, timestamp, type_, user_id, app_id,
         cluster_id) = split_properties(properties)
        headers = _headers(table)
    except (FrameError, struct.error) as exc:
        raise UnstorableMessage(f"properties: cannot be parsed: {exc}") from None
    if cluster_id is not None:
        raise UnstorableMessage("cluster_id: a RabbitMQ 3.x stream does not store it")
    annotations: dict[Symbol | ULong, Any] = {
        Symbol("x-routing-key"): _text(b"\0" + routing_key, "routing key"),
        Symbol("x-exchange"): _text(b"\0" + exchange, "exchange"),
    }
    if priority is not None:
        annotations[Symbol("x-basic-priority")] = UByte(priority[0])
    if delivery_mode is not None:
        annotations[Symbol("x-basic-delivery-mode")] = UByte(delivery_mode[0])
    if expiration is not None:
        annotations[Symbol("x-basic-expiration")] = _text(expiration, "expiration")
    props = Properties(
        message_id=_text(message_id, "message_id"),
        user_id=None if user_id is None else bytes(user_id[1:]),
        reply_to=_text(reply_to, "reply_to"),
        correlation_id=_text(correlation_id, "correlation_id"),
        content_type=None if content_type is None else Symbol(_text(content_type,
                                                                    "content_type") or ""),
        content_encoding=None if content_encoding is None else Symbol(
            _text(content_encoding, "content_encoding") or ""),
        creation_time=None if timestamp is None else Timestamp(
            struct.unpack(">Q", timestamp)[0] * 1000),
    )
    application: dict[str, Any] = {}
    if type_ is not None:
        application["x-basic-type"] = _text(type_, "type")
    if app_id is not None:
        application["x-basic-app-id"] = _text(app_id, "app_id")
    application.update(headers)
    empty = all(getattr(props, f) is None for f in (
        "message_id", "user_id", "reply_to", "correlation_id", "content_type",
        "content_encoding", "creation_time"))
    return encode_message(Message(message_annotations=annotations,
                                  properties=None if empty else props,
                                  application_properties=application or None,
                                  body=[bytes(body)]))
