"""amqp10/mapping.py: the AMQP 0-9-1 <-> AMQP 1.0 mapping (docs/amqp10-mapping.md).

Properties: a 0-9-1 message mapped to 1.0 and back has the same property values (every field
type, nested tables and arrays, decoded here by an independent reader); a 1.0 message mapped to
0-9-1 and back is the same message, type for type; what cannot be mapped is refused with the
field named, and any input either maps or is refused that way. Examples pin each row of the
documented table.
"""

from __future__ import annotations

import re
import string
import struct
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pumpd.amqp10.mapping import (
    MAX_NESTING,
    Amqp091Message,
    UnmappableMessage,
    from_amqp091,
    to_amqp091,
)
from pumpd.amqp10.message import (
    AmqpSequence,
    AmqpValue,
    Header,
    Message,
    Properties,
    decode_message,
    encode_message,
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
from pumpd.dataplane.properties import PROPERTY_NAMES, join_properties, split_properties

F32 = struct.Struct(">f")

# -- an independent 0-9-1 reader and writer (typed nodes: (type letter, value)) -------------------

Node = tuple[str, Any]
FIXED = {"b": ">b", "B": ">B", "s": ">h", "u": ">H", "I": ">i", "i": ">I", "l": ">q",
         "L": ">q", "T": ">Q"}


def enc(node: Node) -> bytes:
    kind, value = node
    if kind in FIXED:
        return kind.encode() + struct.pack(FIXED[kind], value)
    if kind == "t":
        return b"t" + bytes((value,))
    if kind in "fd":  # raw IEEE bytes
        return kind.encode() + bytes(value)
    if kind == "D":
        return b"D" + struct.pack(">BI", *value)
    if kind in "Sx":
        return kind.encode() + struct.pack(">I", len(value)) + bytes(value)
    if kind == "V":
        return b"V"
    if kind == "A":
        body = b"".join(enc(item) for item in value)
        return b"A" + struct.pack(">I", len(body)) + body
    assert kind == "F"
    return b"F" + table(value)


def table(entries: list[tuple[bytes, Node]]) -> bytes:
    body = b"".join(bytes((len(k),)) + k + enc(v) for k, v in entries)
    return struct.pack(">I", len(body)) + body


def dec(buf: bytes, pos: int) -> tuple[Any, int]:
    """A node as RabbitMQ reads it: 'L' is 'l', a boolean octet is true when not zero."""
    kind = chr(buf[pos])
    pos += 1
    if kind in FIXED:
        size = struct.calcsize(FIXED[kind])
        return ("l" if kind == "L" else kind, struct.unpack_from(FIXED[kind], buf, pos)[0]), pos + size
    if kind == "t":
        return ("t", buf[pos] != 0), pos + 1
    if kind in "fd":
        size = 4 if kind == "f" else 8
        return (kind, buf[pos : pos + size]), pos + size
    if kind == "D":
        return ("D", struct.unpack_from(">BI", buf, pos)), pos + 5
    if kind == "V":
        return ("V", None), pos
    (size,) = struct.unpack_from(">I", buf, pos)
    body, end = buf[pos + 4 : pos + 4 + size], pos + 4 + size
    if kind in "Sx":
        return (kind, body), end
    if kind == "A":
        items, p = [], 0
        while p < len(body):
            item, p = dec(body, p)
            items.append(item)
        return ("A", items), end
    assert kind == "F"
    return ("F", dec_entries(body)), end


def dec_entries(body: bytes) -> list[tuple[bytes, Any]]:
    entries, p = [], 0
    while p < len(body):
        key = body[p + 1 : p + 1 + body[p]]
        value, p = dec(body, p + 1 + body[p])
        entries.append((key, value))
    return entries


def decoded(properties: bytes) -> dict[str, Any]:
    """The property values of a raw property list; the headers as a map (a field table's order
    carries no meaning), nested tables in order."""
    out: dict[str, Any] = {}
    for name, raw in zip(PROPERTY_NAMES, split_properties(properties), strict=True):
        if raw is None:
            continue
        if name == "headers":
            entries = dec_entries(raw[4:])
            out[name] = dict(entries)
            assert len(out[name]) == len(entries), "a header written twice"
        else:
            out[name] = raw
    return out


def props091(**values: bytes | None) -> bytes:
    return join_properties([values.get(name) for name in PROPERTY_NAMES])


def sstr(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return bytes((len(raw),)) + raw


def with_headers(*entries: tuple[str, Node], **others: bytes) -> bytes:
    return props091(headers=table([(k.encode(), v) for k, v in entries]), **others)


# -- comparing AMQP 1.0 values type for type ------------------------------------------------------


def typed(v: Any) -> Any:
    kind = type(v)
    if kind in (float, Float):
        return (kind.__name__, struct.pack(">d", v))
    if kind is list:
        return ("list", [typed(i) for i in v])
    if kind is dict:
        return ("map", [(typed(k), typed(x)) for k, x in v.items()])
    if kind is Array:
        return ("array", v.code, typed(v.descriptor), [typed(i) for i in v.items])
    if kind is Described:
        return ("described", typed(v.descriptor), typed(v.value))
    if kind in (Decimal32, Decimal64, Decimal128):
        return (kind.__name__, v.raw)
    if kind is AmqpValue:
        return ("amqp-value", typed(v.value))
    if kind is AmqpSequence:
        return ("amqp-sequence", typed(v.items))
    return (kind.__name__, v)


def typed_message(m: Message) -> dict[str, Any]:
    """A message's sections type for type; an empty section is the same as none."""
    def section(s: Header | Properties | None) -> Any:
        if s is None:
            return None
        fields = {name: typed(getattr(s, name)) for name in type(s).__slots__  # type: ignore[attr-defined]
                  if getattr(s, name) is not None}
        return fields or None

    def as_map(d: dict[Any, Any] | None) -> Any:
        return {typed(k): typed(v) for k, v in d.items()} or None if d is not None else None

    return {
        "header": section(m.header),
        "message_annotations": as_map(m.message_annotations),
        "properties": section(m.properties),
        "application_properties": as_map(m.application_properties),
        "body": [typed(s) for s in m.body],
        "footer": None if m.footer is None else {typed(k): typed(v) for k, v in m.footer.items()},
    }


# -- strategies: 0-9-1 ------------------------------------------------------------------------------

TAGS = ["amqp:symbol", "amqp:char", "amqp:ulong", "amqp:uuid", "amqp:timestamp", "amqp:decimal32",
        "amqp:decimal64", "amqp:decimal128", "amqp:described", "amqp:array", "amqp:map"]
OWNED_HEADERS = {
    "x-message-id", "x-message-id-type", "x-correlation-id", "x-correlation-id-type",
    "x-amqp-user-id", "x-amqp-to", "x-amqp-subject", "x-amqp-reply-to", "x-amqp-content-type",
    "x-amqp-content-encoding", "x-amqp-absolute-expiry-time", "x-amqp-creation-time",
    "x-amqp-group-id", "x-amqp-group-sequence", "x-amqp-reply-to-group-id",
    "x-amqp-first-acquirer", "x-amqp-delivery-count", "x-amqp-footer"}
OWNED_ANNOTATIONS = {"x-exchange", "x-routing-key", "x-basic-type", "x-basic-cluster-id", "x-cc"}

f32_raw = st.binary(min_size=4, max_size=4).filter(lambda r: F32.pack(F32.unpack(r)[0]) == r)
leaf091: st.SearchStrategy[Node] = st.one_of(
    st.tuples(st.just("t"), st.integers(0, 255)),
    st.tuples(st.just("b"), st.integers(-128, 127)),
    st.tuples(st.just("B"), st.integers(0, 255)),
    st.tuples(st.just("s"), st.integers(-(2**15), 2**15 - 1)),
    st.tuples(st.just("u"), st.integers(0, 2**16 - 1)),
    st.tuples(st.just("I"), st.integers(-(2**31), 2**31 - 1)),
    st.tuples(st.just("i"), st.integers(0, 2**32 - 1)),
    st.tuples(st.sampled_from("lL"), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just("f"), f32_raw),
    st.tuples(st.just("d"), st.binary(min_size=8, max_size=8)),
    st.tuples(st.just("D"), st.tuples(st.integers(0, 255), st.integers(0, 2**32 - 1))),
    st.tuples(st.just("S"), st.text(max_size=12).map(str.encode)),
    st.tuples(st.just("S"), st.sampled_from(["9223372036854775808", "18446744073709551615", "a",
                                             str(uuid.UUID(int=7)), "é"]).map(str.encode)),
    st.tuples(st.just("x"), st.binary(max_size=17)),
    st.tuples(st.just("T"), st.integers(0, (2**63 - 1) // 1000)),
    st.just(("V", None)),
)
nested_key = st.one_of(st.text("abcXYZ09-_:", max_size=6), st.sampled_from(TAGS)).map(str.encode)


def _containers(children: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
    return st.one_of(
        st.tuples(st.just("A"), st.lists(children, max_size=4)),
        st.tuples(st.just("F"), st.lists(st.tuples(nested_key, children), max_size=4,
                                         unique_by=lambda e: e[0])),
    )


node091 = st.recursive(leaf091, _containers, max_leaves=12)


def _free_header(name: str) -> bool:
    return (name not in OWNED_HEADERS and name not in OWNED_ANNOTATIONS
            and not name.startswith("x-amqp-header-"))


header_name = st.one_of(
    st.from_regex(r"x-[a-z0-9-]{1,14}", fullmatch=True),
    st.text(max_size=10).filter(lambda n: not n.startswith("x-")),
    st.text(string.ascii_letters, max_size=10),
    st.just("CC"),
).filter(_free_header)
short_text = st.text(max_size=20).filter(lambda t: len(t.encode()) <= 255)
id091 = st.one_of(
    short_text,
    st.uuids().map(lambda u: f"urn:uuid:{u}"),
    st.uuids().map(lambda u: f"urn:uuid:{str(u).upper()}"),
    st.integers(0, 2**64).map(str),
)


@st.composite
def amqp091_messages(draw: st.DrawFn) -> tuple[bytes, bytes, bytes, bytes]:
    values: dict[str, bytes] = {}

    def maybe(name: str, strategy: st.SearchStrategy[bytes]) -> None:
        if draw(st.booleans()):
            values[name] = draw(strategy)

    ascii_text = st.text("abcdefghijklmnopqrstuvwxyz/+-.;= 0123456789", max_size=20)
    maybe("content_type", ascii_text.map(sstr))
    maybe("content_encoding", ascii_text.map(sstr))
    if draw(st.booleans()):
        entries = draw(st.lists(st.tuples(header_name, node091), max_size=6,
                                unique_by=lambda e: e[0]))
        # a list or map under a name that is not ASCII is refused (a test below)
        entries = [(k, v) for k, v in entries if k.isascii() or v[0] not in "AF"]
        values["headers"] = table([(k.encode(), v) for k, v in entries])
    maybe("delivery_mode", st.sampled_from([b"\x01", b"\x02"]))
    maybe("priority", st.integers(0, 255).map(lambda p: bytes((p,))))
    maybe("correlation_id", id091.map(sstr))
    maybe("reply_to", short_text.map(sstr))
    maybe("expiration", st.integers(0, 2**32 - 1).map(lambda n: sstr(str(n))))
    maybe("message_id", id091.map(sstr))
    maybe("timestamp", st.integers(0, (2**63 - 1) // 1000).map(lambda s: struct.pack(">Q", s)))
    maybe("type", short_text.map(sstr))
    maybe("user_id", st.binary(max_size=255).map(sstr))
    maybe("app_id", short_text.map(sstr))
    maybe("cluster_id", short_text.map(sstr))
    exchange = draw(short_text).encode()
    routing_key = draw(short_text).encode()
    return exchange, routing_key, props091(**values), draw(st.binary(max_size=20))


# -- strategies: AMQP 1.0 ---------------------------------------------------------------------------

symbols = st.text("abcdefghijklmnopqrstuvwxyz:-_", max_size=10).map(Symbol)
descriptors = st.one_of(st.integers(0, 2**64 - 1).map(ULong), symbols)
scalar10 = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
    st.floats(), st.floats(width=32, allow_nan=False).map(Float), st.just(Float("nan")),
    st.text(max_size=12),
    st.sampled_from(["urn:uuid:" + str(uuid.UUID(int=1)), str(uuid.UUID(int=2)), "18446744073709551615"]),
    st.binary(max_size=12), st.uuids(),
    st.integers(0, 255).map(UByte), st.integers(0, 2**16 - 1).map(UShort),
    st.integers(0, 2**32 - 1).map(UInt), st.integers(0, 2**64 - 1).map(ULong),
    st.integers(-128, 127).map(Byte), st.integers(-(2**15), 2**15 - 1).map(Short),
    st.integers(-(2**31), 2**31 - 1).map(Int),
    st.integers(-(2**63), 2**63 - 1).map(Timestamp),
    st.integers(-(2**40), 2**40).map(lambda s: Timestamp(s * 1000)),
    st.characters().map(Char), symbols, st.sampled_from(TAGS).map(Symbol),
    st.binary(min_size=4, max_size=4).map(Decimal32),
    st.binary(min_size=8, max_size=8).map(Decimal64),
    st.tuples(st.integers(0, 255), st.integers(0, 2**32 - 1)).map(
        lambda d: Decimal64((((398 - d[0]) << 53) | d[1]).to_bytes(8, "big"))),
    st.binary(min_size=16, max_size=16).map(Decimal128),
)
map_keys = st.one_of(symbols, st.sampled_from(TAGS).map(Symbol), st.text(max_size=5),
                     st.integers(0, 2**64 - 1).map(ULong), st.integers(-5, 5), st.booleans())


# arrays AMQP 1.0 can encode: an element code and elements of its type
ARRAY_ELEMENTS: dict[int, st.SearchStrategy[Any]] = {
    0x40: st.none(), 0x56: st.booleans(), 0x50: st.integers(0, 255).map(UByte),
    0x70: st.integers(0, 2**32 - 1).map(UInt), 0x80: st.integers(0, 2**64 - 1).map(ULong),
    0x71: st.integers(-(2**31), 2**31 - 1).map(Int), 0x81: st.integers(-(2**63), 2**63 - 1),
    0x83: st.integers(-(2**63), 2**63 - 1).map(Timestamp), 0x98: st.uuids(),
    0xA0: st.binary(max_size=4), 0xA1: st.text(max_size=4), 0xA3: symbols,
}


arrays10 = st.sampled_from(sorted(ARRAY_ELEMENTS)).flatmap(lambda code: st.builds(
    Array, st.just(code), st.lists(ARRAY_ELEMENTS[code], max_size=3).map(tuple),
    st.one_of(st.none(), descriptors)))


def _containers10(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(map_keys, children, max_size=4),
        st.builds(Described, descriptors, children),
        arrays10,
        st.builds(Array, st.just(0xC0), st.lists(st.lists(children, max_size=2),
                                                 max_size=2).map(tuple)),
        st.builds(Array, st.just(0xC1), st.lists(st.dictionaries(map_keys, children, max_size=2),
                                                 max_size=2).map(tuple)),
    )


value10 = st.recursive(scalar10, _containers10, max_leaves=10)
simple10 = st.one_of(scalar10, st.builds(Described, descriptors, value10))
timestamps = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**40).map(lambda s: s * 1000))
long_text = st.one_of(short_text, st.text(min_size=1, max_size=5).map(lambda t: t * 60))
ids10 = st.one_of(st.integers(0, 2**64 - 1).map(ULong), st.uuids(), st.binary(max_size=300),
                  long_text, st.uuids().map(lambda u: f"urn:uuid:{u}"),
                  st.integers(0, 2**64).map(str))
annotation_key = st.one_of(
    st.from_regex(r"x-[a-z0-9-]{1,14}", fullmatch=True),
    st.sampled_from(["x-opt-jms-dest", "x-opt-enqueued-time", "x-death", "x-amqp-1.0-properties",
                     "x-basic-expiration", "x-message-id-types"]),
).filter(_free_header)


bodies10 = st.one_of(
    st.binary(max_size=20).map(lambda b: [b]),
    st.lists(st.binary(max_size=4), min_size=2, max_size=3),
    st.lists(st.lists(value10, max_size=3).map(AmqpSequence), max_size=2),
    value10.map(lambda v: [AmqpValue(v)]),
)
# headers whose lists and maps travel as x-amqp-header-NAME annotations
complex_headers10 = st.dictionaries(
    st.text(string.printable, max_size=6).filter(lambda k: not k.startswith("x-")),
    st.one_of(st.lists(value10, max_size=3), st.dictionaries(map_keys, value10, max_size=3),
              arrays10),
    max_size=2)


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


long_symbol = st.one_of(symbols, st.just(Symbol("a" * 300)))
# fields as the codec decodes them (UByte, UInt, Timestamp: test_plain_ints_... for int)
uints = st.integers(0, 2**32 - 1).map(UInt)
headers10 = optional(st.builds(
    Header, optional(st.booleans()), optional(st.integers(0, 255).map(UByte)),
    optional(uints), optional(st.booleans()), optional(uints)))
properties10 = optional(st.builds(
    Properties, message_id=optional(ids10), user_id=optional(st.binary(max_size=300)),
    to=optional(st.text(max_size=10)), subject=optional(st.text(max_size=10)),
    reply_to=optional(long_text), correlation_id=optional(ids10),
    content_type=optional(long_symbol), content_encoding=optional(long_symbol),
    absolute_expiry_time=optional(timestamps.map(Timestamp)),
    creation_time=optional(timestamps.map(Timestamp)),
    group_id=optional(long_text), group_sequence=optional(uints),
    reply_to_group_id=optional(st.text(max_size=10))))
application10 = optional(st.dictionaries(
    st.text(max_size=8).filter(lambda k: not k.startswith("x-")), simple10, max_size=5))
x_annotations10 = st.dictionaries(annotation_key, value10, max_size=4)
cc10 = st.lists(value10, max_size=3)
footer10 = optional(st.dictionaries(st.one_of(symbols, descriptors), value10, max_size=3))


@st.composite
def amqp10_messages(draw: st.DrawFn) -> Message:
    application = draw(application10)
    annotations: dict[Symbol | ULong, Any] = {
        Symbol("x-exchange"): draw(short_text), Symbol("x-routing-key"): draw(short_text)}
    for key, value in draw(x_annotations10).items():
        annotations[Symbol(key)] = value
    if draw(st.booleans()):
        annotations[Symbol("x-basic-type")] = draw(short_text)
    if draw(st.booleans()):
        annotations[Symbol("x-basic-cluster-id")] = draw(short_text)
    if draw(st.booleans()):
        annotations[Symbol("x-cc")] = draw(cc10)
    for name, value in draw(complex_headers10).items():
        if (name == "CC" and type(value) is list) or (application and name in application):
            continue
        annotations[Symbol("x-amqp-header-" + name)] = value
    body = draw(bodies10)
    if len(body) != 1 or type(body[0]) is not bytes:
        annotations.pop(Symbol("x-basic-type"), None)  # refused beside such a body (a test below)
    return Message(header=draw(headers10), message_annotations=annotations,
                   properties=draw(properties10), application_properties=application, body=body,
                   footer=draw(footer10))


# -- round trips ------------------------------------------------------------------------------------


@given(amqp091_messages())
def test_amqp091_to_10_and_back_keeps_every_property_value(message: tuple[bytes, ...]) -> None:
    exchange, routing_key, properties, body = message
    mapped = from_amqp091(exchange, routing_key, properties, body)
    back = to_amqp091(mapped)
    assert back.routing_key == routing_key
    assert back.body == body
    assert decoded(back.properties) == decoded(properties)
    assert typed_message(from_amqp091(exchange, routing_key, *back[1:])) == typed_message(mapped)
    # the AMQP 1.0 message is one the codec encodes, and decodes as it was
    assert typed_message(decode_message(encode_message(mapped))) == typed_message(mapped)


@given(amqp10_messages())
def test_amqp10_to_091_and_back_keeps_the_message_type_for_type(message: Message) -> None:
    out = to_amqp091(message)
    annotations = message.message_annotations or {}
    routing_key = annotations[Symbol("x-routing-key")].encode()
    assert out.routing_key == routing_key
    exchange = annotations[Symbol("x-exchange")].encode()
    back = from_amqp091(exchange, routing_key, out.properties, out.body)
    assert typed_message(back) == typed_message(message)
    assert typed_message(decode_message(encode_message(back))) == typed_message(back)
    # and the 0-9-1 message written is one that maps back to itself
    assert decoded(to_amqp091(back).properties) == decoded(out.properties)


# -- every input either maps or is refused with the field named ------------------------------------


WHERE = re.compile(
    r"^(properties|exchange|routing key|headers\[.*|[a-z_]+"
    r"|header\.[a-z-]+|properties\.[a-z-]+|application-properties\[.*|message-annotations\[.*"
    r"|footer.*|body)$")


@given(st.binary(max_size=64), st.binary(max_size=8), st.binary(max_size=8))
def test_any_property_bytes_map_or_are_refused_by_name(properties: bytes, exchange: bytes,
                                                       routing_key: bytes) -> None:
    try:
        from_amqp091(exchange, routing_key, properties, b"")
    except UnmappableMessage as exc:
        assert WHERE.match(exc.where), exc.where


@given(st.lists(st.tuples(st.sampled_from(["a", "x-a", "CC", "x-message-id", "x-amqp-to",
                                           "x-amqp-creation-time", "x-exchange"]),
                          st.binary(max_size=24)), max_size=3),
       st.sampled_from([None, sstr("5"), sstr("urn:uuid:" + str(uuid.UUID(int=3)))]))
def test_any_header_values_map_or_are_refused_by_name(entries: list[tuple[str, bytes]],
                                                      message_id: bytes | None) -> None:
    raw_entries = b"".join(sstr(k) + v for k, v in entries)
    props = props091(headers=struct.pack(">I", len(raw_entries)) + raw_entries,
                     message_id=message_id)
    try:
        from_amqp091(b"", b"", props, b"")
    except UnmappableMessage as exc:
        assert WHERE.match(exc.where), exc.where


junk = st.one_of(value10, st.sets(st.integers(), max_size=2), st.just(object()),
                 st.integers(2**64, 2**65), st.text(max_size=300),
                 st.text(st.characters(categories=["Cs"]), min_size=1, max_size=2),
                 st.builds(Array, st.integers(-1, 300), st.lists(scalar10, max_size=2).map(tuple),
                           st.one_of(st.none(), descriptors, st.integers())),
                 st.builds(Described, st.one_of(descriptors, st.integers()), scalar10))


@given(st.builds(
    Message,
    header=optional(st.builds(Header, junk, junk, junk, junk, junk)),
    message_annotations=optional(st.dictionaries(st.one_of(map_keys, annotation_key.map(Symbol)),
                                                 junk, max_size=3)),
    properties=optional(st.builds(Properties, junk, junk, junk, junk, junk, junk, junk, junk,
                                  junk, junk, junk, junk, junk)),
    application_properties=optional(st.dictionaries(map_keys, junk, max_size=3)),
    body=st.lists(st.one_of(st.binary(max_size=4), st.builds(AmqpValue, junk)), max_size=2),
    footer=optional(st.dictionaries(map_keys, junk, max_size=2))))
def test_any_message_maps_or_is_refused_by_name(message: Message) -> None:
    try:
        to_amqp091(message)
    except UnmappableMessage as exc:
        assert WHERE.match(exc.where), exc.where


# -- the documented rules, row by row --------------------------------------------------------------


def one(properties: bytes, exchange: bytes = b"ex", routing_key: bytes = b"rk",
        body: bytes = b"b") -> Message:
    return from_amqp091(exchange, routing_key, properties, body)


def annotations_of(m: Message) -> dict[Any, Any]:
    assert m.message_annotations is not None
    return m.message_annotations


def test_basic_properties_map_as_rabbitmq_maps_them() -> None:
    m = one(props091(content_type=sstr("text/plain"), content_encoding=sstr("gzip"),
                     delivery_mode=b"\x02", priority=b"\x07", correlation_id=sstr("c"),
                     reply_to=sstr("q"), expiration=sstr("60000"), message_id=sstr("m"),
                     timestamp=struct.pack(">Q", 1_700_000_000), type=sstr("order"),
                     user_id=sstr("guest"), app_id=sstr("shop"), cluster_id=sstr("c1")))
    assert m.header == Header(durable=True, priority=7, ttl=60000)
    assert m.properties == Properties(
        message_id="m", user_id=b"guest", reply_to="q", correlation_id="c",
        content_type=Symbol("text/plain"), content_encoding=Symbol("gzip"),
        creation_time=1_700_000_000_000, group_id="shop")
    assert typed(annotations_of(m)) == typed({
        Symbol("x-exchange"): "ex", Symbol("x-routing-key"): "rk", Symbol("x-basic-type"): "order",
        Symbol("x-basic-cluster-id"): "c1"})
    assert m.body == [b"b"]
    assert m.application_properties is None
    assert one(props091(delivery_mode=b"\x01")).header == Header(durable=False)
    assert one(props091()).header is None
    assert one(props091()).properties is None


def test_headers_split_into_annotations_and_application_properties() -> None:
    m = one(with_headers(("x-death", ("A", [("F", [(b"count", ("l", 1))])])),
                         ("k", ("S", b"v")), ("n", ("I", -1)),
                         ("CC", ("A", [("S", b"other")])),
                         ("tags", ("A", [("S", b"a")])), ("cfg", ("F", []))))
    assert typed(m.application_properties) == typed({"k": "v", "n": Int(-1)})
    anns = annotations_of(m)
    assert typed(anns[Symbol("x-death")]) == typed([{Symbol("count"): 1}])
    assert typed(anns[Symbol("x-cc")]) == typed(["other"])
    assert typed(anns[Symbol("x-amqp-header-tags")]) == typed(["a"])
    assert typed(anns[Symbol("x-amqp-header-cfg")]) == typed({})
    out = to_amqp091(m)
    assert set(decoded(out.properties)["headers"]) == {b"x-death", b"k", b"n", b"CC", b"tags", b"cfg"}


EVERY_FIELD_TYPE: list[tuple[Node, Any]] = [
    (("t", 1), True), (("t", 0), False), (("b", -2), Byte(-2)), (("B", 200), UByte(200)),
    (("s", -300), Short(-300)), (("u", 60000), UShort(60000)), (("I", -7), Int(-7)),
    (("i", 4_000_000_000), UInt(4_000_000_000)), (("l", -(2**40)), -(2**40)),
    (("L", 2**62), 2**62), (("f", F32.pack(1.5)), Float(1.5)),
    (("d", struct.pack(">d", -0.25)), -0.25),
    (("D", (2, 150)), Decimal64((((398 - 2) << 53) | 150).to_bytes(8, "big"))),
    (("S", "é".encode()), "é"), (("x", b"\x00\xff"), b"\x00\xff"),
    (("T", 1_700_000_000), Timestamp(1_700_000_000_000)), (("V", None), None),
    (("A", [("b", 1), ("V", None)]), [Byte(1), None]),
    (("F", [(b"k", ("u", 1))]), {Symbol("k"): UShort(1)}),
]


@pytest.mark.parametrize(("node", "value"), EVERY_FIELD_TYPE, ids=lambda p: repr(p)[:24])
def test_every_field_type_has_its_amqp10_type(node: Node, value: Any) -> None:
    m = one(with_headers(("x-v", node)))
    assert typed(annotations_of(m)[Symbol("x-v")]) == typed(value)
    back = decoded(to_amqp091(m).properties)["headers"][b"x-v"]
    assert back == dec(enc(node), 0)[0]


TAGGED: list[tuple[Any, str, Node]] = [
    (Symbol("text/plain"), "amqp:symbol", ("S", b"text/plain")),
    (Char("z"), "amqp:char", ("S", b"z")),
    (ULong(5), "amqp:ulong", ("l", 5)),
    (ULong(2**64 - 1), "amqp:ulong", ("S", b"18446744073709551615")),
    (uuid.UUID(int=9), "amqp:uuid", ("S", str(uuid.UUID(int=9)).encode())),
    (Timestamp(1_700_000_000_123), "amqp:timestamp", ("l", 1_700_000_000_123)),
    (Timestamp(-1000), "amqp:timestamp", ("l", -1000)),
    (Decimal32(b"\x01\x02\x03\x04"), "amqp:decimal32", ("x", b"\x01\x02\x03\x04")),
    (Decimal64(b"\x80" + bytes(7)), "amqp:decimal64", ("x", b"\x80" + bytes(7))),
    (Decimal128(bytes(16)), "amqp:decimal128", ("x", bytes(16))),
    (Described(Symbol("d"), 1), "amqp:described",
     ("A", [("F", [(b"amqp:symbol", ("S", b"d"))]), ("l", 1)])),
    (Array(0x71, (Int(1),)), "amqp:array", ("A", [("B", 0x71), ("V", None), ("A", [("I", 1)])])),
    ({"k": 1}, "amqp:map", ("A", [("S", b"k"), ("l", 1)])),
    ({Symbol("amqp:ulong"): 5}, "amqp:map",
     ("A", [("F", [(b"amqp:symbol", ("S", b"amqp:ulong"))]), ("l", 5)])),
]


@pytest.mark.parametrize(("value", "tag", "node"), TAGGED, ids=lambda p: repr(p)[:24])
def test_types_0_9_1_lacks_travel_as_tagged_tables(value: Any, tag: str, node: Node) -> None:
    m = Message(message_annotations={Symbol("x-v"): value}, body=[b""])
    written = decoded(to_amqp091(m).properties)["headers"][b"x-v"]
    assert written == ("F", [(tag.encode(), dec(enc(node), 0)[0])])
    back = annotations_of(from_amqp091(b"", b"", to_amqp091(m).properties, b""))
    assert typed(back[Symbol("x-v")]) == typed(value)


def test_an_array_code_is_the_codecs_one_code_for_its_type() -> None:
    m = ann("x-a", Array(0xB1, ("long string form",)))  # str32's code: a string array
    written = decoded(to_amqp091(m).properties)["headers"][b"x-a"]
    assert written[1][0][1][1][0] == ("B", 0xA1)
    back = annotations_of(from_amqp091(b"", b"", to_amqp091(m).properties, b""))[Symbol("x-a")]
    assert back == Array(0xA1, ("long string form",))
    # a tag naming another code is not the mapping's: the table stays a map
    node = ("F", [(b"amqp:array", ("A", [("B", 0xB1), ("V", None), ("A", [])]))])
    assert type(annotations_of(one(with_headers(("x-a", node))))[Symbol("x-a")]) is dict


def test_a_table_not_in_a_tagged_form_is_a_map() -> None:
    for node in [("F", [(b"amqp:ulong", ("l", -1))]), ("F", [(b"amqp:timestamp", ("l", 2000))]),
                 ("F", [(b"amqp:symbol", ("l", 1))]), ("F", [(b"amqp:map", ("A", [("S", b"k")]))]),
                 ("F", [(b"amqp:other", ("l", 1))])]:
        value = annotations_of(one(with_headers(("x-v", node))))[Symbol("x-v")]
        assert type(value) is dict, node


def test_a_decimal_too_long_for_a_ulong_is_a_map_entry() -> None:
    node = ("F", [(b"amqp:ulong", ("S", b"9" * 5000))])
    value = annotations_of(one(with_headers(("x-v", node))))[Symbol("x-v")]
    assert typed(value) == typed({Symbol("amqp:ulong"): "9" * 5000})


def test_ids_follow_rabbitmq_4() -> None:
    u = uuid.UUID("0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d")
    cases: list[tuple[Any, dict[str, Any]]] = [
        ("abc", {"message_id": sstr("abc")}),
        (u, {"message_id": sstr(f"urn:uuid:{u}")}),
        (ULong(42), {"message_id": sstr("42"), "headers": {b"x-message-id-type": ("S", b"ulong")}}),
        (b"\x01", {"headers": {b"x-message-id": ("x", b"\x01")}}),
        ("l" * 256, {"headers": {b"x-message-id": ("S", b"l" * 256)}}),
        (f"urn:uuid:{u}", {"headers": {b"x-message-id": ("S", f"urn:uuid:{u}".encode())}}),
    ]
    for value, expected in cases:
        m = Message(properties=Properties(message_id=value), body=[b""])
        assert decoded(to_amqp091(m).properties) == expected, value
        back = from_amqp091(b"", b"", to_amqp091(m).properties, b"")
        assert back.properties is not None
        assert typed(back.properties.message_id) == typed(value)
    # an upper-case urn is not the canonical form: it stays a string
    upper = f"urn:uuid:{str(u).upper()}"
    mapped = one(props091(correlation_id=sstr(upper)))
    assert mapped.properties is not None and mapped.properties.correlation_id == upper


def test_plain_ints_are_taken_where_the_codec_takes_them() -> None:
    m = Message(header=Header(priority=4, ttl=5, delivery_count=6),
                properties=Properties(message_id=7, creation_time=8000, group_sequence=9,
                                      absolute_expiry_time=10),
                body=[b""])
    back = from_amqp091(b"", b"", to_amqp091(m).properties, b"")
    back.message_annotations = None  # x-exchange and x-routing-key: the 0-9-1 delivery's
    assert typed_message(back) == typed_message(decode_message(encode_message(m)))
    assert back.properties is not None and type(back.properties.message_id) is ULong


def test_creation_time_in_milliseconds_is_kept_beside_its_seconds() -> None:
    m = Message(properties=Properties(creation_time=1_700_000_000_123), body=[b""])
    got = decoded(to_amqp091(m).properties)
    assert got["timestamp"] == struct.pack(">Q", 1_700_000_000)
    assert got["headers"] == {b"x-amqp-creation-time": ("l", 1_700_000_000_123)}
    back = from_amqp091(b"", b"", to_amqp091(m).properties, b"").properties
    assert back is not None and back.creation_time == 1_700_000_000_123
    before_1970 = Message(properties=Properties(creation_time=-5), body=[b""])
    got = decoded(to_amqp091(before_1970).properties)
    assert "timestamp" not in got and got["headers"] == {b"x-amqp-creation-time": ("l", -5)}


def test_fields_0_9_1_lacks_travel_in_x_amqp_headers() -> None:
    m = Message(
        header=Header(first_acquirer=True, delivery_count=3),
        properties=Properties(to="/queues/a", subject="s", reply_to_group_id="g",
                              group_sequence=9, absolute_expiry_time=7, reply_to="r" * 256,
                              group_id="g" * 256, user_id=b"u" * 256,
                              content_type=Symbol("t" * 256)),
        footer={Symbol("x-sig"): b"\x00"}, body=[b""])
    headers = decoded(to_amqp091(m).properties)["headers"]
    assert headers == {
        b"x-amqp-first-acquirer": ("t", True), b"x-amqp-delivery-count": ("i", 3),
        b"x-amqp-to": ("S", b"/queues/a"), b"x-amqp-subject": ("S", b"s"),
        b"x-amqp-reply-to-group-id": ("S", b"g"), b"x-amqp-group-sequence": ("i", 9),
        b"x-amqp-absolute-expiry-time": ("l", 7), b"x-amqp-reply-to": ("S", b"r" * 256),
        b"x-amqp-group-id": ("S", b"g" * 256), b"x-amqp-user-id": ("x", b"u" * 256),
        b"x-amqp-content-type": ("S", b"t" * 256),
        b"x-amqp-footer": ("F", [(b"x-sig", ("x", b"\x00"))]),
    }
    back = from_amqp091(b"", b"", to_amqp091(m).properties, b"")
    assert (back.header, back.properties, back.footer) == (m.header, m.properties, m.footer)


def test_routing_key_and_exchange_annotations() -> None:
    m = Message(message_annotations={Symbol("x-routing-key"): "rk", Symbol("x-exchange"): "e"},
                body=[b""])
    out = to_amqp091(m)
    assert out == Amqp091Message(b"rk", b"\x00\x00", b"")
    assert to_amqp091(Message(body=[b"z"])) == Amqp091Message(None, b"\x00\x00", b"z")


def test_an_empty_headers_table_is_kept_apart_from_none() -> None:
    empty = one(props091(headers=b"\x00\x00\x00\x00"))
    assert empty.application_properties == {}
    assert split_properties(to_amqp091(empty).properties)[2] == b"\x00\x00\x00\x00"
    assert one(props091()).application_properties is None
    assert split_properties(to_amqp091(one(props091())).properties)[2] is None


BODIES: list[list[Any]] = [
    [AmqpValue("hello")], [AmqpValue(None)], [AmqpSequence([1, Symbol("s")]), AmqpSequence([])],
    [b"one", b"two"], [],
]


@pytest.mark.parametrize("body", BODIES, ids=repr)
def test_other_bodies_are_encoded_and_typed_amqp_1_0_as_rabbitmq_does(body: list[Any]) -> None:
    footer = {Symbol("x-sig"): b"\x01"}
    m = Message(body=body, footer=footer)
    out = to_amqp091(m)
    assert out.body == encode_message(Message(body=body, footer=footer))
    assert decoded(out.properties) == {"type": sstr("amqp-1.0")}
    back = from_amqp091(b"", b"", out.properties, out.body)
    assert typed(back.body) == typed(body)
    assert typed(back.footer) == typed(footer)


def test_a_body_typed_amqp_1_0_holds_body_sections_and_footer_only() -> None:
    typed_10 = props091(type=sstr("amqp-1.0"))
    with_header = encode_message(Message(header=Header(durable=True), body=[AmqpValue(1)]))
    for body, why in [(with_header, "with a header section"),
                      (encode_message(Message(body=[b"x"])), "holding one data section"),
                      (b"\x00\x53\x77", "not AMQP 1.0 body sections")]:
        with pytest.raises(UnmappableMessage, match=why) as info:
            one(typed_10, body=body)
        assert info.value.where == "body"
    assert decode_message(with_header).header == Header(durable=True)


# -- refusals name the field ------------------------------------------------------------------------

REFUSED_091: list[tuple[bytes, str]] = [
    (b"\x00", "properties"),
    (props091(delivery_mode=b"\x03"), "delivery_mode"),
    (props091(expiration=sstr("007")), "expiration"),
    (props091(expiration=sstr("4294967296")), "expiration"),
    (props091(message_id=sstr(b"\xff")), "message_id"),
    (props091(content_type=sstr("tëxt")), "content_type"),
    (props091(reply_to=sstr(b"\xc3")), "reply_to"),
    (props091(timestamp=struct.pack(">Q", 2**63)), "timestamp"),
    (with_headers(("k", ("S", b"\xff"))), "headers['k']"),
    (with_headers(("x-k", ("f", b"\x7f\x80\x00\x01"))), "headers['x-k']"),
    (with_headers(("x-k", ("T", 2**63))), "headers['x-k']"),
    (with_headers(("x-k", ("F", [(b"\xc3\xa9", ("V", None))]))), "headers['x-k']['é']"),
    (with_headers(("x-k", ("F", [(b"a", ("V", None)), (b"a", ("V", None))]))), "headers['x-k']"),
    (with_headers(("x-é", ("V", None))), "headers['x-é']"),
    (with_headers(("é", ("A", []))), "headers['é']"),
    (with_headers(("k", ("V", None)), ("k", ("V", None))), "headers['k']"),
    (props091(headers=struct.pack(">I", 2) + b"\x01k"), "headers"),
    (props091(headers=struct.pack(">I", 4) + b"\x01kI\x00"), "headers['k']"),
    (props091(headers=struct.pack(">I", 7) + b"\x01kS\x00\x00\x00\x09"), "headers['k']"),
    (props091(headers=struct.pack(">I", 3) + b"\x01k?"), "headers['k']"),
    (with_headers(("x-exchange", ("S", b"e"))), "headers['x-exchange']"),
    (with_headers(("x-cc", ("A", []))), "headers['x-cc']"),
    (with_headers(("x-amqp-header-a", ("A", []))), "headers['x-amqp-header-a']"),
    (with_headers(("x-amqp-to", ("l", 1))), "headers['x-amqp-to']"),
    (with_headers(("x-message-id", ("S", b"short"))), "headers['x-message-id']"),
    (with_headers(("x-message-id", ("x", b"b")), message_id=sstr("m")), "headers['x-message-id']"),
    (with_headers(("x-message-id-type", ("S", b"ulong")), message_id=sstr("-1")),
     "headers['x-message-id-type']"),
    (with_headers(("x-message-id-type", ("S", b"ulong"))), "headers['x-message-id-type']"),
    (with_headers(("x-amqp-user-id", ("x", b"u")), user_id=sstr("v")), "headers['x-amqp-user-id']"),
    (with_headers(("x-amqp-reply-to", ("S", b"short"))), "headers['x-amqp-reply-to']"),
    (with_headers(("x-amqp-creation-time", ("l", 1500))), "headers['x-amqp-creation-time']"),
    (with_headers(("x-amqp-creation-time", ("l", 2000)), timestamp=struct.pack(">Q", 2)),
     "headers['x-amqp-creation-time']"),
    (with_headers(("x-amqp-footer", ("A", []))), "headers['x-amqp-footer']"),
    (with_headers(("x-amqp-footer", ("F", [])), type=sstr("amqp-1.0")), "headers['x-amqp-footer']"),
    (props091(type=sstr("amqp-1.0")), "body"),
]


@pytest.mark.parametrize(("properties", "where"), REFUSED_091, ids=[w for _, w in REFUSED_091])
def test_unmappable_0_9_1_messages_are_refused_by_name(properties: bytes, where: str) -> None:
    with pytest.raises(UnmappableMessage) as info:
        one(properties)
    assert info.value.where == where, info.value
    assert str(info.value).startswith(where + ": ")


def test_non_utf8_exchange_or_routing_key_is_refused() -> None:
    with pytest.raises(UnmappableMessage, match=r"^exchange: "):
        one(props091(), exchange=b"\xff")
    with pytest.raises(UnmappableMessage, match=r"^routing key: "):
        one(props091(), routing_key=b"\xff")


def nest091(depth: int) -> Node:
    node: Node = ("V", None)
    for _ in range(depth):
        node = ("A", [node])
    return node


def test_nesting_is_bounded_both_ways() -> None:
    one(with_headers(("x-k", nest091(MAX_NESTING))))
    with pytest.raises(UnmappableMessage) as info:
        one(with_headers(("x-k", nest091(MAX_NESTING + 1))))
    assert info.value.where == "headers['x-k']" + "[0]" * MAX_NESTING
    deep: Any = None
    for _ in range(MAX_NESTING + 1):
        deep = [deep]
    with pytest.raises(UnmappableMessage) as info:
        to_amqp091(Message(message_annotations={Symbol("x-k"): deep}, body=[b""]))
    assert info.value.where.startswith("message-annotations[Symbol('x-k')][0]")
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(UnmappableMessage):
        to_amqp091(Message(message_annotations={Symbol("x-k"): cyclic}, body=[b""]))


def ann(key: str, value: Any) -> Message:
    return Message(message_annotations={Symbol(key): value}, body=[b""])


REFUSED_10: list[tuple[Message, str]] = [
    (Message(body=[AmqpValue("v"), AmqpValue("w")]), "body"),
    (Message(body=[b"a", AmqpSequence([1])]), "body"),
    (Message(body=["text"]), "body"),
    (Message(body=[AmqpValue({1, 2})]), "body"),
    (Message(body=[AmqpValue(1)], footer={Symbol("x-f"): object()}), "footer"),
    (Message(body=[AmqpValue(1)], message_annotations={Symbol("x-basic-type"): "t"}),
     "message-annotations[Symbol('x-basic-type')]"),
    (ann("x-basic-type", "amqp-1.0"), "message-annotations[Symbol('x-basic-type')]"),
    (ann("x-a", Array(0x71, ("not an int",))), "message-annotations[Symbol('x-a')]"),
    (ann("x-a", Array(0x33, ())), "message-annotations[Symbol('x-a')]"),
    (Message(header=Header(durable=1), body=[b""]), "header.durable"),  # type: ignore[arg-type]
    (Message(header=Header(priority=256), body=[b""]), "header.priority"),
    (Message(header=Header(ttl=-1), body=[b""]), "header.ttl"),
    (Message(header=Header(delivery_count=True), body=[b""]), "header.delivery-count"),  # type: ignore[arg-type]
    (Message(properties=Properties(message_id=-1), body=[b""]), "properties.message-id"),
    (Message(properties=Properties(message_id=2**64), body=[b""]), "properties.message-id"),
    (Message(properties=Properties(message_id=Symbol("s")), body=[b""]), "properties.message-id"),
    (Message(properties=Properties(correlation_id=1.5), body=[b""]), "properties.correlation-id"),
    (Message(properties=Properties(user_id="text"), body=[b""]), "properties.user-id"),  # type: ignore[arg-type]
    (Message(properties=Properties(content_type="text/plain"), body=[b""]),  # type: ignore[arg-type]
     "properties.content-type"),
    (Message(properties=Properties(content_type=Symbol("tëxt")), body=[b""]),
     "properties.content-type"),
    (Message(properties=Properties(to=Symbol("q")), body=[b""]), "properties.to"),
    (Message(properties=Properties(creation_time=2**63), body=[b""]), "properties.creation-time"),
    (Message(properties=Properties(group_sequence=-1), body=[b""]), "properties.group-sequence"),
    (Message(application_properties={"x-a": 1}, body=[b""]), "application-properties['x-a']"),
    (Message(application_properties={"l": [1]}, body=[b""]), "application-properties['l']"),
    (Message(application_properties={"k" * 256: 1}, body=[b""]),
     "application-properties['" + "k" * 56 + "...]"),
    (Message(application_properties={Symbol("s"): 1}, body=[b""]),  # type: ignore[dict-item]
     "application-properties[Symbol('s')]"),
    (Message(application_properties={"i": 2**63}, body=[b""]), "application-properties['i']"),
    (Message(application_properties={"s": {1, 2}}, body=[b""]), "application-properties['s']"),
    (Message(application_properties={"d": Decimal32(b"\x00")}, body=[b""]),
     "application-properties['d']"),
    (Message(application_properties={"d": Described(1, 2)}, body=[b""]),
     "application-properties['d']"),
    (Message(application_properties={"a": Array(256, ())}, body=[b""]),
     "application-properties['a']"),
    (ann("x-n", {"k": [Symbol("é")]}), "message-annotations[Symbol('x-n')]['k'][0]"),
    (ann("x-n", {Symbol("k"): Char("\ud800")}), "message-annotations[Symbol('x-n')][Symbol('k')]"),
    (ann("x-n", Array(0xA1, ("a", 1.5j))), "message-annotations[Symbol('x-n')][1]"),
    (ann("x-n", Described(Symbol("d"), {1})), "message-annotations[Symbol('x-n')].value"),
    (Message(properties=Properties(message_id="\ud800"), body=[b""]), "properties.message-id"),
    (Message(application_properties={"\udc00": 1}, body=[b""]), "application-properties['\\udc00']"),
    (Message(application_properties={"CC": "a"}, message_annotations={Symbol("x-cc"): []},
             body=[b""]), "message-annotations[Symbol('x-cc')]"),
    (ann("x-routing-key", b"rk"), "message-annotations[Symbol('x-routing-key')]"),
    (ann("x-routing-key", "r" * 256), "message-annotations[Symbol('x-routing-key')]"),
    (ann("x-exchange", Symbol("e")), "message-annotations[Symbol('x-exchange')]"),
    (ann("x-basic-type", 1), "message-annotations[Symbol('x-basic-type')]"),
    (ann("x-basic-cluster-id", "c" * 256), "message-annotations[Symbol('x-basic-cluster-id')]"),
    (ann("x-cc", "a"), "message-annotations[Symbol('x-cc')]"),
    (ann("x-amqp-header-k", "simple"), "message-annotations[Symbol('x-amqp-header-k')]"),
    (ann("x-amqp-header-x-k", [1]), "message-annotations[Symbol('x-amqp-header-x-k')]"),
    (ann("x-amqp-header-CC", [1]), "message-annotations[Symbol('x-amqp-header-CC')]"),
    (ann("x-message-id", "m"), "message-annotations[Symbol('x-message-id')]"),
    (ann("x-amqp-to", "q"), "message-annotations[Symbol('x-amqp-to')]"),
    (ann("x-" + "k" * 254, 1), "message-annotations[Symbol('x-" + "k" * 47 + "...]"),
    (ann("opt", 1), "message-annotations[Symbol('opt')]"),
    (ann("x-é", 1), "message-annotations[Symbol('x-é')]"),
    (Message(message_annotations={ULong(1): 1}, body=[b""]), "message-annotations[ULong(1)]"),
    (Message(footer={"k": 1}, body=[b""]), "footer['k']"),  # type: ignore[dict-item]
]


@pytest.mark.parametrize(("message", "where"), REFUSED_10, ids=[w for _, w in REFUSED_10])
def test_unmappable_amqp10_messages_are_refused_by_name(message: Message, where: str) -> None:
    with pytest.raises(UnmappableMessage) as info:
        to_amqp091(message)
    assert info.value.where == where, info.value
