#!/usr/bin/python3
"""An AMQP 1.0 peer that is not pumpd: Qpid Proton (Debian's ``python3-qpid-proton``), run by the
system interpreter ``/usr/bin/python3`` as a subprocess, so that Proton stays out of the project's
virtual environment. Tests drive it through :mod:`tests.support.foreign_amqp10`.

Commands (every output is one JSON value or hex string per line on stdout; a failure is a
message on stderr and exit status 1)::

    proton_peer.py send URL ADDRESS --count N --kind KIND [--first I] [--hostname H]
                                    [--timeout S] [--with-bytes]
    proton_peer.py receive URL ADDRESS --count N [--hostname H] [--timeout S] [--with-bytes]
    proton_peer.py describe-bytes          < hex of encoded messages, one a line
    proton_peer.py reencode                < hex of encoded messages, one a line
    proton_peer.py encode KIND --index I

``send`` sends messages I..I+N-1 (I: 0 by default) of recipe KIND to ADDRESS (a link target)
and exits 0 once every one is accepted, printing each message's description as it was sent; any
other outcome ends it with that outcome. ``receive`` takes N messages from ADDRESS (a link source), accepts them and
prints each one's description. ``describe-bytes`` prints the description of each message on
stdin; ``reencode`` prints each one as Proton encodes the values it decodes from it (section by
section, with ``proton.Data``); ``encode`` prints the hex of a recipe's message. ``--hostname`` is the ``open`` frame's hostname (RabbitMQ 3.x
picks the vhost by ``vhost:NAME``); URL carries the SASL PLAIN user and password
(``amqp://user:password@host:port``; without them, SASL ANONYMOUS).

The recipes (message I of kind K is the same every time; I varies what the kind covers):

* ``simple``: one data section, three string application properties.
* ``every-type``: application properties and message annotations of every simple type (some at
  their limits), message annotations of compounds too, every properties field (the ids take the
  ulong, uuid, binary and string forms by I % 4), a header with every field, a footer.
* ``value-body``: an amqp-value body, one of six by I % 6 (a map of everything, a string, a
  described list, an array, a list, a binary).
* ``sequence-body``: one amqp-sequence section of every type.
* ``large``: a 1 MiB data section.
* ``many-sections``: 3 + I % 3 data sections (one empty, one beyond 255 bytes);
  ``many-sequences``: 2 + I % 2 amqp-sequence sections (one empty).
* ``exotic``: what RabbitMQ 3.10 aborts the connection for, one reason by I % 5 (see
  :func:`_exotic`): the other kinds hold only what it carries.

The description ("typed JSON") says the AMQP type and value of everything in the message::

    {"header": {"durable": ["boolean", true], "priority": ["ubyte", 7], ...},
     "delivery_annotations": {KEY: TYPED, ...}, "message_annotations": {KEY: TYPED, ...},
     "properties": {"message_id": ["ulong", 7], "creation_time": ["timestamp", 1700000000123], ...},
     "application_properties": {"k": ["int", -5], ...},
     "body": ["data", HEX, HEX, ...] | ["sequence", [TYPED, ...], ...] | ["value", TYPED],
     "footer": {KEY: TYPED, ...}}

A section is a key only when the message has it; a header or properties field only when it is
there and not null (null and absent are the same in AMQP). ``body`` lists the body sections in
order after their kind. Annotation and footer keys are the symbol's text, application-property
keys the string; a key of any other type (a ulong annotation key) is written as the JSON text of
its typed value, e.g. ``'["ulong", 42]'``. (These section maps are JSON objects, so their order
is not compared; a map value's order is.) A TYPED value is ``[TYPE, PAYLOAD]``:

    null None; boolean true/false; ubyte ushort uint ulong byte short int long timestamp: the
    integer (timestamp: milliseconds); float double: the IEEE 754 bytes in hex (exact, NaN and
    -0.0 included); decimal32/64/128: the bytes in hex; char: the one character; uuid: its
    canonical text; binary: hex; string symbol: the text; list: [TYPED, ...];
    map: [[TYPED key, TYPED value], ...] in wire order; described: ["described", TYPED
    descriptor, TYPED value]; array: ["array", ELEMENT TYPE, [TYPED, ...]] and, when the elements
    are described, a fourth item: the TYPED descriptor.

Each section is decoded with Proton's codec (``proton.Data``), one described value after
another: ``proton.Message.decode`` keeps only the last of several body sections and turns the
header's and properties' times into float seconds, so it cannot describe a message exactly. It
is still run over every message described, so that a message Proton's message layer refuses is a
failure here too. A value Proton 0.37 is known to misread (see :func:`read_value`) is a failure,
never a wrong description.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import uuid
from typing import Any

import proton
from proton import (
    Array,
    Data,
    Delivery,
    Described,
    Handler,
    Message,
    byte,
    char,
    decimal32,
    decimal64,
    decimal128,
    float32,
    int32,
    short,
    symbol,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)
from proton.utils import BlockingConnection

UNDESCRIBED = proton._data.UNDESCRIBED  # Array's "no descriptor" marker (not re-exported)

# --------------------------------------------------------------------------------------------
# Typed JSON

_PACK_U32 = struct.Struct(">I")
_PACK_U64 = struct.Struct(">Q")


def _float_hex(v: float) -> str:
    return struct.pack(">f", v).hex()


def _double_hex(v: float) -> str:
    return struct.pack(">d", v).hex()


_SCALARS: dict[type, tuple[str, Any]] = {
    bool: ("boolean", bool),
    ubyte: ("ubyte", int),
    ushort: ("ushort", int),
    uint: ("uint", int),
    ulong: ("ulong", int),
    byte: ("byte", int),
    short: ("short", int),
    int32: ("int", int),
    int: ("long", int),
    timestamp: ("timestamp", int),
    float32: ("float", _float_hex),
    float: ("double", _double_hex),
    decimal32: ("decimal32", lambda v: _PACK_U32.pack(v).hex()),
    decimal64: ("decimal64", lambda v: _PACK_U64.pack(v).hex()),
    decimal128: ("decimal128", lambda v: bytes(v).hex()),
    char: ("char", str),
    symbol: ("symbol", str),
    str: ("string", str),
    bytes: ("binary", lambda v: bytes(v).hex()),
    uuid.UUID: ("uuid", str),
}

#: Proton's type codes (proton.Data.INT ...) by the names the typed JSON uses
ARRAY_TYPES = {
    Data.NULL: "null", Data.BOOL: "boolean", Data.UBYTE: "ubyte", Data.USHORT: "ushort",
    Data.UINT: "uint", Data.ULONG: "ulong", Data.BYTE: "byte", Data.SHORT: "short",
    Data.INT: "int", Data.LONG: "long", Data.TIMESTAMP: "timestamp", Data.FLOAT: "float",
    Data.DOUBLE: "double", Data.DECIMAL32: "decimal32", Data.DECIMAL64: "decimal64",
    Data.DECIMAL128: "decimal128", Data.CHAR: "char", Data.UUID: "uuid", Data.BINARY: "binary",
    Data.STRING: "string", Data.SYMBOL: "symbol", Data.LIST: "list", Data.MAP: "map",
    Data.ARRAY: "array",
}


def typed(v: Any) -> list[Any]:
    """``v`` (a value as proton.Data gives it) as ``[TYPE, PAYLOAD]``."""
    if v is None:
        return ["null", None]
    t = type(v)
    scalar = _SCALARS.get(t)
    if scalar is not None:
        name, payload = scalar
        return [name, payload(v)]
    if t is list:
        return ["list", [typed(x) for x in v]]
    if t is dict:
        return ["map", [[typed(k), typed(x)] for k, x in v.items()]]
    if t is Described:
        return ["described", typed(v.descriptor), typed(v.value)]
    if t is Array:
        out = ["array", ARRAY_TYPES[v.type], [typed(x) for x in v.elements]]
        if v.descriptor is not UNDESCRIBED:
            out.append(typed(v.descriptor))
        return out
    raise ValueError(f"no typed JSON for {t.__name__} {v!r}")


# --------------------------------------------------------------------------------------------
# Messages: their sections, one described value each (§3.2)

HEADER_FIELDS = ("durable", "priority", "ttl", "first_acquirer", "delivery_count")
PROPERTIES_FIELDS = (
    "message_id", "user_id", "to", "subject", "reply_to", "correlation_id", "content_type",
    "content_encoding", "absolute_expiry_time", "creation_time", "group_id", "group_sequence",
    "reply_to_group_id",
)
SECTIONS = {
    0x70: "header", 0x71: "delivery_annotations", 0x72: "message_annotations",
    0x73: "properties", 0x74: "application_properties", 0x75: "data", 0x76: "sequence",
    0x77: "value", 0x78: "footer",
}
_SYMBOLIC = {
    "amqp:header:list": 0x70, "amqp:delivery-annotations:map": 0x71,
    "amqp:message-annotations:map": 0x72, "amqp:properties:list": 0x73,
    "amqp:application-properties:map": 0x74, "amqp:data:binary": 0x75,
    "amqp:amqp-sequence:list": 0x76, "amqp:amqp-value:*": 0x77, "amqp:footer:map": 0x78,
}
# a section's place in the order: the three body kinds share one
_RANK = {0x70: 0, 0x71: 1, 0x72: 2, 0x73: 3, 0x74: 4, 0x75: 5, 0x76: 5, 0x77: 5, 0x78: 6}


def _fields(name: str, value: Any, names: tuple[str, ...]) -> dict[str, Any]:
    if type(value) is not list:
        raise ValueError(f"the {name} section is {typed(value)[0]}, not a list")
    out = {}
    for i, x in enumerate(value):
        if x is not None:
            out[names[i] if i < len(names) else f"field{i}"] = typed(x)
    return out


def _keyed(name: str, value: Any, key_type: type) -> dict[str, Any]:
    if type(value) is not dict:
        raise ValueError(f"the {name} section is {typed(value)[0]}, not a map")
    out = {}
    for k, x in value.items():
        text = str(k) if type(k) is key_type else json.dumps(typed(k))
        out[text] = typed(x)
    return out


def read_value(data: Data) -> Any:
    """The value at ``data``'s current node, as ``Data.get_object`` gives it, but checked: a
    described value must be two nodes (descriptor and value), a map's keys distinct. Proton 0.37's
    decoder puts what follows a described value whose value is itself described (``00 53 05 00
    a3 01 61 54 01`` then more, in a list or map) into that outer described value, as a third
    node: ``get_object`` would then drop it without a word."""
    t = data.type()
    if t == Data.DESCRIBED:
        data.enter()
        try:
            data.next()
            descriptor = read_value(data)
            data.next()
            value = read_value(data)
            if data.next():
                raise ValueError(
                    "Proton decoded a described value of more than a descriptor and a value "
                    f"(descriptor {typed(descriptor)}): Proton 0.37 misreads what follows a "
                    "described value whose value is described")
        finally:
            data.exit()
        return Described(descriptor, value)
    if t == Data.LIST:
        data.enter()
        items = []
        while data.next():
            items.append(read_value(data))
        data.exit()
        return items
    if t == Data.MAP:
        data.enter()
        pairs: dict[Any, Any] = {}
        while data.next():
            k = read_value(data)
            data.next()
            v = read_value(data)
            try:
                if k in pairs:
                    raise ValueError(f"a map repeats the key {typed(k)}")
            except TypeError:
                raise ValueError(f"a map key {typed(k)} is no Python dict key") from None
            pairs[k] = v
        data.exit()
        return pairs
    if t == Data.ARRAY:
        _, described, element_type = data.get_array()
        data.enter()
        descriptor = UNDESCRIBED
        if described:
            data.next()
            descriptor = read_value(data)
        elements = []
        while data.next():
            elements.append(read_value(data))
        data.exit()
        return Array(descriptor, element_type, *elements)
    return data.get_object()


def split_sections(raw: bytes) -> list[tuple[int, Any, int]]:
    """The sections of an encoded message: (descriptor code, value, offset) each."""
    out = []
    pos = 0
    while pos < len(raw):
        data = Data()
        used = data.decode(raw[pos:])
        data.rewind()
        data.next()
        section = read_value(data)
        if type(section) is not Described:
            raise ValueError(f"at offset {pos}: a section is a described value, not "
                             f"{typed(section)[0]}")
        d = section.descriptor
        code = int(d) if type(d) is ulong else _SYMBOLIC.get(str(d)) if type(d) is symbol else None
        if code not in SECTIONS:
            raise ValueError(f"at offset {pos}: a section with descriptor {typed(d)}")
        out.append((code, section.value, pos))
        pos += used
    return out


def describe(raw: bytes) -> dict[str, Any]:
    """The typed JSON of the message encoded in ``raw`` (see the module docstring)."""
    sections = split_sections(raw)
    try:
        Message().decode(raw)  # Proton's message layer must take it too
    except Exception as e:
        raise ValueError(f"proton.Message.decode refuses it: {type(e).__name__}: {e}") from None
    out: dict[str, Any] = {}
    last = None
    for code, value, pos in sections:
        name = SECTIONS[code]
        if last is not None and _RANK[code] <= _RANK[last] and not (
                code == last and code in (0x75, 0x76)):
            raise ValueError(f"at offset {pos}: a {name} section after a {SECTIONS[last]} "
                             "section")
        last = code
        if code == 0x70:
            out[name] = _fields(name, value, HEADER_FIELDS)
        elif code == 0x73:
            out[name] = _fields(name, value, PROPERTIES_FIELDS)
        elif code == 0x74:
            out[name] = _keyed(name, value, str)
        elif code in (0x71, 0x72, 0x78):
            out[name] = _keyed(name, value, symbol)
        elif code == 0x75:
            if type(value) is not bytes:
                raise ValueError(f"at offset {pos}: a data section is {typed(value)[0]}")
            out.setdefault("body", ["data"]).append(value.hex())
        elif code == 0x76:
            if type(value) is not list:
                raise ValueError(f"at offset {pos}: an amqp-sequence section is "
                                 f"{typed(value)[0]}")
            out.setdefault("body", ["sequence"]).append([typed(x) for x in value])
        else:
            out["body"] = ["value", typed(value)]
    return out


# --------------------------------------------------------------------------------------------
# Recipes: message I of kind K, the same every time

def _section(code: int, value: Any) -> bytes:
    data = Data()
    data.put_object(Described(ulong(code), value))
    return data.encode()


def _every_simple_value(i: int) -> list[tuple[str, Any]]:
    """A value of every simple (not compound) AMQP type, some at their limits; ``i`` varies a
    few of them."""
    return [
        ("null", None),
        ("true", True),
        ("false", False),
        ("ubyte", ubyte(255)),
        ("ushort", ushort(65535 - i)),
        ("uint", uint(0xFFFF_FFFF)),
        ("uint0", uint(0)),
        ("ulong", ulong(0xFFFF_FFFF_FFFF_FFFF)),
        ("ulong-small", ulong(200 + i % 50)),
        ("byte", byte(-128)),
        ("short", short(-32768)),
        ("int", int32(-5)),
        ("int-min", int32(-0x8000_0000)),
        ("long", -0x8000_0000_0000_0000),
        ("long-small", 100 + i),
        ("float", float32(1.5)),
        ("float-negative-zero", float32(-0.0)),
        ("float-infinity", float32(float("inf"))),
        ("double", 3.141592653589793),
        ("double-nan", float("nan")),
        ("decimal32", decimal32(0x2230_0001)),
        ("decimal64", decimal64(0x2238_0000_0000_0001)),
        ("decimal128", decimal128(bytes.fromhex("22080000000000000000000000000001"))),
        ("char", char("€")),
        ("char-astral", char("\U0001d11e")),
        ("timestamp", timestamp(1_700_000_000_123 + i)),
        ("timestamp-negative", timestamp(-1)),
        ("uuid", uuid.UUID(int=0x0123_4567_89AB_CDEF_FEDC_BA98_7654_3210 + i)),
        ("binary", bytes(range(i % 7, 40))),
        ("binary-empty", b""),
        ("string", f"grüße {i} \u2603 \U0001f600"),
        ("string-empty", ""),
        ("string-long", "x" * 300),
        ("symbol", symbol("a-symbol")),
    ]


def _compound_values(i: int) -> list[tuple[str, Any]]:
    """Lists, maps, arrays and described values, nested: the compounds RabbitMQ 3.10 carries
    (see :func:`_exotic_values` for those it does not)."""
    return [
        ("list", [int32(1), "two", symbol("three"), None, [ubyte(4), []], {"k": True}]),
        ("list-empty", []),
        ("list-of-described", [Described(symbol("example:thing"), f"payload {i}"),
                               Described(ulong(0x0000_1234_0000_0001), [int32(1), "a"])]),
        ("map", {symbol("k"): ulong(1), "s": {"nested": [int32(i), int32(2)]}, int32(3): None}),
        ("map-empty", {}),
        ("array-int", Array(UNDESCRIBED, Data.INT, int32(1), int32(-2), int32(300 + i))),
        ("array-long", Array(UNDESCRIBED, Data.LONG, 1, -(2 ** 40))),
        ("array-symbol", Array(UNDESCRIBED, Data.SYMBOL, symbol("a"), symbol("bb"))),
        ("array-string", Array(UNDESCRIBED, Data.STRING, "x", "y" * 300)),
        ("array-boolean", Array(UNDESCRIBED, Data.BOOL, True, False, True)),
        ("array-ubyte", Array(UNDESCRIBED, Data.UBYTE, ubyte(0), ubyte(255))),
        ("array-ushort", Array(UNDESCRIBED, Data.USHORT, ushort(0), ushort(65535))),
        ("array-uint", Array(UNDESCRIBED, Data.UINT, uint(0), uint(7), uint(2 ** 32 - 1))),
        ("array-ulong", Array(UNDESCRIBED, Data.ULONG, ulong(0), ulong(7), ulong(2 ** 64 - 1))),
        ("array-byte", Array(UNDESCRIBED, Data.BYTE, byte(-128), byte(127))),
        ("array-short", Array(UNDESCRIBED, Data.SHORT, short(-32768), short(i))),
        ("array-empty", Array(UNDESCRIBED, Data.LONG)),
        ("array-of-arrays", Array(UNDESCRIBED, Data.ARRAY,
                                  Array(UNDESCRIBED, Data.INT, int32(1)),
                                  Array(UNDESCRIBED, Data.INT, int32(2), int32(3)))),
        ("array-described-symbol", Array(symbol("example:point"), Data.STRING, "p1", "p2")),
        ("array-described-ulong", Array(ulong(7), Data.INT, int32(1), int32(2))),
    ]


def _exotic_values(i: int) -> list[tuple[str, Any]]:
    """Compounds that RabbitMQ 3.10's parser does not take (it aborts the connection): arrays
    of these element types, and a described value as a map's value."""
    return [
        ("array-null", Array(UNDESCRIBED, Data.NULL, None, None)),
        ("array-float", Array(UNDESCRIBED, Data.FLOAT, float32(0.5), float32(-2.25))),
        ("array-double", Array(UNDESCRIBED, Data.DOUBLE, 0.5, -2.25, float("-inf"))),
        ("array-decimal32", Array(UNDESCRIBED, Data.DECIMAL32, decimal32(0x2230_0001))),
        ("array-decimal64", Array(UNDESCRIBED, Data.DECIMAL64, decimal64(1))),
        ("array-decimal128", Array(UNDESCRIBED, Data.DECIMAL128, decimal128(bytes(range(16))))),
        ("array-char", Array(UNDESCRIBED, Data.CHAR, char("a"), char("€"))),
        ("array-timestamp", Array(UNDESCRIBED, Data.TIMESTAMP, timestamp(1), timestamp(-2))),
        ("array-uuid", Array(UNDESCRIBED, Data.UUID, uuid.UUID(int=1), uuid.UUID(int=2 + i))),
        ("array-binary", Array(UNDESCRIBED, Data.BINARY, b"\x00\x01", b"", b"z" * 300)),
        ("array-list", Array(UNDESCRIBED, Data.LIST, [int32(1), "a"], [])),
        ("array-map", Array(UNDESCRIBED, Data.MAP, {"a": 1}, {})),
        ("described-symbol", Described(symbol("example:thing"), f"payload {i}")),
        ("described-ulong", Described(ulong(0x0000_1234_0000_0001), [int32(1), "a"])),
    ]


def _properties_for(i: int, message: Message) -> None:
    """Every field of the properties section. The ids take each of their four types in turn
    (message_id by ``i % 4``, correlation_id one further). user_id is the user the tests
    connect as: RabbitMQ refuses a user_id that is not the authenticated user's."""
    ids = [
        ulong(1000 + i),
        uuid.UUID(int=0xA5A5_0000_0000_0000_0000_0000_0000_0000 + i),
        f"binary-id-{i}".encode(),
        f"string-id-{i}",
    ]
    message.id = ids[i % 4]
    message.correlation_id = ids[(i + 1) % 4]
    message.user_id = b"guest"
    message.address = "/queue/interop-to"
    message.subject = f"subject {i}"
    message.reply_to = "/queue/interop-replies"
    message.content_type = symbol("application/octet-stream")
    message.content_encoding = symbol("identity")
    # far in the future (2100): no peer may let it expire
    message.expiry_time = 4_102_444_800.25 + i
    message.creation_time = 1_700_000_000.125 + i
    message.group_id = f"group {i}"
    message.group_sequence = i + 1
    message.reply_to_group_id = f"reply group {i}"


def _simple(i: int) -> bytes:
    m = Message(body=f"simple message {i}".encode())
    m.inferred = True  # binary body: one data section
    m.properties = {"source": "proton", "kind": "simple", "index": str(i)}
    return m.encode()


def _every_type(i: int) -> bytes:
    m = Message(body=bytes(range(256)) + f"every-type {i}".encode())
    m.inferred = True
    m.durable = True
    m.priority = 7
    # Proton's API takes seconds as a float and truncates to milliseconds: binary fractions
    # (.125, .25) are exact, so the wire gets exactly these milliseconds
    m.ttl = 3600.125 + i
    m.first_acquirer = True
    m.delivery_count = i + 2
    _properties_for(i, m)
    m.properties = dict(_every_simple_value(i))
    annotations: dict[Any, Any] = {symbol(f"x-opt-{k}"): v for k, v in _every_simple_value(i)}
    annotations.update({symbol(f"x-opt-{k}"): v for k, v in _compound_values(i)})
    annotations[ulong(0x5345_0000 + i)] = "a ulong key"
    m.annotations = annotations
    # Proton's Message has no footer: the section is appended by hand
    footer = {symbol("x-opt-digest"): bytes(range(i, i + 16)), symbol("x-opt-count"): uint(i)}
    return m.encode() + _section(0x78, footer)


def _value_body(i: int) -> bytes:
    choices: list[Any] = [
        {symbol(k): v for k, v in _every_simple_value(i) + _compound_values(i)},
        f"a string value {i}",
        Described(symbol("example:described-body"), [int32(i), b"\x00"]),
        Array(UNDESCRIBED, Data.INT, int32(i), int32(-i)),
        [ulong(i)],  # one element: RabbitMQ 3.10 takes no longer list as an amqp-value
        f"binary value {i}".encode(),  # an amqp-value of binary, not a data section
    ]
    m = Message(body=choices[i % len(choices)])
    m.inferred = False
    m.properties = {"kind": "value-body", "index": int32(i)}
    return m.encode()


def _sequence_body(i: int) -> bytes:
    m = Message(body=[v for _, v in _every_simple_value(i) + _compound_values(i)])
    m.inferred = True  # a list body: one amqp-sequence section
    m.properties = {"kind": "sequence-body", "index": int32(i)}
    return m.encode()


def _large(i: int) -> bytes:
    block = bytes((j * 31 + i) & 0xFF for j in range(4096))
    m = Message(body=block * 256)  # 1 MiB
    m.inferred = True
    m.id = f"large-{i}"
    m.properties = {"kind": "large", "index": int32(i)}
    return m.encode()


def _many_sections(i: int) -> bytes:
    """Properties, then 3 + i % 3 data sections: one empty, one beyond a vbin8 (256 bytes and
    more), the rest short."""
    m = Message()
    m.id = f"many-sections-{i}"
    m.properties = {"kind": "many-sections", "index": int32(i)}
    head = m.encode()
    bodies = [f"section 0 of message {i}".encode(), b"", bytes(range(256)) * 3 + bytes([i])]
    bodies += [f"extra {k}".encode() for k in range(i % 3)]
    return head + b"".join(_section(0x75, b) for b in bodies)


def _many_sequences(i: int) -> bytes:
    """Properties, then 2 + i % 2 amqp-sequence sections, one of them empty."""
    m = Message()
    m.id = ulong(i)
    head = m.encode()
    seqs: list[list[Any]] = [[int32(i), "first"], [], [symbol("third"), [None]]]
    return head + b"".join(_section(0x76, s) for s in seqs[: 2 + i % 2])


def _exotic(i: int) -> bytes:
    """What RabbitMQ 3.10 aborts the connection for, one reason per ``i % 5``: delivery
    annotations (0), arrays of the element types its parser lacks in message annotations (1),
    described values as annotation values (2), an amqp-value of a list of more than one element
    (3), an amqp-sequence of those arrays and described values (4)."""
    exotic = _exotic_values(i)
    variant = i % 5
    m = Message(body=f"exotic {i}".encode())
    m.inferred = True
    m.id = f"exotic-{i}"
    if variant == 0:
        m.durable = True
        m.instructions = {symbol("x-opt-delivery"): f"delivery annotation {i}",
                          symbol("x-opt-hops"): uint(i)}
    elif variant == 1:
        m.annotations = {symbol(f"x-opt-{k}"): v for k, v in exotic if k.startswith("array")}
    elif variant == 2:
        m.annotations = {symbol(f"x-opt-{k}"): v for k, v in exotic if k.startswith("desc")}
    elif variant == 3:
        m.body = [v for _, v in _every_simple_value(i) + _compound_values(i) + exotic]
        m.inferred = False
    else:
        m.body = [v for _, v in exotic]
    return m.encode()


RECIPES = {
    "simple": _simple,
    "every-type": _every_type,
    "value-body": _value_body,
    "sequence-body": _sequence_body,
    "large": _large,
    "many-sections": _many_sections,
    "many-sequences": _many_sequences,
    "exotic": _exotic,
}


# --------------------------------------------------------------------------------------------
# The wire

class _Encoded:
    """Bytes already encoded, sent as one message (what proton.Message.send does after its
    encode)."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def send(self, sender: Any, tag: Any = None) -> Delivery:
        dlv = sender.delivery(tag or sender.delivery_tag())
        sender.stream(self.raw)
        sender.advance()
        return dlv


class _Collector(Handler):
    """A receiving link's handler: each whole delivery's bytes, as they came."""

    def __init__(self) -> None:
        self.received: list[tuple[bytes, Delivery]] = []
        self.closed: str | None = None
        self.receiver: Any = None

    def on_delivery(self, event: Any) -> None:
        dlv = event.delivery
        link = event.link
        if not link.is_receiver or dlv.partial:
            return
        if dlv.aborted:
            dlv.settle()
            return
        raw = link.recv(dlv.pending)
        link.advance()
        self.received.append((raw, dlv))

    def on_link_remote_close(self, event: Any) -> None:
        self.closed = f"the peer closed the link: {event.link.remote_condition}"


def _connect(url: str, hostname: str | None, timeout: float) -> BlockingConnection:
    mechs = "PLAIN" if "@" in url else "ANONYMOUS"
    return BlockingConnection(url, timeout=timeout, virtual_host=hostname, allowed_mechs=mechs)


def _outcome(dlv: Delivery) -> str:
    names = {Delivery.ACCEPTED: "accepted", Delivery.REJECTED: "rejected",
             Delivery.RELEASED: "released", Delivery.MODIFIED: "modified"}
    text = names.get(dlv.remote_state, str(dlv.remote_state))
    condition = dlv.remote.condition
    return f"{text} ({condition})" if condition else text


def _line(raw: bytes, with_bytes: bool) -> str:
    described = describe(raw)
    if with_bytes:
        return json.dumps({"description": described, "bytes": raw.hex()})
    return json.dumps(described)


def cmd_send(args: argparse.Namespace) -> int:
    recipe = RECIPES[args.kind]
    conn = _connect(args.url, args.hostname, args.timeout)
    try:
        sender = conn.create_sender(args.address)
        for i in range(args.first, args.first + args.count):
            raw = recipe(i)
            dlv = sender.send(_Encoded(raw), error_states=[])
            if dlv.remote_state != Delivery.ACCEPTED:
                print(f"message {i} of kind {args.kind} to {args.address}: {_outcome(dlv)}",
                      file=sys.stderr)
                return 1
            print(_line(raw, args.with_bytes), flush=True)
    finally:
        conn.close()
    return 0


def cmd_receive(args: argparse.Namespace) -> int:
    conn = _connect(args.url, args.hostname, args.timeout)
    collector = _Collector()
    failure = None
    try:
        # kept: a BlockingReceiver that is collected takes its handler off the link
        collector.receiver = conn.create_receiver(args.address, credit=args.count,
                                                  handler=collector)
        try:
            conn.wait(lambda: len(collector.received) >= args.count or bool(collector.closed),
                      timeout=args.timeout)
        except proton.Timeout:
            pass
        failure = collector.closed
        if len(collector.received) < args.count and failure is None:
            failure = (f"received {len(collector.received)} of {args.count} messages from "
                       f"{args.address} within {args.timeout} s")
        for raw, dlv in collector.received:
            print(_line(raw, args.with_bytes), flush=True)
            dlv.update(Delivery.ACCEPTED)
            dlv.settle()
    finally:
        conn.close()  # waits for the peer's close: the dispositions are out by then
    if failure:
        print(failure, file=sys.stderr)
        return 1
    return 0


def _each_stdin_message(act: Any) -> int:
    for n, line in enumerate(sys.stdin, 1):
        if line.strip():
            try:
                out = act(bytes.fromhex(line.strip()))
            except ValueError as e:
                raise ValueError(f"the message on line {n}: {e}") from None
            except (proton.ProtonException, KeyError) as e:
                raise ValueError(f"the message on line {n}: {type(e).__name__}: {e}") from None
            print(out)
    return 0


def cmd_describe_bytes(args: argparse.Namespace) -> int:
    return _each_stdin_message(lambda raw: json.dumps(describe(raw)))


def reencode(raw: bytes) -> bytes:
    """Each section of ``raw`` decoded and encoded again by proton.Data: Proton's own encoding
    of the same values."""
    out = []
    for code, value, _ in split_sections(raw):
        out.append(_section(code, value))
    return b"".join(out)


def cmd_reencode(args: argparse.Namespace) -> int:
    return _each_stdin_message(lambda raw: reencode(raw).hex())


def cmd_encode(args: argparse.Namespace) -> int:
    print(RECIPES[args.kind](args.index).hex())
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="proton_peer.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def link_command(name: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name)
        p.add_argument("url", help="amqp://user:password@host:port")
        p.add_argument("address", help="the link's target (send) or source (receive)")
        p.add_argument("--count", type=int, required=True)
        p.add_argument("--hostname", help="the open frame's hostname (RabbitMQ: vhost:NAME)")
        p.add_argument("--timeout", type=float, default=30.0, help="seconds for each step")
        p.add_argument("--with-bytes", action="store_true",
                       help='print {"description": ..., "bytes": HEX} per message')
        return p

    p = link_command("send")
    p.add_argument("--kind", choices=sorted(RECIPES), required=True)
    p.add_argument("--first", type=int, default=0, help="the first message's index")
    link_command("receive")
    sub.add_parser("describe-bytes")
    sub.add_parser("reencode")
    p = sub.add_parser("encode")
    p.add_argument("kind", choices=sorted(RECIPES))
    p.add_argument("--index", type=int, default=0)

    args = parser.parse_args(argv)
    command = {"send": cmd_send, "receive": cmd_receive, "describe-bytes": cmd_describe_bytes,
               "reencode": cmd_reencode, "encode": cmd_encode}[args.command]
    try:
        return command(args)
    except (proton.ProtonException, ValueError, KeyError) as e:
        print(f"{args.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
