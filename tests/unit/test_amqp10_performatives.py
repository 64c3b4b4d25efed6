"""pumpd.amqp10.performatives: every performative, SASL body and composite round-trips through
its described list; descriptors by code or name; the fast transfer and disposition paths give
the general path's bytes and values; bad input is a DecodeError naming performative and field."""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pumpd.amqp10 import performatives as pf
from pumpd.amqp10.codec import DecodeError, EncodeError, decode_value, encode_value
from pumpd.amqp10.performatives import (
    Accepted,
    Attach,
    Begin,
    Close,
    Detach,
    Disposition,
    End,
    Error,
    Flow,
    Modified,
    Open,
    Received,
    Rejected,
    Released,
    SaslChallenge,
    SaslInit,
    SaslMechanisms,
    SaslOutcome,
    SaslResponse,
    Source,
    Target,
    Transfer,
    decode_performative,
    decode_transfer_fields,
    descriptor_of,
    encode_disposition,
    encode_performative,
    encode_transfer,
)
from pumpd.amqp10.values import Array, Described, Symbol, UInt, ULong

PERFORMATIVES = [Open, Begin, Attach, Flow, Transfer, Disposition, Detach, End, Close,
                 SaslMechanisms, SaslInit, SaslChallenge, SaslResponse, SaslOutcome]
CODES = {Open: 0x10, Begin: 0x11, Attach: 0x12, Flow: 0x13, Transfer: 0x14, Disposition: 0x15,
         Detach: 0x16, End: 0x17, Close: 0x18, Error: 0x1D, Received: 0x23, Accepted: 0x24,
         Rejected: 0x25, Released: 0x26, Modified: 0x27, Source: 0x28, Target: 0x29,
         SaslMechanisms: 0x40, SaslInit: 0x41, SaslChallenge: 0x42, SaslResponse: 0x43,
         SaslOutcome: 0x44}


@pytest.mark.parametrize("cls", list(CODES), ids=lambda c: c.__name__)
def test_descriptor_codes_and_names(cls: type) -> None:
    code, name = descriptor_of(cls)
    assert code == CODES[cls]
    assert name.startswith("amqp:") and name.endswith(":list")


# --------------------------------------------------------------------------------------------
# Generated instances, from each class's own field table


symbols = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12).map(Symbol)
simple = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
                   st.text(max_size=10), st.binary(max_size=10), symbols)
fields_maps = st.dictionaries(symbols, simple, max_size=3)
errors = st.builds(Error, symbols, st.one_of(st.none(), st.text(max_size=20)),
                   st.one_of(st.none(), fields_maps))
uint = st.integers(0, 2**32 - 1)
outcomes = st.one_of(
    st.just(Accepted()), st.just(Released()),
    st.builds(Rejected, st.one_of(st.none(), errors)),
    st.builds(Modified, st.one_of(st.none(), st.booleans()), st.one_of(st.none(), st.booleans()),
              st.one_of(st.none(), fields_maps)),
    # a delivery state of another spec (a transactional state): kept as it came
    st.builds(lambda b: Described(ULong(0x34), [b]), st.binary(max_size=8)),
)
states = st.one_of(outcomes, st.builds(Received, uint, st.integers(0, 2**64 - 1)))
filters = st.dictionaries(symbols, st.builds(Described, symbols, simple), max_size=3)

STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "boolean": st.booleans(),
    "ubyte": st.integers(0, 255),
    "ushort": st.integers(0, 2**16 - 1),
    "uint": uint,
    "ulong": st.integers(0, 2**64 - 1),
    "string": st.text(max_size=20),
    "symbol": symbols,
    "symbol[]": st.lists(symbols, max_size=3),
    "binary": st.binary(max_size=32),
    "fields": fields_maps,
    "unsettled": st.dictionaries(st.binary(max_size=4), st.one_of(st.none(), states),
                                 max_size=3),
    "*": st.text(max_size=20),
    "an error": errors,
    "a delivery state": states,
    "an outcome": outcomes,
    "a source": st.deferred(lambda: instances(Source, {"filter": filters})),
    "a target": st.one_of(st.deferred(lambda: instances(Target)),
                          st.builds(lambda a: Described(ULong(0x30), [a]),
                                    st.lists(symbols, max_size=2))),
}


def instances(cls: type, overrides: dict[str, st.SearchStrategy[Any]] | None = None
              ) -> st.SearchStrategy[Any]:
    kw: dict[str, st.SearchStrategy[Any]] = {}
    for f in dataclasses.fields(cls):
        s = (overrides or {}).get(f.name)
        if s is None:
            s = STRATEGIES[f.metadata["amqp"].name]
        mandatory = f.default is dataclasses.MISSING
        kw[f.name] = s if mandatory or f.default is not None else st.one_of(st.none(), s)
    return st.builds(cls, **kw)


performatives = st.one_of(*[instances(c) for c in PERFORMATIVES])


@given(performatives, st.binary(max_size=8))
def test_round_trip(p: Any, payload: bytes) -> None:
    enc = encode_performative(p)
    decoded, pos = decode_performative(enc + payload)
    assert decoded == p and type(decoded) is type(p)
    assert pos == len(enc)
    assert encode_performative(decoded) == enc


@given(performatives)
def test_trailing_nulls_are_left_off(p: Any) -> None:
    enc = encode_performative(p)
    items, _ = decode_value(enc, 3)
    assert items == [] or items[-1] is not None


@given(performatives, st.data())
def test_corrupted_performatives_raise_decode_error_only(p: Any, data: st.DataObject) -> None:
    enc = bytearray(encode_performative(p))
    for _ in range(data.draw(st.integers(1, 3))):
        enc[data.draw(st.integers(0, len(enc) - 1))] = data.draw(st.integers(0, 255))
    try:
        decode_performative(bytes(enc))
    except DecodeError as e:
        assert "at position" in str(e)


def _with_descriptor(descriptor: bytes, fields: list[Any]) -> bytes:
    return b"\x00" + descriptor + encode_value(fields)


def test_known_bytes() -> None:
    assert encode_performative(Close()) == b"\x00\x53\x18\x45"
    assert encode_performative(Detach(handle=0)) == bytes.fromhex("005316c0020143")
    assert encode_performative(Open(container_id="c")).hex() == "005310c00401a10163"
    assert encode_performative(SaslInit(Symbol("PLAIN"), b"\x00u\x00p")).hex() == (
        "005341c00e02a305504c41494ea004007500" "70")


def test_symbolic_and_wide_descriptors() -> None:
    by_name = _with_descriptor(encode_value(Symbol("amqp:open:list")), ["c"])
    assert decode_performative(by_name)[0] == Open(container_id="c")
    wide = _with_descriptor(b"\x80" + struct.pack(">Q", 0x10), ["c"])
    assert decode_performative(wide)[0] == Open(container_id="c")


def test_defaults_of_the_spec_apply_to_absent_fields() -> None:
    o, _ = decode_performative(_with_descriptor(b"\x53\x10", ["c"]))
    assert (o.max_frame_size, o.channel_max, o.idle_time_out) == (0xFFFF_FFFF, 0xFFFF, None)
    a, _ = decode_performative(encode_performative(Attach(name="l", handle=0, role=True)))
    assert (a.snd_settle_mode, a.rcv_settle_mode, a.incomplete_unsettled) == (2, 0, False)
    s = Source()
    assert (s.durable, s.expiry_policy, s.timeout, s.dynamic) == (0, "session-end", 0, False)


def test_fields_beyond_the_spec_are_ignored() -> None:
    p, _ = decode_performative(_with_descriptor(b"\x53\x18", [None, "later version"]))
    assert p == Close()


def test_multiple_fields_accept_one_symbol() -> None:
    p, _ = decode_performative(_with_descriptor(b"\x53\x40", [Symbol("PLAIN")]))
    assert p == SaslMechanisms([Symbol("PLAIN")])
    arr = Array(0xA3, (Symbol("PLAIN"), Symbol("ANONYMOUS")))
    p, _ = decode_performative(_with_descriptor(b"\x53\x40", [arr]))
    assert p.sasl_server_mechanisms == ["PLAIN", "ANONYMOUS"]


def test_source_filter_and_other_targets_are_kept() -> None:
    f = {Symbol("rabbitmq:stream-offset-spec"): Described(Symbol("rabbitmq:stream-offset-spec"),
                                                          "first")}
    coordinator = Described(ULong(0x30), [Array(0xA3, (Symbol("amqp:local-transactions"),))])
    a = Attach(name="l", handle=UInt(1), role=True, source=Source(address="/q/a", filter=f),
               target=coordinator)
    assert decode_performative(encode_performative(a))[0] == a


BAD = [
    (b"", "the frame body is empty"),
    (b"\x45", "a performative is a described list"),
    (_with_descriptor(b"\x53\x99", []), "unknown performative descriptor ULong(153)"),
    (_with_descriptor(b"\x53\x1d", [Symbol("x")]), "unknown performative descriptor"),
    (_with_descriptor(encode_value(Symbol("amqp:nope:list")), []), "unknown performative"),
    (_with_descriptor(encode_value([1]), []), "unknown performative descriptor [1]"),
    (b"\x00\x53\x10\xa1\x01c", "open's fields are not a list"),
    (b"\x00\x53\x10", "open has no field list"),
    (_with_descriptor(b"\x53\x10", []), "open: the mandatory field container_id is absent"),
    (_with_descriptor(b"\x53\x10", [Symbol("c")]),
     "open field container_id is symbol, not a string"),
    (_with_descriptor(b"\x53\x10", ["c", None, 512]),
     "open field max_frame_size is long, not a uint"),
    (_with_descriptor(b"\x53\x11", [None, UInt(0), UInt(1)]),
     "begin: the mandatory field outgoing_window is absent"),
    (_with_descriptor(b"\x53\x18", [Described(ULong(0x1D), [])]),
     "close field error: error: the mandatory field condition is absent"),
    (_with_descriptor(b"\x53\x18", [Described(ULong(0x24), [])]),
     "close field error is a described value (ULong(36)), not an error"),
    (_with_descriptor(b"\x53\x12", ["l", UInt(0), True, None, None,
                                    Described(ULong(0x29), [])]),
     "attach field source is a described value (ULong(41)), not a source"),
    (_with_descriptor(b"\x53\x10", ["c", None, None, None, None, None, None, None, None,
                                    {"k": 1}]),
     "open field properties has the key 'k' (string): its keys are symbols"),
    (_with_descriptor(b"\x53\x40", [Array(0xA1, ("PLAIN",))]),
     "sasl-mechanisms field sasl_server_mechanisms is array, not a symbol or an array"),
    (_with_descriptor(b"\x53\x15", [True, UInt(0), None, None, "accepted"]),
     "disposition field state is string, not a delivery state"),
]


@pytest.mark.parametrize(("data", "message"), BAD, ids=[m[:40] for _, m in BAD])
def test_bad_performatives_name_what_is_wrong(data: bytes, message: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode_performative(data)
    assert message in str(info.value)
    assert "at position" in str(info.value)


def test_encode_refuses_bad_fields_naming_them() -> None:
    with pytest.raises(EncodeError, match="open: the mandatory field container_id is None"):
        encode_performative(Open(container_id=None))  # type: ignore[arg-type]
    with pytest.raises(EncodeError, match="begin field handle_max: -1 is out of range"):
        encode_performative(Begin(next_outgoing_id=0, incoming_window=0, outgoing_window=0,
                                  handle_max=-1))
    with pytest.raises(EncodeError, match=r"not an AMQP 1\.0 composite"):
        encode_performative(object())


# --------------------------------------------------------------------------------------------
# The per-message cases


@given(uint, st.one_of(st.none(), uint), st.one_of(st.none(), st.binary(max_size=32)),
       st.booleans(), st.booleans(), uint)
def test_encode_transfer_is_the_general_encoding(handle: int, delivery_id: int | None,
                                                 tag: bytes | None, settled: bool, more: bool,
                                                 fmt: int) -> None:
    t = Transfer(handle=handle, delivery_id=delivery_id, delivery_tag=tag, message_format=fmt,
                 settled=settled, more=more)
    fast = encode_transfer(handle, delivery_id, tag, settled, more, fmt)
    assert fast == encode_performative(t)
    assert decode_performative(fast)[0] == t


@given(st.booleans(), uint, st.one_of(st.none(), uint), st.booleans(),
       st.one_of(st.none(), states))
def test_encode_disposition_is_the_general_encoding(role: bool, first: int, last: int | None,
                                                    settled: bool, state: Any) -> None:
    d = Disposition(role=role, first=first, last=last, settled=settled, state=state)
    fast = encode_disposition(role, first, last, settled, state)
    assert fast == encode_performative(d)
    assert decode_performative(fast)[0] == d


@given(instances(Transfer), st.binary(max_size=16))
def test_decode_transfer_fields_is_the_general_decoding(t: Transfer, payload: bytes) -> None:
    enc = encode_performative(t)
    assert decode_transfer_fields(enc + payload) == decode_performative(enc + payload)
    # also from a frame body at an offset, with bytes beyond `end` that are not read
    buf = b"\xff" + enc + payload + b"\xff"
    assert decode_transfer_fields(buf, 1, len(buf) - 1) == (t, 1 + len(enc))


def test_decode_transfer_fields_refuses_other_performatives() -> None:
    with pytest.raises(DecodeError, match="expected a transfer, got flow"):
        decode_transfer_fields(encode_performative(
            Flow(incoming_window=1, next_outgoing_id=0, outgoing_window=1)))
    with pytest.raises(DecodeError, match="transfer: the mandatory field handle is absent"):
        decode_transfer_fields(b"\x00\x53\x14\x45")


def test_encode_transfer_refuses_what_the_spec_does() -> None:
    with pytest.raises(EncodeError, match="33 bytes, at most 32"):
        encode_transfer(0, 0, b"x" * 33, False, False)
    with pytest.raises(EncodeError, match="not a uint"):
        encode_transfer(-1, 0, b"", False, False)
    with pytest.raises(EncodeError, match="not a uint"):
        encode_disposition(True, 2**32, None, True, Accepted())


def test_module_exports_what_it_declares() -> None:
    for name in pf.__all__:
        assert hasattr(pf, name), name
