"""pumpd.amqp10.codec: every AMQP 1.0 type encodes canonically and decodes to its exact type;
a value decoded from any legal width re-encodes to the canonical bytes of the same type and
value; hostile bytes give DecodeError (naming position and format code) and nothing else."""

from __future__ import annotations

import math
import struct
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pumpd.amqp10.codec import (
    MAX_DEPTH,
    MAX_ZERO_WIDTH_ELEMENTS,
    DecodeError,
    EncodeError,
    decode_value,
    encode_uint,
    encode_value,
)
from pumpd.amqp10.values import (
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

# --------------------------------------------------------------------------------------------
# Equality that sees types: 1 == True == UInt(1) in Python, not in AMQP


def same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack(">d", a) == struct.pack(">d", b)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        if len(a) != len(b):
            return False
        bk = list(b.items())
        return all(same(k, k2) and same(v, v2)
                   for (k, v), (k2, v2) in zip(a.items(), bk, strict=True))
    if isinstance(a, Array):
        return (a.code == b.code and same(a.descriptor, b.descriptor)
                and len(a.items) == len(b.items)
                and all(same(x, y) for x, y in zip(a.items, b.items, strict=True)))
    if isinstance(a, Described):
        return same(a.descriptor, b.descriptor) and same(a.value, b.value)
    return bool(a == b)


def decode_all(b: bytes | memoryview) -> Any:
    v, pos = decode_value(b)
    assert pos == len(b)
    return v


# --------------------------------------------------------------------------------------------
# Known encodings: the canonical form of each type


CANONICAL = [
    (None, "40"),
    (True, "41"),
    (False, "42"),
    (UByte(7), "5007"),
    (UShort(0x1234), "601234"),
    (UInt(0), "43"),
    (UInt(255), "52ff"),
    (UInt(256), "7000000100"),
    (ULong(0), "44"),
    (ULong(200), "53c8"),
    (ULong(2**64 - 1), "80ffffffffffffffff"),
    (Byte(-1), "51ff"),
    (Short(-2), "61fffe"),
    (Int(-128), "5480"),
    (Int(128), "7100000080"),
    (0, "5500"),
    (-129, "81ffffffffffffff7f"),
    (2**63 - 1, "817fffffffffffffff"),
    (Float(1.5), "723fc00000"),
    (1.5, "823ff8000000000000"),
    (Decimal32(b"\x01\x02\x03\x04"), "7401020304"),
    (Decimal64(bytes(range(8))), "840001020304050607"),
    (Decimal128(bytes(range(16))), "94" + bytes(range(16)).hex()),
    (Char("€"), "73000020ac"),
    (Timestamp(1000), "8300000000000003e8"),
    (uuid.UUID(int=1), "98" + "00" * 15 + "01"),
    (b"", "a000"),
    (b"ab", "a0026162"),
    (b"x" * 256, "b000000100" + "78" * 256),
    ("é", "a102c3a9"),
    ("x" * 300, "b10000012c" + "78" * 300),
    (Symbol("ab"), "a3026162"),
    (Symbol("s" * 256), "b300000100" + "73" * 256),
    ([], "45"),
    ([None], "c0020140"),
    ([None] * 256, "d0000001040000010" + "0" + "40" * 256),
    ({}, "c10100"),
    ({Symbol("k"): 1}, "c10602a3016b5501"),
    (Described(ULong(0x10), []), "00531045"),
    (Described(Symbol("x"), None), "00a3017840"),
    (Array(0xA3, (Symbol("a"), Symbol("bc"))), "e00702a30161026263"),
    (Array(0x70, (UInt(1), UInt(2))), "e004025201" + "02"),
    (Array(0x70, (UInt(1), UInt(256))), "e00a02700000000100000100"),
    (Array(0x56, (True, False)), "e004025601" + "00"),
    (Array(0x71, ()), "e0020054"),  # no element needs the wide form
    (Array(0xA1, ("a",), Symbol("d")), "e00801" + "00a30164" + "a10161"),
    (Array(0xC0, ([], [None])), "e00702c0" + "0100" + "020140"),
    (Array(0xE0, (Array(0x70, (UInt(5),)),)), "e00601e0" + "03015205"),
]


@pytest.mark.parametrize(("value", "hexed"), CANONICAL, ids=[h[:20] for _, h in CANONICAL])
def test_canonical_encoding_and_exact_decoding(value: Any, hexed: str) -> None:
    assert encode_value(value).hex() == hexed
    assert same(decode_all(bytes.fromhex(hexed)), value)


# Every legal width of a type decodes to that type; re-encoding gives the canonical form.
WIDE_FORMS = [
    ("7000000005", UInt(5), "5205"),
    ("5200", UInt(0), "43"),
    ("800000000000000007", ULong(7), "5307"),
    ("5300", ULong(0), "44"),
    ("7100000005", Int(5), "5405"),
    ("810000000000000005", 5, "5505"),
    ("5601", True, "41"),
    ("5600", False, "42"),
    ("b00000000161", b"a", "a00161"),
    ("b10000000161", "a", "a10161"),
    ("b30000000161", Symbol("a"), "a30161"),
    ("c00100", [], "45"),
    ("d00000000400000000", [], "45"),
    ("d00000000500000001" "40", [None], "c0020140"),
    ("d10000000400000000", {}, "c10100"),
    ("f0000000050000000043", Array(0x70, ()), "e0020052"),
    ("e0020243", Array(0x70, (UInt(0), UInt(0))), "e004025200" "00"),
    ("e0020241", Array(0x56, (True, True)), "e004025601" "01"),
    ("e0020245", Array(0xC0, ([], [])), "e00602c001000100"),
    ("005380" "c0020140", Described(ULong(0x80), [None]), "005380c0020140"),
    ("00" "800000000000000010" "45", Described(ULong(0x10), []), "00531045"),
]


@pytest.mark.parametrize(("wire", "value", "canonical"), WIDE_FORMS,
                         ids=[w for w, _, _ in WIDE_FORMS])
def test_every_width_decodes_to_the_type(wire: str, value: Any, canonical: str) -> None:
    decoded = decode_all(bytes.fromhex(wire))
    assert same(decoded, value)
    assert encode_value(decoded).hex() == canonical


def test_descriptor_may_itself_be_described() -> None:
    inner = Described(Symbol("inner"), b"iv")
    v = Described(inner, b"ov")
    assert same(decode_all(encode_value(v)), v)


def test_decode_from_a_memoryview_and_an_offset() -> None:
    enc = encode_value([Symbol("a"), {"k": b"v"}])
    buf = b"\xff\xff" + enc + b"\xff"
    v, pos = decode_value(memoryview(buf), 2, len(buf) - 1)
    assert same(v, [Symbol("a"), {"k": b"v"}]) and pos == len(buf) - 1


def test_encode_refuses_what_has_no_amqp_type() -> None:
    with pytest.raises(EncodeError, match=r"object has no AMQP 1\.0 encoding"):
        encode_value(object())
    with pytest.raises(EncodeError, match="beyond an AMQP long"):
        encode_value(2**63)
    with pytest.raises(EncodeError, match="not ASCII"):
        encode_value(Symbol("é"))
    with pytest.raises(EncodeError, match="not valid unicode"):
        encode_value("\ud800")
    with pytest.raises(EncodeError, match="not an AMQP type's format code"):
        encode_value(Array(0x99, ()))
    with pytest.raises(EncodeError, match="not of its type"):
        encode_value(Array(0x70, ("x",)))
    with pytest.raises(EncodeError, match="out of range for a uint"):
        encode_uint(-1)
    with pytest.raises(EncodeError, match="surrogate"):
        encode_value(Char("\udc00"))
    with pytest.raises(EncodeError, match="Decimal32 is 4 bytes"):
        encode_value(Decimal32(b"123"))


def test_subclasses_encode_as_their_base() -> None:
    import enum

    class Colour(enum.IntEnum):
        RED = 3

    assert encode_value(Colour.RED) == encode_value(3)


# --------------------------------------------------------------------------------------------
# Generated values: every type, nested


def _text(alphabet: st.SearchStrategy[str] | None = None) -> st.SearchStrategy[str]:
    if alphabet is None:
        alphabet = st.characters(exclude_categories=("Cs",))
    return st.text(alphabet, max_size=20)


def _ints(cls: type, low: int, high: int) -> st.SearchStrategy[Any]:
    return st.integers(low, high).map(cls)


# type code (as an Array names it) -> strategy of one element of that type
SCALARS: dict[int, st.SearchStrategy[Any]] = {
    0x56: st.booleans(),
    0x50: _ints(UByte, 0, 255),
    0x60: _ints(UShort, 0, 2**16 - 1),
    0x70: st.one_of(_ints(UInt, 0, 300), _ints(UInt, 0, 2**32 - 1)),
    0x80: st.one_of(_ints(ULong, 0, 300), _ints(ULong, 0, 2**64 - 1)),
    0x51: _ints(Byte, -128, 127),
    0x61: _ints(Short, -(2**15), 2**15 - 1),
    0x71: st.one_of(_ints(Int, -200, 200), _ints(Int, -(2**31), 2**31 - 1)),
    0x81: st.one_of(st.integers(-200, 200), st.integers(-(2**63), 2**63 - 1)),
    0x72: st.floats(width=32, allow_nan=False).map(Float),
    0x82: st.floats(allow_nan=False),
    0x74: st.binary(min_size=4, max_size=4).map(Decimal32),
    0x84: st.binary(min_size=8, max_size=8).map(Decimal64),
    0x94: st.binary(min_size=16, max_size=16).map(Decimal128),
    0x73: st.characters(exclude_categories=("Cs",)).map(Char),
    0x83: _ints(Timestamp, -(2**63), 2**63 - 1),
    0x98: st.uuids(),
    0xA0: st.one_of(st.binary(max_size=20), st.binary(min_size=256, max_size=300)),
    0xA1: _text(),
    0xA3: _text(st.characters(min_codepoint=0, max_codepoint=127)).map(Symbol),
}
scalars = st.one_of(st.none(), *SCALARS.values())


def _arrays(elements: st.SearchStrategy[Any], code: int) -> st.SearchStrategy[Array]:
    return st.builds(lambda items, d: Array(code, tuple(items), d),
                     st.lists(elements, max_size=5),
                     st.one_of(st.none(), _ints(ULong, 0, 2**64 - 1),
                               SCALARS[0xA3]))


scalar_arrays = st.one_of(
    st.builds(lambda n: Array(0x40, (None,) * n), st.integers(0, 5)),
    *[_arrays(s, code) for code, s in SCALARS.items()])


def _compound(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keys = st.one_of(*SCALARS.values())  # hashable, distinct from one another in Python
    lists = st.lists(children, max_size=5)
    maps = st.dictionaries(keys, children, max_size=5)
    return st.one_of(
        lists,
        maps,
        st.builds(Described, st.one_of(SCALARS[0x80], SCALARS[0xA3]), children),
        _arrays(lists, 0xC0),
        _arrays(maps, 0xC1),
        _arrays(scalar_arrays, 0xE0),
    )


values = st.recursive(st.one_of(scalars, scalar_arrays), _compound, max_leaves=20)


# An encoder written here, independently of the codec, that always takes the widest form: what
# a peer may send. The codec must read it back as the same value and re-encode it canonically.

def wide(v: Any) -> bytes:
    if v is None:
        return b"\x40"
    if type(v) is bool:
        return b"\x56" + (b"\x01" if v else b"\x00")
    if type(v) is Array:
        return b"\xf0" + _wide_array_body(v)
    if type(v) is Described:
        return b"\x00" + wide(v.descriptor) + wide(v.value)
    if type(v) is list:
        body = b"".join(wide(x) for x in v)
        return b"\xd0" + struct.pack(">II", len(body) + 4, len(v)) + body
    if type(v) is dict:
        body = b"".join(wide(k) + wide(x) for k, x in v.items())
        return b"\xd1" + struct.pack(">II", len(body) + 4, 2 * len(v)) + body
    code = _WIDE_CODE[type(v)]
    return bytes([code]) + _wide_payload(code, v)


_WIDE_CODE = {UByte: 0x50, UShort: 0x60, UInt: 0x70, ULong: 0x80, Byte: 0x51, Short: 0x61,
              Int: 0x71, int: 0x81, Float: 0x72, float: 0x82, Decimal32: 0x74,
              Decimal64: 0x84, Decimal128: 0x94, Char: 0x73, Timestamp: 0x83, uuid.UUID: 0x98,
              bytes: 0xB0, str: 0xB1, Symbol: 0xB3}
_WIDE_FMT = {0x50: "B", 0x60: "H", 0x70: "I", 0x80: "Q", 0x51: "b", 0x61: "h", 0x71: "i",
             0x81: "q", 0x72: "f", 0x82: "d", 0x83: "q"}


def _wide_payload(code: int, v: Any) -> bytes:
    if code in _WIDE_FMT:
        return struct.pack(">" + _WIDE_FMT[code], v)
    if code in (0x74, 0x84, 0x94):
        return bytes(v.raw)
    if code == 0x73:
        return struct.pack(">I", ord(v))
    if code == 0x98:
        return bytes(v.bytes)
    data = v if code == 0xB0 else v.encode("utf-8")
    return struct.pack(">I", len(data)) + data


_WIDE_ELEMENT = {0x56: 0x56, 0xA0: 0xB0, 0xA1: 0xB1, 0xA3: 0xB3, 0xC0: 0xD0, 0xC1: 0xD1,
                 0xE0: 0xF0}


def _wide_array_body(a: Array) -> bytes:
    code = _WIDE_ELEMENT.get(a.code, a.code)
    constructor = bytes([code])
    if a.descriptor is not None:
        constructor = b"\x00" + wide(a.descriptor) + constructor
    parts = []
    for x in a.items:
        if code == 0x40:
            continue
        if code == 0x56:
            parts.append(b"\x01" if x else b"\x00")
        elif code in (0xD0, 0xD1):
            contents = (b"".join(wide(e) for e in x) if code == 0xD0
                        else b"".join(wide(k) + wide(e) for k, e in x.items()))
            count = len(x) if code == 0xD0 else 2 * len(x)
            parts.append(struct.pack(">II", len(contents) + 4, count) + contents)
        elif code == 0xF0:
            parts.append(_wide_array_body(x))
        else:
            parts.append(_wide_payload(code, x))
    body = constructor + b"".join(parts)
    return struct.pack(">II", len(body) + 4, len(a.items)) + body


@given(values, st.binary(max_size=4), st.binary(max_size=4))
def test_round_trip_keeps_type_and_value(v: Any, before: bytes, after: bytes) -> None:
    enc = encode_value(v)
    decoded = decode_all(enc)
    assert same(decoded, v)
    assert encode_value(decoded) == enc
    # the same from a memoryview, between other bytes that must not be read
    buf = memoryview(before + enc + after)
    again, pos = decode_value(buf, len(before), len(before) + len(enc))
    assert same(again, v) and pos == len(before) + len(enc)
    # the widest forms, as a peer may send them: the same value, re-encoded canonically
    from_wide = decode_all(wide(v))
    assert same(from_wide, v)
    assert encode_value(from_wide) == enc


# --------------------------------------------------------------------------------------------
# Hostile input: DecodeError, nothing else, never a read outside [pos, end)


def _decode_or_error(buf: bytes, pos: int = 0, end: int | None = None) -> None:
    try:
        _, after = decode_value(buf, pos, end)
    except DecodeError as e:
        assert "at position" in str(e)
        return
    assert after <= (len(buf) if end is None else end)


@given(values, st.data())
def test_truncated_or_corrupted_encodings_raise_decode_error_only(v: Any,
                                                                   data: st.DataObject) -> None:
    enc = wide(v) if len(encode_value(v)) % 2 else encode_value(v)
    # every cut of a short encoding, an even spread over a long one; each cut both as a shorter
    # buffer and by `end` with the rest of the bytes there (they must not be read)
    for cut in range(0, len(enc), max(1, len(enc) // 32)):
        for args in ((enc[:cut], 0, None), (enc, 0, cut)):
            try:
                decode_value(*args)
            except DecodeError:
                continue
            raise AssertionError(f"{enc[:cut].hex()} decoded (a cut of {enc.hex()})")
    corrupted = bytearray(enc)
    for _ in range(data.draw(st.integers(1, 3))):
        corrupted[data.draw(st.integers(0, len(enc) - 1))] = data.draw(st.integers(0, 255))
    _decode_or_error(bytes(corrupted))


@given(st.binary(max_size=64))
def test_random_bytes_decode_or_raise_decode_error(data: bytes) -> None:
    _decode_or_error(data)


def _error(hexed: str | bytes) -> DecodeError:
    buf = bytes.fromhex(hexed) if isinstance(hexed, str) else hexed
    with pytest.raises(DecodeError) as info:
        decode_value(buf)
    return info.value


HOSTILE = [
    ("", "no value", None),
    ("02", "unknown format code", 0x02),
    ("70000001", "uint needs 4 bytes", 0x70),
    ("a005616263", "vbin8 of 5 bytes, 3 left", 0xA0),
    ("b0ffffffff61", "vbin32 of 4294967295 bytes", 0xB0),
    ("a102c328", "not valid utf-8", 0xA1),
    ("a301ff", "not ASCII", 0xA3),
    ("c0ff0140", "list8 of 255 bytes", 0xC0),
    ("c00205" "4040", "list8 claims 5 elements in 1 bytes", 0xC0),
    ("c0030140" "40", "ends at", 0xC0),  # size 3 holds count + two nulls, count says one
    ("c0030240" "a0", "needs", None),  # the second element is cut by the list's size
    ("d0000000000000", "header needs 8 bytes", 0xD0),
    ("c00000", "less than its count", 0xC0),
    ("c10301" "4040", "odd count", 0xC1),
    ("c10302" "45" "40", "key of type list", None),
    ("c10304" "4040", "claims 4 elements in 2 bytes", 0xC1),
    ("c10904" "a10161" "40" "a10161" "40", "repeats the key 'a'", None),
    ("e0020199", "element format code is not a type's", 0x99),
    ("e00501" "005301" "00", "described twice", 0x00),
    ("e00301" "5201", "", None),  # well formed
    ("e0ff0152", "array8 of 255 bytes", 0xE0),
    ("e00305" "7000", "claims 5 elements of at least 4 bytes", 0xE0),
    ("f0000000050001000140", "zero-width type", 0xF0),
    ("e00402" "4101" "01", "ends at", 0xE0),  # zero-width elements, bytes left over
    ("e00101", "no element constructor", 0xE0),
    ("5602", "boolean byte is 0x02", 0x56),
    ("73" "00110000", "not a unicode scalar value", 0x73),
    ("73" "0000d800", "not a unicode scalar value", 0x73),
    ("00", "descriptor", None),
    ("0053", "smallulong needs 1 bytes", 0x53),
    ("005310", "described value", None),
    ("c10604" "41" "40" "5501" "40", "keys True and 1 are one key in Python", None),
]


@pytest.mark.parametrize(("hexed", "message", "code"), HOSTILE, ids=[h for h, _, _ in HOSTILE])
def test_hostile_input_names_position_and_code(hexed: str, message: str,
                                               code: int | None) -> None:
    if message == "":
        decode_all(bytes.fromhex(hexed))
        return
    e = _error(hexed)
    assert message in str(e)
    assert "at position" in str(e)
    if code is not None:
        assert e.code == code and f"format code 0x{code:02x}" in str(e)


def test_a_peers_array_that_overruns_its_elements() -> None:
    # an open's properties from a real client with a broken array: its 0x41 (true) elements take
    # no bytes, so the symbols that follow are left over inside the array's size
    body = bytes([83, 16, 192, 85, 10, 177, 0, 0, 0, 1, 48, 161, 12, 114, 97, 98, 98, 105,
                  116, 109, 113, 45, 98, 111, 120, 112, 255, 255, 0, 0, 96, 0, 50, 112, 0, 0,
                  19, 136, 163, 5, 101, 110, 45, 85, 83, 224, 14, 2, 65, 5, 102, 105, 45, 70,
                  73, 5, 101, 110, 45, 85, 83, 64, 64, 193, 24, 2, 163, 20, 68, 69, 70, 69, 78,
                  83, 73, 67, 83, 46, 84, 69, 83, 84, 46, 83, 85, 73, 84, 69, 65])
    e = _error(b"\x00" + body)
    assert "array8 of 2 elements ends at" in str(e) and e.code == 0xE0


@pytest.mark.parametrize("opener", ["c0", "d0", "c1", "e0", "00"])
def test_nesting_is_bounded(opener: str) -> None:
    depth = MAX_DEPTH + 5
    if opener == "00":
        data = b"\x00" * depth + b"\x40\x40"
    else:
        # a list32 of one element, nested: each level's size covers the rest
        data = b"\x45"
        for _ in range(depth):
            if opener == "c1":
                data = b"\xd1" + struct.pack(">II", len(data) + 5, 2) + b"\x40" + data
            elif opener == "e0":
                data = b"\xf0" + struct.pack(">II", len(data) + 4, 1) + b"\xf0" + data[1:]
            else:
                data = b"\xd0" + struct.pack(">II", len(data) + 4, 1) + data
    e = _error(data)
    assert f"nesting deeper than {MAX_DEPTH}" in str(e)


def test_nesting_up_to_the_bound_decodes() -> None:
    v: Any = []
    for _ in range(MAX_DEPTH - 1):
        v = [v]
    assert same(decode_all(encode_value(v)), v)


def test_zero_width_arrays_are_bounded() -> None:
    ok = b"\xf0" + struct.pack(">II", 5, MAX_ZERO_WIDTH_ELEMENTS) + b"\x40"
    assert len(decode_all(ok).items) == MAX_ZERO_WIDTH_ELEMENTS


def test_counts_never_allocate_beyond_the_bytes() -> None:
    # a list32 claiming 2**32-1 elements in 4 bytes fails before any element is made
    e = _error(b"\xd0" + struct.pack(">II", 8, 2**32 - 1) + b"\x40" * 4)
    assert "claims 4294967295 elements" in str(e)


def test_float_values_keep_their_width() -> None:
    f = Float(0.1)  # rounded to 32 bits when made
    assert f == struct.unpack(">f", struct.pack(">f", 0.1))[0]
    v = decode_all(encode_value(f))
    assert type(v) is Float and v == f
    with pytest.raises(ValueError, match="beyond a 32-bit float"):
        Float(1e300)
    assert math.isnan(decode_all(encode_value(float("nan"))))
