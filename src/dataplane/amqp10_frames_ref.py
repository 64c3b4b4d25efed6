"""AMQP 1.0's hot path, pure-Python reference: transfer frames written in bulk, the transfers and
dispositions of one session read out of the bytes off its connection, every other frame handed
on whole to the Python codec.

The native twin is ``pumpd._fastpath`` (``TransferWriter``, ``FrameScanner``,
``encode_disposition``: same API, same behaviour, same error messages, same tests); the contract
is :class:`pumpd.dataplane.api.TransferWriter` and :class:`~pumpd.dataplane.api.FrameScanner`.
This module stands alone: it sits below :mod:`pumpd.amqp10` and encodes and decodes only the few
AMQP types a transfer and a disposition use.

A frame (AMQP 1.0 part 2.3) is a 4-byte size (counting itself), a data offset ``doff`` in 4-byte
words, a type (0 AMQP, 1 SASL), a 2-byte channel, an extended header up to ``doff * 4``, then the
body: a performative (a described list) and, for a transfer, the message's bytes. Every size a
peer sends is checked before it is used: a frame header against ``max_frame_size`` before the
rest of the frame is waited for, and every field of a transfer or disposition within its list
and its list within its frame. A violation raises :class:`FramingError`, whose message names the
frame's channel, the performative, the field, its offset in the frame and the value; the
connection is then closed with a framing error, and the scanner is not used again.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

# the frame types
TYPE_AMQP = 0
TYPE_SASL = 1
# The type :meth:`FrameScanner.take_other` gives a protocol header (``AMQP`` and 4 version
# bytes, its body): a peer sends one at the start of the stream and again after SASL, between
# frames. A frame's type is an octet, so -1 is none.
PROTOCOL_HEADER = -1
PROTOCOL_HEADER_SIZE = 8
FRAME_HEADER_SIZE = 8
MIN_MAX_FRAME_SIZE = 512
MAX_MAX_FRAME_SIZE = 0xFFFF_FFFF
UINT_MASK = 0xFFFF_FFFF
MAX_DELIVERY_TAG = 32  # octets (part 2.8.7)

# descriptor codes (AMQP's own domain, 0x00000000)
TRANSFER = 0x14
DISPOSITION = 0x15
RECEIVED = 0x23
ACCEPTED = 0x24
REJECTED = 0x25
RELEASED = 0x26
MODIFIED = 0x27
DECLARED = 0x33
TRANSACTIONAL_STATE = 0x34
# what a disposition's or a transfer's state may be, by descriptor code and by symbolic name
DELIVERY_STATES = {
    b"amqp:received:list": RECEIVED,
    b"amqp:accepted:list": ACCEPTED,
    b"amqp:rejected:list": REJECTED,
    b"amqp:released:list": RELEASED,
    b"amqp:modified:list": MODIFIED,
    b"amqp:declared:list": DECLARED,
    b"amqp:transactional-state:list": TRANSACTIONAL_STATE,
}
DELIVERY_STATE_CODES = frozenset(DELIVERY_STATES.values())
PERFORMATIVES = {b"amqp:transfer:list": TRANSFER, b"amqp:disposition:list": DISPOSITION}
# what encode_disposition writes for each state code: the outcome with every field absent
STATE_CODES_WRITTEN = (0, ACCEPTED, REJECTED, RELEASED, MODIFIED)

# type codes
NULL = 0x40
TRUE = 0x41
FALSE = 0x42
UINT0 = 0x43
LIST0 = 0x45
UBYTE = 0x50
SMALLUINT = 0x52
SMALLULONG = 0x53
BOOLEAN = 0x56
UINT = 0x70
ULONG = 0x80
VBIN8 = 0xA0
SYM8 = 0xA3
VBIN32 = 0xB0
SYM32 = 0xB3
LIST8 = 0xC0
LIST32 = 0xD0

# what a field of a transfer or a disposition is
K_UINT, K_BOOL, K_UBYTE, K_BINARY, K_STATE = 0, 1, 2, 3, 4
KIND_NAMES = ("uint", "boolean", "ubyte", "binary", "delivery-state")
TRANSFER_FIELDS = ("handle", "delivery-id", "delivery-tag", "message-format", "settled", "more",
                   "rcv-settle-mode", "state", "resume", "aborted", "batchable")
TRANSFER_KINDS = (K_UINT, K_UINT, K_BINARY, K_UINT, K_BOOL, K_BOOL, K_UBYTE, K_STATE, K_BOOL,
                  K_BOOL, K_BOOL)
DISPOSITION_FIELDS = ("role", "first", "last", "settled", "state", "batchable")
DISPOSITION_KINDS = (K_BOOL, K_UINT, K_UINT, K_BOOL, K_STATE, K_BOOL)
# the type codes each kind of field may come as (besides null)
KIND_CODES = (
    frozenset((UINT0, SMALLUINT, UINT)),
    frozenset((TRUE, FALSE, BOOLEAN)),
    frozenset((UBYTE,)),
    frozenset((VBIN8, VBIN32)),
    frozenset((0x00,)),
)

_U32 = struct.Struct(">I")
_HEAD = struct.Struct(">IBBH")


class FramingError(ValueError):
    """A frame that breaks AMQP 1.0's framing or whose transfer or disposition has fields that
    are not what the specification says; the message names what and where."""


# -- messages shared with the native twin (it raises the same text) ----------------------------


def head_error(size: int, doff: int, ftype: int, channel: int, max_frame_size: int) -> str | None:
    """What is wrong with a frame header, or None. The header alone is judged, before the rest of
    the frame is waited for."""
    if size < FRAME_HEADER_SIZE:
        return f"frame size {size} (type {ftype}, channel {channel}) is below the minimum of 8"
    if size > max_frame_size:
        return (f"a frame of {size} bytes (type {ftype}, channel {channel}) exceeds "
                f"max-frame-size {max_frame_size}")
    if doff < 2:
        return f"frame doff {doff} (type {ftype}, channel {channel}) is below the minimum of 2"
    if doff * 4 > size:
        return (f"frame doff {doff} ({doff * 4} bytes, type {ftype}, channel {channel}) exceeds "
                f"its size {size}")
    return None


def _name(performative: int) -> str:
    return "transfer" if performative == TRANSFER else "disposition"


def field_type_error(performative: int, channel: int, index: int, code: int,
                     offset: int) -> str:
    """A field whose type code is not one its type may come as."""
    if performative == TRANSFER:
        field, kind = TRANSFER_FIELDS[index], TRANSFER_KINDS[index]
    else:
        field, kind = DISPOSITION_FIELDS[index], DISPOSITION_KINDS[index]
    return (f"{_name(performative)} on channel {channel}: field {field} at offset {offset} has "
            f"type code 0x{code:02x}, not a {KIND_NAMES[kind]}")


def field_error(performative: int, channel: int, detail: str) -> str:
    """Any other fault of a transfer's or a disposition's fields."""
    return f"{_name(performative)} on channel {channel}: {detail}"


# -- writing ------------------------------------------------------------------------------------


def _uint(v: int) -> bytes:
    if v == 0:
        return b"\x43"
    if v < 256:
        return bytes((SMALLUINT, v))
    return b"\x70" + _U32.pack(v)


def _check_uint(value: int, what: str) -> int:
    if not 0 <= value <= UINT_MASK:
        raise ValueError(f"{what} {value} is not a uint (0..4294967295)")
    return value


def _delivery_id(value: int) -> int:
    """A delivery-id as the writer takes it: any 64-bit count, modulo 2^32."""
    if not 0 <= value < 1 << 64:
        raise OverflowError(f"delivery_id {value} is not within 0..2^64-1")
    return value & UINT_MASK


class TransferWriter:
    """Transfer frames of link ``handle`` on session ``channel``, for a peer whose max-frame-size
    is ``max_frame_size``, gathered in one buffer: :meth:`take` hands them out as one write.

    A message's first frame carries its delivery-id, its delivery-tag (the delivery-id's 4 bytes,
    big-endian), message-format 0 and ``settled``; a message too large for one frame goes on in
    frames that omit those (the specification allows it on continuation transfers) and set
    more=true on every frame but the last.
    """

    def __init__(self, channel: int, handle: int, max_frame_size: int) -> None:
        if not 0 <= channel <= 0xFFFF:
            raise ValueError(f"channel {channel} is not a ushort (0..65535)")
        _check_uint(handle, "handle")
        if not MIN_MAX_FRAME_SIZE <= max_frame_size <= MAX_MAX_FRAME_SIZE:
            raise ValueError(f"max_frame_size {max_frame_size} is not within "
                             f"{MIN_MAX_FRAME_SIZE}..{MAX_MAX_FRAME_SIZE}")
        self.channel = channel
        self.handle = handle
        self.max_frame_size = max_frame_size
        self.frames = 0  # transfer frames written, in all
        self._head = _HEAD.pack(0, 2, TYPE_AMQP, channel)[4:]  # doff, type, channel
        self._handle = _uint(handle)
        # a continuation frame's fields: handle, no delivery-id, tag or message-format
        self._more_fields = self._handle + b"\x40\x40\x40"
        self._out: list[bytes] = []
        self._buffered = 0

    @property
    def buffered(self) -> int:
        """Bytes written and not yet taken."""
        return self._buffered

    def add(self, delivery_id: int, payload: bytes, settled: bool) -> None:
        """Append the transfer frames of one message: ``delivery_id`` is taken modulo 2^32
        (a delivery-id is a serial number that wraps)."""
        self._add(_delivery_id(delivery_id), payload, settled)

    def add_many(self, first_delivery_id: int, payloads: Sequence[bytes], settled: bool) -> int:
        """Append every payload as a message, delivery-ids counting up from
        ``first_delivery_id`` (modulo 2^32); returns the number of frames appended."""
        first = _delivery_id(first_delivery_id)
        frames = self.frames
        for i, payload in enumerate(payloads):
            self._add((first + i) & UINT_MASK, payload, settled)
        return self.frames - frames

    def _add(self, did: int, payload: bytes, settled: bool) -> None:
        flag = b"\x41" if settled else b"\x42"
        data = memoryview(payload).cast("B")
        fields = self._handle + _uint(did) + b"\xa0\x04" + _U32.pack(did) + b"\x43" + flag
        room = self.max_frame_size - FRAME_HEADER_SIZE
        pos = 0
        while True:
            # one more field (more=true) when the rest does not fit this frame
            n = len(data) - pos
            last = n <= room - 6 - len(fields)
            if not last:
                n = room - 7 - len(fields)
            self._frame(fields, last, data[pos:pos + n])
            pos += n
            if last:
                return
            fields = self._more_fields + flag

    def _frame(self, fields: bytes, last: bool, chunk: memoryview) -> None:
        count = 5 if last else 6
        body = b"\x00\x53\x14\xc0" + bytes((len(fields) + 1 + (0 if last else 1), count)) + fields
        if not last:
            body += b"\x41"
        size = FRAME_HEADER_SIZE + len(body) + len(chunk)
        self._out.append(_U32.pack(size) + self._head + body)
        self._out.append(bytes(chunk))
        self._buffered += size
        self.frames += 1

    def take(self) -> bytes:
        """Every frame written since the last call, as one ``bytes``; the buffer is emptied."""
        out = b"".join(self._out)
        self._out.clear()
        self._buffered = 0
        return out


def encode_disposition(channel: int, role: bool, first: int, last: int, settled: bool,
                       state_code: int) -> bytes:
    """A whole disposition frame on ``channel``: ``role`` True for a receiver, deliveries
    ``first`` to ``last`` (each taken modulo 2^32; last omitted when it equals first),
    ``settled``, and the outcome ``state_code`` (:data:`ACCEPTED`, :data:`REJECTED`,
    :data:`RELEASED`, :data:`MODIFIED` with every field absent, or 0 for none)."""
    if not 0 <= channel <= 0xFFFF:
        raise ValueError(f"channel {channel} is not a ushort (0..65535)")
    if state_code not in STATE_CODES_WRITTEN:
        raise ValueError(f"state_code 0x{state_code:02x} is not one of accepted (0x24), "
                         "rejected (0x25), released (0x26), modified (0x27) or 0 (none)")
    if first < 0 or last < 0:
        raise OverflowError(f"delivery-ids {first}..{last}: negative")
    first &= UINT_MASK
    last &= UINT_MASK
    fields = (b"\x41" if role else b"\x42") + _uint(first)
    fields += b"\x40" if last == first else _uint(last)
    fields += b"\x41" if settled else b"\x42"
    count = 4
    if state_code:
        fields += bytes((0x00, SMALLULONG, state_code, LIST0))
        count = 5
    body = b"\x00\x53\x15\xc0" + bytes((len(fields) + 1, count)) + fields
    return _HEAD.pack(FRAME_HEADER_SIZE + len(body), 2, TYPE_AMQP, channel) + body


# -- reading ------------------------------------------------------------------------------------


def _descriptor(buf: bytes, pos: int, end: int, symbols: dict[bytes, int]) -> tuple[int, int]:
    """The descriptor at ``buf[pos]`` (after the 0x00 constructor): AMQP's own descriptor code
    (a symbolic descriptor known by ``symbols``; -1 for any other descriptor) and the position
    after it, which is -1 when the descriptor does not end by ``end``."""
    if pos >= end:
        return -1, -1
    code = buf[pos]
    if code == SMALLULONG:
        if pos + 2 > end:
            return -1, -1
        return buf[pos + 1], pos + 2
    if code == ULONG:
        if pos + 9 > end:
            return -1, -1
        v = int.from_bytes(buf[pos + 1:pos + 9], "big")
        return (v if v <= 0xFF else -1), pos + 9
    if code == SYM8 or code == SYM32:
        width = 1 if code == SYM8 else 4
        if pos + 1 + width > end:
            return -1, -1
        start = pos + 1 + width
        n = int.from_bytes(buf[pos + 1:start], "big")
        if n > end - start:
            return -1, -1
        return symbols.get(buf[start:start + n], -1), start + n
    return -1, pos  # not a ulong nor a symbol: no descriptor of this scanner's


def _list_end(buf: bytes, pos: int, end: int) -> int:
    """The position after the list at ``buf[pos]``; -1 when it does not end by ``end``, 0
    when it is no list (or a list too short for its own count)."""
    if pos >= end:
        return -1
    code = buf[pos]
    if code == LIST0:
        return pos + 1
    if code == LIST8:
        if pos + 2 > end:
            return -1
        size, after = buf[pos + 1], pos + 2 + buf[pos + 1]
        least = 1
    elif code == LIST32:
        if pos + 5 > end:
            return -1
        size = int.from_bytes(buf[pos + 1:pos + 5], "big")
        after, least = pos + 5 + size, 4
    else:
        return 0
    if size < least:
        return 0
    return after if after <= end else -1


def _field_value(buf: bytes, pos: int, end: int, kind: int, code: int,
                 values: list[int | None], index: int) -> int:
    """Store field ``index``'s value (its type ``code`` is one of ``kind``'s) in ``values``;
    the position after it, -1 when it does not end by ``end``, 0 when its value is not one its
    type allows."""
    if code == UINT0 or code == TRUE or code == FALSE:
        values[index] = 1 if code == TRUE else 0
        return pos + 1
    if code == SMALLUINT or code == UBYTE or code == BOOLEAN:
        if pos + 2 > end:
            return -1
        v = buf[pos + 1]
        if v > 1 and code != SMALLUINT:
            return 0  # a boolean is 0 or 1; rcv-settle-mode is first (0) or second (1)
        values[index] = v
        return pos + 2
    if code == UINT:
        if pos + 5 > end:
            return -1
        values[index] = int.from_bytes(buf[pos + 1:pos + 5], "big")
        return pos + 5
    if kind == K_BINARY:
        width = 1 if code == VBIN8 else 4
        if pos + 1 + width > end:
            return -1
        n = int.from_bytes(buf[pos + 1:pos + 1 + width], "big")
        if n > end - (pos + 1 + width):
            return -1
        values[index] = n
        return pos + 1 + width + n
    # a delivery state: one of the known descriptors, then a list
    state, after = _descriptor(buf, pos + 1, end, DELIVERY_STATES)
    if after < 0:
        return -1
    if state not in DELIVERY_STATE_CODES:
        return 0
    values[index] = state
    return _list_end(buf, after, end)


def _fields(buf: bytes, start: int, pos: int, end: int, performative: int,
            channel: int) -> tuple[list[int | None], int]:
    """The fields of the transfer or disposition whose list is at ``buf[pos]`` in the frame
    ``buf[start:end]``, checked against the specification, and the position after the list.
    A field is None when absent (null, or past the list's count); a uint, a boolean and a ubyte
    are ints, a binary is its length, a delivery state its descriptor code."""
    kinds = TRANSFER_KINDS if performative == TRANSFER else DISPOSITION_KINDS
    names = TRANSFER_FIELDS if performative == TRANSFER else DISPOSITION_FIELDS
    values: list[int | None] = [None] * len(kinds)
    list_at = pos - start
    if pos >= end:
        raise FramingError(field_error(performative, channel,
                                       f"the frame ends at offset {list_at} before its list"))
    code = buf[pos]
    if code == LIST0:
        return values, pos + 1
    if code == LIST8:
        if pos + 3 > end:
            raise FramingError(field_error(performative, channel,
                                           f"its list8 at offset {list_at} is cut short"))
        size, count = buf[pos + 1], buf[pos + 2]
        list_end, pos, least = pos + 2 + size, pos + 3, 1
    elif code == LIST32:
        if pos + 9 > end:
            raise FramingError(field_error(performative, channel,
                                           f"its list32 at offset {list_at} is cut short"))
        size = int.from_bytes(buf[pos + 1:pos + 5], "big")
        count = int.from_bytes(buf[pos + 5:pos + 9], "big")
        list_end, pos, least = pos + 5 + size, pos + 9, 4
    else:
        raise FramingError(field_error(performative, channel,
                                       f"type code 0x{code:02x} at offset {list_at}, "
                                       "not a list"))
    if size < least or list_end > end:
        raise FramingError(field_error(performative, channel,
                                       f"its list of {size} bytes at offset {list_at} does not "
                                       f"fit the frame's {end - start} bytes"))
    if count > len(kinds):
        raise FramingError(field_error(performative, channel,
                                       f"its list has {count} fields, more than the "
                                       f"{len(kinds)} it defines"))
    for index in range(count):
        if pos >= list_end:
            raise FramingError(field_error(performative, channel,
                                           f"its list ends at offset {list_end - start} before "
                                           f"field {index + 1} of {count}"))
        code = buf[pos]
        if code == NULL:
            pos += 1
            continue
        kind = kinds[index]
        if code not in KIND_CODES[kind]:
            raise FramingError(field_type_error(performative, channel, index, code,
                                                pos - start))
        after = _field_value(buf, pos, list_end, kind, code, values, index)
        if after <= 0:
            problem = "does not fit its list" if after < 0 else f"is no valid {KIND_NAMES[kind]}"
            raise FramingError(field_error(performative, channel,
                                           f"field {names[index]} at offset {pos - start} "
                                           f"{problem}"))
        pos = after
    if pos != list_end:
        raise FramingError(field_error(performative, channel,
                                       f"its list has {list_end - pos} bytes after its "
                                       f"{count} fields"))
    return values, list_end


class FrameScanner:
    """The bytes read off one AMQP 1.0 connection, for session ``channel``: its transfers
    (reassembled when a message spans frames) and dispositions taken out, every other frame
    kept whole, in order, for the Python codec.

    ``max_frame_size`` is the largest frame accepted (the one pumpd announced in its open);
    ``max_message_size`` bounds a message reassembled from several frames (0: no bound). A
    multi-frame delivery is continued on the same handle only: one delivery is in progress
    per session at a time.
    """

    def __init__(self, max_frame_size: int, channel: int, max_message_size: int = 0) -> None:
        if not FRAME_HEADER_SIZE <= max_frame_size <= MAX_MAX_FRAME_SIZE:
            raise ValueError(f"max_frame_size {max_frame_size} is not within "
                             f"{FRAME_HEADER_SIZE}..{MAX_MAX_FRAME_SIZE}")
        if not 0 <= channel <= 0xFFFF:
            raise ValueError(f"channel {channel} is not a ushort (0..65535)")
        if max_message_size < 0:
            raise ValueError(f"max_message_size {max_message_size} is negative")
        self._max_frame_size = max_frame_size
        self.channel = channel
        self.max_message_size = max_message_size
        self.transfer_frames = 0  # transfer frames on the channel, continuations and aborted too
        self.deliveries = 0  # whole messages taken out
        self.aborted = 0  # deliveries the sender aborted (dropped)
        self._carry = b""
        self._transfers: list[tuple[int, int, bool, bytes]] = []
        self._dispositions: list[tuple[bool, int, int, bool, int]] = []
        self._other: list[tuple[int, int, bytes]] = []
        # the delivery in progress: its handle (-1: none), delivery-id, settled, payload so far
        self._handle = -1
        self._delivery_id = 0
        self._settled = False
        self._parts: list[bytes] = []
        self._size = 0

    @property
    def max_frame_size(self) -> int:
        return self._max_frame_size

    @max_frame_size.setter
    def max_frame_size(self, value: int) -> None:
        if not FRAME_HEADER_SIZE <= value <= MAX_MAX_FRAME_SIZE:
            raise ValueError(f"max_frame_size {value} is not within "
                             f"{FRAME_HEADER_SIZE}..{MAX_MAX_FRAME_SIZE}")
        self._max_frame_size = value

    @property
    def pending(self) -> int:
        """Whole transfers not yet taken."""
        return len(self._transfers)

    @property
    def in_delivery(self) -> bool:
        """A multi-frame delivery has begun and not ended."""
        return self._handle >= 0

    def feed(self, data: bytes) -> None:
        """Scan ``data`` (with the frame an earlier call left unfinished).

        :raises FramingError: a frame header or a transfer or disposition the specification
            forbids (then the scanner is not to be used again)
        """
        buf = self._carry + bytes(data) if self._carry else bytes(data)
        n = len(buf)
        pos = 0
        try:
            while n - pos >= FRAME_HEADER_SIZE:
                if buf[pos:pos + 4] == b"AMQP":
                    self._other.append((PROTOCOL_HEADER, 0, buf[pos:pos + 8]))
                    pos += PROTOCOL_HEADER_SIZE
                    continue
                size, doff, ftype, channel = _HEAD.unpack_from(buf, pos)
                error = head_error(size, doff, ftype, channel, self._max_frame_size)
                if error is not None:
                    raise FramingError(error)
                if n - pos < size:
                    break
                self._frame(buf, pos, pos + doff * 4, pos + size, ftype, channel)
                pos += size
        except BaseException:
            self._carry = b""
            self._end_delivery()
            raise
        self._carry = buf[pos:]

    def _frame(self, buf: bytes, start: int, body: int, end: int, ftype: int,
               channel: int) -> None:
        performative = after = -1
        if (ftype == TYPE_AMQP and channel == self.channel and body < end
                and buf[body] == 0x00):
            performative, after = _descriptor(buf, body + 1, end, PERFORMATIVES)
        if performative == TRANSFER and after > 0:
            self._transfer(buf, start, after, end)
        elif performative == DISPOSITION and after > 0:
            self._disposition(buf, start, after, end)
        else:
            self._other.append((ftype, channel, buf[body:end]))

    def _transfer(self, buf: bytes, start: int, pos: int, end: int) -> None:
        self.transfer_frames += 1
        values, payload_at = _fields(buf, start, pos, end, TRANSFER, self.channel)
        handle, delivery_id, tag, _, settled, more, _, _, _, aborted, _ = values
        if handle is None:
            raise FramingError(field_error(TRANSFER, self.channel, "handle is missing"))
        if self._handle < 0:
            if delivery_id is None:
                raise FramingError(field_error(TRANSFER, self.channel,
                                               f"delivery-id missing on handle {handle}'s "
                                               "first transfer of a delivery"))
            if tag is None:
                raise FramingError(field_error(TRANSFER, self.channel,
                                               f"delivery-tag missing on handle {handle}'s "
                                               "first transfer of a delivery"))
            self._delivery_id = delivery_id
            self._settled = False
            self._parts = []
            self._size = 0
        else:
            if handle != self._handle:
                raise FramingError(field_error(TRANSFER, self.channel,
                                               f"handle {handle} while delivery "
                                               f"{self._delivery_id} on handle {self._handle} "
                                               "is unfinished"))
            if delivery_id is not None and delivery_id != self._delivery_id:
                raise FramingError(field_error(TRANSFER, self.channel,
                                               f"delivery-id {delivery_id} continues delivery "
                                               f"{self._delivery_id}"))
        if tag is not None and tag > MAX_DELIVERY_TAG:
            raise FramingError(field_error(TRANSFER, self.channel,
                                           f"delivery-tag of {tag} bytes, over "
                                           f"{MAX_DELIVERY_TAG}"))
        if aborted:
            self.aborted += 1
            self._end_delivery()
            return
        if settled:
            self._settled = True
        size = self._size + end - payload_at
        if self.max_message_size and size > self.max_message_size:
            raise FramingError(field_error(TRANSFER, self.channel,
                                           f"delivery {self._delivery_id} on handle {handle} "
                                           f"reaches {size} bytes, over max-message-size "
                                           f"{self.max_message_size}"))
        self._size = size
        if more:
            self._handle = handle
            self._parts.append(buf[payload_at:end])
            return
        payload = buf[payload_at:end]
        if self._parts:
            self._parts.append(payload)
            payload = b"".join(self._parts)
        self._transfers.append((handle, self._delivery_id, self._settled, payload))
        self.deliveries += 1
        self._end_delivery()

    def _end_delivery(self) -> None:
        self._handle = -1
        self._parts = []
        self._size = 0

    def _disposition(self, buf: bytes, start: int, pos: int, end: int) -> None:
        values, list_end = _fields(buf, start, pos, end, DISPOSITION, self.channel)
        role, first, last, settled, state, _ = values
        if role is None:
            raise FramingError(field_error(DISPOSITION, self.channel, "role is missing"))
        if first is None:
            raise FramingError(field_error(DISPOSITION, self.channel, "first is missing"))
        if list_end != end:
            raise FramingError(field_error(DISPOSITION, self.channel,
                                           f"{end - list_end} bytes follow its list"))
        self._dispositions.append((bool(role), first, first if last is None else last,
                                   bool(settled), state or 0))

    def take_transfers(self, most: int) -> list[tuple[int, int, bool, bytes]]:
        """The first ``most`` whole transfers, in order: (handle, delivery-id, settled,
        payload)."""
        n = max(0, most)
        batch = self._transfers[:n]
        del self._transfers[:n]
        return batch

    def take_dispositions(self) -> list[tuple[bool, int, int, bool, int]]:
        """Every disposition received on the channel, in order: (role, first, last, settled,
        state code: 0x24 accepted, 0x25 rejected, 0x26 released, 0x27 modified, another
        delivery state's descriptor code, or 0 for none)."""
        batch, self._dispositions = self._dispositions, []
        return batch

    def take_other(self) -> list[tuple[int, int, bytes]]:
        """Every other frame, in order: (frame type, channel, body after the extended header;
        empty for a heartbeat). A protocol header comes as (:data:`PROTOCOL_HEADER`, 0, its
        8 bytes)."""
        batch, self._other = self._other, []
        return batch
