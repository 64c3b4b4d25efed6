"""An AMQP 1.0 message: its sections, and the raw bytes it came as.

The sections are those of the AMQP 1.0 messaging layer (§3.2): header, delivery annotations,
message annotations, properties, application properties, the body (data sections, amqp-sequence
sections, or one amqp-value) and footer. :attr:`Message.raw` keeps the encoded message as
received: a destination that changes nothing sends it as it came, byte for byte; one that adds
annotations re-encodes only the sections before the bare message (header, delivery and message
annotations) and sends the bare message's bytes as they came (:attr:`Message.bare`).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

from .codec import (
    DecodeError,
    EncodeError,
    decode_value,
    encode_binary,
    encode_boolean,
    encode_string,
    encode_symbol,
    encode_timestamp,
    encode_ubyte,
    encode_uint,
    encode_ulong,
    encode_value,
)
from .values import Symbol, Timestamp, UByte, UInt, ULong

__all__ = [
    "AmqpSequence", "AmqpValue", "Header", "Message", "Properties", "complete", "decode_message",
    "encode_message", "encode_with_annotations",
]


@dataclass(slots=True)
class Header:
    """The header section; a field left at None is absent (its default applies)."""

    durable: bool | None = None
    priority: int | None = None  # ubyte
    ttl: int | None = None  # milliseconds (uint)
    first_acquirer: bool | None = None
    delivery_count: int | None = None  # uint


@dataclass(slots=True)
class Properties:
    """The properties section (immutable part of the bare message); None: absent."""

    message_id: Any = None  # ulong, uuid, binary or string
    user_id: bytes | None = None
    to: str | None = None
    subject: str | None = None
    reply_to: str | None = None
    correlation_id: Any = None  # as message_id
    content_type: Symbol | None = None
    content_encoding: Symbol | None = None
    absolute_expiry_time: int | None = None  # timestamp, ms
    creation_time: int | None = None  # timestamp, ms
    group_id: str | None = None
    group_sequence: int | None = None  # sequence-no (uint)
    reply_to_group_id: str | None = None


@dataclass(frozen=True, slots=True)
class AmqpSequence:
    """One amqp-sequence body section: a list of values."""

    items: list[Any]


@dataclass(frozen=True, slots=True)
class AmqpValue:
    """The amqp-value body section: one value of any type."""

    value: Any


@dataclass(slots=True)
class Message:
    """See the module docstring. ``body`` is a list of ``bytes`` (data sections), of
    :class:`AmqpSequence`, or one :class:`AmqpValue`. Annotation maps are keyed by
    :class:`Symbol` (or :class:`ULong`)."""

    header: Header | None = None
    delivery_annotations: dict[Symbol | ULong, Any] | None = None
    message_annotations: dict[Symbol | ULong, Any] | None = None
    properties: Properties | None = None
    application_properties: dict[str, Any] | None = None
    body: list[Any] = field(default_factory=list)
    footer: dict[Symbol | ULong, Any] | None = None
    #: the encoded message as received (None: built here)
    raw: bytes | None = None
    #: where the bare message starts in ``raw`` (after header and annotations)
    bare_offset: int = 0
    #: decoded up to the bare message only (``decode_message(raw, head_only=True)``): its
    #: properties, application properties, body and footer are still in ``raw`` alone
    partial: bool = False

    @property
    def bare(self) -> bytes | None:
        """The bare message's bytes as received (properties to the end of the body, footer
        included when present: a footer is outside the bare message but follows it)."""
        return None if self.raw is None else self.raw[self.bare_offset:]


# --------------------------------------------------------------------------------------------
# Sections on the wire (§3.2): each a described value, in this order

HEADER = 0x70
DELIVERY_ANNOTATIONS = 0x71
MESSAGE_ANNOTATIONS = 0x72
PROPERTIES = 0x73
APPLICATION_PROPERTIES = 0x74
DATA = 0x75
AMQP_SEQUENCE = 0x76
AMQP_VALUE = 0x77
FOOTER = 0x78

SECTION_NAMES = {
    HEADER: "header", DELIVERY_ANNOTATIONS: "delivery-annotations",
    MESSAGE_ANNOTATIONS: "message-annotations", PROPERTIES: "properties",
    APPLICATION_PROPERTIES: "application-properties", DATA: "data",
    AMQP_SEQUENCE: "amqp-sequence", AMQP_VALUE: "amqp-value", FOOTER: "footer",
}
_SYMBOLIC = {
    Symbol("amqp:header:list"): HEADER,
    Symbol("amqp:delivery-annotations:map"): DELIVERY_ANNOTATIONS,
    Symbol("amqp:message-annotations:map"): MESSAGE_ANNOTATIONS,
    Symbol("amqp:properties:list"): PROPERTIES,
    Symbol("amqp:application-properties:map"): APPLICATION_PROPERTIES,
    Symbol("amqp:data:binary"): DATA,
    Symbol("amqp:amqp-sequence:list"): AMQP_SEQUENCE,
    Symbol("amqp:amqp-value:*"): AMQP_VALUE,
    Symbol("amqp:footer:map"): FOOTER,
}
# a section's place in the order; the three body kinds share one
_RANK = {HEADER: 0, DELIVERY_ANNOTATIONS: 1, MESSAGE_ANNOTATIONS: 2, PROPERTIES: 3,
         APPLICATION_PROPERTIES: 4, DATA: 5, AMQP_SEQUENCE: 5, AMQP_VALUE: 5, FOOTER: 6}


def _section_code(descriptor: Any, pos: int) -> int:
    if type(descriptor) is ULong:
        code = int(descriptor)
        if code in SECTION_NAMES:
            return code
    elif type(descriptor) is Symbol and descriptor in _SYMBOLIC:
        return _SYMBOLIC[descriptor]
    raise DecodeError(f"message section with unknown descriptor {descriptor!r}", pos)


def _type_name(v: Any) -> str:
    names = {type(None): "null", bool: "boolean", int: "long", float: "double", str: "string",
             bytes: "binary", list: "list", dict: "map"}
    return names.get(type(v), type(v).__name__.lower())


# The header and properties sections, field by field in the spec's order (their dataclasses'
# order): the name on the wire, the types a decoded value may have, and how a value is encoded.
_FieldSpec = tuple[str, tuple[type, ...], str, Callable[[Any], bytes]]

_MESSAGE_ID = (ULong, bytes, str, uuid.UUID)
_ID_WHAT = "a message-id (ulong, uuid, binary or string)"


def _message_id(v: Any) -> bytes:
    if type(v) is int:  # a plain int means the ulong form
        return encode_ulong(v)
    if not isinstance(v, _MESSAGE_ID):
        raise EncodeError(f"{v!r} is not {_ID_WHAT}")
    return encode_value(v)


_HEADER_FIELDS: tuple[_FieldSpec, ...] = (
    ("durable", (bool,), "a boolean", encode_boolean),
    ("priority", (UByte,), "a ubyte", encode_ubyte),
    ("ttl", (UInt,), "a uint", encode_uint),
    ("first-acquirer", (bool,), "a boolean", encode_boolean),
    ("delivery-count", (UInt,), "a uint", encode_uint),
)
_PROPERTIES_FIELDS: tuple[_FieldSpec, ...] = (
    ("message-id", _MESSAGE_ID, _ID_WHAT, _message_id),
    ("user-id", (bytes,), "a binary", encode_binary),
    ("to", (str,), "a string", encode_string),
    ("subject", (str,), "a string", encode_string),
    ("reply-to", (str,), "a string", encode_string),
    ("correlation-id", _MESSAGE_ID, _ID_WHAT, _message_id),
    ("content-type", (Symbol,), "a symbol", encode_symbol),
    ("content-encoding", (Symbol,), "a symbol", encode_symbol),
    ("absolute-expiry-time", (Timestamp,), "a timestamp", encode_timestamp),
    ("creation-time", (Timestamp,), "a timestamp", encode_timestamp),
    ("group-id", (str,), "a string", encode_string),
    ("group-sequence", (UInt,), "a uint", encode_uint),
    ("reply-to-group-id", (str,), "a string", encode_string),
)


def _section_fields(section: str, v: Any, table: tuple[_FieldSpec, ...],
                    pos: int) -> list[Any]:
    """A list section's fields, checked and padded to the table's width (fields a later
    version may add are ignored)."""
    if type(v) is not list:
        raise DecodeError(f"{section} section is {_type_name(v)}, not a list", pos)
    width = len(table)
    for x, (name, kinds, what, _) in zip(v, table, strict=False):
        if x is not None and type(x) not in kinds:
            raise DecodeError(f"{section} field {name} is {_type_name(x)} {x!r}, not {what}",
                              pos)
    n = len(v)
    return v + [None] * (width - n) if n < width else v[:width]


def _header(v: Any, pos: int) -> Header:
    return Header(*_section_fields("header", v, _HEADER_FIELDS, pos))


def _properties(v: Any, pos: int) -> Properties:
    return Properties(*_section_fields("properties", v, _PROPERTIES_FIELDS, pos))


def _annotations(section: str, v: Any, pos: int) -> dict[Symbol | ULong, Any]:
    if type(v) is not dict:
        raise DecodeError(f"{section} section is {_type_name(v)}, not a map", pos)
    # The specification keys annotations by symbol or ulong; RabbitMQ 3.x writes a string key
    # (x-stream-offset on every stream delivery). A string key is kept as a string: passed on
    # as it came, never turned into a symbol.
    for k in v:
        if type(k) is not Symbol and type(k) is not ULong and type(k) is not str:
            raise DecodeError(f"{section} key {k!r} is {_type_name(k)}, not a symbol or ulong",
                              pos)
    return v


def _application_properties(v: Any, pos: int) -> dict[str, Any]:
    if type(v) is not dict:
        raise DecodeError(f"application-properties section is {_type_name(v)}, not a map", pos)
    for k in v:
        if type(k) is not str:
            raise DecodeError(f"application-properties key {k!r} is {_type_name(k)}, not a "
                              "string", pos)
    return v


def decode_message(raw: bytes, *, head_only: bool = False) -> Message:
    """The message encoded in ``raw`` (a transfer's payload, all its frames joined). ``raw`` is
    kept, and where the bare message starts in it. :class:`DecodeError` for a section out of the
    spec's order, repeated, of an unknown descriptor, of the wrong type, or a body that mixes
    kinds (naming the sections).

    With ``head_only`` only the sections before the bare message are decoded (header and
    annotations: what a hop reads and adds to); the result is :attr:`Message.partial` until
    :func:`complete` decodes the rest. A message passed on unchanged is never decoded further.
    """
    raw = bytes(raw)
    m = Message(raw=raw, bare_offset=len(raw))
    end = len(raw)
    pos = 0
    last = -1  # the code of the previous section
    while pos < end:
        start = pos
        if raw[pos] != 0x00:
            raise DecodeError("a message section is a described value, not this", pos, raw[pos])
        if head_only and pos + 2 < end and raw[pos + 1] == 0x53 and raw[pos + 2] >= PROPERTIES:
            # the bare message begins (its usual small-ulong descriptor read without decoding)
            m.bare_offset = start
            m.partial = True
            return m
        value, pos = decode_value(raw, pos, end)
        code = _section_code(value.descriptor, start)
        name = SECTION_NAMES[code]
        if last >= 0 and _RANK[code] <= _RANK[last]:
            prev = SECTION_NAMES[last]
            if _RANK[code] == 5 and _RANK[last] == 5:
                if code != last:
                    raise DecodeError(f"the body mixes {prev} and {name} sections", start)
                if code == AMQP_VALUE:
                    raise DecodeError("a second amqp-value section (the body has one)", start)
            elif code == last:
                raise DecodeError(f"a second {name} section", start)
            else:
                raise DecodeError(f"{name} section after the {prev} section", start)
        if code >= PROPERTIES and m.bare_offset == end:
            m.bare_offset = start
            if head_only:
                m.partial = True
                return m
        v = value.value
        if code == DATA:
            if type(v) is not bytes:
                raise DecodeError(f"data section is {_type_name(v)}, not a binary", start)
            m.body.append(v)
        elif code == AMQP_SEQUENCE:
            if type(v) is not list:
                raise DecodeError(f"amqp-sequence section is {_type_name(v)}, not a list", start)
            m.body.append(AmqpSequence(v))
        elif code == AMQP_VALUE:
            m.body.append(AmqpValue(v))
        elif code == HEADER:
            m.header = _header(v, start)
        elif code == DELIVERY_ANNOTATIONS:
            m.delivery_annotations = _annotations(name, v, start)
        elif code == MESSAGE_ANNOTATIONS:
            m.message_annotations = _annotations(name, v, start)
        elif code == PROPERTIES:
            m.properties = _properties(v, start)
        elif code == APPLICATION_PROPERTIES:
            m.application_properties = _application_properties(v, start)
        else:
            m.footer = _annotations(name, v, start)
        last = code
    return m


def complete(m: Message) -> Message:
    """``m`` with every section decoded: itself when it is not :attr:`~Message.partial`, else
    the bare message decoded from ``raw`` under ``m``'s own header and annotations (which the
    caller may have changed)."""
    if not m.partial:
        return m
    assert m.raw is not None
    full = decode_message(m.raw)
    full.header = m.header
    full.delivery_annotations = m.delivery_annotations
    full.message_annotations = m.message_annotations
    return full


# ---- encoding

def _described_list(code: int, parts: list[bytes]) -> bytes:
    while parts and parts[-1] == b"\x40":
        parts.pop()
    head = b"\x00\x53" + bytes((code,))
    if not parts:
        return head + b"\x45"
    body = b"".join(parts)
    size = len(body) + 1
    if size < 256 and len(parts) < 256:
        return head + bytes((0xC0, size, len(parts))) + body
    return head + struct.pack(">BII", 0xD0, size + 3, len(parts)) + body


def _encode_fields(section: str, code: int, values: tuple[Any, ...],
                   table: tuple[_FieldSpec, ...]) -> bytes:
    parts = []
    for v, (name, _, what, enc) in zip(values, table, strict=True):
        if v is None:
            parts.append(b"\x40")
            continue
        try:
            parts.append(enc(v))
        except EncodeError as e:
            raise EncodeError(f"{section} field {name}: {e}") from None
        except (ValueError, TypeError, AttributeError) as e:
            raise EncodeError(f"{section} field {name} = {v!r} is not {what} ({e})") from None
    return _described_list(code, parts)


_header_values = attrgetter(*[f.name for f in fields(Header)])
_properties_values = attrgetter(*[f.name for f in fields(Properties)])


def _encode_header(h: Header) -> bytes:
    return _encode_fields("header", HEADER, _header_values(h), _HEADER_FIELDS)


def _encode_properties(p: Properties) -> bytes:
    return _encode_fields("properties", PROPERTIES, _properties_values(p), _PROPERTIES_FIELDS)


def _described(code: int, value: Any) -> bytes:
    return b"\x00\x53" + bytes((code,)) + encode_value(value)


def _encode_annotations(code: int, v: dict[Any, Any]) -> bytes:
    keyed = {}
    for k, x in v.items():
        if type(k) is str:
            k = Symbol(k)
        elif type(k) is int:
            k = ULong(k)
        elif type(k) is not Symbol and type(k) is not ULong:
            raise EncodeError(f"{SECTION_NAMES[code]} key {k!r} is not a symbol or ulong")
        keyed[k] = x
    return _described(code, keyed)


def _encode_head(m: Message) -> list[bytes]:
    out = []
    if m.header is not None:
        out.append(_encode_header(m.header))
    if m.delivery_annotations is not None:
        out.append(_encode_annotations(DELIVERY_ANNOTATIONS, m.delivery_annotations))
    if m.message_annotations is not None:
        out.append(_encode_annotations(MESSAGE_ANNOTATIONS, m.message_annotations))
    return out


def encode_message(m: Message) -> bytes:
    """``m``'s sections encoded from its fields (``raw`` is not looked at, except for the bare
    message of a :attr:`~Message.partial` one). A body of no sections is sent as none."""
    m = complete(m)
    out = _encode_head(m)
    if m.properties is not None:
        out.append(_encode_properties(m.properties))
    if m.application_properties is not None:
        for k in m.application_properties:
            if type(k) is not str:
                raise EncodeError(f"application-properties key {k!r} is not a string")
        out.append(_described(APPLICATION_PROPERTIES, m.application_properties))
    kinds = {type(s) for s in m.body}
    if len(kinds) > 1:
        raise EncodeError(f"the body mixes section kinds: {sorted(k.__name__ for k in kinds)}")
    for s in m.body:
        if isinstance(s, bytes | bytearray | memoryview):
            out.append(b"\x00\x53\x75" + encode_binary(s))
        elif isinstance(s, AmqpSequence):
            out.append(_described(AMQP_SEQUENCE, list(s.items)))
        elif isinstance(s, AmqpValue):
            if len(m.body) > 1:
                raise EncodeError("the body has more than one amqp-value section")
            out.append(_described(AMQP_VALUE, s.value))
        else:
            raise EncodeError(f"a body section is {type(s).__name__}: bytes (data), "
                              "AmqpSequence or AmqpValue")
    if m.footer is not None:
        out.append(_encode_annotations(FOOTER, m.footer))
    return b"".join(out)


def encode_with_annotations(m: Message) -> bytes:
    """Header, delivery and message annotations encoded from ``m``'s fields, then the bare
    message (and footer) as received; :func:`encode_message` when ``m`` was not received."""
    bare = m.bare
    if bare is None:
        return encode_message(m)
    return b"".join(_encode_head(m)) + bare
