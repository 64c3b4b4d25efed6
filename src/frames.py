"""AMQP 0-9-1 wire constants and the few encoders the data plane needs.

No I/O here. The pure-Python relay uses these per message; the native relay only uses
:func:`encode_property_overrides` once, at set-up, and does the rest in C.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import pika.data

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
BASIC_NACK = 120

ACK_MODE_NO_ACK = 0
ACK_MODE_ON_PUBLISH = 1
ACK_MODE_ON_CONFIRM = 2

# The 14 basic properties in wire order; flag bit for index i is 1 << (15 - i).
PROPERTY_NAMES: tuple[str, ...] = (
    "content_type",
    "content_encoding",
    "headers",
    "delivery_mode",
    "priority",
    "correlation_id",
    "reply_to",
    "expiration",
    "message_id",
    "timestamp",
    "type",
    "user_id",
    "app_id",
    "cluster_id",
)
PROPERTY_INDEX = {name: i for i, name in enumerate(PROPERTY_NAMES)}
# Wire kinds: s = shortstr, t = table, o = octet, q = 64-bit (timestamp).
PROPERTY_KINDS = "sstoossssqssss"
HEADERS_INDEX = PROPERTY_INDEX["headers"]

_FRAME_HEAD = struct.Struct(">BHI")
_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")


class FrameError(ValueError):
    """The byte stream is not valid AMQP 0-9-1 framing (a broker or network fault)."""


def frame(frame_type: int, channel: int, payload: bytes | bytearray | memoryview) -> bytes:
    return _FRAME_HEAD.pack(frame_type, channel, len(payload)) + bytes(payload) + b"\xce"


def shortstr(value: bytes) -> bytes:
    if len(value) > 255:
        raise ValueError(f"short string longer than 255 bytes: {value[:40]!r}...")
    return bytes((len(value),)) + value


def basic_ack_frame(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    payload = struct.pack(">HHQB", CLASS_BASIC, BASIC_ACK, delivery_tag, 1 if multiple else 0)
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
        return _U64.pack(int(value))
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


def apply_property_overrides(raw: bytes, overrides: Mapping[int, bytes]) -> bytes:
    """Replace or set properties in a raw property list without decoding the others."""
    values = split_properties(raw)
    for index, encoded in overrides.items():
        values[index] = encoded
    return join_properties(values)
