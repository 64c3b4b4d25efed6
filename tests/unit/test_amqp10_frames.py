"""AMQP 1.0's hot path (native and reference, same tests): transfer frames written, a session's
transfers and dispositions scanned, every other frame handed on.

Frames are built here by hand from the specification (part 2.3 framing, part 1 types, 2.7.5
transfer, 2.7.6 disposition) in every form a peer may choose (smalluint or uint, list8 or
list32, a numeric or symbolic descriptor...), so the scanner is checked against an encoder it
does not share. Property tests cut the same stream at arbitrary places (a socket may), compare
the scanner's output with a model of the stream, and drive both implementations with the same
hostile bytes: same results, same error message.
"""

from __future__ import annotations

import re
import struct
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pumpd.dataplane import amqp10_frames_ref as ref
from pumpd.dataplane.amqp10_frames_ref import FramingError

from tests.support.impls import native

CH = 1
MAX = 4096


def impl_module(impl: str) -> ModuleType:
    return ref if impl == "reference" else native()


@pytest.fixture
def mod(impl: str) -> ModuleType:
    return impl_module(impl)


# -- a hand encoder, after the specification ----------------------------------------------------

NULL = b"\x40"


def uint(v: int, form: int = 0) -> bytes:
    """A uint: form 0 the shortest, 1 smalluint where it fits, 2 always the 4-byte uint."""
    if form == 0 and v == 0:
        return b"\x43"
    if form < 2 and v < 256:
        return bytes((0x52, v))
    return b"\x70" + struct.pack(">I", v)


def boolean(v: bool, form: int = 0) -> bytes:
    return (b"\x41" if v else b"\x42") if form == 0 else bytes((0x56, int(v)))


def vbin(v: bytes, form: int = 0) -> bytes:
    return (bytes((0xA0, len(v))) if form == 0 else b"\xb0" + struct.pack(">I", len(v))) + v


def sym(name: bytes) -> bytes:
    return bytes((0xA3, len(name))) + name


def descriptor(code: int, name: bytes, form: int = 0) -> bytes:
    if form == 0:
        return bytes((0x00, 0x53, code))
    if form == 1:
        return b"\x00\x80" + struct.pack(">Q", code)
    return b"\x00" + sym(name)


def lst(fields: list[bytes], form: int = 0) -> bytes:
    if not fields and form == 0:
        return b"\x45"
    body = b"".join(fields)
    if form < 2 and len(body) + 1 <= 255:
        return bytes((0xC0, len(body) + 1, len(fields))) + body
    return b"\xd0" + struct.pack(">II", len(body) + 4, len(fields)) + body


def frame(body: bytes, channel: int = CH, ftype: int = 0, ext: bytes = b"") -> bytes:
    assert len(ext) % 4 == 0
    return struct.pack(">IBBH", 8 + len(ext) + len(body), 2 + len(ext) // 4, ftype,
                       channel) + ext + body


def transfer(fields: list[bytes], payload: bytes = b"", channel: int = CH, dform: int = 0,
             lform: int = 0) -> bytes:
    return frame(descriptor(0x14, b"amqp:transfer:list", dform) + lst(fields, lform) + payload,
                 channel)


def first_fields(handle: int, did: int, settled: bool | None = None, more: bool = False,
                 form: int = 0) -> list[bytes]:
    fields = [uint(handle, form), uint(did, form), vbin(struct.pack(">I", did), form % 2),
              uint(0, form)]
    if settled is not None or more:
        fields.append(NULL if settled is None else boolean(settled, form % 2))
    if more:
        fields.append(boolean(True, form % 2))
    return fields


def state(code: int, form: int = 0, fields: list[bytes] | None = None) -> bytes:
    names = {v: k for k, v in ref.DELIVERY_STATES.items()}
    return descriptor(code, names.get(code, b"x"), form) + lst(fields or [], form)


def disposition(role: bool, first: int, last: int | None = None, settled: bool | None = None,
                st_: bytes | None = None, channel: int = CH, form: int = 0) -> bytes:
    fields = [boolean(role, form % 2), uint(first, form)]
    if last is not None or settled is not None or st_ is not None:
        fields.append(NULL if last is None else uint(last, form))
    if settled is not None or st_ is not None:
        fields.append(NULL if settled is None else boolean(settled, form % 2))
    if st_ is not None:
        fields.append(st_)
    return frame(descriptor(0x15, b"amqp:disposition:list", form) + lst(fields, form),
                 channel)


def split(data: bytes) -> list[bytes]:
    """The frames of a stream, by their size fields."""
    out, pos = [], 0
    while pos < len(data):
        size = struct.unpack_from(">I", data, pos)[0]
        out.append(data[pos:pos + size])
        pos += size
    return out


def scan(m: ModuleType, data: bytes, cuts: list[int] | None = None, **kw: Any) -> tuple[
        list[Any], list[Any], list[Any]]:
    scanner = m.FrameScanner(kw.pop("max_frame_size", MAX), CH, **kw)
    points = sorted({c % (len(data) + 1) for c in cuts or []})
    pos = 0
    for c in [*points, len(data)]:
        scanner.feed(data[pos:c])
        pos = c
    return scanner.take_transfers(1 << 30), scanner.take_dispositions(), scanner.take_other()


# -- the writer ---------------------------------------------------------------------------------


def test_a_transfer_frame_is_what_the_specification_describes(mod: ModuleType) -> None:
    w = mod.TransferWriter(CH, 0, 512)
    w.add(5, b"hello", True)
    w.add(70000, b"", False)
    w2 = mod.TransferWriter(7, 300, 512)
    w2.add(0, b"x", False)
    assert w.take() == (
        b"\x00\x00\x00\x1e\x02\x00\x00\x01"  # size 30, doff 2, AMQP, channel 1
        b"\x00\x53\x14\xc0\x0c\x05"  # transfer: list8 of 12 bytes, 5 fields
        b"\x43\x52\x05\xa0\x04\x00\x00\x00\x05\x43\x41"  # handle 0, id 5, tag, format 0, settled
        b"hello"
        b"\x00\x00\x00\x1c\x02\x00\x00\x01\x00\x53\x14\xc0\x0f\x05"
        b"\x43\x70\x00\x01\x11\x70\xa0\x04\x00\x01\x11\x70\x43\x42")
    assert w2.take() == (b"\x00\x00\x00\x1d\x02\x00\x00\x07\x00\x53\x14\xc0\x0f\x05"
                         b"\x70\x00\x00\x01\x2c\x43\xa0\x04\x00\x00\x00\x00\x43\x42x")
    assert w.take() == b"" and w.buffered == 0 and w.frames == 2


@pytest.mark.parametrize("extra", [-1, 0, 1, 2, 500, 5000])
def test_a_message_too_large_for_a_frame_is_split_with_more(mod: ModuleType, extra: int) -> None:
    fields = len(b"\x43\x52\x09\xa0\x04\x00\x00\x00\x09\x43\x42")
    fits = 512 - 8 - 6 - fields  # the largest payload of a one-frame message
    payload = bytes(i % 251 for i in range(fits + extra))
    w = mod.TransferWriter(CH, 0, 512)
    w.add(9, payload, False)
    frames = split(w.take())
    assert all(len(f) <= 512 for f in frames)
    if extra <= 0:
        assert len(frames) == 1 and len(frames[0]) == 512 + extra
        return
    assert len(frames) == w.frames > 1
    first, *rest = frames
    assert first[8:20] == b"\x00\x53\x14\xc0\x0d\x06\x43\x52\x09\xa0\x04\x00"  # more: 6 fields
    assert first[8 + 6 + fields] == 0x41 and len(first) == 512
    for f in rest[:-1]:
        assert f[8:17] == b"\x00\x53\x14\xc0\x07\x06\x43\x40\x40" and f[17:20] == b"\x40\x42\x41"
        assert len(f) == 512
    assert rest[-1][8:19] == b"\x00\x53\x14\xc0\x06\x05\x43\x40\x40\x40\x42"
    [(handle, did, settled, got)] = scan(mod, b"".join(frames))[0]
    assert (handle, did, settled, got) == (0, 9, False, payload)


def test_delivery_ids_wrap_at_2_to_the_32(mod: ModuleType) -> None:
    w = mod.TransferWriter(CH, 2, 512)
    assert w.add_many(2**32 - 2, [b"a", b"b", bytearray(b"c"), memoryview(b"d")], True) == 4
    w.add(2**32 + 5, b"e", False)
    assert w.add_many(0, (b"x" * 1200,), False) == 3  # a tuple; 3 frames of 512
    got = scan(ref, w.take())[0]
    assert [(d, s, p) for _, d, s, p in got] == [
        (2**32 - 2, True, b"a"), (2**32 - 1, True, b"b"), (0, True, b"c"), (1, True, b"d"),
        (5, False, b"e"), (0, False, b"x" * 1200)]
    assert w.frames == 8


def test_writer_arguments_are_checked(mod: ModuleType) -> None:
    for args, message in [((70000, 0, 512), "channel 70000 is not a ushort"),
                          ((-1, 0, 512), "channel -1 is not a ushort"),
                          ((0, 2**32, 512), "handle 4294967296 is not a uint"),
                          ((0, 0, 511), "max_frame_size 511 is not within"),
                          ((0, 0, 2**32), "max_frame_size 4294967296 is not within")]:
        with pytest.raises(ValueError, match=message):
            mod.TransferWriter(*args)
    w = mod.TransferWriter(0, 0, 512)
    with pytest.raises(OverflowError):
        w.add(-1, b"", True)
    with pytest.raises(TypeError):
        w.add(0, "text", True)


def test_a_disposition_frame_is_what_the_specification_describes(mod: ModuleType) -> None:
    assert mod.encode_disposition(1, True, 3, 7, True, 0x24) == (
        b"\x00\x00\x00\x18\x02\x00\x00\x01\x00\x53\x15\xc0\x0b\x05"
        b"\x41\x52\x03\x52\x07\x41\x00\x53\x24\x45")
    assert mod.encode_disposition(0, False, 300, 300, False, 0) == (
        b"\x00\x00\x00\x16\x02\x00\x00\x00\x00\x53\x15\xc0\x09\x04\x42\x70\x00\x00\x01\x2c"
        b"\x40\x42")
    assert mod.encode_disposition(2, True, 2**32 + 1, 2**32 - 1, True, 0x26)[14:] == (
        b"\x41\x52\x01\x70\xff\xff\xff\xff\x41\x00\x53\x26\x45")
    for code in (0, 0x24, 0x25, 0x26, 0x27):
        got = scan(mod, mod.encode_disposition(CH, True, 0, 9, False, code))[1]
        assert got == [(True, 0, 9, False, code)]
    with pytest.raises(ValueError, match="state_code 0x23"):
        mod.encode_disposition(CH, True, 0, 0, True, 0x23)
    with pytest.raises(ValueError, match="channel"):
        mod.encode_disposition(65536, True, 0, 0, True, 0)


# -- the scanner: every form the specification allows ------------------------------------------


def test_transfers_in_every_form_the_specification_allows(mod: ModuleType) -> None:
    every_field = [
        uint(3, 2), uint(70000, 2), vbin(b"t" * 32, 1), uint(0, 2), boolean(True, 1),
        boolean(False, 1), b"\x50\x01", state(0x24, 1), boolean(False), b"\x42", b"\x41"]
    data = b"".join([
        transfer(every_field, b"all eleven", dform=1, lform=2),
        transfer(first_fields(0, 1), b"symbolic", dform=2),
        transfer([uint(0), uint(2), vbin(b"")], b"three fields"),  # settled absent: false
        frame(descriptor(0x14, b"amqp:transfer:list") + lst(first_fields(0, 3, True)) + b"x",
              ext=b"\x00\x00\x00\x00"),  # an extended header (doff 3)
        transfer([*first_fields(0, 4, True, form=1), NULL, NULL, NULL, NULL, NULL, NULL], b""),
    ])
    transfers, dispositions, other = scan(mod, data)
    assert transfers == [(3, 70000, True, b"all eleven"), (0, 1, False, b"symbolic"),
                         (0, 2, False, b"three fields"), (0, 3, True, b"x"), (0, 4, True, b"")]
    assert dispositions == [] and other == []


def test_a_message_over_frames_is_joined(mod: ModuleType) -> None:
    data = b"".join([
        transfer(first_fields(4, 10, None, more=True), b"one "),
        frame(b"", channel=0),  # a heartbeat between
        transfer([uint(4), uint(10), NULL, NULL, boolean(True), boolean(True)], b"two "),
        transfer([uint(4), NULL, NULL, NULL, NULL, boolean(False)], b"three"),
        transfer(first_fields(4, 11, False), b"next"),
    ])
    scanner = mod.FrameScanner(MAX, CH)
    frames = split(data)
    scanner.feed(b"".join(frames[:3]))
    assert scanner.in_delivery and scanner.pending == 0
    scanner.feed(b"".join(frames[3:]))
    assert not scanner.in_delivery
    # settled on a later frame settles the delivery (part 2.7.5: later frames inherit it)
    assert scanner.take_transfers(1) == [(4, 10, True, b"one two three")]
    assert scanner.take_transfers(5) == [(4, 11, False, b"next")]
    assert scanner.take_transfers(5) == [] and scanner.pending == 0
    assert scanner.take_other() == [(0, 0, b"")]
    assert (scanner.transfer_frames, scanner.deliveries, scanner.aborted) == (4, 2, 0)


def test_an_aborted_delivery_is_dropped(mod: ModuleType) -> None:
    aborted = [uint(1), NULL, NULL, NULL, NULL, boolean(True), NULL, NULL, NULL, boolean(True)]
    data = b"".join([
        transfer(first_fields(1, 20, True, more=True), b"partial"),
        transfer(aborted, b"ignored"),
        transfer(first_fields(1, 21, True), b"whole"),
        transfer([*first_fields(1, 22, True), NULL, NULL, NULL, NULL, boolean(True)], b"x"),
    ])
    scanner = mod.FrameScanner(MAX, CH)
    scanner.feed(data)
    assert scanner.take_transfers(9) == [(1, 21, True, b"whole")]
    assert (scanner.transfer_frames, scanner.deliveries, scanner.aborted) == (4, 1, 2)


def test_dispositions_in_every_form(mod: ModuleType) -> None:
    error = lst([sym(b"amqp:internal-error"), bytes((0xA1, 3)) + b"bad", NULL])
    data = b"".join([
        disposition(True, 5),
        disposition(True, 5, 9, True, state(0x24)),
        disposition(False, 1, None, False, state(0x25, 2, [b"\x00\x53\x1d" + error]), form=2),
        disposition(True, 70000, 70001, True, state(0x26, 1), form=1),
        disposition(True, 2, 2, True, state(0x27, 0, [boolean(True), boolean(True)])),
        disposition(True, 3, None, None, state(0x23, 0, [uint(0), b"\x53\x00"])),  # received
        disposition(True, 4, None, True, NULL),
        frame(descriptor(0x15, b"") + lst([boolean(True), uint(6), NULL, NULL, NULL,
                                           boolean(True)])),  # batchable
    ])
    assert scan(mod, data)[1] == [
        (True, 5, 5, False, 0), (True, 5, 9, True, 0x24), (False, 1, 1, False, 0x25),
        (True, 70000, 70001, True, 0x26), (True, 2, 2, True, 0x27), (True, 3, 3, False, 0x23),
        (True, 4, 4, True, 0), (True, 6, 6, False, 0)]


def test_every_other_frame_is_handed_on_in_order(mod: ModuleType) -> None:
    elsewhere = transfer(first_fields(0, 1, True), b"on channel 2", channel=2)
    open_ = descriptor(0x10, b"") + lst([bytes((0xA1, 1)) + b"c"])
    flow = descriptor(0x13, b"") + lst([uint(0), uint(100), uint(0), uint(100)])
    sasl = descriptor(0x41, b"") + lst([b"\xe0\x02\x01\xa3"])
    data = b"".join([
        b"AMQP\x03\x01\x00\x00", frame(sasl, channel=0, ftype=1),
        b"AMQP\x00\x01\x00\x00", frame(open_, channel=0),
        elsewhere,
        frame(flow), transfer(first_fields(0, 0), b"mine"),
        frame(b"", channel=0), frame(flow, ftype=1),  # a SASL frame on the session's channel
        frame(b"\x00\x53"),  # cut short: the codec's to refuse
        frame(b"\x00\x80" + struct.pack(">Q", (1 << 32) | 0x14) + b"\x45"),  # another domain
        disposition(True, 1, channel=0),
        frame(b"\x00" + sym(b"amqp:transfer:lis") + b"\x45"),
        frame(open_, channel=CH, ext=b"\x01\x02\x03\x04"),
    ])
    transfers, dispositions, other = scan(mod, data)
    assert transfers == [(0, 0, False, b"mine")] and dispositions == []
    assert other == [
        (-1, 0, b"AMQP\x03\x01\x00\x00"), (1, 0, sasl), (-1, 0, b"AMQP\x00\x01\x00\x00"),
        (0, 0, open_), (0, 2, elsewhere[8:]), (0, CH, flow), (0, 0, b""), (1, CH, flow),
        (0, CH, b"\x00\x53"), (0, CH, b"\x00\x80" + struct.pack(">Q", (1 << 32) | 0x14) + b"\x45"),
        (0, 0, disposition(True, 1)[8:]), (0, CH, b"\x00" + sym(b"amqp:transfer:lis") + b"\x45"),
        (0, CH, open_)]


def test_take_transfers_hands_out_at_most_most(mod: ModuleType) -> None:
    scanner = mod.FrameScanner(MAX, CH)
    scanner.feed(b"".join(transfer(first_fields(0, i), bytes([i])) for i in range(5)))
    assert scanner.take_transfers(0) == [] and scanner.take_transfers(-3) == []
    assert [t[1] for t in scanner.take_transfers(2)] == [0, 1]
    assert scanner.pending == 3 and [t[1] for t in scanner.take_transfers(9)] == [2, 3, 4]


def test_scanner_limits(mod: ModuleType) -> None:
    big = transfer(first_fields(0, 1), b"x" * 600)
    scanner = mod.FrameScanner(512, CH)
    with pytest.raises(FramingError, match=r"a frame of 624 bytes .* exceeds max-frame-size 512"):
        scanner.feed(big[:8])  # refused by its header alone
    scanner = mod.FrameScanner(512, CH)
    scanner.max_frame_size = 1024
    scanner.feed(big)
    assert scanner.pending == 1
    with pytest.raises(ValueError):
        scanner.max_frame_size = 7
    with pytest.raises(ValueError):
        mod.FrameScanner(MAX, 65536)
    # max_message_size: a single frame, then a message over frames
    scanner = mod.FrameScanner(MAX, CH, 100)
    scanner.feed(transfer(first_fields(0, 1), b"x" * 100))
    with pytest.raises(FramingError, match="delivery 2 on handle 0 reaches 101 bytes, over "
                                           "max-message-size 100"):
        scanner.feed(transfer(first_fields(0, 2), b"x" * 101))
    scanner = mod.FrameScanner(MAX, CH, 100)
    scanner.max_message_size = 150
    scanner.feed(transfer(first_fields(0, 3, more=True), b"x" * 100))
    with pytest.raises(FramingError, match="reaches 151 bytes"):
        scanner.feed(transfer([uint(0)], b"y" * 51))
    assert scanner.take_transfers(5) == [] and not scanner.in_delivery


# -- hostile frames -----------------------------------------------------------------------------

T = descriptor(0x14, b"")
GOOD = first_fields(0, 1)
HOSTILE = [
    (b"\x00\x00\x00\x07\x02\x00\x00\x01", "frame size 7 .* below the minimum of 8"),
    (b"\x00\x00\x00\x08\x01\x00\x00\x01", "frame doff 1 .* below the minimum of 2"),
    (b"\x00\x00\x00\x0c\x04\x00\x00\x01\x00\x00\x00\x00", r"frame doff 4 \(16 bytes.* its size 12"),
    (b"\x00\x00\x80\x00\x02\x00\x00\x01", "a frame of 32768 bytes .* exceeds max-frame-size"),
    (frame(T), "transfer on channel 1: the frame ends at offset 11 before its list"),
    (frame(T + b"\x45"), "transfer on channel 1: handle is missing"),
    (frame(T + b"\xc0\x05"), "its list8 at offset 11 is cut short"),
    (frame(T + b"\xd0\x00\x00\x00\x05"), "its list32 at offset 11 is cut short"),
    (frame(T + b"\xa1\x00"), "type code 0xa1 at offset 11, not a list"),
    (frame(T + b"\xc0\x09\x01\x43"), "its list of 9 bytes at offset 11 does not fit"),
    (frame(T + b"\xc0\x00\x00"), "its list of 0 bytes"),
    (frame(T + b"\xd0\xff\xff\xff\xff\x00\x00\x00\x01\x43"), "its list of 4294967295 bytes"),
    (transfer(GOOD + [NULL] * 8), "its list has 12 fields, more than the 11"),
    (frame(T + b"\xc0\x03\x03\x43\x43"), "its list ends at offset 16 before field 3 of 3"),
    (transfer([b"\x71\x00\x00\x00\x01"]), "field handle at offset 14 has type code 0x71, not a uint"),
    (transfer([uint(0), b"\x44"]), "field delivery-id .* 0x44, not a uint"),
    (transfer([uint(0), uint(1), b"\xa1\x01t"]), "field delivery-tag .* 0xa1, not a binary"),
    (transfer([*GOOD, b"\x52\x01"]), "field settled .* 0x52, not a boolean"),
    (transfer([*GOOD, b"\x56\x02"]), "field settled at offset 24 is no valid boolean"),
    (transfer([*GOOD, NULL, NULL, b"\x50\x02"]), "field rcv-settle-mode .* is no valid ubyte"),
    (transfer([*GOOD, NULL, NULL, b"\x52\x01"]), "field rcv-settle-mode .* 0x52, not a ubyte"),
    (transfer([*GOOD, NULL, NULL, NULL, b"\x45"]), "field state .* 0x45, not a delivery-state"),
    (transfer([*GOOD, NULL, NULL, NULL, b"\x00\x53\x99\x45"]), "field state .* no valid"),
    (transfer([*GOOD, NULL, NULL, NULL, b"\x00\x53\x24\x40"]), "field state .* no valid"),
    (transfer([*GOOD, NULL, NULL, NULL, b"\x00\x52\x24\x45"]), "field state .* no valid"),
    (transfer([*GOOD, NULL, NULL, NULL, b"\x00" + sym(b"amqp:nope:list") + b"\x45"]),
     "field state .* no valid"),
    (frame(T + b"\xc0\x03\x02\x43\x52\x07"), "field delivery-id at offset 15 does not fit its list"),
    (frame(T + b"\xc0\x04\x03\x43\x43\xb0zzzz"), "field delivery-tag .* does not fit its list"),
    (frame(T + b"\xc0\x07\x03\x43\x43\xa0\x09" + b"\x00" * 3), "delivery-tag .* does not fit"),
    (frame(T + b"\xc0\x05\x03\x43\x43\x45\x40"), "field delivery-tag .* 0x45, not a binary"),
    (frame(T + b"\xc0\x04\x02\x43\x43\x43"), "its list has 1 bytes after its 2 fields"),
    (transfer([uint(0)]), "delivery-id missing on handle 0's first transfer"),
    (transfer([uint(0), uint(1)]), "delivery-tag missing on handle 0's first transfer"),
    (transfer([uint(0), uint(1), vbin(b"t" * 33)]), "delivery-tag of 33 bytes, over 32"),
    (transfer(first_fields(0, 1, more=True)) + transfer([uint(1)]),
     "handle 1 while delivery 1 on handle 0 is unfinished"),
    (transfer(first_fields(0, 1, more=True)) + transfer([uint(0), uint(2)]),
     "delivery-id 2 continues delivery 1"),
    (frame(descriptor(0x15, b"") + lst([boolean(True), b"\x44"])),
     "disposition on channel 1: field first at offset 15 has type code 0x44, not a uint"),
    (frame(descriptor(0x15, b"") + b"\x45"), "disposition on channel 1: role is missing"),
    (frame(descriptor(0x15, b"") + lst([boolean(True)])), "first is missing"),
    (frame(descriptor(0x15, b"") + lst([boolean(True), uint(1)]) + b"!"),
     "disposition on channel 1: 1 bytes follow its list"),
    (disposition(True, 1, None, None, b"\x00\x53\x14\x45"), "field state .* no valid"),
    (disposition(True, 1, None, None, b"\x00\x53\x24\xc0\x05\x00"), "does not fit its list"),
    (disposition(True, 1, None, None, b"\x00\x53\x24\xd0\x00\x00\x00\x01\x00\x00\x00\x00"),
     "field state .* no valid"),
]


@pytest.mark.parametrize(("data", "message"), HOSTILE)
def test_hostile_frames_are_refused_by_name(mod: ModuleType, data: bytes, message: str) -> None:
    scanner = mod.FrameScanner(MAX, CH)
    with pytest.raises(FramingError, match=message):
        scanner.feed(data)
    assert not scanner.in_delivery


# -- properties: cuts, a model of the stream, parity ---------------------------------------------

forms = st.integers(0, 2)


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, list[tuple[int, int, bool, bytes]],
                                      list[tuple[bool, int, int, bool, int]], list[bytes]]:
    """A stream of frames and what the scanner must make of it: transfers (some over several
    frames, other frames between), dispositions, other frames (their bodies)."""
    out: list[bytes] = []
    transfers, dispositions, other = [], [], []
    did = draw(st.integers(0, 2**32 - 1))
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["transfer", "transfer", "disposition", "other"]))
        if kind == "transfer":
            handle = draw(st.integers(0, 2**32 - 1))
            parts = draw(st.lists(st.binary(max_size=40), min_size=1, max_size=4))
            settled = draw(st.lists(st.sampled_from([None, False, True]), min_size=len(parts),
                                    max_size=len(parts)))
            form = draw(forms)
            for i, part in enumerate(parts):
                more = i < len(parts) - 1
                if i == 0:
                    fields = first_fields(handle, did, None, True, form)
                else:
                    fields = [uint(handle, form), draw(st.sampled_from([NULL, uint(did, form)])),
                              NULL, NULL, NULL, NULL]
                fields[4] = NULL if settled[i] is None else boolean(settled[i], form % 2)
                fields[5] = boolean(more, form % 2)
                out.append(transfer(fields, part, dform=draw(forms), lform=draw(forms)))
                if more and draw(st.booleans()):
                    out.append(frame(b"", channel=0))
                    other.append(b"")
            transfers.append((handle, did, any(settled), b"".join(parts)))
            did = (did + 1) % 2**32
        elif kind == "disposition":
            first = draw(st.integers(0, 2**32 - 1))
            last = draw(st.one_of(st.none(), st.integers(0, 2**32 - 1)))
            settled_ = draw(st.booleans())
            code = draw(st.sampled_from(sorted(ref.DELIVERY_STATE_CODES)))
            out.append(disposition(True, first, last, settled_, state(code, draw(forms)),
                                   form=draw(forms)))
            dispositions.append((True, first, first if last is None else last, settled_, code))
        else:
            body = draw(st.binary(max_size=30))
            out.append(frame(body, channel=draw(st.sampled_from([0, 2]))))
            other.append(body)
    return b"".join(out), transfers, dispositions, other


@given(stream=streams(), cuts=st.lists(st.integers(0, 2000), max_size=6))
def test_any_cut_of_a_stream_gives_what_it_carries(stream: Any, cuts: list[int]) -> None:
    data, transfers, dispositions, other = stream
    for m in (ref, native()):
        got_t, got_d, got_o = scan(m, data, cuts)
        assert got_t == transfers and got_d == dispositions
        assert [body for _, _, body in got_o] == other


@st.composite
def hostile(draw: st.DrawFn) -> bytes:
    """A valid stream with bytes flipped (mostly past a frame's size, so that the fields are
    what is wrong), dropped or inserted."""
    data = bytearray(draw(streams())[0] or transfer(GOOD, b"x"))
    starts = [0]
    for f in split(bytes(data)):
        starts.append(starts[-1] + len(f))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        how = draw(st.sampled_from([0, 0, 0, 1, 2]))
        start = max(x for x in starts if x <= at)
        if how == 0 and at - start < 4 and draw(st.integers(0, 3)):
            at += 4  # past the size field, mostly
        if how == 0 and at < len(data):
            data[at] = draw(st.sampled_from([0x00, 0x01, 0x40, 0x45, 0x53, 0x56, 0x70, 0xA0,
                                             0xC0, 0xD0, 0xFF, draw(st.integers(0, 255))]))
        elif how == 1:
            del data[at:at + draw(st.integers(1, 3))]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=3))
    return bytes(data)


def outcome(m: ModuleType, data: bytes, cuts: list[int]) -> tuple[Any, ...]:
    scanner = m.FrameScanner(MAX, CH, 64)
    error = None
    points = sorted({c % (len(data) + 1) for c in cuts})
    pos = 0
    try:
        for c in [*points, len(data)]:
            scanner.feed(data[pos:c])
            pos = c
    except FramingError as exc:
        error = str(exc)
    return (error, scanner.take_transfers(1 << 30), scanner.take_dispositions(),
            scanner.take_other(), scanner.transfer_frames, scanner.deliveries, scanner.aborted,
            scanner.in_delivery)


@given(data=hostile(), cuts=st.lists(st.integers(0, 2000), max_size=4))
def test_hostile_bytes_get_the_same_answer_from_both(data: bytes, cuts: list[int]) -> None:
    expected = outcome(ref, data, [])
    assert outcome(ref, data, cuts) == expected  # cuts never change the answer
    assert outcome(native(), data, cuts) == expected


@given(ids=st.integers(0, 2**64 - 1), sizes=st.lists(st.integers(0, 3000), max_size=6),
       max_frame_size=st.integers(512, 2048), handle=st.integers(0, 2**32 - 1),
       settled=st.booleans())
def test_both_writers_write_the_same_frames(ids: int, sizes: list[int], max_frame_size: int,
                                            handle: int, settled: bool) -> None:
    payloads = [bytes(i % 256 for i in range(n)) for n in sizes]
    out = []
    for m in (ref, native()):
        w = m.TransferWriter(CH, handle, max_frame_size)
        frames = w.add_many(ids, payloads, settled)
        out.append((w.take(), frames, w.frames))
    assert out[0] == out[1]
    data = out[0][0]
    assert all(len(f) <= max_frame_size for f in split(data))
    transfers = scan(native(), data, max_frame_size=max_frame_size)[0]
    assert transfers == [(handle, (ids + i) % 2**32, settled, p) for i, p in enumerate(payloads)]


@given(role=st.booleans(), first=st.integers(0, 2**40), last=st.integers(0, 2**40),
       settled=st.booleans(), code=st.sampled_from(ref.STATE_CODES_WRITTEN),
       channel=st.integers(0, 65535))
def test_both_write_the_same_dispositions(role: bool, first: int, last: int, settled: bool,
                                          code: int, channel: int) -> None:
    data = ref.encode_disposition(channel, role, first, last, settled, code)
    assert native().encode_disposition(channel, role, first, last, settled, code) == data
    scanner = ref.FrameScanner(MAX, channel)
    scanner.feed(data)
    assert scanner.take_dispositions() == [(role, first % 2**32, last % 2**32, settled, code)]


def test_error_messages_name_the_channel_and_the_field() -> None:
    with pytest.raises(FramingError) as info:
        ref.FrameScanner(MAX, 9).feed(transfer([b"\x71\x00\x00\x00\x01"], channel=9))
    assert re.fullmatch(r"transfer on channel 9: field handle at offset 14 has type code 0x71, "
                        r"not a uint", str(info.value))
