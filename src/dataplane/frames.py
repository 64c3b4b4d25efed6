"""AMQP 0-9-1 wire constants, the few encoders the data plane needs, and the header edits.

No I/O here. The pure-Python relay uses these per message; the native relay uses
:func:`encode_property_overrides` and :func:`encode_hop` once, at set-up, reads
:data:`FIELD_SIZES` at import, and does the rest in C, except the rare edit that
:func:`edit_properties` makes of an ``x-shovelled`` header that is not an array.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

import pika.data

from ..config.vocabulary import BASIC_PROPERTIES, LONGLONG, OCTET, SHORTSTR, TABLE

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
FRAME_HEADER_SIZE = 7  # type(1) channel(2) size(4)
FRAME_OVERHEAD = 8  # header + end octet

CLASS_BASIC = 60
BASIC_PUBLISH = 40
BASIC_RETURN = 50
BASIC_DELIVER = 60
BASIC_ACK = 80
BASIC_REJECT = 90
BASIC_NACK = 120

ACK_MODE_NO_ACK = 0
ACK_MODE_ON_PUBLISH = 1
ACK_MODE_ON_CONFIRM = 2

# The 14 basic properties in wire order; flag bit for index i is 1 << (15 - i).
PROPERTY_NAMES: tuple[str, ...] = tuple(BASIC_PROPERTIES)
PROPERTY_INDEX = {name: i for i, name in enumerate(PROPERTY_NAMES)}
# Wire kinds: s = shortstr, t = table, o = octet, q = 64-bit (timestamp).
_WIRE_KIND = {SHORTSTR: "s", TABLE: "t", OCTET: "o", LONGLONG: "q"}
PROPERTY_KINDS = "".join(_WIRE_KIND[kind] for kind in BASIC_PROPERTIES.values())
HEADERS_INDEX = PROPERTY_INDEX["headers"]

FRAME_HEAD = struct.Struct(">BHI")  # frame type, channel, payload size
METHOD_ID = struct.Struct(">HH")  # class id, method id: the start of a method payload
U64 = struct.Struct(">Q")
_U16 = struct.Struct(">H")


class FrameError(ValueError):
    """The byte stream is not valid AMQP 0-9-1 framing (a broker or network fault)."""


def frame(frame_type: int, channel: int, payload: bytes | bytearray | memoryview) -> bytes:
    return FRAME_HEAD.pack(frame_type, channel, len(payload)) + bytes(payload) + b"\xce"


# The reply code of connection.close for a frame that breaks the framing rules (RabbitMQ's too).
CONNECTION_CLOSE_FRAME_ERROR = 501


def connection_close_frame(reply_code: int, reply_text: str) -> bytes:
    """connection.close (channel 0) with ``reply_code`` and the text cut to a short string."""
    text = reply_text.encode("utf-8", "replace")[:255]
    payload = struct.pack(">HHH", 10, 50, reply_code) + shortstr(text) + struct.pack(">HH", 0, 0)
    return frame(FRAME_METHOD, 0, payload)


def shortstr(value: bytes) -> bytes:
    if len(value) > 255:
        raise ValueError(f"short string longer than 255 bytes: {value[:40]!r}...")
    return bytes((len(value),)) + value


def basic_ack_frame(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    payload = struct.pack(">HHQB", CLASS_BASIC, BASIC_ACK, delivery_tag, 1 if multiple else 0)
    return frame(FRAME_METHOD, channel, payload)


def basic_reject_frame(channel: int, delivery_tag: int, requeue: bool) -> bytes:
    payload = struct.pack(">HHQB", CLASS_BASIC, BASIC_REJECT, delivery_tag, 1 if requeue else 0)
    return frame(FRAME_METHOD, channel, payload)


def basic_nack_frame(channel: int, delivery_tag: int, multiple: bool, requeue: bool) -> bytes:
    bits = (1 if multiple else 0) | (2 if requeue else 0)
    payload = struct.pack(">HHQB", CLASS_BASIC, BASIC_NACK, delivery_tag, bits)
    return frame(FRAME_METHOD, channel, payload)


def basic_publish_payload(exchange: bytes, routing_key: bytes, mandatory: bool) -> bytes:
    return (
        struct.pack(">HHH", CLASS_BASIC, BASIC_PUBLISH, 0)
        + shortstr(exchange)
        + shortstr(routing_key)
        + (b"\x01" if mandatory else b"\x00")
    )


def content_header_payload(body_size: int, raw_properties: bytes) -> bytes:
    """``raw_properties`` is the property-flags word(s) followed by the property values."""
    return struct.pack(">HHQ", CLASS_BASIC, 0, body_size) + raw_properties


def encode_property_value(name: str, value: Any) -> bytes:
    """Encode one basic property's value as it appears on the wire (after the flags).

    :raises ValueError: for a value that does not fit the property's wire type
    """
    kind = PROPERTY_KINDS[PROPERTY_INDEX[name]]
    if kind == "s":
        data = value.encode() if isinstance(value, str) else bytes(value)
        return shortstr(data)
    if kind == "o":
        return bytes((int(value),))
    if kind == "q":
        return U64.pack(int(value))
    pieces: list[bytes] = []
    pika.data.encode_table(pieces, dict(value))
    return b"".join(pieces)


def encode_property_overrides(properties: Mapping[str, Any]) -> dict[int, bytes]:
    """``publish_properties`` as property index → encoded value, ready to splice."""
    return {PROPERTY_INDEX[name]: encode_property_value(name, v) for name, v in properties.items()}


def split_properties(raw: bytes | bytearray | memoryview) -> list[bytes | None]:
    """The 14 encoded property values of a content header (None where absent).

    :raises FrameError: when the property list is truncated or uses flag continuation
    """
    raw = bytes(raw)
    if len(raw) < 2:
        raise FrameError("content header without property flags")
    flags = _U16.unpack_from(raw, 0)[0]
    if flags & 1:
        raise FrameError("property flag continuation is not used by basic properties")
    values: list[bytes | None] = [None] * len(PROPERTY_NAMES)
    pos = 2
    for i, kind in enumerate(PROPERTY_KINDS):
        if not flags & (1 << (15 - i)):
            continue
        if kind == "s":
            end = pos + 1 + (raw[pos] if pos < len(raw) else 0)
        elif kind == "t":
            end = pos + 4 + (struct.unpack_from(">I", raw, pos)[0] if pos + 4 <= len(raw) else 0)
        elif kind == "o":
            end = pos + 1
        else:
            end = pos + 8
        if end > len(raw):
            raise FrameError("content header properties truncated")
        values[i] = raw[pos:end]
        pos = end
    return values


def join_properties(values: list[bytes | None]) -> bytes:
    flags = 0
    parts = [b""]
    for i, value in enumerate(values):
        if value is not None:
            flags |= 1 << (15 - i)
            parts.append(value)
    parts[0] = _U16.pack(flags)
    return b"".join(parts)


# -- header edits without decoding the user's table ---------------------------------------------
#
# Field value types as RabbitMQ's rabbit_binary_parser reads them: a fixed size in bytes, or
# LONG for a u32 length followed by that many bytes. 's' is a signed 16-bit integer there (the
# 0-9-1 spec's short string is not used by any client RabbitMQ talks to).
LONG = -1
FIELD_SIZES: dict[int, int] = {
    ord("t"): 1, ord("b"): 1, ord("B"): 1, ord("s"): 2, ord("u"): 2, ord("I"): 4, ord("i"): 4,
    ord("l"): 8, ord("L"): 8, ord("f"): 4, ord("d"): 8, ord("D"): 5, ord("T"): 8, ord("V"): 0,
    ord("S"): LONG, ord("x"): LONG, ord("A"): LONG, ord("F"): LONG,
}
FORWARD_HEADER = b"x-shovelled"
TIMESTAMP_HEADER = b"x-shovelled-timestamp"
INVALID_HEADERS = b"x-invalid-headers"
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")


class UnparseableProperties(FrameError):
    """A message's properties cannot be parsed where the relay must edit them: the message is
    undeliverable, not the stream broken."""


def table_entries(table: bytes) -> list[tuple[bytes, int, int, int]]:
    """(key, entry start, value start (its type octet), entry end) of each entry of an encoded
    field table (``table`` starts with its u32 length).

    :raises UnparseableProperties: for a truncated table or an unknown field type
    """
    if len(table) < 4:
        raise UnparseableProperties("headers table truncated")
    end = 4 + _U32.unpack_from(table, 0)[0]
    if end > len(table):
        raise UnparseableProperties("headers table truncated")
    entries = []
    pos = 4
    while pos < end:
        vpos = pos + 1 + table[pos]
        if vpos >= end:
            raise UnparseableProperties("headers table truncated")
        size = FIELD_SIZES.get(table[vpos])
        if size is None:
            raise UnparseableProperties(f"headers table has an unknown field type 0x{table[vpos]:02x}")
        if size == LONG:
            if vpos + 5 > end:
                raise UnparseableProperties("headers table truncated")
            size = 4 + _U32.unpack_from(table, vpos + 1)[0]
        entry_end = vpos + 1 + size
        if entry_end > end:
            raise UnparseableProperties("headers table truncated")
        entries.append((table[pos + 1 : vpos], pos, vpos, entry_end))
        pos = entry_end
    return entries


def _entry(key: bytes, typed_value: bytes) -> bytes:
    return bytes((len(key),)) + key + typed_value


def _array(elements: bytes) -> bytes:
    return b"A" + _U32.pack(len(elements)) + elements


def _prepend(table: bytes, key: bytes, element: bytes) -> tuple[bytes, bytes | None]:
    """``element`` (a typed value) put first in the array ``key`` of ``table`` (the entries,
    without the table's length), as rabbit_basic:prepend_table_header does. An absent key gets a
    new array, appended; a key holding something else gets a new array in its place, and that
    other typed value is returned (the plugin moves it to ``x-invalid-headers``)."""
    for k, start, vpos, end in table_entries(_U32.pack(len(table)) + table):
        if k != key:
            continue
        start, vpos, end = start - 4, vpos - 4, end - 4
        if table[vpos] == ord("A"):
            new = _array(element + table[vpos + 5 : end])
            return table[: vpos] + new + table[end:], None
        return table[: vpos] + _array(element) + table[end:], table[vpos:end]
    return table + _entry(key, _array(element)), None


def edit_headers(table: bytes | None, hop: bytes | None, timestamp: int | None) -> bytes:
    """The headers table with this hop first in ``x-shovelled`` and / or ``x-shovelled-timestamp``
    set to ``timestamp`` (a 64-bit signed 'l', replacing an existing one in place, as
    rabbit_misc:set_table_value does); every other entry byte for byte, in its place.

    :param table: the encoded headers table (u32 length + entries), None when absent
    :param hop: this hop's encoded table (u32 length + entries), None for no forward header
    :raises UnparseableProperties: for a headers table that cannot be parsed
    """
    entries = b""
    if table is not None:
        table_entries(table)  # validates: the edits below rely on the top level being whole
        entries = table[4 : 4 + _U32.unpack_from(table, 0)[0]]
    if hop is not None:
        entries, displaced = _prepend(entries, FORWARD_HEADER, b"F" + hop)
        if displaced is not None:
            entries = _set_invalid(entries, displaced)
    if timestamp is not None:
        value = b"l" + _I64.pack(timestamp)
        for k, _start, vpos, end in table_entries(_U32.pack(len(entries)) + entries):
            if k == TIMESTAMP_HEADER:
                entries = entries[: vpos - 4] + value + entries[end - 4 :]
                break
        else:
            entries += _entry(TIMESTAMP_HEADER, value)
    return _U32.pack(len(entries)) + entries


def _set_invalid(entries: bytes, displaced: bytes) -> bytes:
    """rabbit_basic:set_invalid_header: a non-array ``x-shovelled`` goes first in
    ``x-invalid-headers``' array of the same name (a table, created if absent; a non-table
    ``x-invalid-headers`` is itself moved into the new table first)."""
    for k, _start, vpos, end in table_entries(_U32.pack(len(entries)) + entries):
        if k != INVALID_HEADERS:
            continue
        vpos, end = vpos - 4, end - 4
        if entries[vpos] == ord("F"):
            inner = entries[vpos + 5 : end]
        else:
            inner = _entry(INVALID_HEADERS, _array(entries[vpos:end]))
        inner, _ = _prepend(inner, FORWARD_HEADER, displaced)
        return entries[:vpos] + b"F" + _U32.pack(len(inner)) + inner + entries[end:]
    inner = _entry(FORWARD_HEADER, _array(displaced))
    return entries + _entry(INVALID_HEADERS, b"F" + _U32.pack(len(inner)) + inner)


def edit_properties(
    raw: bytes,
    overrides: Mapping[int, bytes],
    hop: bytes | None,
    timestamp: int | None,
) -> bytes:
    """Raw properties with the overrides put in, then the forward / timestamp headers spliced
    into the headers table (the plugin's order: publish_properties, then the hop, then the
    timestamp). A message without headers gets a table.

    :raises UnparseableProperties: when the properties or the headers table cannot be parsed
    """
    try:
        values = split_properties(raw)
    except FrameError as exc:
        raise UnparseableProperties(str(exc)) from None
    for index, encoded in overrides.items():
        values[index] = encoded
    if hop is not None or timestamp is not None:
        values[HEADERS_INDEX] = edit_headers(values[HEADERS_INDEX], hop, timestamp)
    return join_properties(values)


def encode_hop(fields: Sequence[tuple[str, str]]) -> bytes:
    """A forward-header hop table, every value a long string ('S') as the plugin writes it."""
    entries = b"".join(
        _entry(k.encode(), b"S" + _U32.pack(len(v.encode())) + v.encode()) for k, v in fields
    )
    return _U32.pack(len(entries)) + entries
