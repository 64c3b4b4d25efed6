"""An AMQP 0-9-1 message in the AMQP 1.0 form a RabbitMQ stream stores when a 0-9-1 client
publishes it, so that a 0-9-1 consumer of the stream reads back what it would have read had the
message been published there over 0-9-1. The form depends on the broker's version
(:func:`stores_container_form`): RabbitMQ 3.13 and later store a message container's AMQP 1.0
form, which is the one mapping (:func:`container_form`); earlier versions store the form below
(``rabbit_msg_record:from_amqp091``, :func:`stored_form`), and each version reads the other's
``type`` and ``app_id`` back as headers.

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
from collections.abc import Callable
from typing import Any

from ..amqp10.codec import EncodeError
from ..amqp10.mapping import UnmappableMessage, from_amqp091
from ..amqp10.message import Message, Properties, encode_message
from ..amqp10.values import Byte, Float, Int, Short, Symbol, Timestamp, UByte, UInt, ULong, UShort
from ..dataplane.properties import (
    HEADERS_INDEX,
    FrameError,
    join_properties,
    split_properties,
    table_entries,
)

__all__ = ["CONTAINERS_SINCE", "OFFSET_HEADER", "StoredForms", "UnstorableMessage",
           "container_form", "container_head", "data_section_head", "head_of", "stored_form",
           "stored_head", "stores_container_form"]

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


# A stream delivery's headers table ends with its offset, a long (type "l"): key, type, 8 bytes.
_OFFSET_ENTRY = b"\x0f" + OFFSET_HEADER.encode() + b"l"
_OFFSET_TAIL = len(_OFFSET_ENTRY) + 8
_HEADERS_FLAG, _CONTENT_TYPE_FLAG, _CONTENT_ENCODING_FLAG = 0x2000, 0x8000, 0x4000
_BLANK = bytes(8)
_EMPTY_DATA = b"\x00\x53\x75\xa0\x00"  # the data section of an empty body
#: distinct messages (all but their offset) whose stored form is remembered; past that, the
#: memory starts again
FORMS_MAX = 1024
_RETRY_EVERY = 1 << 16  # conversions between two tries of a memory that stopped serving


def _trailing_offset_at(properties: bytes) -> tuple[int, int]:
    """(where the headers table begins, where the 8 bytes of a trailing ``x-stream-offset`` long
    begin) in a property list, or (-1, -1) when its headers do not end with one (a candidate:
    the caller confirms it by a full read)."""
    n = len(properties)
    if n < 2 or properties[1] & 1:  # a second flag word: not a basic property list
        return -1, -1
    flags = properties[0] << 8 | properties[1]
    if not flags & _HEADERS_FLAG:
        return -1, -1
    pos = 2  # content type and content encoding come before the headers
    for flag in (_CONTENT_TYPE_FLAG, _CONTENT_ENCODING_FLAG):
        if flags & flag:
            if pos >= n:
                return -1, -1
            pos += 1 + properties[pos]
    if pos + 4 > n:
        return -1, -1
    end = pos + 4 + int.from_bytes(properties[pos:pos + 4], "big")
    if end > n or end - pos - 4 < _OFFSET_TAIL:
        return -1, -1
    if properties[end - _OFFSET_TAIL:end - 8] != _OFFSET_ENTRY:
        return -1, -1
    return pos, end - 8


def data_section_head(size: int) -> bytes:
    """What comes before a body of ``size`` bytes in its data section (vbin8 up to 255 bytes,
    vbin32 past that), as :func:`stored_form` encodes it."""
    return b"\x00\x53\x75" + (b"\xa0" + bytes((size,)) if size < 256
                               else b"\xb0" + size.to_bytes(4, "big"))


def stored_head(exchange: bytes, routing_key: bytes, properties: bytes) -> bytes:
    """:func:`stored_form` up to its body's data section: the form of any body is this, then
    :func:`data_section_head` of its size, then the body.

    :raises UnstorableMessage: as :func:`stored_form`
    """
    return stored_form(exchange, routing_key, properties, b"")[:-len(_EMPTY_DATA)]


#: the first RabbitMQ version whose streams store a 0-9-1 publish as its message container's
#: AMQP 1.0 form, with a header section and ``app_id`` as the group id
CONTAINERS_SINCE = (3, 13)


def stores_container_form(version: str) -> bool:
    """Whether a broker that says it is ``version`` (its peer property) stores the container
    form. A version that cannot be read is taken for one that does not: the 3.x form is what
    every version reads without failing (a later one reads ``type`` and ``app_id`` back as
    headers), while a 3.x stream's reader fails on the container form's header section."""
    parts = version.split(".")
    try:
        major, minor = int(parts[0]), int(parts[1].split("-")[0].split("+")[0])
    except (ValueError, IndexError):
        return False
    return (major, minor) >= CONTAINERS_SINCE


def _without_offset(properties: bytes) -> bytes:
    """The property list without the ``x-stream-offset`` header a stream source added (and
    without a headers table that held nothing else)."""
    values = split_properties(properties)
    table = values[HEADERS_INDEX]
    if table is None:
        return properties
    for key, start, _vpos, end in table_entries(table):
        if key == _OFFSET_ENTRY[1:-1]:
            entries = table[4:start] + table[end:]
            values[HEADERS_INDEX] = len(entries).to_bytes(4, "big") + entries if entries else None
            return join_properties(values)
    return properties


def container_form(exchange: bytes, routing_key: bytes, properties: bytes, body: bytes) -> bytes:
    """The encoded AMQP 1.0 message a RabbitMQ 3.13 or later stream stores for this 0-9-1
    message: the one mapping (:func:`pumpd.amqp10.mapping.from_amqp091`), which is RabbitMQ's own
    conversion where that keeps the message and refuses it where RabbitMQ would alter it.

    :raises UnstorableMessage: naming the field the mapping refuses
    """
    try:
        message = from_amqp091(exchange, routing_key, _without_offset(properties), body)
        return encode_message(message)
    except UnmappableMessage as exc:
        raise UnstorableMessage(str(exc)) from None
    except (FrameError, struct.error, EncodeError) as exc:
        raise UnstorableMessage(f"properties: cannot be mapped: {exc}") from None


def container_head(exchange: bytes, routing_key: bytes, properties: bytes) -> bytes:
    """:func:`container_form` up to its body's data section (as :func:`stored_head`).

    :raises UnstorableMessage: as :func:`container_form`, and for a message whose ``type`` says
        its body is AMQP 1.0 sections (it has no data section to put a body into)
    """
    form = container_form(exchange, routing_key, properties, b"")
    if not form.endswith(_EMPTY_DATA):
        raise UnstorableMessage("type: 'amqp-1.0' says the body is AMQP 1.0 sections, which a "
                                "row's body is not")
    return form[:-len(_EMPTY_DATA)]


def head_of(container: bool) -> Callable[[bytes, bytes, bytes], bytes]:
    """:func:`container_head` or :func:`stored_head`: the head of the broker's form."""
    return container_head if container else stored_head


class StoredForms:
    """The stored form of a stream source's deliveries (:func:`stored_form` or
    :func:`container_form`), and their offsets, with a memory.

    A stream's messages mostly repeat their exchange, routing key and properties byte for byte
    but for the offset at the end of their headers. The encoded form up to the body is
    remembered per such message with its offset's 8 bytes blanked out: a message equal to a
    remembered one in every other byte has the same structure (the 8 value bytes of a long
    change no length), so its form is the remembered one and its offset is read where the
    remembered one's was. Any other message takes the full conversion, which confirms where its
    offset lies before it is remembered. Messages that never repeat (a message id each) stop
    being remembered after :data:`FORMS_MAX` misses in a row, and are tried again now and then."""

    def __init__(self, container: bool = False) -> None:
        """``container``: the broker stores the container form (:func:`stores_container_form`)."""
        self._form = container_form if container else stored_form
        self._prefixes: dict[bytes, bytes] = {}
        self._misses = 0  # conversions since the memory last served one

    def of(self, exchange: bytes, routing_key: bytes, properties: bytes,
           body: bytes) -> tuple[int | None, bytes]:
        """(the message's ``x-stream-offset`` or None, its stored form).

        :raises UnstorableMessage: as :func:`stored_form` or :func:`container_form`
        """
        table_at, at = _trailing_offset_at(properties)
        key = b""
        if at >= 0:
            key = b"".join((bytes((len(exchange),)), exchange, bytes((len(routing_key),)),
                            routing_key, properties[:at], _BLANK, properties[at + 8:]))
            prefix = self._prefixes.get(key)
            if prefix is not None:
                self._misses = 0
                return (int.from_bytes(properties[at:at + 8], "big", signed=True),
                        b"".join((prefix, data_section_head(len(body)), body)))
        form = self._form(exchange, routing_key, properties, body)
        self._misses += 1
        if not key or (self._misses > FORMS_MAX and self._misses % _RETRY_EVERY):
            return _any_offset(properties), form
        offset = _confirmed_offset(properties, table_at, at)
        tail = len(body) + (5 if len(body) < 256 else 8)  # the body's data section
        if offset is None or form[-tail:] != data_section_head(len(body)) + body:
            return _any_offset(properties), form
        head = form[:-tail]
        if len(self._prefixes) >= FORMS_MAX:
            self._prefixes.clear()
        self._prefixes[key] = head
        return offset, form


def _confirmed_offset(properties: bytes, table_at: int, at: int) -> int | None:
    """The offset at ``at`` if a full read of the headers table at ``table_at`` finds the
    ``x-stream-offset`` long there (and nowhere else), else None."""
    if at < 0:
        return None
    try:
        found = [vpos for key, _start, vpos, _end in table_entries(properties[table_at:])
                 if key == _OFFSET_ENTRY[1:-1]]
    except (FrameError, struct.error, ValueError):
        return None
    if found != [at - 1 - table_at]:
        return None
    return int.from_bytes(properties[at:at + 8], "big", signed=True)


def _any_offset(properties: bytes) -> int | None:
    """The ``x-stream-offset`` of a property list wherever it is, an integer of any width."""
    try:
        table = split_properties(properties)[2]
        if table is None:
            return None
        for key, _start, vpos, _end in table_entries(table):
            if key == _OFFSET_ENTRY[1:-1]:
                fmt = _FIXED.get(table[vpos])
                if fmt is None or fmt[0] in (">f", ">d"):
                    return None
                return int(struct.unpack_from(fmt[0], table, vpos + 1)[0])
    except (FrameError, struct.error, ValueError):
        return None
    return None
