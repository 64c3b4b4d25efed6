"""The streams protocol's frames as bytes: the requests pumpd's clients write, a bounded reader
of what the peer sends, and a ``Deliver`` frame's chunk header (``PROTOCOL.adoc`` of
rabbitmq-server's ``rabbitmq_stream`` plugin).

A frame is ``size`` (uint32, what follows it), ``key`` (uint16: the command, the high bit set
on a response), ``version`` (uint16), then the command's fields. Strings are an int16 length and
UTF-8 bytes (-1: null), byte runs an int32 length, arrays an int32 count. Every length and count
the peer gives is checked against the bytes its frame holds before anything is read or
allocated: a count cannot promise more elements than the frame has room for.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from .codes import PUBLISH

__all__ = [
    "CHUNK_HEAD",
    "FIRST",
    "HEAD",
    "LAST",
    "NEXT",
    "OFFSET",
    "PUBLISHED_OVERHEAD",
    "PUBLISH_OVERHEAD",
    "TIMESTAMP",
    "ChunkHead",
    "FrameReader",
    "Malformed",
    "bytes_field",
    "chunk_head",
    "frame",
    "offset_specification",
    "publish_frames",
    "string",
]

HEAD = struct.Struct(">IHH")  # size, key, version
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_I16 = struct.Struct(">h")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_U64 = struct.Struct(">Q")
_PUBLISH_HEAD = struct.Struct(">IHHBi")  # size, key, version, publisher id, message count
_PUBLISHED = struct.Struct(">QI")  # publishing id, message length
#: the bytes of a publish frame around its messages, and around each message
PUBLISH_OVERHEAD = _PUBLISH_HEAD.size
PUBLISHED_OVERHEAD = _PUBLISHED.size

# subscribe's offset specifications: the first chunk, the last one, what comes next, an offset,
# a timestamp (milliseconds); the last two take a value
FIRST, LAST, NEXT, OFFSET, TIMESTAMP = 1, 2, 3, 4, 5
_OFFSET_VALUE = struct.Struct(">Hq")  # kind, offset or timestamp
#: a Deliver frame (version 1) after its key and version: subscription id, then the chunk's
#: header: magic and version, chunk type, entries, records, timestamp (ms), epoch, first
#: offset, CRC of the data, data length, trailer length; 4 reserved bytes follow, then the data
CHUNK_HEAD = struct.Struct(">BbbHIqQQIII")
CHUNK_RESERVED = 4
#: where a Deliver frame's chunk data begins, counted from the frame's first byte
DELIVER_DATA_AT = HEAD.size + CHUNK_HEAD.size + CHUNK_RESERVED
USER_CHUNK = 0  # the chunk type of messages (others are the stream's own bookkeeping)


class Malformed(ValueError):
    """A frame whose fields do not fit its bytes; the text says which field."""


def string(text: str) -> bytes:
    """A protocol string: int16 length and UTF-8 bytes.

    :raises ValueError: for a text longer than 32767 bytes
    """
    raw = text.encode()
    if len(raw) > 0x7FFF:
        raise ValueError(f"a streams protocol string holds 32767 bytes at most, not {len(raw)}")
    return _I16.pack(len(raw)) + raw


def offset_specification(kind: int, value: int = 0) -> bytes:
    """Subscribe's offset specification: ``kind`` (:data:`FIRST` ... :data:`TIMESTAMP`), and
    ``value`` for :data:`OFFSET` and :data:`TIMESTAMP`.

    :raises ValueError: for an unknown kind, or a value out of the signed 64-bit range
    """
    if kind not in (FIRST, LAST, NEXT, OFFSET, TIMESTAMP):
        raise ValueError(f"offset specification {kind}: give one of 1 (first) to 5 (timestamp)")
    if kind in (OFFSET, TIMESTAMP):
        if not -(1 << 63) <= value < (1 << 63):
            raise ValueError(f"offset specification value {value}: out of the int64 range")
        return _OFFSET_VALUE.pack(kind, value)
    return _U16.pack(kind)


class ChunkHead(NamedTuple):
    """A delivered chunk's header: its first offset, its entries (a sub-entry batch is one),
    its records (messages: the offsets it takes), when it was written (milliseconds since the
    epoch, the writing node's clock), and where its data lies in the frame."""

    subscription: int
    first: int
    entries: int
    records: int
    timestamp: int
    data_at: int
    data_length: int
    crc: int  # CRC-32 of the data

    @property
    def last(self) -> int:
        """The offset of its last record."""
        return self.first + self.records - 1


def chunk_head(data: bytes) -> ChunkHead:
    """The header of the chunk a whole ``Deliver`` frame (size field included) carries, its
    messages left undecoded.

    :raises Malformed: a frame too short for the header, a chunk type that is not messages, a
        chunk of no records or of fewer records than entries, or data that runs past the
        frame's end (each named)
    """
    if len(data) < DELIVER_DATA_AT:
        raise Malformed(f"a Deliver frame of {len(data)} bytes: {DELIVER_DATA_AT} needed for "
                        "a chunk header")
    (subscription, _magic, kind, entries, records, timestamp, _epoch, first, crc, length,
     _trailer) = CHUNK_HEAD.unpack_from(data, HEAD.size)
    if kind != USER_CHUNK:
        raise Malformed(f"the chunk at offset {first} is of type {kind}, not messages "
                        f"({USER_CHUNK})")
    if records == 0 or records < entries:
        raise Malformed(f"the chunk at offset {first} says {entries} entries and {records} "
                        "records (records hold at least one message per entry, and at least "
                        "one)")
    if first + records > 1 << 63:
        raise Malformed(f"the chunk at offset {first} of {records} records runs past the "
                        "largest offset")
    # the broker sends the data without the trailer (its tracking entries): only the data's
    # length is the frame's
    left = len(data) - DELIVER_DATA_AT
    if length > left:
        raise Malformed(f"the chunk at offset {first} says {length} bytes of data; its frame "
                        f"holds {left}")
    return ChunkHead(subscription, first, entries, records, timestamp, DELIVER_DATA_AT, length,
                     crc)


def bytes_field(raw: bytes) -> bytes:
    return _I32.pack(len(raw)) + raw


def frame(key: int, body: bytes, version: int = 1) -> bytes:
    """A whole frame of ``key`` with ``body`` (everything after the version)."""
    return HEAD.pack(4 + len(body), key, version) + body


def publish_frames(publisher: int, messages: Sequence[tuple[int, bytes]], frame_max: int
                   ) -> list[bytes]:
    """``messages`` (publishing id, encoded message) in publish frames of at most ``frame_max``
    bytes each (0: no bound), in order; a message that fits no frame alone is the caller's to
    refuse beforehand (:data:`PUBLISH_OVERHEAD` + :data:`PUBLISHED_OVERHEAD` + its size)."""
    out: list[bytes] = []
    parts: list[bytes] = []
    size = PUBLISH_OVERHEAD
    count = 0

    def close() -> None:
        out.append(_PUBLISH_HEAD.pack(size - 4, PUBLISH, 1, publisher, count) + b"".join(parts))

    for publishing_id, body in messages:
        need = PUBLISHED_OVERHEAD + len(body)
        if count and frame_max and size + need > frame_max:
            close()
            parts, size, count = [], PUBLISH_OVERHEAD, 0
        parts.append(_PUBLISHED.pack(publishing_id, len(body)))
        parts.append(body)
        size += need
        count += 1
    if count:
        close()
    return out


class FrameReader:
    """Fields read in order from one frame, each checked against the bytes left."""

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    @property
    def left(self) -> int:
        return len(self.data) - self.pos

    def _take(self, fmt: struct.Struct, what: str) -> int:
        if self.left < fmt.size:
            raise Malformed(f"{what}: {fmt.size} bytes needed, {self.left} left in the frame")
        (value,) = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return int(value)

    def u8(self, what: str) -> int:
        return self._take(_U8, what)

    def u16(self, what: str) -> int:
        return self._take(_U16, what)

    def u32(self, what: str) -> int:
        return self._take(_U32, what)

    def u64(self, what: str) -> int:
        return self._take(_U64, what)

    def string(self, what: str) -> str | None:
        n = self._take(_I16, what)
        if n == -1:
            return None
        if n < 0 or n > self.left:
            raise Malformed(f"{what}: a string of {n} bytes, {self.left} left in the frame")
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise Malformed(f"{what}: not UTF-8") from None

    def count(self, what: str, each: int) -> int:
        """An array's count, bounded by the bytes left (each element takes ``each`` at least)."""
        n = self._take(_I32, what)
        if n < 0 or n * each > self.left:
            raise Malformed(f"{what}: {n} elements of {each}+ bytes, {self.left} bytes left in "
                            "the frame")
        return n

    def pairs(self, what: str) -> dict[str, str]:
        """A map of strings to strings (peer and connection properties); a null is ``""``."""
        out: dict[str, str] = {}
        for i in range(self.count(what, 4)):
            key = self.string(f"{what} key {i}") or ""
            out[key] = self.string(f"{what} value {i}") or ""
        return out

    def strings(self, what: str) -> list[str]:
        out = []
        for i in range(self.count(what, 2)):
            s = self.string(f"{what}[{i}]")
            if s is None:
                raise Malformed(f"{what}[{i}]: null")
            out.append(s)
        return out
