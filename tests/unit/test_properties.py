"""dataplane/properties.py: the one codec of basic properties, field tables and message ids.

Every AMQP field type, under both table rules; the shovel's rules checked against pika's
encoder (what encoded a shovel's ``publish_properties`` before); decoding where pumpd decodes
(``table_entries``, ``split_properties``, ``message_id_of``); the id splice against a whole
encoding, natively too.
"""

from __future__ import annotations

import decimal
import struct
from datetime import datetime, timezone
from typing import Any

import pika.data
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pumpd.dataplane.properties import (
    FIELD_SIZES,
    LONG,
    PROPERTY_NAMES,
    PUBLISHER_RULES,
    SHOVEL_RULES,
    FrameError,
    IdSplice,
    TableRules,
    UnparseableProperties,
    append_to_table,
    encode_hop,
    encode_properties,
    encode_property_overrides,
    encode_rows,
    encode_table,
    field_value,
    join_properties,
    message_id_of,
    message_id_text,
    split_properties,
    table_entries,
)
from pumpd.dataplane.publish_plane_ref import PublishPlane as RefPlane

from tests.support.impls import IMPLEMENTATIONS, native

RULES = {"publisher": PUBLISHER_RULES, "shovel": SHOVEL_RULES}

# (value, its encoding under the publisher's rules, under the shovel's rules)
FIELD_CASES: list[tuple[Any, bytes, bytes]] = [
    ("hé", b"S\x00\x00\x00\x03h\xc3\xa9", b"S\x00\x00\x00\x03h\xc3\xa9"),
    (b"\x00\xff", b"x\x00\x00\x00\x02\x00\xff", b"x\x00\x00\x00\x02\x00\xff"),
    (bytearray(b"b"), b"x\x00\x00\x00\x01b", b"x\x00\x00\x00\x01b"),
    (True, b"t\x01", b"t\x01"),
    (False, b"t\x00", b"t\x00"),
    (3, b"l" + struct.pack(">q", 3), b"I" + struct.pack(">i", 3)),
    (-(2**31), b"l" + struct.pack(">q", -(2**31)), b"I" + struct.pack(">i", -(2**31))),
    (2**31, b"l" + struct.pack(">q", 2**31), b"l" + struct.pack(">q", 2**31)),
    (-(2**63), b"l" + struct.pack(">q", -(2**63)), b"l" + struct.pack(">q", -(2**63))),
    (0.25, b"d" + struct.pack(">d", 0.25), b"d" + struct.pack(">d", 0.25)),
    (decimal.Decimal("1.50"), b"D\x02\x00\x00\x00\x96", b"D\x02\x00\x00\x00\x96"),
    (decimal.Decimal("-7"), b"D\x00\xff\xff\xff\xf9", b"D\x00\xff\xff\xff\xf9"),
    (datetime(2020, 1, 1, tzinfo=timezone.utc), b"T" + struct.pack(">Q", 1577836800),
     b"T" + struct.pack(">Q", 1577836800)),
    ({"a": "b"}, b"F\x00\x00\x00\x08\x01aS\x00\x00\x00\x01b",
     b"F\x00\x00\x00\x08\x01aS\x00\x00\x00\x01b"),
    ([1, None], b"A\x00\x00\x00\x0al" + struct.pack(">q", 1) + b"V",
     b"A\x00\x00\x00\x06I" + struct.pack(">i", 1) + b"V"),
    ((), b"A\x00\x00\x00\x00", b"A\x00\x00\x00\x00"),
    (None, b"V", b"V"),
]


@pytest.mark.parametrize("rules", list(RULES))
@pytest.mark.parametrize(("value", "publisher", "shovel"), FIELD_CASES,
                         ids=[f"{type(v).__name__}-{i}" for i, (v, _, _) in enumerate(FIELD_CASES)])
def test_every_field_type(rules: str, value: Any, publisher: bytes, shovel: bytes) -> None:
    encoded = field_value(value, RULES[rules])
    assert encoded == (publisher if rules == "publisher" else shovel)
    # and it reads back as one whole entry of the type it says (FIELD_SIZES: RabbitMQ's sizes)
    table = encode_table({"k": value}, RULES[rules])
    [(key, start, vpos, end)] = table_entries(table)
    assert (key, start, table[vpos:end]) == (b"k", 4, encoded)
    size = FIELD_SIZES[encoded[0]]
    assert len(encoded) == 1 + (size if size != LONG else 4 + len(encoded) - 5)


@pytest.mark.parametrize("rules", list(RULES))
@pytest.mark.parametrize(("value", "error"), [
    (2**63, ValueError), (-(2**63) - 1, ValueError),
    (decimal.Decimal("1e10"), ValueError), (decimal.Decimal("NaN"), ValueError),
    (datetime(2020, 1, 1, 0, 0, 0, 5), ValueError), (object(), TypeError), ({1, 2}, TypeError),
])
def test_what_cannot_be_carried_unaltered_raises(rules: str, value: Any,
                                                 error: type[Exception]) -> None:
    with pytest.raises(error):
        encode_table({"k": value}, RULES[rules])


_json_scalars = st.one_of(st.none(), st.booleans(), st.text(max_size=20),
                          st.integers(-(2**63), 2**63 - 1))
_json_tables = st.recursive(
    st.dictionaries(st.text(max_size=10), _json_scalars, max_size=4),
    lambda inner: st.dictionaries(st.text(max_size=10),
                                  st.one_of(_json_scalars, inner, st.lists(inner, max_size=3)),
                                  max_size=4),
    max_leaves=12)


@given(_json_tables)
def test_shovel_rules_write_what_pika_wrote(table: dict[str, Any]) -> None:
    """publish_properties' headers were pika-encoded before this codec: same bytes, except
    floats, which pika refused (a session could not start) and which are now doubles."""
    pieces: list[bytes] = []
    pika.data.encode_table(pieces, table)
    assert encode_table(table, SHOVEL_RULES) == b"".join(pieces)


def test_floats_in_publish_properties_are_doubles() -> None:
    overrides = encode_property_overrides({"headers": {"f": 1.5, "n": 2}, "priority": 3})
    assert overrides == {
        PROPERTY_NAMES.index("headers"):
            b"\x00\x00\x00\x12\x01fd" + struct.pack(">d", 1.5) + b"\x01nI\x00\x00\x00\x02",
        PROPERTY_NAMES.index("priority"): b"\x03",
    }


def test_hop_table_is_long_strings() -> None:
    assert encode_hop([("a", "é"), ("b", "")]) == (
        b"\x00\x00\x00\x10\x01aS\x00\x00\x00\x02\xc3\xa9\x01bS\x00\x00\x00\x00")
    assert TableRules() == PUBLISHER_RULES


@pytest.mark.parametrize("table", [None, {}, {"x": 1.5, "y": [1, {"z": None}]}])
def test_parking_appends_to_a_table_keeping_its_bytes(table: dict[str, Any] | None) -> None:
    added = {"x-reason": "nack", "x-é": ""}
    encoded = None if table is None else encode_table(table)
    assert append_to_table(encoded, added) == encode_table({**(table or {}), **added})


ALL_PROPERTIES: dict[str, Any] = {
    "content_type": "t", "content_encoding": "e", "headers": {"h": 1}, "delivery_mode": 2,
    "priority": 9, "correlation_id": "c", "reply_to": "r", "expiration": "60000",
    "message_id": "m", "timestamp": 1_700_000_000, "type": "ty", "user_id": "u",
    "app_id": "a", "cluster_id": "cl",
}


@pytest.mark.parametrize("name", PROPERTY_NAMES)
def test_each_property_round_trips_through_split(name: str) -> None:
    absent = "type" if name != "type" else "app_id"  # None: left out
    raw = encode_properties({absent: None, name: ALL_PROPERTIES[name]})
    values = split_properties(raw)
    assert [i for i, v in enumerate(values) if v is not None] == [PROPERTY_NAMES.index(name)]
    assert join_properties(values) == raw
    assert message_id_of(raw) == (b"m" if name == "message_id" else None)


def test_all_properties_and_the_edges() -> None:
    raw = encode_properties(ALL_PROPERTIES)
    assert raw[:2] == b"\xff\xfc"
    assert message_id_of(raw) == b"m" and message_id_text(raw) == "m"
    assert encode_properties(None) == encode_properties({}) == b"\x00\x00"
    ts = datetime(2020, 1, 1, tzinfo=timezone.utc)
    assert encode_properties({"timestamp": ts}) == encode_properties({"timestamp": 1577836800})
    with pytest.raises(KeyError):
        encode_properties({"nope": 1})
    with pytest.raises(ValueError):
        encode_properties({"message_id": "x" * 256})
    for broken in (b"", b"\x00", b"\x00\x01", raw[:-1]):  # message_id_of never raises
        assert message_id_of(broken) is None
        with pytest.raises(FrameError):
            split_properties(broken)
    with pytest.raises(UnparseableProperties):
        table_entries(b"\x00\x00\x00\x03\x01kZ")  # an unknown field type


@pytest.mark.parametrize("shared", [{}, {"delivery_mode": 2},
                                    {"content_type": "t", "message_id": "old", "app_id": "a",
                                     "headers": {"h": [1, "x"]}, "priority": None}])
def test_id_splice_is_a_whole_encoding(shared: dict[str, Any]) -> None:
    splice = IdSplice(shared)
    for mid in (b"", b"w:0:3:41", b"x" * 255):
        assert splice.of(mid) == encode_properties({**shared, "message_id": mid})
    ids = [b"p:1", b"p:2"]
    assert encode_rows(2, shared, {}, ids) == [splice.of(i) for i in ids]
    assert encode_rows(2, shared, {}, None) == [encode_properties(shared)] * 2


def test_rows_override_the_shared_properties() -> None:
    rows = encode_rows(3, {"delivery_mode": 2, "app_id": "a"},
                       {"app_id": ["b", None, "c"], "headers": [{"n": 1}, None, None]},
                       [b"1", b"2", b"3"])
    assert rows == [
        encode_properties({"delivery_mode": 2, "app_id": "b", "headers": {"n": 1},
                           "message_id": b"1"}),
        encode_properties({"delivery_mode": 2, "app_id": "a", "message_id": b"2"}),
        encode_properties({"delivery_mode": 2, "app_id": "c", "message_id": b"3"}),
    ]
    with pytest.raises(KeyError):
        encode_rows(1, None, {"colour": ["red"]}, None)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_planes_splice_ids_as_the_codec_does(impl: str) -> None:
    """publish_arrow's native id splice mirrors IdSplice (the .pyx's one property encoder)."""
    pa = pytest.importorskip("pyarrow")
    cls = RefPlane if impl == "reference" else native().PublishPlane
    shared = {"content_type": "t", "delivery_mode": 2, "app_id": "a"}
    splice = IdSplice(shared)
    col = pa.array([b"a", b"b", b"c"], pa.binary())
    _validity, offsets, data = col.buffers()
    spliced = cls(channel=1, frame_max=4096, exchange=b"x", mandatory=False)
    whole = cls(channel=1, frame_max=4096, exchange=b"x", mandatory=False)
    spliced.publish_arrow(offsets, data, 0, 3, b"rk", splice.head, large=False,
                          properties_tail=splice.tail, id_prefix=b"w:", id_start=98)
    for i, body in enumerate([b"a", b"b", b"c"]):
        whole.publish(body, b"rk", splice.of(b"w:" + str(98 + i).encode()))
    assert spliced.take_output() == whole.take_output()
