"""Header tables for the forward-headers tests: a field of every AMQP type, written and decoded
with pamqp's codec, and the content header around them."""

from __future__ import annotations

import struct
from decimal import Decimal
from typing import Any

import pamqp.decode
import pamqp.frame
import pamqp.header
import pika
import pika.frame
import pika.spec
from pumpd.dataplane.properties import (
    HEADERS_INDEX,
    split_properties,
    table_entries,
)


def entry(key: str, typed_value: bytes) -> bytes:
    return bytes((len(key),)) + key.encode() + typed_value


def table(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack(">I", len(body)) + body


def longstr(s: bytes) -> bytes:
    return b"S" + struct.pack(">I", len(s)) + s


def array(*values: bytes) -> bytes:
    body = b"".join(values)
    return b"A" + struct.pack(">I", len(body)) + body


# One entry of every field type RabbitMQ reads (rabbit_binary_parser), with the values that a
# decode / re-encode used to change or crash on, and nested tables and arrays.
EVERY_TYPE = [
    entry("t", b"t\x01"),
    entry("b", b"b" + struct.pack(">b", -5)),
    entry("B", b"B" + struct.pack(">B", 200)),
    entry("s", b"s" + struct.pack(">h", -300)),
    entry("u", b"u" + struct.pack(">H", 60000)),
    entry("I", b"I" + struct.pack(">i", -70000)),
    entry("i", b"i" + struct.pack(">I", 4_000_000_000)),
    entry("l", b"l" + struct.pack(">q", -(2**40))),
    entry("L", b"L" + struct.pack(">q", 2**62)),
    entry("f", b"f" + struct.pack(">f", 3.0e38)),
    entry("f-half", b"f" + struct.pack(">f", 1.5)),
    entry("d", b"d" + struct.pack(">d", -1e300)),
    entry("d-pi", b"d" + struct.pack(">d", 3.141592653589793)),
    entry("D", b"D\x02" + struct.pack(">I", 100)),  # 1.00
    entry("S", longstr("ünïcode".encode())),
    entry("T", b"T" + struct.pack(">Q", 1_700_000_000)),
    entry("V", b"V"),
    entry("x", b"x" + struct.pack(">I", 3) + b"\x00\xff\x01"),
    entry("A", array(b"I" + struct.pack(">i", 1), longstr(b"two"),
                     b"F" + table(entry("deep", b"d" + struct.pack(">d", -0.25))),
                     array(b"b\x01"), b"V")),
    entry("F", b"F" + table(entry("n", b"F" + table(entry("x", b"D\x03" + struct.pack(">I", 1)))),
                            entry("e", b"F" + table()))),
    entry("A-empty", array()),
]


EXPECTED_VALUES: dict[str, Any] = {
    "t": True, "b": -5, "B": 200, "s": -300, "u": 60000, "I": -70000, "i": 4_000_000_000,
    "l": -(2**40), "L": 2**62, "f": struct.unpack(">f", struct.pack(">f", 3.0e38))[0],
    "f-half": 1.5, "d": -1e300, "d-pi": 3.141592653589793, "D": Decimal("1.00"),
    "S": "ünïcode", "V": None, "x": bytearray(b"\x00\xff\x01"),
    "A": [1, "two", {"deep": -0.25}, [1], None],
    "F": {"n": {"x": Decimal("0.001")}, "e": {}}, "A-empty": [],
}


def raw_props(headers: bytes | None, **others: Any) -> bytes:
    """A property list: the given headers table bytes (or none) and pika-encoded others."""
    base = pika.frame.Header(0, 0, pika.BasicProperties(**others)).marshal()[19:-1]
    values = split_properties(base)
    values[HEADERS_INDEX] = headers
    flags = 0
    out = b""
    for i, v in enumerate(values):
        if v is not None:
            flags |= 1 << (15 - i)
            out += v
    return struct.pack(">H", flags) + out


def headers_of(props: bytes) -> bytes:
    headers = split_properties(props)[HEADERS_INDEX]
    assert headers is not None
    return headers


def entries_by_key(headers: bytes) -> dict[bytes, bytes]:
    return {k: headers[start:end] for k, start, _, end in table_entries(headers)}


def decode_table(headers: bytes) -> dict[str, Any]:
    return dict(pamqp.decode.field_table(headers)[1])

