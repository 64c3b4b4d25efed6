"""pumpd.amqp10.message: messages round-trip through their sections; sections out of the spec's
order, repeated, of unknown descriptors or of the wrong types are refused, naming them; adding
annotations keeps the bare message's bytes as received."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pumpd.amqp10.codec import DecodeError, EncodeError, encode_value
from pumpd.amqp10.message import (
    AmqpSequence,
    AmqpValue,
    Header,
    Message,
    Properties,
    complete,
    decode_message,
    encode_message,
    encode_with_annotations,
)
from pumpd.amqp10.values import Described, Symbol, Timestamp, UByte, UInt, ULong

symbols = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=10).map(Symbol)
simple = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
                   st.text(max_size=10), st.binary(max_size=10), symbols, st.uuids())
annotations = st.dictionaries(st.one_of(symbols, st.integers(0, 2**64 - 1).map(ULong)), simple,
                              max_size=3)
ids = st.one_of(st.integers(0, 2**64 - 1).map(ULong), st.uuids(), st.binary(max_size=8),
                st.text(max_size=8))


def opt(s: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), s)


headers = st.builds(Header, opt(st.booleans()), opt(st.integers(0, 255).map(UByte)),
                    opt(st.integers(0, 2**32 - 1).map(UInt)), opt(st.booleans()),
                    opt(st.integers(0, 2**32 - 1).map(UInt)))
stamps = st.integers(-(2**63), 2**63 - 1).map(Timestamp)
properties = st.builds(
    Properties, opt(ids), opt(st.binary(max_size=8)), opt(st.text(max_size=8)),
    opt(st.text(max_size=8)), opt(st.text(max_size=8)), opt(ids), opt(symbols), opt(symbols),
    opt(stamps), opt(stamps), opt(st.text(max_size=8)),
    opt(st.integers(0, 2**32 - 1).map(UInt)), opt(st.text(max_size=8)))
bodies = st.one_of(
    st.just([]),
    st.lists(st.binary(max_size=20), min_size=1, max_size=3),
    st.lists(st.lists(simple, max_size=3).map(AmqpSequence), min_size=1, max_size=3),
    simple.map(lambda v: [AmqpValue(v)]),
)
messages = st.builds(Message, opt(headers), opt(annotations), opt(annotations), opt(properties),
                     opt(st.dictionaries(st.text(max_size=8), simple, max_size=3)), bodies,
                     opt(annotations))


def fields_of(m: Message) -> Message:
    return Message(m.header, m.delivery_annotations, m.message_annotations, m.properties,
                   m.application_properties, m.body, m.footer)


@given(messages)
def test_round_trip(m: Message) -> None:
    raw = encode_message(m)
    d = decode_message(raw)
    assert fields_of(d) == m
    assert d.raw == raw
    assert encode_message(d) == raw


@given(messages, annotations)
def test_annotations_added_keep_the_bare_message_as_received(m: Message,
                                                             added: dict[Any, Any]) -> None:
    raw = encode_message(m)
    d = decode_message(raw)
    bare_start = len(encode_message(Message(m.header, m.delivery_annotations,
                                            m.message_annotations)))
    assert d.bare_offset == bare_start and d.bare == raw[bare_start:]
    d.message_annotations = {**(d.message_annotations or {}), **added}
    out = encode_with_annotations(d)
    assert out.endswith(raw[bare_start:])
    again = decode_message(out)
    assert again.message_annotations == d.message_annotations
    assert fields_of(again) == fields_of(d)


def test_bare_message_bytes_are_sent_as_they_came() -> None:
    # a properties section in the widest forms a peer may send: re-encoding would narrow it
    props = (b"\x00\x80" + struct.pack(">Q", 0x73) + b"\xd0" + struct.pack(">II", 9, 1)
             + b"\xb1" + struct.pack(">I", 0))
    data = b"\x00\x53\x75\xb0" + struct.pack(">I", 2) + b"hi"
    raw = b"\x00\x53\x70\x45" + props + data
    d = decode_message(raw)
    assert d.properties == Properties(message_id="")
    assert d.bare_offset == 4 and d.bare == props + data
    d.header = Header(durable=True)
    d.message_annotations = {Symbol("x-opt-a"): 1}
    out = encode_with_annotations(d)
    assert out.endswith(props + data)
    assert out == encode_message(Message(header=Header(durable=True),
                                         message_annotations={Symbol("x-opt-a"): 1})
                                 ) + props + data


def test_message_built_here_has_no_bare_bytes() -> None:
    m = Message(body=[b"x"], message_annotations={"x-opt-k": "v"})
    assert m.bare is None
    assert encode_with_annotations(m) == encode_message(m)


def test_known_bytes() -> None:
    m = Message(header=Header(durable=True), properties=Properties(message_id=7, to="/q/a"),
                application_properties={"k": 1}, body=[b"hello"])
    assert encode_message(m).hex() == (
        "005370c0020141"
        "005373c00a035307" "40" "a1042f712f61"
        "005374c10602a1016b5501"
        "005375a00568656c6c6f")


def test_symbolic_section_descriptors() -> None:
    raw = (b"\x00" + encode_value(Symbol("amqp:properties:list")) + encode_value([None, b"u"])
           + b"\x00" + encode_value(Symbol("amqp:amqp-value:*")) + encode_value(5))
    d = decode_message(raw)
    assert d.properties == Properties(user_id=b"u") and d.body == [AmqpValue(5)]
    assert d.bare_offset == 0


def test_plain_values_take_their_fields_types() -> None:
    m = Message(header=Header(priority=4, ttl=1000),
                properties=Properties(message_id=5, creation_time=1, group_sequence=2),
                message_annotations={"x-opt-s": 1, 3: 4}, body=[AmqpValue(None)])
    d = decode_message(encode_message(m))
    assert d.header is not None and type(d.header.priority) is UByte
    assert type(d.header.ttl) is UInt
    assert d.properties is not None and type(d.properties.message_id) is ULong
    assert type(d.properties.creation_time) is Timestamp
    assert d.message_annotations == {Symbol("x-opt-s"): 1, ULong(3): 4}
    assert all(type(k) in (Symbol, ULong) for k in d.message_annotations)


def section(code: int, value: Any) -> bytes:
    return encode_value(Described(ULong(code), value))


H = section(0x70, [True])
DA = section(0x71, {Symbol("x"): 1})
MA = section(0x72, {Symbol("x"): 1})
P = section(0x73, ["id"])
AP = section(0x74, {"k": "v"})
D = section(0x75, b"d")
S = section(0x76, [1])
V = section(0x77, 1)
F = section(0x78, {Symbol("f"): 1})

BAD = [
    (P + H, "header section after the properties section"),
    (MA + DA, "delivery-annotations section after the message-annotations section"),
    (D + AP, "application-properties section after the data section"),
    (F + D, "data section after the footer section"),
    (H + H, "a second header section"),
    (P + P, "a second properties section"),
    (F + F, "a second footer section"),
    (D + S, "the body mixes data and amqp-sequence sections"),
    (S + V, "the body mixes amqp-sequence and amqp-value sections"),
    (V + D, "the body mixes amqp-value and data sections"),
    (V + V, "a second amqp-value section"),
    (section(0x79, []), "message section with unknown descriptor ULong(121)"),
    (encode_value(Described(Symbol("amqp:nope:list"), [])), "unknown descriptor"),
    (b"\x45", "a message section is a described value"),
    (section(0x75, "text"), "data section is string, not a binary"),
    (section(0x76, {}), "amqp-sequence section is map, not a list"),
    (section(0x70, {}), "header section is map, not a list"),
    (section(0x70, [1]), "header field durable is long 1, not a boolean"),
    (section(0x73, [1.5]), "properties field message-id is double 1.5, not a message-id"),
    (section(0x73, [None, None, Symbol("q")]), "properties field to is symbol"),
    (section(0x72, {1: 1}), "message-annotations key 1 is long, not a symbol or ulong"),
    (section(0x74, {Symbol("k"): 1}), "application-properties key Symbol('k') is symbol, not a "
                                      "string"),
    (section(0x74, {1: 1}), "application-properties key 1 is long, not a string"),
    (section(0x78, []), "footer section is list, not a map"),
    (D + b"\x00\x53", "smallulong needs 1 bytes"),
]


@pytest.mark.parametrize(("raw", "message"), BAD, ids=[m[:40] for _, m in BAD])
def test_bad_messages_name_the_sections(raw: bytes, message: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode_message(raw)
    assert message in str(info.value)
    assert "at position" in str(info.value)


def test_every_section_in_order_decodes() -> None:
    m = decode_message(H + DA + MA + P + AP + D + D + F)
    assert m.body == [b"d", b"d"] and m.footer == {Symbol("f"): 1}
    assert m.bare_offset == len(H + DA + MA)
    assert decode_message(S + S).body == [AmqpSequence([1]), AmqpSequence([1])]
    assert decode_message(b"").body == [] and decode_message(b"").bare == b""


def test_encode_refuses_what_cannot_be_sent() -> None:
    with pytest.raises(EncodeError, match="application-properties key Symbol"):
        encode_message(Message(application_properties={Symbol("k"): 1}))  # type: ignore[dict-item]
    with pytest.raises(EncodeError, match="mixes section kinds"):
        encode_message(Message(body=[b"x", AmqpValue(1)]))
    with pytest.raises(EncodeError, match="more than one amqp-value"):
        encode_message(Message(body=[AmqpValue(1), AmqpValue(2)]))
    with pytest.raises(EncodeError, match=r"message-annotations key 1\.5"):
        encode_message(Message(message_annotations={1.5: 1}))  # type: ignore[dict-item]
    with pytest.raises(EncodeError, match=r"properties field message-id: 1\.5 is not a message"):
        encode_message(Message(properties=Properties(message_id=1.5)))
    with pytest.raises(EncodeError, match="header field priority: 256 is out of range for a"):
        encode_message(Message(header=Header(priority=256)))
    with pytest.raises(EncodeError, match="properties field to = 5 is not a string"):
        encode_message(Message(properties=Properties(to=5)))  # type: ignore[arg-type]


@given(messages, st.data())
def test_corrupted_messages_raise_decode_error_only(m: Message, data: st.DataObject) -> None:
    raw = bytearray(encode_message(m))
    if not raw:
        return
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        decode_message(bytes(raw))
    except DecodeError as e:
        assert "at position" in str(e)


def test_uuid_ids_round_trip() -> None:
    u = uuid.uuid4()
    m = Message(properties=Properties(message_id=u, correlation_id=b"c"))
    assert decode_message(encode_message(m)).properties == m.properties


def test_a_string_annotation_key_as_rabbitmq_3_writes_it_is_kept_a_string() -> None:
    # RabbitMQ 3.x keys x-stream-offset by a string on every stream delivery
    m = decode_message(section(0x72, {"x-stream-offset": 7}) + section(0x75, b"b"))
    assert m.message_annotations == {"x-stream-offset": 7}
    assert type(next(iter(m.message_annotations))) is str
    assert decode_message(encode_message(m)).message_annotations == {"x-stream-offset": 7}


def test_head_only_decodes_up_to_the_bare_message_and_complete_decodes_the_rest() -> None:
    full = Message(header=Header(durable=True), message_annotations={Symbol("x-a"): 1},
                   properties=Properties(message_id="m"), application_properties={"k": "v"},
                   body=[b"one", b"two"])
    raw = encode_message(full)
    head = decode_message(raw, head_only=True)
    assert head.partial and head.header == full.header and head.properties is None
    assert head.message_annotations == {Symbol("x-a"): 1} and head.body == []
    assert head.bare == decode_message(raw).bare
    # a hop adds an annotation: the bare message is sent as it came, the head re-encoded
    head.message_annotations = {Symbol("x-a"): 1, Symbol("x-b"): 2}
    done = complete(head)
    assert not done.partial and done.body == [b"one", b"two"]
    assert done.properties == full.properties and done.message_annotations == {
        Symbol("x-a"): 1, Symbol("x-b"): 2}
    assert decode_message(encode_message(head)) == decode_message(encode_with_annotations(head))
    assert complete(done) is done


def test_a_malformed_bare_message_is_found_when_completed_not_before() -> None:
    raw = encode_message(Message(header=Header(durable=True))) + b"\x00\x53\x73\xc0\x03"
    head = decode_message(raw, head_only=True)
    assert head.partial
    with pytest.raises(DecodeError):
        complete(head)
