"""The one mapping between an AMQP 0-9-1 message and an AMQP 1.0 message, both ways.

RabbitMQ's own conversion (``mc_amqpl`` in RabbitMQ 4) is the model: durable and delivery mode,
the ids with their ``urn:uuid:`` form and ``x-message-id`` / ``x-correlation-id`` headers, app-id
and group-id, ``x-basic-type``, x- headers as message annotations, other headers as application
properties, ``x-cc`` and ``CC``, ``x-exchange`` and ``x-routing-key``. Where RabbitMQ loses or
changes something, this mapping keeps it exactly or refuses the message with
:class:`UnmappableMessage`, which names the field: nothing is altered silently, so a message
mapped one way and back is the message it was. docs/amqp10-mapping.md states every rule.

* 0-9-1 header values and AMQP 1.0 values map type for type (``b`` byte, ``B`` ubyte, ``D``
  decimal64, ``A`` list, ``F`` map with symbol keys, ...). A 1.0 value of a type 0-9-1 lacks is
  written as a *tagged table*: a table of one entry whose key names the type (``amqp:symbol``,
  ``amqp:ulong``, ``amqp:timestamp``, ...), read back as that type.
* A 1.0 field without a 0-9-1 property travels in the header ``x-amqp-<field>`` (``x-amqp-to``,
  ``x-amqp-subject``, ...); so does one whose value the property cannot hold (longer than a
  short string, a creation time in milliseconds).
* A header or annotation whose name the mapping uses for something else is refused unless it
  has exactly the form the mapping gives it: that is what makes each direction the inverse of
  the other.
"""

from __future__ import annotations

import re
import struct
import uuid
from dataclasses import fields
from typing import Any, NamedTuple

from ..dataplane.properties import (
    PROPERTY_NAMES,
    FrameError,
    join_properties,
    longstr,
    shortstr,
    split_properties,
)
from .codec import ARRAY_TYPE_CODE, DecodeError, EncodeError, encode_value
from .message import (
    AmqpSequence,
    AmqpValue,
    Header,
    Message,
    Properties,
    complete,
    decode_message,
    encode_message,
)
from .values import (
    Array,
    Byte,
    Char,
    Decimal32,
    Decimal64,
    Decimal128,
    Described,
    Float,
    Int,
    Short,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
    UShort,
)

__all__ = ["MAX_NESTING", "Amqp091Message", "UnmappableMessage", "from_amqp091", "to_amqp091"]


class UnmappableMessage(ValueError):
    """A message that has no faithful counterpart in the other protocol.

    ``where`` names the field (``properties.message-id``, ``headers['k'][2]``, ``body``, ...),
    ``why`` says what about its value cannot be carried.
    """

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: {why}")
        self.where = where
        self.why = why


class Amqp091Message(NamedTuple):
    """An AMQP 0-9-1 message: the routing key (from the ``x-routing-key`` annotation; None
    without one), the content header's raw property list, and the body."""

    routing_key: bytes | None
    properties: bytes
    body: bytes


#: Tables and arrays (0-9-1) nested deeper than this are refused, both ways (a tagged table
#: counts as one level): a hostile peer's nesting never exhausts the stack, and a value read
#: from 0-9-1 is never nested deeper than the AMQP 1.0 codec decodes (its MAX_DEPTH).
MAX_NESTING = 64

_SHORTSTR_MAX = 255
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_MS_PER_S = 1000
_ULONG_DIGITS = len(str(ULong.HIGH))  # a longer decimal is no ulong (and int() is not asked)

_CANONICAL_DECIMAL = re.compile(r"(?:0|[1-9][0-9]*)\Z")
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
_URN_UUID = "urn:uuid:"

# -- names the mapping uses -----------------------------------------------------------------------

# Headers that to_amqp091 writes and from_amqp091 reads back as 1.0 fields.
_MESSAGE_ID, _MESSAGE_ID_TYPE = "x-message-id", "x-message-id-type"
_CORRELATION_ID, _CORRELATION_ID_TYPE = "x-correlation-id", "x-correlation-id-type"
_ULONG_ID = "ulong"
_USER_ID = "x-amqp-user-id"
_TO = "x-amqp-to"
_SUBJECT = "x-amqp-subject"
_REPLY_TO = "x-amqp-reply-to"
_CONTENT_TYPE = "x-amqp-content-type"
_CONTENT_ENCODING = "x-amqp-content-encoding"
_ABSOLUTE_EXPIRY_TIME = "x-amqp-absolute-expiry-time"
_CREATION_TIME = "x-amqp-creation-time"
_GROUP_ID = "x-amqp-group-id"
_GROUP_SEQUENCE = "x-amqp-group-sequence"
_REPLY_TO_GROUP_ID = "x-amqp-reply-to-group-id"
_FIRST_ACQUIRER = "x-amqp-first-acquirer"
_DELIVERY_COUNT = "x-amqp-delivery-count"
_FOOTER = "x-amqp-footer"
_OWNED_HEADERS = frozenset({
    _MESSAGE_ID, _MESSAGE_ID_TYPE, _CORRELATION_ID, _CORRELATION_ID_TYPE, _USER_ID, _TO, _SUBJECT,
    _REPLY_TO, _CONTENT_TYPE, _CONTENT_ENCODING, _ABSOLUTE_EXPIRY_TIME, _CREATION_TIME, _GROUP_ID,
    _GROUP_SEQUENCE, _REPLY_TO_GROUP_ID, _FIRST_ACQUIRER, _DELIVERY_COUNT, _FOOTER,
})

# Message annotations that from_amqp091 writes and to_amqp091 reads back as 0-9-1 fields.
_EXCHANGE = "x-exchange"
_ROUTING_KEY = "x-routing-key"
_TYPE = "x-basic-type"
_CLUSTER_ID = "x-basic-cluster-id"
_CC_ANNOTATION, _CC_HEADER = "x-cc", "CC"
# The type property of a 0-9-1 body that is AMQP 1.0 encoded sections (RabbitMQ's own mark).
_AMQP10_TYPE = "amqp-1.0"
_HEADER_PREFIX = "x-amqp-header-"  # + a header's name: a list or map 1.0 application properties cannot hold
_OWNED_ANNOTATIONS = frozenset({_EXCHANGE, _ROUTING_KEY, _TYPE, _CLUSTER_ID, _CC_ANNOTATION})

# Tagged tables: a 1.0 value of a type 0-9-1 lacks, as a table of one entry keyed by its type.
_TAG_SYMBOL = "amqp:symbol"
_TAG_CHAR = "amqp:char"
_TAG_ULONG = "amqp:ulong"
_TAG_UUID = "amqp:uuid"
_TAG_TIMESTAMP = "amqp:timestamp"
_TAG_DECIMAL32 = "amqp:decimal32"
_TAG_DECIMAL64 = "amqp:decimal64"
_TAG_DECIMAL128 = "amqp:decimal128"
_TAG_DESCRIBED = "amqp:described"
_TAG_ARRAY = "amqp:array"
_TAG_MAP = "amqp:map"
_TAG_PREFIX = "amqp:"

_I8, _U8, _I16, _U16 = struct.Struct(">b"), struct.Struct(">B"), struct.Struct(">h"), struct.Struct(">H")
_I32, _U32, _I64, _U64 = struct.Struct(">i"), struct.Struct(">I"), struct.Struct(">q"), struct.Struct(">Q")
_F32, _F64 = struct.Struct(">f"), struct.Struct(">d")
_DECIMAL = struct.Struct(">BI")
# What the codec raises for a value it cannot encode: EncodeError, or, for a value of no AMQP
# type at all (an element of the wrong type, a cycle), what Python raises underneath.
_ENCODE_FAULTS = (EncodeError, ValueError, TypeError, OverflowError, struct.error, RecursionError)

_TYPE_NAMES: dict[type, str] = {
    type(None): "null", bool: "boolean", int: "long", float: "double", str: "string",
    bytes: "binary", uuid.UUID: "uuid", list: "list", dict: "map", UByte: "ubyte",
    UShort: "ushort", UInt: "uint", ULong: "ulong", Byte: "byte", Short: "short", Int: "int",
    Float: "float", Char: "char", Timestamp: "timestamp", Symbol: "symbol",
    Decimal32: "decimal32", Decimal64: "decimal64", Decimal128: "decimal128",
    Described: "described value", Array: "array",
}


def _type_name(value: Any) -> str:
    return _TYPE_NAMES.get(type(value), f"Python {type(value).__name__}")


def _fits_shortstr(encoded: bytes) -> bool:
    return len(encoded) <= _SHORTSTR_MAX


def _is_simple(value: Any) -> bool:
    """What AMQP 1.0 application properties may hold: anything but a list, map or array."""
    return not isinstance(value, (list, dict, Array))


# -- 0-9-1 field values → AMQP 1.0 values -------------------------------------------------------


def _truncated(where: str) -> UnmappableMessage:
    return UnmappableMessage(where, "the field table is truncated")


def _fixed(buf: bytes, pos: int, end: int, size: int, where: str) -> int:
    if pos + size > end:
        raise _truncated(where)
    return pos + size


def _read_field(buf: bytes, pos: int, end: int, where: str, depth: int) -> tuple[Any, int]:
    """The typed field value at ``pos`` as an AMQP 1.0 value, and the position after it."""
    code = buf[pos]
    pos += 1
    if code == 0x53:  # S
        data, pos = _read_long(buf, pos, end, where)
        try:
            return data.decode(), pos
        except UnicodeDecodeError:
            raise UnmappableMessage(
                where, "a long string that is not UTF-8 (an AMQP 1.0 string is; "
                       "binary data belongs in an 'x' field)") from None
    if code == 0x6C or code == 0x4C:  # l, L: RabbitMQ reads both as signed 64 bits
        end_ = _fixed(buf, pos, end, 8, where)
        return _I64.unpack_from(buf, pos)[0], end_
    if code == 0x49:  # I
        end_ = _fixed(buf, pos, end, 4, where)
        return Int(_I32.unpack_from(buf, pos)[0]), end_
    if code == 0x74:  # t
        end_ = _fixed(buf, pos, end, 1, where)
        return buf[pos] != 0, end_
    if code == 0x78:  # x
        return _read_long(buf, pos, end, where)
    if code == 0x46:  # F
        return _read_nested_table(buf, pos, end, where, depth)
    if code == 0x41:  # A
        return _read_array(buf, pos, end, where, depth)
    if code == 0x54:  # T
        end_ = _fixed(buf, pos, end, 8, where)
        seconds = _U64.unpack_from(buf, pos)[0]
        if seconds * _MS_PER_S > Timestamp.HIGH:
            raise UnmappableMessage(
                where, f"timestamp {seconds} s is beyond AMQP 1.0's (64-bit milliseconds)")
        return Timestamp(seconds * _MS_PER_S), end_
    if code == 0x64:  # d
        end_ = _fixed(buf, pos, end, 8, where)
        return _F64.unpack_from(buf, pos)[0], end_
    if code == 0x66:  # f
        end_ = _fixed(buf, pos, end, 4, where)
        value = _F32.unpack_from(buf, pos)[0]
        if _F32.pack(value) != buf[pos:end_]:
            raise UnmappableMessage(
                where, f"a 32-bit float {buf[pos:end_].hex()} that changes when read "
                       "(a signalling NaN)")
        return Float(value), end_
    if code == 0x62:  # b
        end_ = _fixed(buf, pos, end, 1, where)
        return Byte(_I8.unpack_from(buf, pos)[0]), end_
    if code == 0x42:  # B
        end_ = _fixed(buf, pos, end, 1, where)
        return UByte(buf[pos]), end_
    if code == 0x73:  # s: RabbitMQ's signed 16 bits
        end_ = _fixed(buf, pos, end, 2, where)
        return Short(_I16.unpack_from(buf, pos)[0]), end_
    if code == 0x75:  # u
        end_ = _fixed(buf, pos, end, 2, where)
        return UShort(_U16.unpack_from(buf, pos)[0]), end_
    if code == 0x69:  # i
        end_ = _fixed(buf, pos, end, 4, where)
        return UInt(_U32.unpack_from(buf, pos)[0]), end_
    if code == 0x44:  # D: scale, then the unsigned 32-bit value, as RabbitMQ reads it
        end_ = _fixed(buf, pos, end, 5, where)
        scale, value = _DECIMAL.unpack_from(buf, pos)
        return Decimal64(_decimal64_bits(scale, value).to_bytes(8, "big")), end_
    if code == 0x56:  # V
        return None, pos
    raise UnmappableMessage(where, f"unknown field type {chr(code)!r} (0x{code:02x})")


def _read_long(buf: bytes, pos: int, end: int, where: str) -> tuple[bytes, int]:
    start = _fixed(buf, pos, end, 4, where)
    stop = start + _U32.unpack_from(buf, pos)[0]
    if stop > end:
        raise _truncated(where)
    return buf[start:stop], stop


def _container(buf: bytes, pos: int, end: int, where: str, depth: int) -> tuple[int, int]:
    _enter(where, depth)
    start = _fixed(buf, pos, end, 4, where)
    stop = start + _U32.unpack_from(buf, pos)[0]
    if stop > end:
        raise _truncated(where)
    return start, stop


def _read_array(buf: bytes, pos: int, end: int, where: str, depth: int) -> tuple[list[Any], int]:
    pos, stop = _container(buf, pos, end, where, depth)
    items: list[Any] = []
    while pos < stop:
        item, pos = _read_field(buf, pos, stop, f"{where}[{len(items)}]", depth + 1)
        items.append(item)
    return items, stop


def _read_entries(buf: bytes, pos: int, stop: int, where: str,
                  depth: int) -> list[tuple[bytes, Any]]:
    entries: list[tuple[bytes, Any]] = []
    while pos < stop:
        key_end = pos + 1 + buf[pos]
        if key_end >= stop:
            raise _truncated(where)
        key = buf[pos + 1 : key_end]
        value, pos = _read_field(buf, key_end, stop, f"{where}[{_key_text(key)!r}]", depth)
        entries.append((key, value))
    return entries


def _key_text(key: bytes) -> str:
    return key.decode("utf-8", "replace")


def _read_nested_table(buf: bytes, pos: int, end: int, where: str,
                       depth: int) -> tuple[Any, int]:
    """A table inside a header: a map with symbol keys, or the value its tag names."""
    pos, stop = _container(buf, pos, end, where, depth)
    result: dict[Any, Any] = {}
    for key, value in _read_entries(buf, pos, stop, where, depth + 1):
        if not key.isascii():
            raise UnmappableMessage(
                f"{where}[{_key_text(key)!r}]",
                "a table key that is not ASCII (nested tables become maps with symbol keys)")
        name = Symbol(key.decode("ascii"))
        if name in result:
            raise UnmappableMessage(where, f"the key {name!r} twice")
        result[name] = value
    if len(result) == 1:
        ((name, value),) = result.items()
        if name.startswith(_TAG_PREFIX):
            tagged = _untag(name, value)
            if tagged is not _UNTAGGED:
                return tagged, stop
    return result, stop


# -- tagged tables ---------------------------------------------------------------------------------

_UNTAGGED: Any = object()


def _decimal64_bits(scale: int, value: int) -> int:
    """IEEE 754 decimal64 (binary integer decimal) of ``value`` times 10 to the power -``scale``."""
    return ((398 - scale) << 53) | value


def _as_amqp091_decimal(raw: bytes) -> tuple[int, int] | None:
    """(scale, value) of a decimal64 that 0-9-1's decimal holds exactly, else None."""
    bits = int.from_bytes(raw, "big")
    if bits >> 63 or (bits >> 61) & 0b11 == 0b11:  # negative; large coefficient, inf or NaN
        return None
    scale = 398 - ((bits >> 53) & 0x3FF)
    value = bits & ((1 << 53) - 1)
    if 0 <= scale <= 0xFF and value <= 0xFFFF_FFFF:
        return scale, value
    return None


def _untag(tag: str, value: Any) -> Any:
    """The 1.0 value a tagged table stands for, or _UNTAGGED when it is not in the exact form
    :func:`_write_value` gives that type (then it is an ordinary map)."""
    kind = type(value)
    if tag == _TAG_SYMBOL:
        return Symbol(value) if kind is str and value.isascii() else _UNTAGGED
    if tag == _TAG_CHAR:
        return Char(value) if kind is str and len(value) == 1 else _UNTAGGED
    if tag == _TAG_ULONG:
        if kind is int and value >= 0:
            return ULong(value)
        if (kind is str and len(value) <= _ULONG_DIGITS and _CANONICAL_DECIMAL.match(value)
                and _LONG_MAX < int(value) <= ULong.HIGH):
            return ULong(int(value))
        return _UNTAGGED
    if tag == _TAG_UUID:
        return uuid.UUID(value) if kind is str and _CANONICAL_UUID.match(value) else _UNTAGGED
    if tag == _TAG_TIMESTAMP:
        if kind is int and (value < 0 or value % _MS_PER_S):
            return Timestamp(value)
        return _UNTAGGED
    if tag == _TAG_DECIMAL32:
        return Decimal32(value) if kind is bytes and len(value) == 4 else _UNTAGGED
    if tag == _TAG_DECIMAL64:
        if kind is bytes and len(value) == 8 and _as_amqp091_decimal(value) is None:
            return Decimal64(value)
        return _UNTAGGED
    if tag == _TAG_DECIMAL128:
        return Decimal128(value) if kind is bytes and len(value) == 16 else _UNTAGGED
    if tag == _TAG_DESCRIBED:
        if kind is list and len(value) == 2 and type(value[0]) in (ULong, Symbol):
            return Described(value[0], value[1])
        return _UNTAGGED
    if tag == _TAG_ARRAY:
        if (kind is list and len(value) == 3 and type(value[0]) is UByte
                and (value[1] is None or type(value[1]) in (ULong, Symbol))
                and type(value[2]) is list):
            array = Array(int(value[0]), tuple(value[2]), value[1])
            if ARRAY_TYPE_CODE.get(array.code) == array.code and _encodable(array):
                return array
        return _UNTAGGED
    if tag == _TAG_MAP:
        if kind is not list or len(value) % 2:
            return _UNTAGGED
        try:
            result = dict(zip(value[::2], value[1::2], strict=True))
        except TypeError:  # a key Python cannot hash (a list or map)
            return _UNTAGGED
        if 2 * len(result) != len(value) or not _needs_map_tag(result):
            return _UNTAGGED
        return result
    return _UNTAGGED


def _encodable(array: Array) -> bool:
    """An array the AMQP 1.0 codec encodes (its code names a type, its items are of it)."""
    try:
        encode_value(array)
    except _ENCODE_FAULTS:
        return False
    return True


def _needs_map_tag(value: dict[Any, Any]) -> bool:
    """A map that a table cannot carry as it is: a key that is not an ASCII symbol of at most
    255 characters, or a single entry that would read back as a tagged value."""
    for key in value:
        if type(key) is not Symbol or not key.isascii() or len(key) > _SHORTSTR_MAX:
            return True
    if len(value) == 1:
        ((key, item),) = value.items()
        return bool(key.startswith(_TAG_PREFIX) and _untag(key, item) is not _UNTAGGED)
    return False


# -- AMQP 1.0 values → 0-9-1 field values ---------------------------------------------------------


def _enter(where: str, depth: int) -> int:
    """The depth of a 0-9-1 table or array's items, refused beyond :data:`MAX_NESTING`."""
    if depth >= MAX_NESTING:
        raise UnmappableMessage(where, f"values nested deeper than {MAX_NESTING} tables and arrays")
    return depth + 1


def _tagged(tag: str, value: Any, where: str, depth: int) -> bytes:
    """``value`` (a string, long or binary) in a table of one entry keyed by ``tag``."""
    _enter(where, depth)
    return b"F" + longstr(shortstr(tag.encode()) + _write_value(value, where, depth + 1))


def _tagged_array(tag: str, parts: list[tuple[Any, str]], where: str, depth: int) -> bytes:
    """An array of ``parts`` (each a value and its place) in a table keyed by ``tag``."""
    inner = _enter(where, _enter(where, depth))
    items = b"".join(_write_value(value, place, inner) for value, place in parts)
    return b"F" + longstr(shortstr(tag.encode()) + b"A" + longstr(items))


def _utf8(text: str, where: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError:
        raise UnmappableMessage(where, f"{_short(text)} has a lone surrogate, which UTF-8 "
                                       "cannot encode") from None


def _write_value(value: Any, where: str, depth: int) -> bytes:
    """``value`` as a typed 0-9-1 field value (its type octet first)."""
    kind = type(value)
    if kind is str:
        return b"S" + longstr(_utf8(value, where))
    if kind is int:
        if not _LONG_MIN <= value <= _LONG_MAX:
            raise UnmappableMessage(where, f"integer {value} is beyond a long (64 bits)")
        return b"l" + _I64.pack(value)
    if kind is bool:
        return b"t\x01" if value else b"t\x00"
    if kind is bytes:
        return b"x" + longstr(value)
    if value is None:
        return b"V"
    if kind is float:
        return b"d" + _F64.pack(value)
    if kind is dict:
        return _write_map(value, where, depth)
    if kind is list:
        inner = _enter(where, depth)
        return b"A" + longstr(b"".join(_write_value(item, f"{where}[{i}]", inner)
                                       for i, item in enumerate(value)))
    if kind is Symbol:
        if not value.isascii():
            raise UnmappableMessage(where, f"symbol {_short(value)} is not ASCII")
        return _tagged(_TAG_SYMBOL, str(value), where, depth)
    if kind is UByte:
        return b"B" + _U8.pack(value)
    if kind is Byte:
        return b"b" + _I8.pack(value)
    if kind is Short:
        return b"s" + _I16.pack(value)
    if kind is UShort:
        return b"u" + _U16.pack(value)
    if kind is Int:
        return b"I" + _I32.pack(value)
    if kind is UInt:
        return b"i" + _U32.pack(value)
    if kind is ULong:
        return _tagged(_TAG_ULONG, int(value) if value <= _LONG_MAX else str(int(value)),
                       where, depth)
    if kind is Timestamp:
        if value >= 0 and value % _MS_PER_S == 0:
            return b"T" + _U64.pack(value // _MS_PER_S)
        return _tagged(_TAG_TIMESTAMP, int(value), where, depth)
    if kind is Float:
        return b"f" + _F32.pack(value)  # a Float is a 32-bit float when made
    if kind is Char:
        return _tagged(_TAG_CHAR, str(value), where, depth)
    if kind is uuid.UUID:
        return _tagged(_TAG_UUID, str(value), where, depth)
    if kind is Decimal64:
        decimal = _as_amqp091_decimal(_raw(value, 8, where))
        if decimal is not None:
            return b"D" + _DECIMAL.pack(*decimal)
        return _tagged(_TAG_DECIMAL64, value.raw, where, depth)
    if kind is Decimal32:
        return _tagged(_TAG_DECIMAL32, _raw(value, 4, where), where, depth)
    if kind is Decimal128:
        return _tagged(_TAG_DECIMAL128, _raw(value, 16, where), where, depth)
    if kind is Described:
        _descriptor(value.descriptor, False, where)
        return _tagged_array(_TAG_DESCRIBED, [(value.descriptor, f"{where}.descriptor"),
                                              (value.value, f"{where}.value")], where, depth)
    if kind is Array:
        if type(value.code) is not int or not 0 <= value.code <= 0xFF:
            raise UnmappableMessage(where, f"array element code {_short(value.code)} is not "
                                           "an octet")
        if type(value.items) is not tuple:
            raise UnmappableMessage(where, f"array items are a {_type_name(value.items)}, "
                                           "not a tuple")
        _descriptor(value.descriptor, True, where)
        if not _encodable(value):
            raise UnmappableMessage(
                where, f"array of element code 0x{value.code:02x} that AMQP 1.0 cannot encode "
                       f"(an element not of that type, or no such type): {_short(value.items)}")
        # the codec's one code for the elements' type, as decoding the array gives it
        return _tagged_array(_TAG_ARRAY, [
            (UByte(ARRAY_TYPE_CODE[value.code]), f"{where}.code"), (value.descriptor, f"{where}.descriptor"),
            (list(value.items), where)], where, depth)
    raise UnmappableMessage(where, f"a {_type_name(value)} is not an AMQP 1.0 value")


def _descriptor(descriptor: Any, optional: bool, where: str) -> None:
    if (descriptor is None and optional) or type(descriptor) in (ULong, Symbol):
        return
    raise UnmappableMessage(where, f"a descriptor that is a {_type_name(descriptor)} "
                                   "(a descriptor is a ulong or a symbol)")


def _raw(value: Decimal32 | Decimal64 | Decimal128, size: int, where: str) -> bytes:
    if type(value.raw) is not bytes or len(value.raw) != size:
        raise UnmappableMessage(where, f"a {_type_name(value)} is {size} bytes")
    return value.raw


def _write_map(value: dict[Any, Any], where: str, depth: int) -> bytes:
    if _needs_map_tag(value):
        parts: list[tuple[Any, str]] = []
        for key, item in value.items():
            parts.extend(((key, f"{where} key {_short(key)}"), (item, f"{where}[{_short(key)}]")))
        return _tagged_array(_TAG_MAP, parts, where, depth)
    inner = _enter(where, depth)
    return b"F" + longstr(b"".join(
        shortstr(key.encode()) + _write_value(item, f"{where}[{_short(key)}]", inner)
        for key, item in value.items()))


# -- AMQP 0-9-1 → AMQP 1.0 ------------------------------------------------------------------------


def _text(raw: bytes, where: str) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise UnmappableMessage(where, f"{raw!r} is not UTF-8 (its AMQP 1.0 field is a string)") from None


def _symbol(raw: bytes, where: str) -> Symbol:
    if not raw.isascii():
        raise UnmappableMessage(where, f"{raw!r} is not ASCII (its AMQP 1.0 field is a symbol)")
    return Symbol(raw.decode("ascii"))


class _Headers:
    """A 0-9-1 headers table being read: the entries not yet taken, by name."""

    def __init__(self, table: bytes | None) -> None:
        self.entries: dict[str, Any] = {}
        if table is None:
            return
        for key, value in _read_entries(table, 4, len(table), "headers", 0):
            name = _text(key, f"headers[{_key_text(key)!r}]")
            if name in self.entries:
                raise UnmappableMessage(f"headers[{name!r}]", "the header twice")
            self.entries[name] = value

    def take(self, name: str, kind: type) -> Any:
        """The value of the header ``name`` (removed), None when absent; a value that is not of
        ``kind`` is refused (the mapping writes ``kind`` under that name)."""
        if name not in self.entries:
            return None
        value = self.entries.pop(name)
        if type(value) is not kind:
            raise _owned(f"headers[{name!r}]", f"holds a {_type_name(value)}, where the mapping "
                                              f"writes a {_TYPE_NAMES[kind]}")
        return value


def _owned(where: str, why: str) -> UnmappableMessage:
    return UnmappableMessage(where, f"{why} (the name is the mapping's own)")


def _read_id(raw: bytes | None, headers: _Headers, field: str, id_header: str,
             type_header: str) -> Any:
    """message-id or correlation-id: the property, typed by ``type_header``, or, without the
    property, ``id_header``'s value."""
    carried = headers.entries.pop(id_header, None)
    kind = headers.take(type_header, str)
    if raw is None:
        if kind is not None:
            raise _owned(f"headers[{type_header!r}]", f"set without the {field} property")
        if carried is None:
            return None
        if type(carried) is bytes:
            return carried
        if type(carried) is str and not _fits_property_id(carried):
            return carried
        raise _owned(f"headers[{id_header!r}]",
                     f"holds a {_type_name(carried)} {_short(carried)} that the {field} "
                     f"property would carry")
    if carried is not None:
        raise _owned(f"headers[{id_header!r}]", f"set as well as the {field} property")
    text = _text(raw[1:], field)
    if kind is not None:
        if kind != _ULONG_ID or not _CANONICAL_DECIMAL.match(text) or int(text) > ULong.HIGH:
            raise _owned(f"headers[{type_header!r}]",
                         f"is {kind!r} for {field} {text!r}, where the mapping writes "
                         f"{_ULONG_ID!r} beside a decimal ulong")
        return ULong(int(text))
    if text.startswith(_URN_UUID) and _CANONICAL_UUID.match(text, len(_URN_UUID)):
        return uuid.UUID(text[len(_URN_UUID):])
    return text


def _fits_property_id(text: str) -> bool:
    """A string id that the 0-9-1 property carries as it is (not too long, and not read back
    as a uuid)."""
    return _fits_shortstr(text.encode()) and not (
        text.startswith(_URN_UUID) and _CANONICAL_UUID.match(text, len(_URN_UUID)))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _read_short_field(raw: bytes | None, headers: _Headers, field: str, header: str,
                      kind: type) -> Any:
    """A field carried by a short-string property, or, when longer than one, by ``header``."""
    if raw is not None:
        if header in headers.entries:
            raise _owned(f"headers[{header!r}]", f"set as well as the {field} property")
        value = raw[1:]
        if kind is bytes:
            return value
        return _symbol(value, field) if kind is Symbol else _text(value, field)
    carried = headers.take(header, bytes if kind is bytes else str)
    if carried is None:
        return None
    if kind is Symbol:
        if not carried.isascii():
            raise _owned(f"headers[{header!r}]", "holds a string that is not ASCII")
        carried = Symbol(carried)
    if _fits_shortstr(carried if kind is bytes else carried.encode()):
        raise _owned(f"headers[{header!r}]",
                     f"holds {_short(carried)}, short enough for the {field} property")
    return carried


def _read_creation_time(raw: bytes | None, headers: _Headers) -> Timestamp | None:
    seconds = None if raw is None else _U64.unpack(raw)[0]
    carried = headers.take(_CREATION_TIME, int)
    if carried is None:
        if seconds is None:
            return None
        if seconds * _MS_PER_S > Timestamp.HIGH:
            raise UnmappableMessage(
                "timestamp", f"{seconds} s is beyond AMQP 1.0's (64-bit milliseconds)")
        created: Timestamp = Timestamp(seconds * _MS_PER_S)
        return created
    expected = carried // _MS_PER_S if carried >= 0 else None
    if (carried >= 0 and carried % _MS_PER_S == 0) or seconds != expected:
        raise _owned(f"headers[{_CREATION_TIME!r}]",
                     f"holds {carried} ms beside a timestamp of {seconds} s, where the mapping "
                     "writes milliseconds that are not whole seconds beside their whole seconds")
    exact: Timestamp = Timestamp(carried)
    return exact


def _read_expiration(raw: bytes) -> UInt:
    text = raw[1:].decode("ascii", "replace")
    if not _CANONICAL_DECIMAL.match(text) or int(text) > UInt.HIGH:
        raise UnmappableMessage(
            "expiration", f"{text!r} is not a whole number of milliseconds in 0..{UInt.HIGH} "
                          "written without sign or leading zeros (AMQP 1.0's ttl)")
    ttl: UInt = UInt(int(text))
    return ttl


def _read_delivery_mode(raw: bytes) -> bool:
    if raw[0] not in (1, 2):
        raise UnmappableMessage(
            "delivery_mode", f"{raw[0]} is neither 1 (transient) nor 2 (persistent)")
    return raw[0] == 2


def from_amqp091(exchange: bytes, routing_key: bytes, properties: bytes, body: bytes) -> Message:
    """The AMQP 1.0 message for an AMQP 0-9-1 one: ``properties`` is a content header's raw
    property list (as :class:`pumpd.dataplane.api.Delivered` has it).

    :raises UnmappableMessage: naming what has no faithful AMQP 1.0 counterpart (or a
        property list that cannot be parsed: ``properties``)
    """
    try:
        (content_type, content_encoding, table, delivery_mode, priority, correlation_id,
         reply_to, expiration, message_id, timestamp, type_, user_id, app_id,
         cluster_id) = split_properties(properties)
    except FrameError as exc:
        raise UnmappableMessage("properties", f"cannot be parsed: {exc}") from None
    headers = _Headers(table)

    header = Header(
        durable=None if delivery_mode is None else _read_delivery_mode(delivery_mode),
        priority=None if priority is None else UByte(priority[0]),
        ttl=None if expiration is None else _read_expiration(expiration),
        first_acquirer=headers.take(_FIRST_ACQUIRER, bool),
        delivery_count=headers.take(_DELIVERY_COUNT, UInt),
    )
    props = Properties(
        message_id=_read_id(message_id, headers, "message_id", _MESSAGE_ID, _MESSAGE_ID_TYPE),
        user_id=_read_short_field(user_id, headers, "user_id", _USER_ID, bytes),
        to=headers.take(_TO, str),
        subject=headers.take(_SUBJECT, str),
        reply_to=_read_short_field(reply_to, headers, "reply_to", _REPLY_TO, str),
        correlation_id=_read_id(correlation_id, headers, "correlation_id", _CORRELATION_ID,
                                _CORRELATION_ID_TYPE),
        content_type=_read_short_field(content_type, headers, "content_type", _CONTENT_TYPE,
                                       Symbol),
        content_encoding=_read_short_field(content_encoding, headers, "content_encoding",
                                           _CONTENT_ENCODING, Symbol),
        absolute_expiry_time=_timestamp(headers.take(_ABSOLUTE_EXPIRY_TIME, int)),
        creation_time=_read_creation_time(timestamp, headers),
        group_id=_read_short_field(app_id, headers, "app_id", _GROUP_ID, str),
        group_sequence=headers.take(_GROUP_SEQUENCE, UInt),
        reply_to_group_id=headers.take(_REPLY_TO_GROUP_ID, str),
    )
    encoded = type_ is not None and type_[1:] == _AMQP10_TYPE.encode()
    footer = headers.entries.pop(_FOOTER, None)
    if footer is not None and (encoded or type(footer) is not dict
                               or any(type(k) not in (Symbol, ULong) for k in footer)):
        raise _owned(f"headers[{_FOOTER!r}]",
                     f"holds a {_type_name(footer)}, where the mapping writes the footer of a "
                     "plain body: a map with symbol and ulong keys")
    if encoded:
        sections, footer = _read_encoded_body(body)
    else:
        sections = [bytes(body)]

    annotations: dict[Symbol | ULong, Any] = {
        Symbol(_EXCHANGE): _text(exchange, "exchange"),
        Symbol(_ROUTING_KEY): _text(routing_key, "routing key"),
    }
    if type_ is not None and not encoded:
        annotations[Symbol(_TYPE)] = _text(type_[1:], "type")
    if cluster_id is not None:
        annotations[Symbol(_CLUSTER_ID)] = _text(cluster_id[1:], "cluster_id")
    application: dict[str, Any] = {}
    for name, value in headers.entries.items():
        where = f"headers[{name!r}]"
        if name in _OWNED_ANNOTATIONS or name.startswith(_HEADER_PREFIX):
            raise _owned(where, "names an annotation the mapping writes from another field")
        if name.startswith("x-"):
            if not name.isascii():
                raise UnmappableMessage(
                    where, "an x- header whose name is not ASCII (it becomes a message "
                           "annotation, whose key is a symbol)")
            annotations[Symbol(name)] = value
        elif _is_simple(value):
            application[name] = value
        elif name == _CC_HEADER and type(value) is list:
            annotations[Symbol(_CC_ANNOTATION)] = value
        elif name.isascii():
            annotations[Symbol(_HEADER_PREFIX + name)] = value
        else:
            raise UnmappableMessage(
                where, f"a {_type_name(value)} under a name that is not ASCII (application "
                       "properties hold simple values; a message annotation's key is a symbol)")
    # an empty headers table and none differ in 0-9-1: an empty application-properties
    # section keeps the difference
    empty_table = table is not None and len(table) == 4
    application_properties = {} if empty_table else application or None

    return Message(
        header=None if _empty(header) else header,
        message_annotations=annotations,
        properties=None if _empty(props) else props,
        application_properties=application_properties,
        body=sections,
        footer=footer,
    )


def _read_encoded_body(body: bytes) -> tuple[list[Any], dict[Symbol | ULong, Any] | None]:
    """The body sections and footer of a body typed amqp-1.0."""
    try:
        m = decode_message(body)
    except DecodeError as exc:
        raise UnmappableMessage("body", f"typed {_AMQP10_TYPE!r} but not AMQP 1.0 body "
                                        f"sections: {exc}") from None
    for name in ("header", "delivery_annotations", "message_annotations", "properties",
                 "application_properties"):
        if getattr(m, name) is not None:
            raise UnmappableMessage(
                "body", f"typed {_AMQP10_TYPE!r} with a {name.replace('_', '-')} section "
                        "(the mapping writes body sections and footer only)")
    if len(m.body) == 1 and type(m.body[0]) is bytes:
        raise UnmappableMessage(
            "body", f"typed {_AMQP10_TYPE!r} holding one data section (the mapping writes "
                    "that as the body itself)")
    return m.body, m.footer


def _timestamp(value: int | None) -> Timestamp | None:
    if value is None:
        return None
    timestamp: Timestamp = Timestamp(value)
    return timestamp


def _empty(section: Header | Properties) -> bool:
    return all(getattr(section, f.name) is None for f in fields(section))


# -- AMQP 1.0 → AMQP 0-9-1 ------------------------------------------------------------------------


class _Writer:
    """The basic properties and headers of the 0-9-1 message being written."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}
        self.headers: dict[str, bytes] = {}
        self.sources: dict[str, str] = {}

    def header(self, name: str, typed_value: bytes, source: str) -> None:
        if name in self.headers:
            raise UnmappableMessage(
                source, f"becomes the header {name!r}, which {self.sources[name]} becomes too")
        self.headers[name] = typed_value
        self.sources[name] = source

    def properties(self, empty_table: bool) -> bytes:
        if self.headers or empty_table:
            self.values["headers"] = longstr(b"".join(
                shortstr(name.encode()) + value for name, value in self.headers.items()))
        return join_properties([self.values.get(name) for name in PROPERTY_NAMES])


def _check(value: Any, kind: type | tuple[type, ...], where: str, expected: str) -> None:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise UnmappableMessage(where, f"a {_type_name(value)} {_short(value)}, where AMQP 1.0 "
                                       f"has {expected}")


def _check_range(value: Any, bounded: type[UByte] | type[UInt] | type[Timestamp], where: str,
                 expected: str) -> int:
    _check(value, int, where, expected)
    if not bounded.LOW <= value <= bounded.HIGH:
        raise UnmappableMessage(where, f"{value} is out of range for {expected}")
    return int(value)


def _write_header(header: Header, out: _Writer) -> None:
    if header.durable is not None:
        _check(header.durable, bool, "header.durable", "a boolean")
        out.values["delivery_mode"] = b"\x02" if header.durable else b"\x01"
    if header.priority is not None:
        out.values["priority"] = bytes((_check_range(header.priority, UByte, "header.priority",
                                                     "a ubyte"),))
    if header.ttl is not None:
        ttl = _check_range(header.ttl, UInt, "header.ttl", "a uint (milliseconds)")
        out.values["expiration"] = shortstr(str(ttl).encode())
    if header.first_acquirer is not None:
        _check(header.first_acquirer, bool, "header.first-acquirer", "a boolean")
        out.header(_FIRST_ACQUIRER, _write_value(header.first_acquirer, "", 0),
                   "header.first-acquirer")
    if header.delivery_count is not None:
        count = _check_range(header.delivery_count, UInt, "header.delivery-count", "a uint")
        out.header(_DELIVERY_COUNT, b"i" + _U32.pack(count), "header.delivery-count")


def _write_id(value: Any, field: str, prop: str, id_header: str, type_header: str,
              out: _Writer) -> None:
    where = f"properties.{field}"
    kind = type(value)
    if kind is str:
        encoded = _utf8(value, where)
        if _fits_property_id(value):
            out.values[prop] = shortstr(encoded)
        else:
            out.header(id_header, b"S" + longstr(encoded), where)
    elif kind is uuid.UUID:
        out.values[prop] = shortstr((_URN_UUID + str(value)).encode())
    elif kind is ULong or (kind is int and ULong.LOW <= value <= ULong.HIGH):
        # a plain int is the ulong form, as the codec encodes it
        out.values[prop] = shortstr(str(int(value)).encode())
        out.header(type_header, b"S" + longstr(_ULONG_ID.encode()), where)
    elif kind is bytes:
        out.header(id_header, b"x" + longstr(value), where)
    else:
        raise UnmappableMessage(
            where, f"a {_type_name(value)} {_short(value)} (an id is a ulong, uuid, binary or "
                   "string)")


def _write_short_field(value: Any, kind: type, field: str, prop: str, header: str,
                       out: _Writer) -> None:
    """A field carried by a short-string property, or, when longer than one, by ``header``."""
    where = f"properties.{field}"
    if type(value) is not kind:
        raise UnmappableMessage(where, f"a {_type_name(value)} {_short(value)}, where AMQP 1.0 "
                                       f"has a {_TYPE_NAMES[kind]}")
    encoded: bytes
    if isinstance(value, bytes):
        encoded = value
    elif isinstance(value, str):
        if kind is Symbol and not value.isascii():
            raise UnmappableMessage(where, f"symbol {_short(value)} is not ASCII")
        encoded = _utf8(value, where)
    if _fits_shortstr(encoded):
        out.values[prop] = shortstr(encoded)
    else:
        out.header(header, (b"x" if kind is bytes else b"S") + longstr(encoded), where)


def _write_string_header(value: Any, field: str, header: str, out: _Writer) -> None:
    where = f"properties.{field}"
    if type(value) is not str:
        raise UnmappableMessage(where, f"a {_type_name(value)} {_short(value)}, where AMQP 1.0 "
                                       "has a string")
    out.header(header, b"S" + longstr(_utf8(value, where)), where)


def _write_properties(props: Properties, out: _Writer) -> None:
    if props.message_id is not None:
        _write_id(props.message_id, "message-id", "message_id", _MESSAGE_ID, _MESSAGE_ID_TYPE, out)
    if props.correlation_id is not None:
        _write_id(props.correlation_id, "correlation-id", "correlation_id", _CORRELATION_ID,
                  _CORRELATION_ID_TYPE, out)
    if props.user_id is not None:
        _write_short_field(props.user_id, bytes, "user-id", "user_id", _USER_ID, out)
    if props.to is not None:
        _write_string_header(props.to, "to", _TO, out)
    if props.subject is not None:
        _write_string_header(props.subject, "subject", _SUBJECT, out)
    if props.reply_to is not None:
        _write_short_field(props.reply_to, str, "reply-to", "reply_to", _REPLY_TO, out)
    if props.content_type is not None:
        _write_short_field(props.content_type, Symbol, "content-type", "content_type",
                           _CONTENT_TYPE, out)
    if props.content_encoding is not None:
        _write_short_field(props.content_encoding, Symbol, "content-encoding",
                           "content_encoding", _CONTENT_ENCODING, out)
    if props.absolute_expiry_time is not None:
        expiry = _check_range(props.absolute_expiry_time, Timestamp,
                              "properties.absolute-expiry-time", "a timestamp")
        out.header(_ABSOLUTE_EXPIRY_TIME, b"l" + _I64.pack(expiry),
                   "properties.absolute-expiry-time")
    if props.creation_time is not None:
        created = _check_range(props.creation_time, Timestamp, "properties.creation-time",
                               "a timestamp")
        if created >= 0:
            out.values["timestamp"] = _U64.pack(created // _MS_PER_S)
        if created < 0 or created % _MS_PER_S:
            out.header(_CREATION_TIME, b"l" + _I64.pack(created), "properties.creation-time")
    if props.group_id is not None:
        _write_short_field(props.group_id, str, "group-id", "app_id", _GROUP_ID, out)
    if props.group_sequence is not None:
        sequence = _check_range(props.group_sequence, UInt, "properties.group-sequence",
                                "a sequence-no (uint)")
        out.header(_GROUP_SEQUENCE, b"i" + _U32.pack(sequence), "properties.group-sequence")
    if props.reply_to_group_id is not None:
        _write_string_header(props.reply_to_group_id, "reply-to-group-id", _REPLY_TO_GROUP_ID,
                             out)


def _short_text_annotation(value: Any, where: str, role: str) -> bytes:
    if type(value) is not str:
        raise _owned(where, f"holds a {_type_name(value)} {_short(value)}, where the mapping "
                            f"reads the {role} as a string")
    encoded = _utf8(value, where)
    if not _fits_shortstr(encoded):
        raise UnmappableMessage(where, f"{_short(value)} is longer than the {role} can be "
                                       "(255 bytes)")
    return encoded


def _write_annotations(annotations: dict[Any, Any], encoded: bool, out: _Writer) -> bytes | None:
    """The x- annotations as headers and properties; the routing key (None without one)."""
    routing_key = None
    for key, value in annotations.items():
        where = f"message-annotations[{_short(key)}]"
        if type(key) is not Symbol or not key.startswith("x-"):
            raise UnmappableMessage(
                where, "a key that is not an x- symbol (those keys are reserved by AMQP 1.0; "
                       "0-9-1 has no place for them)")
        if not key.isascii():
            raise UnmappableMessage(where, "a symbol that is not ASCII")
        name = str(key)
        if name == _ROUTING_KEY:
            routing_key = _short_text_annotation(value, where, "routing key")
        elif name == _EXCHANGE:
            _short_text_annotation(value, where, "exchange")
        elif name == _TYPE:
            if encoded:
                raise UnmappableMessage(
                    where, f"beside a body that is not one data section (the type property "
                           f"is then {_AMQP10_TYPE!r})")
            type_ = _short_text_annotation(value, where, "type property")
            if type_ == _AMQP10_TYPE.encode():
                raise UnmappableMessage(
                    where, f"{_AMQP10_TYPE!r} beside one data section (the type marks a body "
                           "of encoded sections)")
            out.values["type"] = shortstr(type_)
        elif name == _CLUSTER_ID:
            out.values["cluster_id"] = shortstr(
                _short_text_annotation(value, where, "cluster_id property"))
        elif name == _CC_ANNOTATION:
            if type(value) is not list:
                raise _owned(where, f"holds a {_type_name(value)}, where the mapping reads the "
                                    "CC header's list")
            out.header(_CC_HEADER, _write_value(value, where, 0), where)
        elif name.startswith(_HEADER_PREFIX):
            header = name[len(_HEADER_PREFIX):]
            if (header.startswith("x-") or not _fits_shortstr(header.encode())
                    or _is_simple(value) or (header == _CC_HEADER and type(value) is list)):
                raise _owned(where, "is not a header's list or map that application properties "
                                    "could not hold")
            out.header(header, _write_value(value, where, 0), where)
        elif name in _OWNED_HEADERS:
            raise _owned(where, "names a header the mapping writes for another field")
        else:
            if not _fits_shortstr(key.encode()):
                raise UnmappableMessage(where, "a key longer than a header name (255 bytes)")
            out.header(name, _write_value(value, where, 0), where)
    return routing_key


def _write_application_properties(application: dict[Any, Any], out: _Writer) -> None:
    for key, value in application.items():
        where = f"application-properties[{_short(key)}]"
        if type(key) is not str:
            raise UnmappableMessage(where, f"a {_type_name(key)} key (the keys are strings)")
        if key.startswith("x-"):
            raise UnmappableMessage(
                where, "a key that begins with x- (such a header becomes a message annotation)")
        if not _fits_shortstr(_utf8(key, where)):
            raise UnmappableMessage(where, "a key longer than a header name (255 bytes)")
        if not _is_simple(value):
            raise UnmappableMessage(
                where, f"a {_type_name(value)} (application properties hold simple values)")
        out.header(key, _write_value(value, where, 0), where)


def _check_footer(footer: dict[Any, Any]) -> None:
    for key in footer:
        if type(key) not in (Symbol, ULong):
            raise UnmappableMessage(
                f"footer[{_short(key)}]", f"a {_type_name(key)} key (the keys are symbols or "
                                          "ulongs)")


def _write_body(message: Message) -> tuple[bytes, bool]:
    """The 0-9-1 body: one data section's bytes, or the body sections and footer encoded (then
    True: the type property says so)."""
    body = message.body
    if len(body) == 1 and isinstance(body[0], (bytes, bytearray, memoryview)):
        return bytes(body[0]), False
    for section in body:
        if not isinstance(section, (bytes, bytearray, memoryview, AmqpSequence, AmqpValue)):
            raise UnmappableMessage("body", f"a section that is a {_type_name(section)}")
    encoded = _encode_section(Message(body=body), "body")
    if message.footer is not None:
        encoded += _encode_section(Message(footer=message.footer), "footer")
    return encoded, True


def _encode_section(message: Message, where: str) -> bytes:
    try:
        return encode_message(message)
    except _ENCODE_FAULTS as exc:
        raise UnmappableMessage(where, f"cannot be encoded in AMQP 1.0: {exc}") from None


def to_amqp091(message: Message) -> Amqp091Message:
    """The AMQP 0-9-1 message for an AMQP 1.0 one (delivery annotations are for the receiving
    peer and are not carried).

    :raises UnmappableMessage: naming what has no faithful AMQP 0-9-1 counterpart
    """
    try:
        message = complete(message)
    except DecodeError as exc:
        raise UnmappableMessage("bare message", f"is not valid AMQP 1.0: {exc}") from None
    if message.footer is not None:
        _check_footer(message.footer)
    body, encoded = _write_body(message)
    out = _Writer()
    if encoded:
        out.values["type"] = shortstr(_AMQP10_TYPE.encode())
    if message.header is not None:
        _write_header(message.header, out)
    if message.properties is not None:
        _write_properties(message.properties, out)
    if message.application_properties is not None:
        _write_application_properties(message.application_properties, out)
    routing_key = None
    if message.message_annotations is not None:
        routing_key = _write_annotations(message.message_annotations, encoded, out)
    if message.footer is not None and not encoded:
        out.header(_FOOTER, _write_map(message.footer, "footer", 0), "footer")
    properties = out.properties(empty_table=message.application_properties is not None)
    return Amqp091Message(routing_key, properties, body)
