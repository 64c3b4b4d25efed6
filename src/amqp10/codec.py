"""AMQP 1.0's type system on the wire (AMQP 1.0 part 1): :func:`encode_value` and
:func:`decode_value`.

Python values are those of :mod:`pumpd.amqp10.values`. Decoding keeps the exact AMQP type (a
``smalluint`` comes back as :class:`UInt`, a ``sym8`` as :class:`Symbol`), so that encoding a
decoded value gives the same type and value. Encoding is canonical: the narrowest form of a type
that holds the value (``uint0``/``smalluint``/``uint``, ``str8``/``str32``, ``list0``/``list8``/
``list32`` ...), so the bytes may be narrower than those received, never of another type.

An :class:`Array`'s ``code`` names the elements' type by one code per type (bool 0x56, uint 0x70,
ulong 0x80, int 0x71, long 0x81, binary 0xA0, string 0xA1, symbol 0xA3, list 0xC0, map 0xC1,
array 0xE0, the fixed-width types their one code): any code of that type is accepted when
encoding, and decoding gives that one code, so a decoded array compares equal to the one built by
hand and to itself re-encoded.

The decoder trusts nothing it reads: every size and count is checked against the bytes that are
there (within ``[pos, end)``) before anything is read or allocated; a compound's size must match
its elements exactly; nesting is bounded by :data:`MAX_DEPTH`. Every fault is a
:class:`DecodeError` naming the position and the format code.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

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

__all__ = [
    "ARRAY_TYPE_CODE", "MAX_DEPTH", "MAX_ZERO_WIDTH_ELEMENTS", "DecodeError", "EncodeError",
    "decode_value", "encode_binary", "encode_boolean", "encode_string", "encode_symbol",
    "encode_timestamp", "encode_ubyte", "encode_uint", "encode_ulong", "encode_ushort",
    "encode_value",
]

#: how deeply compounds (lists, maps, arrays, described values) may nest in a decoded value
MAX_DEPTH = 64
#: most elements an array of a zero-width element type (null, true, false, uint0, ulong0, list0)
#: may declare: its elements take no bytes, so the buffer's size does not bound their number
MAX_ZERO_WIDTH_ELEMENTS = 1 << 16


class DecodeError(ValueError):
    """Bytes that are not a valid AMQP 1.0 encoding. ``position`` is the offset in the buffer of
    the fault, ``code`` the format code being decoded there (None: before one was read)."""

    def __init__(self, message: str, position: int, code: int | None = None) -> None:
        where = f"at position {position}"
        if code is not None:
            where += f" (format code 0x{code:02x})"
        super().__init__(f"{message} {where}")
        self.position = position
        self.code = code


class EncodeError(ValueError):
    """A Python value that has no AMQP 1.0 encoding (a type not in :mod:`.values`, an int beyond
    a long, a symbol that is not ASCII, an array element not of the array's type)."""


# --------------------------------------------------------------------------------------------
# Encoding

_B = struct.Struct(">B")
_b = struct.Struct(">b")
_H = struct.Struct(">H")
_h = struct.Struct(">h")
_I = struct.Struct(">I")
_i = struct.Struct(">i")
_Q = struct.Struct(">Q")
_q = struct.Struct(">q")
_f = struct.Struct(">f")
_d = struct.Struct(">d")
_BB = struct.Struct(">BB")
_II = struct.Struct(">II")
_BBB = struct.Struct(">BBB")
_BII = struct.Struct(">BII")
_BI = struct.Struct(">BI")
_Bb = struct.Struct(">Bb")
_BH = struct.Struct(">BH")
_Bh = struct.Struct(">Bh")
_Bi = struct.Struct(">Bi")
_BQ = struct.Struct(">BQ")
_Bq = struct.Struct(">Bq")
_Bf = struct.Struct(">Bf")
_Bd = struct.Struct(">Bd")

_LONG_LOW, _LONG_HIGH = -(1 << 63), (1 << 63) - 1


def _enc_null(v: Any) -> bytes:
    return b"\x40"


def _enc_bool(v: Any) -> bytes:
    return b"\x41" if v else b"\x42"


def _enc_ubyte(v: Any) -> bytes:
    return _BB.pack(0x50, v)


def _enc_ushort(v: Any) -> bytes:
    return _BH.pack(0x60, v)


def _enc_uint(v: Any) -> bytes:
    if v == 0:
        return b"\x43"
    if v < 256:
        return _BB.pack(0x52, v)
    return _BI.pack(0x70, v)


def _enc_ulong(v: Any) -> bytes:
    if v == 0:
        return b"\x44"
    if v < 256:
        return _BB.pack(0x53, v)
    return _BQ.pack(0x80, v)


def _enc_byte(v: Any) -> bytes:
    return _Bb.pack(0x51, v)


def _enc_short(v: Any) -> bytes:
    return _Bh.pack(0x61, v)


def _enc_int(v: Any) -> bytes:
    if -128 <= v <= 127:
        return _Bb.pack(0x54, v)
    return _Bi.pack(0x71, v)


def _enc_long(v: Any) -> bytes:
    if -128 <= v <= 127:
        return _Bb.pack(0x55, v)
    if not _LONG_LOW <= v <= _LONG_HIGH:
        raise EncodeError(f"int {v} is beyond an AMQP long (signed 64 bits): give it a type "
                          "(ULong) or make it smaller")
    return _Bq.pack(0x81, v)


def _enc_timestamp(v: Any) -> bytes:
    return _Bq.pack(0x83, v)


def _enc_float(v: Any) -> bytes:
    try:
        return _Bf.pack(0x72, v)
    except OverflowError:
        raise EncodeError(f"Float {v!r} is beyond a 32-bit float") from None


def _enc_double(v: Any) -> bytes:
    return _Bd.pack(0x82, v)


def _enc_decimal32(v: Decimal32) -> bytes:
    if len(v.raw) != 4:
        raise EncodeError(f"a Decimal32 is 4 bytes, not {len(v.raw)}")
    return b"\x74" + v.raw


def _enc_decimal64(v: Decimal64) -> bytes:
    if len(v.raw) != 8:
        raise EncodeError(f"a Decimal64 is 8 bytes, not {len(v.raw)}")
    return b"\x84" + v.raw


def _enc_decimal128(v: Decimal128) -> bytes:
    if len(v.raw) != 16:
        raise EncodeError(f"a Decimal128 is 16 bytes, not {len(v.raw)}")
    return b"\x94" + v.raw


def _enc_char(v: Any) -> bytes:
    cp = ord(v)
    if 0xD800 <= cp <= 0xDFFF:
        raise EncodeError(f"char {v!r} is a surrogate, not a unicode scalar value")
    return _BI.pack(0x73, cp)


def _enc_uuid(v: uuid.UUID) -> bytes:
    return b"\x98" + v.bytes


def _enc_binary(v: Any) -> bytes:
    n = len(v)
    if n < 256:
        return _BB.pack(0xA0, n) + bytes(v)
    return _BI.pack(0xB0, n) + bytes(v)


def _enc_string(v: str) -> bytes:
    try:
        data = v.encode("utf-8")
    except UnicodeEncodeError as e:
        raise EncodeError(f"string {v!r} is not valid unicode ({e.reason})") from None
    n = len(data)
    if n < 256:
        return _BB.pack(0xA1, n) + data
    return _BI.pack(0xB1, n) + data


def _enc_symbol(v: str) -> bytes:
    try:
        data = v.encode("ascii")
    except UnicodeEncodeError:
        raise EncodeError(f"symbol {v!r} is not ASCII") from None
    n = len(data)
    if n < 256:
        return _BB.pack(0xA3, n) + data
    return _BI.pack(0xB3, n) + data


def _enc_list(v: Any) -> bytes:
    n = len(v)
    if n == 0:
        return b"\x45"
    body = b"".join([encode_value(x) for x in v])
    size = len(body) + 1
    if size < 256 and n < 256:
        return _BBB.pack(0xC0, size, n) + body
    return _BII.pack(0xD0, size + 3, n) + body


def _enc_map(v: Any) -> bytes:
    parts = []
    for k, x in v.items():
        parts.append(encode_value(k))
        parts.append(encode_value(x))
    body = b"".join(parts)
    n = len(parts)
    size = len(body) + 1
    if size < 256 and n < 256:
        return _BBB.pack(0xC1, size, n) + body
    return _BII.pack(0xD1, size + 3, n) + body


def _enc_described(v: Any) -> bytes:
    return b"\x00" + encode_value(v.descriptor) + encode_value(v.value)


def _enc_array(v: Any) -> bytes:
    constructor, elements = _array_body(v)
    count = len(v.items)
    size = len(constructor) + len(elements) + 1
    if size < 256 and count < 256:
        return _BBB.pack(0xE0, size, count) + constructor + elements
    return _BII.pack(0xF0, size + 3, count) + constructor + elements


_ENCODERS: dict[type, Callable[[Any], bytes]] = {
    type(None): _enc_null,
    bool: _enc_bool,
    int: _enc_long,
    float: _enc_double,
    str: _enc_string,
    bytes: _enc_binary,
    bytearray: _enc_binary,
    memoryview: _enc_binary,
    uuid.UUID: _enc_uuid,
    list: _enc_list,
    tuple: _enc_list,
    dict: _enc_map,
    UByte: _enc_ubyte,
    UShort: _enc_ushort,
    UInt: _enc_uint,
    ULong: _enc_ulong,
    Byte: _enc_byte,
    Short: _enc_short,
    Int: _enc_int,
    Timestamp: _enc_timestamp,
    Float: _enc_float,
    Char: _enc_char,
    Symbol: _enc_symbol,
    Decimal32: _enc_decimal32,
    Decimal64: _enc_decimal64,
    Decimal128: _enc_decimal128,
    Described: _enc_described,
    Array: _enc_array,
}


def _encoder_for(t: type) -> Callable[[Any], bytes]:
    # a subclass (an IntEnum, a str subclass) encodes as the nearest known type it derives from;
    # the answer is remembered for the next value of that type
    for base in t.__mro__[1:]:
        enc = _ENCODERS.get(base)
        if enc is not None:
            _ENCODERS[t] = enc
            return enc
    raise EncodeError(f"{t.__name__} has no AMQP 1.0 encoding (the types are those of "
                      "pumpd.amqp10.values)")


def encode_value(v: Any) -> bytes:
    """``v`` as one AMQP 1.0 value, canonically (see the module docstring)."""
    enc = _ENCODERS.get(type(v))
    if enc is None:
        enc = _encoder_for(type(v))
    return enc(v)


# ---- one value as a given AMQP type (a field of a known type: a plain int as a uint ...)

def _ranged(v: int, low: int, high: int, name: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise EncodeError(f"{v!r} is not an integer (a {name})")
    if not low <= v <= high:
        raise EncodeError(f"{v} is out of range for a {name} ({low}..{high})")
    return v


def encode_boolean(v: bool) -> bytes:
    return b"\x41" if v else b"\x42"


def encode_ubyte(v: int) -> bytes:
    return _enc_ubyte(_ranged(v, 0, 0xFF, "ubyte"))


def encode_ushort(v: int) -> bytes:
    return _enc_ushort(_ranged(v, 0, 0xFFFF, "ushort"))


def encode_uint(v: int) -> bytes:
    return _enc_uint(_ranged(v, 0, 0xFFFF_FFFF, "uint"))


def encode_ulong(v: int) -> bytes:
    return _enc_ulong(_ranged(v, 0, 0xFFFF_FFFF_FFFF_FFFF, "ulong"))


def encode_timestamp(v: int) -> bytes:
    return _enc_timestamp(_ranged(v, _LONG_LOW, _LONG_HIGH, "timestamp"))


def encode_string(v: str) -> bytes:
    return _enc_string(v)


def encode_symbol(v: str) -> bytes:
    return _enc_symbol(v)


def encode_binary(v: bytes | bytearray | memoryview) -> bytes:
    return _enc_binary(v)


# ---- arrays: one constructor, then each element's bytes without it

def _fixed_elements(fmt: str) -> Callable[[tuple[Any, ...]], tuple[int, bytes]]:
    def elements(items: tuple[Any, ...]) -> tuple[int, bytes]:
        return 0, struct.pack(f">{len(items)}{fmt}", *items)
    return elements


def _narrow_elements(wide_code: int, wide_fmt: str, narrow_code: int, narrow_fmt: str,
                     low: int, high: int) -> Callable[[tuple[Any, ...]], tuple[int, bytes]]:
    def elements(items: tuple[Any, ...]) -> tuple[int, bytes]:
        if all(low <= x <= high for x in items):
            return narrow_code, struct.pack(f">{len(items)}{narrow_fmt}", *items)
        return wide_code, struct.pack(f">{len(items)}{wide_fmt}", *items)
    return elements


def _bool_elements(items: tuple[Any, ...]) -> tuple[int, bytes]:
    return 0x56, bytes([1 if x else 0 for x in items])


def _float_elements(items: tuple[Any, ...]) -> tuple[int, bytes]:
    try:
        return 0x72, struct.pack(f">{len(items)}f", *items)
    except OverflowError:
        raise EncodeError("a Float in an array is beyond a 32-bit float") from None


def _decimal_elements(code: int, width: int) -> Callable[[tuple[Any, ...]], tuple[int, bytes]]:
    def elements(items: tuple[Any, ...]) -> tuple[int, bytes]:
        for x in items:
            if len(x.raw) != width:
                raise EncodeError(f"an array of decimal{width * 8} has an element of "
                                  f"{len(x.raw)} bytes")
        return code, b"".join([x.raw for x in items])
    return elements


def _char_elements(items: tuple[Any, ...]) -> tuple[int, bytes]:
    return 0x73, struct.pack(f">{len(items)}I", *[ord(x) for x in items])


def _uuid_elements(items: tuple[Any, ...]) -> tuple[int, bytes]:
    return 0x98, b"".join([x.bytes for x in items])


def _variable_elements(narrow: int, wide: int,
                       to_bytes: Callable[[Any], bytes]) -> Callable[[tuple[Any, ...]],
                                                                      tuple[int, bytes]]:
    def elements(items: tuple[Any, ...]) -> tuple[int, bytes]:
        datas = [to_bytes(x) for x in items]
        if all(len(d) < 256 for d in datas):
            return narrow, b"".join([_B.pack(len(d)) + d for d in datas])
        return wide, b"".join([_I.pack(len(d)) + d for d in datas])
    return elements


def _utf8(x: Any) -> bytes:
    try:
        return str(x).encode("utf-8")
    except UnicodeEncodeError as e:
        raise EncodeError(f"string {x!r} is not valid unicode ({e.reason})") from None


def _ascii(x: Any) -> bytes:
    try:
        return str(x).encode("ascii")
    except UnicodeEncodeError:
        raise EncodeError(f"symbol {x!r} is not ASCII") from None


def _compound_elements(narrow: int, wide: int,
                       bodies: Callable[[Any], tuple[int, bytes]]) -> Callable[[tuple[Any, ...]],
                                                                                tuple[int, bytes]]:
    # a list, map or array element is its compound body: size, count, then the contents
    def elements(items: tuple[Any, ...]) -> tuple[int, bytes]:
        parts = [bodies(x) for x in items]
        if all(count < 256 and len(body) + 1 < 256 for count, body in parts):
            return narrow, b"".join([_BB.pack(len(b) + 1, c) + b for c, b in parts])
        return wide, b"".join([_II.pack(len(b) + 4, c) + b for c, b in parts])
    return elements


def _list_contents(x: Any) -> tuple[int, bytes]:
    if not isinstance(x, list | tuple):
        raise EncodeError(f"an array of lists has an element {x!r}")
    return len(x), b"".join([encode_value(e) for e in x])


def _map_contents(x: Any) -> tuple[int, bytes]:
    if not isinstance(x, dict):
        raise EncodeError(f"an array of maps has an element {x!r}")
    parts = []
    for k, e in x.items():
        parts.append(encode_value(k))
        parts.append(encode_value(e))
    return len(parts), b"".join(parts)


def _array_contents(x: Any) -> tuple[int, bytes]:
    if not isinstance(x, Array):
        raise EncodeError(f"an array of arrays has an element {x!r}")
    constructor, elements = _array_body(x)
    return len(x.items), constructor + elements


#: an element code as received -> the one code naming that type in an :class:`Array`
ARRAY_TYPE_CODE: dict[int, int] = {
    0x40: 0x40,
    0x41: 0x56, 0x42: 0x56, 0x56: 0x56,
    0x50: 0x50, 0x60: 0x60,
    0x43: 0x70, 0x52: 0x70, 0x70: 0x70,
    0x44: 0x80, 0x53: 0x80, 0x80: 0x80,
    0x51: 0x51, 0x61: 0x61,
    0x54: 0x71, 0x71: 0x71,
    0x55: 0x81, 0x81: 0x81,
    0x72: 0x72, 0x82: 0x82, 0x74: 0x74, 0x84: 0x84, 0x94: 0x94,
    0x73: 0x73, 0x83: 0x83, 0x98: 0x98,
    0xA0: 0xA0, 0xB0: 0xA0,
    0xA1: 0xA1, 0xB1: 0xA1,
    0xA3: 0xA3, 0xB3: 0xA3,
    0x45: 0xC0, 0xC0: 0xC0, 0xD0: 0xC0,
    0xC1: 0xC1, 0xD1: 0xC1,
    0xE0: 0xE0, 0xF0: 0xE0,
}

# type code -> items -> (wire element code, the elements' bytes); a wire code 0 means "the type
# code itself" (the fixed-width types have one form)
_ARRAY_ELEMENTS: dict[int, Callable[[tuple[Any, ...]], tuple[int, bytes]]] = {
    0x40: lambda items: (0x40, b""),
    0x56: _bool_elements,
    0x50: _fixed_elements("B"),
    0x60: _fixed_elements("H"),
    0x70: _narrow_elements(0x70, "I", 0x52, "B", 0, 255),
    0x80: _narrow_elements(0x80, "Q", 0x53, "B", 0, 255),
    0x51: _fixed_elements("b"),
    0x61: _fixed_elements("h"),
    0x71: _narrow_elements(0x71, "i", 0x54, "b", -128, 127),
    0x81: _narrow_elements(0x81, "q", 0x55, "b", -128, 127),
    0x72: _float_elements,
    0x82: _fixed_elements("d"),
    0x74: _decimal_elements(0x74, 4),
    0x84: _decimal_elements(0x84, 8),
    0x94: _decimal_elements(0x94, 16),
    0x73: _char_elements,
    0x83: _fixed_elements("q"),
    0x98: _uuid_elements,
    0xA0: _variable_elements(0xA0, 0xB0, bytes),
    0xA1: _variable_elements(0xA1, 0xB1, _utf8),
    0xA3: _variable_elements(0xA3, 0xB3, _ascii),
    0xC0: _compound_elements(0xC0, 0xD0, _list_contents),
    0xC1: _compound_elements(0xC1, 0xD1, _map_contents),
    0xE0: _compound_elements(0xE0, 0xF0, _array_contents),
}


def _array_body(a: Array) -> tuple[bytes, bytes]:
    """An array's element constructor (descriptor included) and its elements' bytes."""
    type_code = ARRAY_TYPE_CODE.get(a.code)
    if type_code is None:
        raise EncodeError(f"0x{a.code:02x} is not an AMQP type's format code (an Array's code)")
    try:
        wire, elements = _ARRAY_ELEMENTS[type_code](tuple(a.items))
    except (struct.error, TypeError, AttributeError, ValueError) as e:
        if isinstance(e, EncodeError):
            raise
        raise EncodeError(f"an array of type 0x{type_code:02x} has an element that is not of "
                          f"its type ({e})") from None
    constructor = _B.pack(wire or type_code)
    if a.descriptor is not None:
        constructor = b"\x00" + encode_value(a.descriptor) + constructor
    return constructor, elements


# --------------------------------------------------------------------------------------------
# Decoding
#
# A decoder is called with the buffer, the position after its format code, the end of the
# region it may read, and the nesting depth; it returns the value and the position after it.

_Buf = bytes | memoryview
_Decoder = Callable[[_Buf, int, int, int], tuple[Any, int]]

_new_int = int.__new__  # decoded widths are in range by construction: skip the range check
_new_float = float.__new__
_new_str = str.__new__


def _need(buf: _Buf, pos: int, n: int, end: int, code: int, what: str) -> None:
    if pos + n > end:
        raise DecodeError(f"{what} needs {n} bytes, {max(end - pos, 0)} left", pos, code)


def _const(value: Any) -> _Decoder:
    def dec(buf: _Buf, pos: int, end: int, depth: int) -> tuple[Any, int]:
        return value, pos
    return dec


def _fixed(code: int, s: struct.Struct, make: Callable[[Any], Any], name: str) -> _Decoder:
    n = s.size
    unpack = s.unpack_from

    def dec(buf: _Buf, pos: int, end: int, depth: int) -> tuple[Any, int]:
        if pos + n > end:
            raise DecodeError(f"{name} needs {n} bytes, {max(end - pos, 0)} left", pos, code)
        return make(unpack(buf, pos)[0]), pos + n
    return dec


def _typed_int(cls: type) -> Callable[[int], Any]:
    return lambda v: _new_int(cls, v)


def _dec_bool(buf: _Buf, pos: int, end: int, depth: int) -> tuple[Any, int]:
    if pos >= end:
        raise DecodeError("boolean needs 1 byte, 0 left", pos, 0x56)
    b = buf[pos]
    if b > 1:
        raise DecodeError(f"boolean byte is 0x{b:02x}, not 0x00 or 0x01", pos, 0x56)
    return b == 1, pos + 1


def _dec_char(buf: _Buf, pos: int, end: int, depth: int) -> tuple[Any, int]:
    _need(buf, pos, 4, end, 0x73, "char")
    cp = _I.unpack_from(buf, pos)[0]
    if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
        raise DecodeError(f"char 0x{cp:x} is not a unicode scalar value", pos, 0x73)
    return _new_str(Char, chr(cp)), pos + 4


def _raw(code: int, n: int, cls: Callable[[bytes], Any], name: str) -> _Decoder:
    def dec(buf: _Buf, pos: int, end: int, depth: int) -> tuple[Any, int]:
        if pos + n > end:
            raise DecodeError(f"{name} needs {n} bytes, {max(end - pos, 0)} left", pos, code)
        return cls(bytes(buf[pos:pos + n])), pos + n
    return dec


def _variable(code: int, wide: bool, make: Callable[[bytes, int], Any], name: str) -> _Decoder:
    width = 4 if wide else 1

    def dec(buf: _Buf, pos: int, end: int, depth: int) -> tuple[Any, int]:
        if pos + width > end:
            raise DecodeError(f"{name} size needs {width} bytes, {max(end - pos, 0)} left",
                              pos, code)
        n = _I.unpack_from(buf, pos)[0] if wide else buf[pos]
        start = pos + width
        if start + n > end:
            raise DecodeError(f"{name} of {n} bytes, {end - start} left", pos, code)
        return make(bytes(buf[start:start + n]), pos), start + n
    return dec


def _make_binary(data: bytes, pos: int) -> Any:
    return data


def _make_string(code: int) -> Callable[[bytes, int], Any]:
    def make(data: bytes, pos: int) -> Any:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(f"string is not valid utf-8 ({e.reason} at byte {e.start})",
                              pos, code) from None
    return make


def _make_symbol(code: int) -> Callable[[bytes, int], Any]:
    def make(data: bytes, pos: int) -> Any:
        try:
            return _new_str(Symbol, data.decode("ascii"))
        except UnicodeDecodeError as e:
            raise DecodeError(f"symbol is not ASCII (byte 0x{data[e.start]:02x} at {e.start})",
                              pos, code) from None
    return make


def _compound_header(buf: _Buf, pos: int, end: int, code: int, wide: bool,
                     name: str) -> tuple[int, int, int]:
    """Size and count of a list, map or array: (count, first content position, end of it)."""
    width = 4 if wide else 1
    if pos + 2 * width > end:
        raise DecodeError(f"{name} header needs {2 * width} bytes, {max(end - pos, 0)} left",
                          pos, code)
    if wide:
        size, count = _II.unpack_from(buf, pos)
    else:
        size, count = buf[pos], buf[pos + 1]
    if size < width:
        raise DecodeError(f"{name} size {size} is less than its count's {width} bytes", pos, code)
    stop = pos + width + size
    if stop > end:
        raise DecodeError(f"{name} of {size} bytes, {end - pos - width} left", pos, code)
    return count, pos + 2 * width, stop


def _list(code: int, wide: bool) -> _Decoder:
    name = "list32" if wide else "list8"

    def dec(buf: _Buf, pos: int, end: int, depth: int) -> tuple[Any, int]:
        count, p, stop = _compound_header(buf, pos, end, code, wide, name)
        if count > stop - p:
            raise DecodeError(f"{name} claims {count} elements in {stop - p} bytes", pos, code)
        if depth >= MAX_DEPTH:
            raise DecodeError(f"nesting deeper than {MAX_DEPTH}", pos, code)
        out = []
        d = depth + 1
        for _ in range(count):
            if p >= stop:
                raise DecodeError(f"{name} ends before its {count} elements", p, code)
            c = buf[p]
            fn = _DECODERS.get(c)
            if fn is None:
                raise DecodeError("unknown format code", p, c)
            v, p = fn(buf, p + 1, stop, d)
            out.append(v)
        if p != stop:
            raise DecodeError(f"{name} of {count} elements ends at {p}, its size says {stop}",
                              pos, code)
        return out, p
    return dec


def _map(code: int, wide: bool) -> _Decoder:
    name = "map32" if wide else "map8"

    def dec(buf: _Buf, pos: int, end: int, depth: int) -> tuple[Any, int]:
        count, p, stop = _compound_header(buf, pos, end, code, wide, name)
        if count % 2:
            raise DecodeError(f"{name} has an odd count {count} (keys and values pair up)",
                              pos, code)
        if count > stop - p:
            raise DecodeError(f"{name} claims {count} elements in {stop - p} bytes", pos, code)
        if depth >= MAX_DEPTH:
            raise DecodeError(f"nesting deeper than {MAX_DEPTH}", pos, code)
        out: dict[Any, Any] = {}
        d = depth + 1
        for _ in range(count // 2):
            kpos = p
            k, p = _decode_in(buf, p, stop, d, name)
            v, p = _decode_in(buf, p, stop, d, name)
            try:
                if k in out:
                    first = next(k2 for k2 in out if k2 == k)
                    if type(first) is type(k):
                        raise DecodeError(f"{name} repeats the key {k!r}", kpos)
                    raise DecodeError(f"{name} keys {first!r} and {k!r} are one key in "
                                      "Python", kpos)
            except TypeError:
                raise DecodeError(f"{name} key of type {type(k).__name__} cannot be a Python "
                                  "dict key", kpos) from None
            out[k] = v
        if p != stop:
            raise DecodeError(f"{name} of {count} elements ends at {p}, its size says {stop}",
                              pos, code)
        return out, p
    return dec


def _decode_in(buf: _Buf, p: int, stop: int, depth: int, name: str) -> tuple[Any, int]:
    if p >= stop:
        raise DecodeError(f"{name} is missing: the bytes end", p)
    c = buf[p]
    fn = _DECODERS.get(c)
    if fn is None:
        raise DecodeError("unknown format code", p, c)
    return fn(buf, p + 1, stop, depth)


# the bytes an array element of each code takes at least (0: none at all)
_ELEMENT_WIDTH: dict[int, int] = {
    0x40: 0, 0x41: 0, 0x42: 0, 0x43: 0, 0x44: 0, 0x45: 0,
    0x56: 1, 0x50: 1, 0x52: 1, 0x53: 1, 0x51: 1, 0x54: 1, 0x55: 1,
    0x60: 2, 0x61: 2,
    0x70: 4, 0x71: 4, 0x72: 4, 0x73: 4, 0x74: 4,
    0x80: 8, 0x81: 8, 0x82: 8, 0x83: 8, 0x84: 8,
    0x94: 16, 0x98: 16,
    0xA0: 1, 0xA1: 1, 0xA3: 1, 0xB0: 4, 0xB1: 4, 0xB3: 4,
    0xC0: 2, 0xC1: 2, 0xE0: 2, 0xD0: 8, 0xD1: 8, 0xF0: 8,
}


def _array(code: int, wide: bool) -> _Decoder:
    name = "array32" if wide else "array8"

    def dec(buf: _Buf, pos: int, end: int, depth: int) -> tuple[Any, int]:
        count, p, stop = _compound_header(buf, pos, end, code, wide, name)
        if depth >= MAX_DEPTH:
            raise DecodeError(f"nesting deeper than {MAX_DEPTH}", pos, code)
        if p >= stop:
            raise DecodeError(f"{name} has no element constructor", p, code)
        descriptor = None
        ecode = buf[p]
        if ecode == 0x00:
            descriptor, p = _decode_in(buf, p + 1, stop, depth + 1, name + " descriptor")
            if p >= stop:
                raise DecodeError(f"{name} has no element constructor after its descriptor",
                                  p, code)
            ecode = buf[p]
            if ecode == 0x00:
                raise DecodeError(f"{name} element constructor is described twice", p, ecode)
        width = _ELEMENT_WIDTH.get(ecode)
        if width is None:
            raise DecodeError(f"{name} element format code is not a type's", p, ecode)
        p += 1
        if width == 0:
            if count > MAX_ZERO_WIDTH_ELEMENTS:
                raise DecodeError(f"{name} claims {count} elements of a zero-width type (at "
                                  f"most {MAX_ZERO_WIDTH_ELEMENTS})", pos, code)
        elif count * width > stop - p:
            raise DecodeError(f"{name} claims {count} elements of at least {width} bytes in "
                              f"{stop - p} bytes", pos, code)
        fn = _DECODERS[ecode]
        d = depth + 1
        items = []
        for _ in range(count):
            v, p = fn(buf, p, stop, d)
            items.append(v)
        if p != stop:
            raise DecodeError(f"{name} of {count} elements ends at {p}, its size says {stop}",
                              pos, code)
        return Array(ARRAY_TYPE_CODE[ecode], tuple(items), descriptor), p
    return dec


def _dec_described(buf: _Buf, pos: int, end: int, depth: int) -> tuple[Any, int]:
    if depth >= MAX_DEPTH:
        raise DecodeError(f"nesting deeper than {MAX_DEPTH}", pos - 1, 0x00)
    d = depth + 1
    descriptor, p = _decode_in(buf, pos, end, d, "described value's descriptor")
    value, p = _decode_in(buf, p, end, d, "described value")
    return Described(descriptor, value), p


def _dec_timestamp(v: int) -> Any:
    return _new_int(Timestamp, v)


def _dec_float(v: float) -> Any:
    return _new_float(Float, v)


_DECODERS: dict[int, _Decoder] = {
    0x00: _dec_described,
    0x40: _const(None),
    0x41: _const(True),
    0x42: _const(False),
    0x56: _dec_bool,
    0x50: _fixed(0x50, _B, _typed_int(UByte), "ubyte"),
    0x60: _fixed(0x60, _H, _typed_int(UShort), "ushort"),
    0x70: _fixed(0x70, _I, _typed_int(UInt), "uint"),
    0x52: _fixed(0x52, _B, _typed_int(UInt), "smalluint"),
    0x43: _const(_new_int(UInt, 0)),
    0x80: _fixed(0x80, _Q, _typed_int(ULong), "ulong"),
    0x53: _fixed(0x53, _B, _typed_int(ULong), "smallulong"),
    0x44: _const(_new_int(ULong, 0)),
    0x51: _fixed(0x51, _b, _typed_int(Byte), "byte"),
    0x61: _fixed(0x61, _h, _typed_int(Short), "short"),
    0x71: _fixed(0x71, _i, _typed_int(Int), "int"),
    0x54: _fixed(0x54, _b, _typed_int(Int), "smallint"),
    0x81: _fixed(0x81, _q, int, "long"),
    0x55: _fixed(0x55, _b, int, "smalllong"),
    0x72: _fixed(0x72, _f, _dec_float, "float"),
    0x82: _fixed(0x82, _d, float, "double"),
    0x74: _raw(0x74, 4, Decimal32, "decimal32"),
    0x84: _raw(0x84, 8, Decimal64, "decimal64"),
    0x94: _raw(0x94, 16, Decimal128, "decimal128"),
    0x73: _dec_char,
    0x83: _fixed(0x83, _q, _dec_timestamp, "timestamp"),
    0x98: _raw(0x98, 16, lambda b: uuid.UUID(bytes=b), "uuid"),
    0xA0: _variable(0xA0, False, _make_binary, "vbin8"),
    0xB0: _variable(0xB0, True, _make_binary, "vbin32"),
    0xA1: _variable(0xA1, False, _make_string(0xA1), "str8"),
    0xB1: _variable(0xB1, True, _make_string(0xB1), "str32"),
    0xA3: _variable(0xA3, False, _make_symbol(0xA3), "sym8"),
    0xB3: _variable(0xB3, True, _make_symbol(0xB3), "sym32"),
    0x45: _const(None),  # replaced below: each list0 must be a new list
    0xC0: _list(0xC0, False),
    0xD0: _list(0xD0, True),
    0xC1: _map(0xC1, False),
    0xD1: _map(0xD1, True),
    0xE0: _array(0xE0, False),
    0xF0: _array(0xF0, True),
}


def _dec_list0(buf: _Buf, pos: int, end: int, depth: int) -> tuple[Any, int]:
    return [], pos


_DECODERS[0x45] = _dec_list0


def decode_value(buf: bytes | memoryview, pos: int = 0,
                 end: int | None = None) -> tuple[Any, int]:
    """The value encoded at ``buf[pos:]`` and the position after it; nothing at or beyond
    ``end`` (default: the buffer's end) is read. :class:`DecodeError` when the bytes there are
    not one whole valid value."""
    n = len(buf)
    if end is None or end > n:
        end = n
    if isinstance(buf, memoryview) and buf.format != "B":
        buf = buf.cast("B")
    if pos < 0 or pos >= end:
        raise DecodeError("no value: the buffer ends", pos)
    code = buf[pos]
    fn = _DECODERS.get(code)
    if fn is None:
        raise DecodeError("unknown format code", pos, code)
    return fn(buf, pos + 1, end, 0)

