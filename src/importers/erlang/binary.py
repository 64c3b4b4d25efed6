"""The bytes of one segment of an Erlang binary literal (``<<"é"/utf8, 300:16/little>>``).

The term reader (:mod:`.terms`) reads a segment's value, size and type specifiers; this
module makes its bytes. Supported: string, character and integer segments, ``Value:Size``, and
the type specifiers ``integer``, ``float``, ``utf8``, ``utf16``, ``utf32``, ``signed``,
``unsigned``, ``big``, ``little``, ``native`` and ``unit:N``. Where Erlang would silently
truncate a value to fit a segment, this refuses with an error instead.
"""

from __future__ import annotations

import struct
import sys
from typing import Literal, NoReturn, TypeAlias

from ...config.limits import MAX_BINARY_BYTES
from .lexer import MAX_CODE_POINT, ErlangSyntaxError, Token

__all__ = ["Spec", "encode_segment"]

Spec: TypeAlias = tuple[str, int | None, Token]
"""A type specifier as written: its name, its ``:N`` argument if any, and its token."""

Endian: TypeAlias = Literal["big", "little"]


def encode_segment(value: str | float, size: int | None, specs: list[Spec],
                   where: Token) -> bytes:
    """The bytes of one binary segment.

    :param value: a string, a character or integer code, or a float.
    :param size: the ``:Size`` written, if any, in units (of 1 bit unless ``unit:N``).
    :param specs: the type specifiers after ``/``, in order.
    :param where: the segment's first token, where an error points.
    :raises ErlangSyntaxError: on a specifier that is not supported, or a value that does not
        fit its segment.
    """
    seg_type, endian, unit = _read_specs(specs)
    if seg_type.startswith("utf"):
        if size is not None or unit is not None:
            _fail(f"a {seg_type} segment takes no size or unit", where)
        return _utf_segment(value, seg_type, endian, where)
    bits = (size if size is not None else (64 if seg_type == "float" else 8)) * (unit or 1)
    if bits > MAX_BINARY_BYTES * 8:  # before anything of that size is made
        _fail(f"a segment of {bits} bits: a binary holds at most {MAX_BINARY_BYTES} bytes", where)
    if bits % 8:
        _fail(f"a segment of {bits} bits is not whole bytes (bitstrings are not supported)",
              where)
    if seg_type == "float":
        return _float_segment(value, bits, endian, where)
    return _integer_segment(value, bits, endian, where)


def _fail(reason: str, token: Token) -> NoReturn:
    raise ErlangSyntaxError(reason, token.line, token.column)


def _read_specs(specs: list[Spec]) -> tuple[str, Endian, int | None]:
    """The segment's type (``integer`` unless said), byte order and unit."""
    seg_type = "integer"
    endian: Endian = "big"
    unit: int | None = None
    for name, argument, token in specs:
        if name == "unit":
            if argument is None or not 1 <= argument <= 256:
                _fail("unit needs a value 1..256, e.g. unit:8", token)
            unit = argument
            continue
        if argument is not None:
            _fail(f"type specifier '{name}' takes no ':' argument", token)
        if name in ("integer", "float", "utf8", "utf16", "utf32"):
            seg_type = name
        elif name in ("signed", "unsigned"):
            pass  # only matters when matching a binary, not when building one
        elif name == "big":
            endian = "big"
        elif name == "little":
            endian = "little"
        elif name == "native":
            endian = sys.byteorder
        elif name in ("binary", "bytes", "bitstring", "bits"):
            _fail(f"'{name}' segments are not supported in a literal term", token)
        else:
            _fail(f"unknown binary type specifier '{name}'", token)
    return seg_type, endian, unit


def _utf_segment(value: str | float, seg_type: str, endian: Endian, where: Token) -> bytes:
    codec = {"utf8": "utf-8", "utf16": "utf-16", "utf32": "utf-32"}[seg_type]
    if codec != "utf-8":
        codec += "-be" if endian == "big" else "-le"
    if isinstance(value, float):
        _fail(f"a {seg_type} segment needs a character or a string, not a float", where)
    chars = value if isinstance(value, str) else [value]
    out = bytearray()
    for ch in chars:
        code = ord(ch) if isinstance(ch, str) else ch
        if not 0 <= code <= MAX_CODE_POINT or 0xD800 <= code <= 0xDFFF:
            _fail(f"{code} is not a Unicode scalar value ({seg_type} segment)", where)
        out += chr(code).encode(codec)
    return bytes(out)


def _float_segment(value: str | float, bits: int, endian: Endian, where: Token) -> bytes:
    if isinstance(value, str):
        _fail("a float segment needs a number, not a string", where)
    formats = {2: "e", 4: "f", 8: "d"}
    width = bits // 8
    if width not in formats:
        _fail(f"a float segment must be 16, 32 or 64 bits, not {bits}", where)
    try:
        return struct.pack((">" if endian == "big" else "<") + formats[width], float(value))
    except (OverflowError, struct.error):
        _fail(f"{value} does not fit in a {bits}-bit float", where)


def _integer_segment(value: str | float, bits: int, endian: Endian, where: Token) -> bytes:
    if isinstance(value, float):
        _fail("a float in a binary needs the /float type specifier", where)
    integers = [ord(c) for c in value] if isinstance(value, str) else [value]
    width = bits // 8
    out = bytearray()
    low = -(1 << (bits - 1)) if bits else 0  # accept anything that fits signed or unsigned
    high = (1 << bits) - 1
    for integer in integers:
        if not low <= integer <= high:
            what = f"character {chr(integer)!r} ({integer})" if isinstance(value, str) else integer
            hint = ' (write <<"..."/utf8>> for non-Latin-1 text)' if isinstance(value, str) else ""
            _fail(f"{what} does not fit in a segment of {bits} bits{hint}", where)
        if width:
            out += (integer & high).to_bytes(width, endian)
    return bytes(out)
