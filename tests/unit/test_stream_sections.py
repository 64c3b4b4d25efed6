"""Stream messages decoded into Arrow's column buffers (native and reference, same tests): every
row equal to the per-message decoder's (``row_of_amqp10``), for the messages RabbitMQ stores,
the ones clients of the streams protocol write, random ones, and every AMQP type an
application property may hold; a malformed or truncated message refused with an error naming
where, never read past its bytes.

The messages are written by pumpd's AMQP 1.0 codec (:func:`pumpd.amqp10.codec.encode_value`),
an encoder independent of both decoders, or by hand where the codec would not write them.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pumpd.amqp10.codec import encode_value
from pumpd.amqp10.values import (
    Array,
    Byte,
    Char,
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
from pumpd.dataplane import stream_sections_ref
from pumpd.spark.read.schema import COLUMNS
from pumpd.spark.read.streams.amqp10_decode import row_of_amqp10
from pumpd.spark.read.streams.chunk import ChunkColumns

from tests.support.impls import IMPLEMENTATIONS, native

pytest.importorskip("pyarrow")


def sections_class(impl: str) -> Any:
    return stream_sections_ref.StreamSections if impl == "reference" else native().StreamSections


@pytest.fixture(params=IMPLEMENTATIONS)
def impl(request: pytest.FixtureRequest) -> Any:
    return sections_class(request.param)


def section(code: int, value: Any) -> bytes:
    return b"\x00\x53" + bytes([code]) + encode_value(value)


def message(*, header: Any = None, ann: Any = None, props: Any = None, app: Any = None,
            body: Any = (b"payload",), value: Any = ..., raw: bytes = b"") -> bytes:
    """A message's sections in the standard order; None leaves a section out."""
    out = b""
    if header is not None:
        out += section(0x70, header)
    if ann is not None:
        out += section(0x72, ann)
    if props is not None:
        out += section(0x73, props)
    if app is not None:
        out += section(0x74, app)
    out += raw
    for b in body:
        out += section(0x75, b)
    if value is not ...:
        out += section(0x77, value)
    return out


def map_section(code: int, pairs: list[tuple[Any, Any]]) -> bytes:
    """A map section of any keys, in the wide encoding."""
    body = b"".join(encode_value(k) + encode_value(v) for k, v in pairs)
    return (b"\x00\x53" + bytes([code, 0xD1]) + (len(body) + 4).to_bytes(4, "big")
            + (2 * len(pairs)).to_bytes(4, "big") + body)


def chunk(messages: list[bytes]) -> bytes:
    return b"".join(len(m).to_bytes(4, "big") + m for m in messages)


def rows_of(batches: list[Any]) -> list[tuple[Any, ...]]:
    out = []
    for batch in batches:
        batch.validate(full=True)
        cols = batch.to_pydict()
        for i in range(batch.num_rows):
            out.append(tuple(cols[n][i] for n, _ in COLUMNS))
    return out


def expected(messages: list[bytes], first: int = 0) -> list[tuple[Any, ...]]:
    """``row_of_amqp10``'s rows, headers as Arrow gives a map back: (key, value) pairs."""
    out = []
    for i, m in enumerate(messages):
        row = list(row_of_amqp10(m, first + i, "st"))
        row[5] = None if row[5] is None else list(row[5].items())
        out.append(tuple(row))
    return out


def decoded(cls: Any, messages: list[bytes]) -> list[tuple[Any, ...]]:
    cols = ChunkColumns("st", 0, len(messages), sections=cls())
    cols.add_chunk(chunk(messages), 0, len(messages))
    assert cols.done
    return rows_of(cols.take())


def assert_rows_agree(cls: Any, messages: list[bytes]) -> None:
    got, want = decoded(cls, messages), expected(messages)
    for g, w, m in zip(got, want, messages, strict=True):
        assert g == w, m


# RabbitMQ 3.10's storage of AMQP 0-9-1 publishes: a bare one, and one with every property
BARE = b"\x00Sr\xc1!\x04\xa3\rx-routing-key\xa1\x01s\xa3\nx-exchange\xa1\x00\x00Su\xa0\x05plain"
RICH = (b"\x00Sr\xc1l\n\xa3\rx-routing-key\xa1\x02rk\xa3\nx-exchange\xa1\x02ex\xa3\x10x-basic"
        b"-priorityP\x03\xa3\x15x-basic-delivery-modeP\x02\xa3\x12x-basic-expiration\xa1\x05"
        b"60000\x00Ss\xc07\r\xa1\x03mid\xa0\x05guest@@\xa1\x02rt\xa1\x03cid\xa3\ntext/plain"
        b"\xa3\x04gzip@\x83\x00\x00\x01\x8b\xcf\xe5h\x00@@@\x00St\xc1K\x0e\xa1\x0cx-basic-type"
        b"\xa1\x02ty\xa1\x0ex-basic-app-id\xa1\x03app\xa1\x01aT\x01\xa1\x01b\xa1\x01x\xa1\x01cV"
        b"\x01\xa1\x01d\x81\x00\x00\x01\x00\x00\x00\x00\x00\xa1\x01g\xa0\x02\x00\xff\x00Su\xa0"
        b"\x05hello")
ANN = {Symbol("x-routing-key"): "rk", Symbol("x-exchange"): ""}
# a message as pumpd's writer and typical producers send it: a message id, a few headers
TYPICAL = message(
    header=[True, UByte(4)], ann=ANN,
    props=[f"id-{7:08d}", None, None, None, None, "corr", Symbol("application/json")],
    app={"tenant": "acme", "seq": 7, "ok": True, "ts": Timestamp(1_700_000_000_123)},
    body=[b'{"n": 7}'])

def _nested(depth: int) -> Any:
    value: Any = None
    for _ in range(depth):
        value = [value]
    return value


EVERY_TYPE: list[Any] = [
    None, True, False, UByte(200), UShort(60000), UInt(0), UInt(7), UInt(4_000_000_000),
    ULong(0), ULong(9), ULong(2**64 - 1), Byte(-5), Short(-300), Int(-70000), 0, -1, 2**63 - 1,
    -(2**63), Float(1.5), Float(float("inf")), 0.1, 1e300, float("nan"), -0.0, Char("x"),
    Char("\u20ac"), Char("\U0001F600"), Timestamp(1_700_000_000_000), Timestamp(-5),
    uuid.UUID("12345678-1234-5678-1234-567812345678"), b"bin", b"\xff\xfe", "", "plain",
    "\u00e9t\u00e9 \U0001F600", Symbol("sym"), [], [1, "a", None], {"k": [1, {"n": b"x"}]},
    {1: "int key"}, Array(0x71, (1, 2, 3)), Array(0xA3, ("a", "b")), Array(0x40, (None, None)),
    Array(0x56, (True, False)), Described(ULong(5), "inside"), Described(Symbol("d"), [1]),
    Array(0x71, ()),
]


def test_typical_messages_decode_as_row_of_amqp10(impl: Any) -> None:
    other = BARE[:-5] + b"other"
    tricky = BARE.replace(b"\xa1\x01s", b"\xa1\x03\x00Su", 1).replace(b"\xc1!", b"\xc1#", 1)
    assert_rows_agree(impl, [BARE, RICH, TYPICAL, other, tricky, BARE])


@pytest.mark.parametrize("value", EVERY_TYPE, ids=repr)
def test_every_type_in_application_properties(impl: Any, value: Any) -> None:
    messages = [message(app={"h": value}), message(app={"x-basic-type": value, "k": 1}),
                message(app={"x-basic-app-id": value}), message(props=[value, value]),
                message(ann={Symbol("x-routing-key"): value}), message(body=[], value=value)]
    messages.append(message(raw=map_section(0x74, [(value, "v"), ("k", value)])))
    assert_rows_agree(impl, messages)


def test_an_array_of_described_elements(impl: Any) -> None:
    """(Which the per-message decoder misreads: its elements are the values described.)"""
    m = message(app={"a": Array(0x71, (4, 5), descriptor=Symbol("dd"))})
    assert decoded(impl, [m])[0][5] == [("a", "[4,5]")]


def test_sections_every_way_they_come(impl: Any) -> None:
    big = "x" * 300  # 32-bit sizes: str32, list32, map32
    messages = [
        message(header=[False, UByte(9)]),  # not durable: no delivery mode; the priority
        message(header=[True], ann={Symbol("x-basic-delivery-mode"): UByte(1)}),
        message(header=[UInt(0), None], ann={Symbol("x-basic-priority"): None}),
        message(header=[], props=[]),
        message(header=["durable?"]),  # truthiness, as Python has it
        message(ann={Symbol("x-exchange"): "a", "x-exchange": "b"}),  # the last one wins
        message(ann={Symbol("x-basic-expiration"): UInt(60000)}),
        message(props=[ULong(42), b"user", None, None, "reply", uuid.UUID(int=5), big, big,
                       None, Timestamp(1_699_999_999_999), None, None, None, "past 13"]),
        message(props=[None] * 9 + [-1500]),  # before the epoch: floor division
        message(props=[None] * 9 + [ULong(253402300799999)]),  # the last second of 9999
        message(props=[None] * 9 + [True]),
        message(app={"a": 1, "b": 2, "a": 3}),  # noqa: F601 (one key: kept once)
        message(app={Symbol("a"): 1, "a": 2, "b": 3}),  # a symbol and a string alike
        message(app={f"k{i}": i for i in range(40)} | {"k3": "again", big: big}),
        message(app={"x-basic-type": "t", "x-basic-app-id": "a"}),  # nothing left: null
        message(app={}),
        message(app=[]),
        message(ann=[]),
        message(body=[b"one", b"two", b""]),  # data sections joined
        message(body=[b""]),
        message(body=[], value=None),
        message(body=[], value="text"),
        message(body=[], value=b"bytes"),
        message(body=[], value=[1, 2]),
        message(body=[b"data"], value="ignored"),
        message(body=[], raw=section(0x76, [1, 2])),  # an amqp-sequence: no body
        message(raw=section(0x71, {Symbol("da"): 1}) + section(0x78, {Symbol("f"): 2})),
        message(body=[]),
        b"",
        # sections described twice over, and a described body
        b"\x00\x53\x73\x00\x53\x01" + encode_value(["m"]) + b"\x00\x53\x75\x00\x53\x00\xa0\x01z",
        # strings of invalid UTF-8 everywhere, and wide encodings of short values
        message(ann={Symbol("x-routing-key"): "r"}, props=[b"\xc3\x28", b"\xed\xa0\x80"],
                app={"h": b"\xf4\x90\x80\x80", "g": b"\xe0\x80\xaf"},
                raw=b"\x00\x53\x77\xb1\x00\x00\x00\x02\xc3\x28"),
        b"\x00\x53\x74\xd1\x00\x00\x00\x10\x00\x00\x00\x02\xb3\x00\x00\x00\x01k\xb1\x00\x00\x00"
        b"\x01v\x00\x53\x75\xb0\x00\x00\x00\x01z",
    ]
    assert_rows_agree(impl, messages)


_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 255).map(UByte), st.integers(0, 2**32 - 1).map(UInt),
    st.integers(0, 2**64 - 1).map(ULong), st.integers(-128, 127).map(Byte),
    st.integers(-(2**31), 2**31 - 1).map(Int), st.floats(allow_nan=True),
    st.floats(width=32).map(Float), st.text(max_size=20), st.binary(max_size=20),
    st.text(alphabet=st.characters(max_codepoint=127), max_size=12).map(Symbol),
    st.characters(exclude_categories=["Cs"]).map(Char),
    st.integers(-62135596800000, 253402300799999).map(Timestamp), st.uuids(),
)
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4),
    st.builds(Described, st.integers(0, 2**64 - 1).map(ULong), inner)), max_leaves=8)
_TEXTS = st.one_of(st.none(), st.text(max_size=30), st.binary(max_size=30),
                   st.text(alphabet=st.characters(max_codepoint=127), max_size=30).map(Symbol),
                   st.integers(0, 2**64 - 1).map(ULong), st.uuids())
_KEYS = st.one_of(st.text(max_size=8), st.sampled_from(["x-basic-type", "x-basic-app-id"]),
                  st.text(alphabet="abc", max_size=2).map(Symbol))


@st.composite
def messages(draw: st.DrawFn) -> bytes:
    header = draw(st.none() | st.lists(_SCALARS, max_size=3))
    ann = draw(st.none() | st.dictionaries(
        st.sampled_from(["x-routing-key", "x-exchange", "x-basic-priority",
                         "x-basic-delivery-mode", "x-basic-expiration", "other"]).map(Symbol),
        st.one_of(_TEXTS, st.integers(0, 255).map(UByte)), max_size=6))
    if ann is not None:
        for key in ("x-basic-priority", "x-basic-delivery-mode"):
            if key in ann and not isinstance(ann[key], (UByte, type(None))):
                ann[key] = UByte(2)
    if header is not None and len(header) > 1 and not (
            header[1] is None or (isinstance(header[1], int) and not isinstance(header[1], bool)
            and not isinstance(header[1], Timestamp) and -(2**31) <= header[1] < 2**31)):
        header[1] = UByte(4)
    props = draw(st.none() | st.lists(_TEXTS, max_size=13))
    if props is not None and len(props) > 9:
        props[9] = draw(st.none() | st.integers(0, 2**40).map(Timestamp))
    app = draw(st.none() | st.dictionaries(_KEYS, _VALUES, max_size=6))
    body = draw(st.lists(st.binary(max_size=40), max_size=3))
    value = draw(st.just(...) | _VALUES)
    return message(header=header, ann=ann, props=props, app=app, body=body, value=value)


@given(st.lists(messages(), min_size=1, max_size=5))
def test_random_messages_decode_as_row_of_amqp10(batch: list[bytes]) -> None:
    for name in IMPLEMENTATIONS:
        assert_rows_agree(sections_class(name), batch)


def outcome(cls: Any, data: bytes, entries: int) -> Any:
    """The rows of a chunk, or the error it raised."""
    cols = ChunkColumns("st", 0, entries, sections=cls())
    try:
        cols.add_chunk(data, 0, entries)
        return rows_of(cols.take())
    except ValueError as exc:
        return str(exc)


def test_every_truncation_is_refused_or_read_whole(impl: Any) -> None:
    whole = [RICH, TYPICAL, message(app={"n": [1, {"m": Array(0x71, (1, 2))}], "f": 0.5},
                                    body=[], value=[b"x", 3])]
    for m in whole:
        for cut in range(len(m)):
            part = m[:cut]
            got = outcome(impl, chunk([part]), 1)
            if isinstance(got, str):
                assert "offset 0" in got and "byte" in got, got
            else:  # cut at a section's end: a whole message
                assert got == expected([part]), part
        # the entry's size says more than the chunk holds
        got = outcome(impl, len(m).to_bytes(4, "big") + m[:-1], 1)
        assert "runs past the chunk's end" in got
    assert "an entry's size at byte 0" in outcome(impl, b"\x00\x00", 1)


@pytest.mark.parametrize("bad, says", [
    (b"\x00\x53\x75\xa0\x05abc", "type 0xa0 of 5 bytes at byte 5 needs 5 bytes, 3 left"),
    (b"\x00\x80\x75", "no section descriptor at byte 0"),
    (b"\x00\x53", "no section descriptor at byte 0"),
    (b"\x00\x53\x75\x74" + b"\x00" * 4, "AMQP 1.0 type code 0x74 at byte 3"),  # decimal32
    (b"\x00\x53\x75\xa1\x01a", "a data section at byte 3 holds type 0xa1, not a binary"),
    (b"\x00\x53\x74\xc1\x03\x01\x40\x40", "a map at byte 3 of 1 elements, an odd count"),
    (b"\x00\x53\x74\xd1\xff\xff\xff\xff\x00\x00\x00\x01", "needs 4294967295 bytes"),
    (b"\x00\x53\x74\xc0\x01\x05", "5 elements in 1 bytes"),
    (b"\x00\x53\x74\xe0\x02\x03\x40", "3 elements in 2 bytes"),
    (b"\x00\x53\x74\xc0\x00\x00", "of size 0, less than its count"),
    (b"\x00\x53\x74\xe0\x04\x01\x00\x40\x00", "described twice"),
    (b"\x00\x53\x74\xe0\x06\x03\x71\x00\x00\x00\x01", "type 0x71 at byte 11 needs 4 bytes, 0 left"),
    (b"\x00\x53\x74\xe0\x05\x02\x98\x00\x00\x00", "a uuid at byte 7 needs 16 bytes, 3 left"),
    (section(0x74, _nested(40)), "nested more than 32 deep"),
    (b"\x00\x53\x74" + b"\x00\x40" * 40 + b"\x40", "nested more than 32 deep"),
    (b"\x00\x53\x74\x73\x00\x00\xd8\x00", "char 0xd800 at byte 3 is no Unicode scalar value"),
    (b"\x00\x53\x74\x73\x00\x11\x00\x00", "is no Unicode scalar value"),
    (b"\x00\x53\x70\xa1\x01x", "the header section at byte 3 is not a list"),
    (b"\x00\x53\x73" + encode_value({"a": 1}), "the properties section at byte 3 is not a list"),
    (b"\x00\x53\x74\xa1\x01x", "the application properties section at byte 3 is not a map"),
    (b"\x00\x53\x72" + encode_value([1]), "the message annotations section at byte 3 is not"),
    (section(0x72, {Symbol("x-basic-priority"): "high"}), "the priority is 'high', not a 32-bit"),
    (section(0x72, {Symbol("x-basic-delivery-mode"): ULong(2**40)}), "not a 32-bit integer"),
    (section(0x70, [True, True]), "the priority is True, not a 32-bit integer"),
    (section(0x73, [None] * 9 + ["noon"]), "the creation time is 'noon', not a timestamp"),
    (section(0x73, [None] * 9 + [Timestamp(253402300800000)]), "out of the years 1 to 9999"),
    (section(0x73, [None] * 9 + [ULong(2**64 - 1)]), "out of the years 1 to 9999"),
])
def test_a_malformed_message_is_refused_naming_where(impl: Any, bad: bytes, says: str) -> None:
    good = message()
    got = outcome(impl, chunk([good, good, bad, good]), 4)
    assert isinstance(got, str) and "stream 'st': the message at offset 2: " in got, got
    assert says in got


@given(st.data())
def test_damaged_messages_both_decode_alike(data: st.DataObject) -> None:
    """Bytes flipped, cut or inserted anywhere: both implementations give the same rows or the
    same error, and the rows, when there are some, are row_of_amqp10's."""
    m = bytearray(data.draw(messages()))
    for _ in range(data.draw(st.integers(1, 4))):
        if not m:
            break
        at = data.draw(st.integers(0, len(m) - 1))
        how = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if how == "flip":
            m[at] = data.draw(st.integers(0, 255))
        elif how == "cut":
            del m[at:]
        else:
            m[at:at] = data.draw(st.binary(min_size=1, max_size=4))
    raw = bytes(m)
    ref, nat = (outcome(sections_class(name), chunk([raw]), 1) for name in IMPLEMENTATIONS)
    assert ref == nat
    if not isinstance(ref, str):
        assert ref == expected([raw])


def test_the_range_sub_entries_and_several_chunks(impl: Any) -> None:
    import gzip

    msgs = [BARE, RICH, TYPICAL, BARE, RICH, TYPICAL, BARE, RICH, TYPICAL]
    records = chunk(msgs[3:6])
    for codec, stored in ((0, records), (1, gzip.compress(records))):
        entry = (bytes([0x80 | codec << 4]) + (3).to_bytes(2, "big")
                 + len(records).to_bytes(4, "big") + len(stored).to_bytes(4, "big") + stored)
        data = b"\0" * 5 + chunk(msgs[:3]) + entry + chunk(msgs[6:])
        # offsets 10 to 18 in one chunk; the range 11 to 16 ends inside the sub-entry batch's
        # successor and starts inside the chunk
        cols = ChunkColumns("st", 11, 17, sections=impl())
        cols.add_chunk(data, 10, 7, pos=5)
        assert cols.done and len(cols) == 6
        assert rows_of(cols.take()) == expected(msgs, 10)[1:7]
        cols = ChunkColumns("st", 14, 30, sections=impl())
        cols.add_chunk(data, 10, 7, pos=5)
        cols.add_chunk(chunk([BARE]), 19, 1)
        assert rows_of(cols.take()) == expected([*msgs, BARE], 10)[4:]
    bomb = gzip.compress(b"\0" * 1_000_000)
    entry = (b"\x90" + (1).to_bytes(2, "big") + (10).to_bytes(4, "big")
             + len(bomb).to_bytes(4, "big") + bomb)
    with pytest.raises(ValueError, match="holds more or less than the 10 bytes it says"):
        ChunkColumns("st", 0, 5, sections=impl()).add_chunk(entry, 0, 1)


def test_a_full_batch_is_cut_before_the_next_message(monkeypatch: pytest.MonkeyPatch) -> None:
    """(The reference only: the native limit is compiled in, a GiB.)"""
    monkeypatch.setattr(stream_sections_ref, "FULL_BYTES", 20)
    body = message(body=[b"b" * 15])
    cols = ChunkColumns("st", 0, 5, sections=stream_sections_ref.StreamSections())
    cols.add_chunk(chunk([body] * 5), 0, 5)
    batches = cols.take()
    assert [b.num_rows for b in batches] == [2, 2, 1]
    assert rows_of(batches) == expected([body] * 5)


def test_buffers_are_little_endian_arrow(impl: Any) -> None:
    s = impl()
    s.add(chunk([message(header=[True], props=[None] * 9 + [Timestamp(2000)]),
                 message(app={"k": "v"})]), 0, 2, 0, 2)
    rows, cols = s.take()
    assert rows == 2 and s.rows == 0
    body = cols[0]
    assert body[:2] == (0, None) and body[2] == struct.pack("<3i", 0, 7, 14)
    mode = cols[6]
    assert mode[0] == 1 and mode[1] == b"\x01" and mode[2] == struct.pack("<2i", 2, 0)
    assert cols[12][2] == struct.pack("<2q", 2_000_000, 0)
    headers = cols[5]
    assert headers[:3] == (1, b"\x02", struct.pack("<3i", 0, 0, 1)) and headers[4:] == (
        b"k", struct.pack("<2i", 0, 1), b"v")
