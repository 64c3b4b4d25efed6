"""AMQP 1.0's values as Python values, without loss.

A value decoded from the wire and encoded again gives the same AMQP type, so a message passes
through pumpd unaltered. Python's own types stand for the types a Python user means by them:
``None`` null, ``bool`` boolean, ``int`` long (signed 64 bits), ``float`` double, ``str`` string,
``bytes`` binary, ``uuid.UUID`` uuid, ``list`` list, ``dict`` map. Every other AMQP type has a
class here: the integer widths and signedness (:class:`UByte` ... :class:`ULong`, :class:`Byte`,
:class:`Short`, :class:`Int`), :class:`Float` (32 bits), :class:`Char`, :class:`Timestamp`
(milliseconds since the epoch), :class:`Symbol`, the three decimals (their IEEE 754 bytes, kept
as they are), :class:`Described` and :class:`Array` (one element type for all its elements).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Array", "Byte", "Char", "Decimal32", "Decimal64", "Decimal128", "Described", "Float", "Int",
    "Short", "Symbol", "Timestamp", "UByte", "UInt", "ULong", "UShort",
]


_F32 = struct.Struct(">f")


class _Bounded(int):
    """An integer of a fixed AMQP width: out of range is refused when made."""

    LOW = 0
    HIGH = 0

    def __new__(cls, value: int = 0) -> Any:
        v = int(value)
        if not cls.LOW <= v <= cls.HIGH:
            raise ValueError(f"{v} is out of range for {cls.__name__} ({cls.LOW}..{cls.HIGH})")
        return super().__new__(cls, v)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({int(self)})"


class UByte(_Bounded):
    LOW, HIGH = 0, 0xFF


class UShort(_Bounded):
    LOW, HIGH = 0, 0xFFFF


class UInt(_Bounded):
    LOW, HIGH = 0, 0xFFFF_FFFF


class ULong(_Bounded):
    LOW, HIGH = 0, 0xFFFF_FFFF_FFFF_FFFF


class Byte(_Bounded):
    LOW, HIGH = -0x80, 0x7F


class Short(_Bounded):
    LOW, HIGH = -0x8000, 0x7FFF


class Int(_Bounded):
    LOW, HIGH = -0x8000_0000, 0x7FFF_FFFF


class Timestamp(_Bounded):
    """Milliseconds since the Unix epoch (signed 64 bits)."""

    LOW, HIGH = -0x8000_0000_0000_0000, 0x7FFF_FFFF_FFFF_FFFF


class Float(float):
    """A 32-bit IEEE 754 float (a Python ``float`` is AMQP's double). The value is rounded to 32
    bits when made, so that it equals what the wire gives back; beyond a 32-bit float's range
    (other than infinity) is refused."""

    def __new__(cls, value: float = 0.0) -> Any:
        try:
            v = _F32.unpack(_F32.pack(float(value)))[0]
        except OverflowError:
            raise ValueError(f"{value!r} is beyond a 32-bit float") from None
        return super().__new__(cls, v)

    def __repr__(self) -> str:
        return f"Float({float(self)!r})"


class Char(str):
    """One UTF-32 code point."""

    def __new__(cls, value: str) -> Any:
        if len(value) != 1:
            raise ValueError(f"a char is one code point, not {value!r}")
        return super().__new__(cls, value)

    def __repr__(self) -> str:
        return f"Char({str(self)!r})"


class Symbol(str):
    """An ASCII symbolic constant (annotation keys, content types, descriptors' names)."""

    def __repr__(self) -> str:
        return f"Symbol({str(self)!r})"


@dataclass(frozen=True, slots=True)
class Decimal32:
    raw: bytes  # 4 bytes, IEEE 754 decimal32 as on the wire


@dataclass(frozen=True, slots=True)
class Decimal64:
    raw: bytes  # 8 bytes


@dataclass(frozen=True, slots=True)
class Decimal128:
    raw: bytes  # 16 bytes


@dataclass(frozen=True, slots=True)
class Described:
    """A described value: ``descriptor`` is a :class:`ULong` code or a :class:`Symbol` name."""

    descriptor: Any
    value: Any


@dataclass(frozen=True, slots=True)
class Array:
    """An AMQP array: ``code`` is the element constructor's format code (e.g. 0xA3 symbol,
    0x71 int), ``descriptor`` the elements' descriptor when they are described (None if not),
    ``items`` the elements as Python values."""

    code: int
    items: tuple[Any, ...]
    descriptor: Any = None
