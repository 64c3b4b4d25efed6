"""Stream messages (AMQP 1.0 sections, as RabbitMQ stores them) decoded into Arrow's column
buffers, one batch at a time: the pure-Python reference, the specification of the native
``pumpd._fastpath.StreamSections``.

A chunk of a stream holds entries, each a 32-bit big-endian size and one message; the message
is AMQP 1.0 sections, each a described value whose descriptor is a small ulong (0x70 header,
0x72 message annotations, 0x73 properties, 0x74 application properties, 0x75 data, 0x77
amqp-value, any other read and left). RabbitMQ 3.10 stores a message published over AMQP
0-9-1 with the exchange, routing key, priority, delivery mode and expiration as message
annotations (``x-exchange``, ``x-routing-key``, ``x-basic-*``), type and app id as application
properties (``x-basic-type``, ``x-basic-app-id``) beside the headers, the rest as properties.

Each message becomes one row of :data:`COLUMNS` (the Spark reader's columns from ``body`` to
``app_id``), written straight into Arrow's buffers (little-endian: int32 offsets and the bytes
for strings and binaries, values for numbers, a validity bitmap when a column has nulls), so a
batch becomes Arrow arrays without a Python object per row. The values are those of the
Spark reader's per-message decoder (``pumpd.spark.read.streams.amqp10_decode.row_of_amqp10``):

- text columns: a string or symbol as it is, a binary decoded as UTF-8 (invalid bytes
  replaced), any other value as Python's ``str`` of it (a uuid as 32 hex digits);
- ``headers``: the application properties but the two above, keys as text, values by
  :func:`header_text`; null when none is left. A key repeated keeps its first place and its
  last value;
- ``delivery_mode`` / ``priority``: the annotations', else the header's (durable is mode 2);
- ``timestamp``: ``creation_time`` (milliseconds) in whole seconds, as microseconds;
- ``body``: the data sections joined, else the amqp-value (a binary as it is, any other value
  as the UTF-8 of its text), else empty.

Every size is checked against the bytes it lies in; a message that is not such AMQP 1.0
raises :class:`MessageDecodeError` naming the byte of the message where it went wrong.
"""

from __future__ import annotations

import json
import struct
from array import array
from datetime import datetime
from typing import Any

# the decoded columns, in the Spark reader's order
COLUMNS = ("body", "routing_key", "exchange", "content_type", "content_encoding", "headers",
           "delivery_mode", "priority", "correlation_id", "reply_to", "expiration", "message_id",
           "timestamp", "type", "user_id", "app_id")
# compound values nested deeper than this are refused (the native decoder recurses)
MAX_DEPTH = 32
# a batch stops taking messages once a column holds this many bytes: Arrow's offsets are int32
FULL_BYTES = 1 << 30
INT32_MAX = (1 << 31) - 1
# datetime's range, in seconds since the epoch
_SECONDS_MIN, _SECONDS_MAX = -62135596800, 253402300799

_U32 = struct.Struct(">I")
# fixed-width codes: (how to unpack, width)
_FIXED: dict[int, tuple[struct.Struct, int]] = {
    0x51: (struct.Struct(">b"), 1), 0x54: (struct.Struct(">b"), 1), 0x55: (struct.Struct(">b"), 1),
    0x60: (struct.Struct(">H"), 2), 0x61: (struct.Struct(">h"), 2),
    0x70: (_U32, 4), 0x71: (struct.Struct(">i"), 4), 0x72: (struct.Struct(">f"), 4),
    0x80: (struct.Struct(">Q"), 8), 0x83: (struct.Struct(">Q"), 8),  # ulong, timestamp (ms)
    0x81: (struct.Struct(">q"), 8), 0x82: (struct.Struct(">d"), 8),
}
# codes of no payload: null, true, false, uint0, ulong0, list0
_EMPTY: dict[int, Any] = {0x40: None, 0x41: True, 0x42: False, 0x43: 0, 0x44: 0, 0x45: ()}
_ONE_BYTE = (0x50, 0x52, 0x53, 0x56)  # ubyte, smalluint, smallulong, boolean
_VARIABLE = (0xA0, 0xA1, 0xA3, 0xB0, 0xB1, 0xB3)  # binary, string, symbol (8 / 32 bit size)
_COMPOUND = (0xC0, 0xC1, 0xD0, 0xD1, 0xE0, 0xF0)  # list, map, array (8 / 32 bit size)
# the integer codes (boolean apart), the only ones a number column or a timestamp takes
_INTEGERS = frozenset((0x43, 0x44, 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x60, 0x61, 0x70, 0x71,
                       0x80, 0x81, 0x83))
_ANNOTATIONS = {b"x-routing-key": 0, b"x-exchange": 1, b"x-basic-priority": 2,
                b"x-basic-delivery-mode": 3, b"x-basic-expiration": 4}


class MessageDecodeError(ValueError):
    """A stream message that is not AMQP 1.0 as RabbitMQ stores it. ``entry``: which of the
    entries walked by the :meth:`StreamSections.add` call it was (0 the first), -1 unknown."""

    def __init__(self, text: str, entry: int = -1) -> None:
        super().__init__(text)
        self.entry = entry


def _short(b: bytes, p: int, end: int, want: int, what: str) -> None:
    if p + want > end:
        raise MessageDecodeError(f"{what} at byte {p} needs {want} bytes, {max(end - p, 0)} "
                                 "left")


def value_at(b: bytes, p: int, end: int, depth: int = 0) -> tuple[Any, int]:
    """The value encoded at ``b[p]``, within ``b[:end]``: (value, position after it)."""
    _short(b, p, end, 1, "a value")
    return _payload(b, b[p], p, p + 1, end, depth)


def _payload(b: bytes, c: int, p: int, q: int, end: int, depth: int) -> tuple[Any, int]:
    """A value of type code ``c`` (written at ``p``) whose payload begins at ``q``."""
    if c == 0x00:  # described: the descriptor read and dropped, the value kept
        if depth >= MAX_DEPTH:
            raise MessageDecodeError(f"values nested more than {MAX_DEPTH} deep at byte {p}")
        _, q = value_at(b, q, end, depth + 1)
        return value_at(b, q, end, depth + 1)
    if c in _EMPTY:
        v = _EMPTY[c]
        return ([] if v == () else v), q
    if c in _FIXED:
        unpack, width = _FIXED[c]
        _short(b, q, end, width, f"type 0x{c:02x}")
        return unpack.unpack_from(b, q)[0], q + width
    if c in _ONE_BYTE:
        _short(b, q, end, 1, f"type 0x{c:02x}")
        return (b[q] == 1 if c == 0x56 else b[q]), q + 1
    if c == 0x73:  # char (UTF-32)
        _short(b, q, end, 4, "a char")
        n = _U32.unpack_from(b, q)[0]
        if n > 0x10FFFF or 0xD800 <= n < 0xE000:
            raise MessageDecodeError(f"char 0x{n:x} at byte {p} is no Unicode scalar value")
        return chr(n), q + 4
    if c == 0x98:
        _short(b, q, end, 16, "a uuid")
        return b[q:q + 16].hex(), q + 16
    if c in _VARIABLE:
        wide = c >= 0xB0
        _short(b, q, end, 4 if wide else 1, f"the size of type 0x{c:02x}")
        n = _U32.unpack_from(b, q)[0] if wide else b[q]
        q += 4 if wide else 1
        _short(b, q, end, n, f"type 0x{c:02x} of {n} bytes")
        raw = b[q:q + n]
        return (raw if c in (0xA0, 0xB0) else raw.decode("utf-8", "replace")), q + n
    if c in _COMPOUND:
        if depth >= MAX_DEPTH:
            raise MessageDecodeError(f"values nested more than {MAX_DEPTH} deep at byte {p}")
        return _compound(b, q, end, c, depth + 1)
    raise MessageDecodeError(f"AMQP 1.0 type code 0x{c:02x} at byte {p}")


def _compound(b: bytes, p: int, end: int, c: int, depth: int) -> tuple[Any, int]:
    """A list, map or array whose size begins at ``p`` (``c``: its type code)."""
    wide = c in (0xD0, 0xD1, 0xF0)
    width = 4 if wide else 1
    _short(b, p, end, 2 * width, f"the size and count of type 0x{c:02x}")
    size = _U32.unpack_from(b, p)[0] if wide else b[p]
    count = _U32.unpack_from(b, p + 4)[0] if wide else b[p + 1]
    if size < width:
        raise MessageDecodeError(f"type 0x{c:02x} at byte {p - 1} of size {size}, less than "
                                 "its count")
    stop = p + width + size
    _short(b, p + width, end, size, f"type 0x{c:02x} of {size} bytes")
    if count > size:  # every element takes a byte at least, but an array's width-0 ones
        raise MessageDecodeError(f"type 0x{c:02x} at byte {p - 1}: {count} elements in {size} "
                                 "bytes")
    q = p + 2 * width
    items: list[Any] = []
    if c in (0xE0, 0xF0):  # an array: one constructor for every element
        _short(b, q, stop, 1, "an array's constructor")
        ctor_at = q
        if b[q] == 0x00:  # described elements: the descriptor once
            _, q = value_at(b, q + 1, stop, depth)
            _short(b, q, stop, 1, "an array's constructor")
            ctor_at = q
        q += 1
        ctor = b[ctor_at]
        if ctor == 0x00:
            raise MessageDecodeError(f"an array's constructor at byte {ctor_at} is described "
                                     "twice")
        for _ in range(count):
            v, q = _payload(b, ctor, ctor_at, q, stop, depth)
            items.append(v)
        return items, stop
    for _ in range(count):
        v, q = value_at(b, q, stop, depth)
        items.append(v)
    if c in (0xC1, 0xD1):
        if count % 2:
            raise MessageDecodeError(f"a map at byte {p - 1} of {count} elements, an odd count")
        return {str(items[i]): items[i + 1] for i in range(0, count, 2)}, stop
    return items, stop


def header_text(value: Any) -> str:
    """A header's value as text: a string as it is, a byte string decoded as UTF-8 (invalid
    bytes replaced), any other value (numbers, booleans, lists, maps, timestamps) as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return json.dumps(value, default=_jsonable, separators=(",", ":"))


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def column_text(value: Any) -> str | None:
    """A value in a text column: a binary decoded as UTF-8, another value as its ``str``."""
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


# What the native decoder asks of this module for the values it does not write itself (lists,
# maps, arrays, a string of invalid UTF-8, a key that is not a string): the same
# functions, so the two agree by construction on those.
TEXT_COLUMN, TEXT_HEADER, TEXT_KEY = 0, 1, 2


def text_at(b: bytes, p: int, how: int) -> str | None:
    """The text of the value at ``b[p]`` in a text column, a header value or a header key."""
    v, _ = value_at(b, p, len(b))
    if how == TEXT_HEADER:
        return header_text(v)
    if how == TEXT_KEY:
        return str(v)
    return column_text(v)


def truthy_at(b: bytes, p: int) -> bool:
    """Whether the value at ``b[p]`` is true as Python has it (the header's durable)."""
    return bool(value_at(b, p, len(b))[0])


class _Text:
    """A string or binary column's buffers."""

    def __init__(self) -> None:
        self.offsets = array("i", [0])
        self.data = bytearray()
        self.valid = bytearray()

    def add(self, text: str | bytes | None) -> None:
        if text is not None:
            self.data += text.encode("utf-8") if isinstance(text, str) else text
            if len(self.data) > INT32_MAX:
                raise MessageDecodeError("a batch's column past 2 GiB")
        self.offsets.append(len(self.data))
        self.valid.append(text is not None)


class _Numbers:
    def __init__(self, code: str) -> None:
        self.values = array(code)
        self.valid = bytearray()

    def add(self, value: int | None) -> None:
        self.values.append(0 if value is None else value)
        self.valid.append(value is not None)


def _bitmap(valid: bytearray) -> tuple[int, bytes | None]:
    """(nulls, Arrow's validity bitmap, least significant bit first; None without nulls)."""
    nulls = len(valid) - sum(valid)
    if not nulls:
        return 0, None
    out = bytearray((len(valid) + 7) // 8)
    for i, v in enumerate(valid):
        if v:
            out[i >> 3] |= 1 << (i & 7)
    return nulls, bytes(out)


def _le(a: array[int]) -> bytes:
    if a.itemsize > 1 and struct.pack("=H", 1) != struct.pack("<H", 1):
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


class StreamSections:
    """The rows of one batch, gathered message by message into column buffers."""

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self._rows = 0
        self._text = {name: _Text() for name in COLUMNS
                      if name not in ("headers", "delivery_mode", "priority", "timestamp")}
        self._ints = {"delivery_mode": _Numbers("i"), "priority": _Numbers("i")}
        self._time = _Numbers("q")
        self._map_offsets = array("i", [0])
        self._map_valid = bytearray()
        self._keys, self._values = _Text(), _Text()

    @property
    def rows(self) -> int:
        return self._rows

    @property
    def full(self) -> bool:
        """Whether a column holds :data:`FULL_BYTES` bytes or more (take the batch)."""
        return any(len(t.data) >= FULL_BYTES
                   for t in (*self._text.values(), self._keys, self._values))

    def add(self, data: bytes, pos: int, entries: int, skip: int, most: int) -> tuple[int, int]:
        """Walk up to ``entries`` entries of ``data`` from ``pos``, each a 32-bit big-endian
        size and a message: the first ``skip`` passed over, then up to ``most`` messages
        decoded as rows. Stops before an entry whose size has its top bit set (a sub-entry
        batch, for the caller to open), after ``most`` rows, and before a message once
        :attr:`full`. Returns (the position after the last entry walked, entries walked).

        :raises MessageDecodeError: an entry past the data's end, or a message it cannot
            read (``entry`` says which); the batch is then cleared
        """
        walked = taken = 0
        end = len(data)
        try:
            while walked < entries and taken < most:
                if pos + 4 > end:
                    raise MessageDecodeError(f"an entry's size at byte {pos} of a chunk of "
                                             f"{end} bytes", walked)
                size = _U32.unpack_from(data, pos)[0]
                if size & 0x80000000:
                    break
                if pos + 4 + size > end:
                    raise MessageDecodeError(f"an entry of {size} bytes at byte {pos} runs past "
                                             f"the chunk's end ({end} bytes)", walked)
                if walked >= skip:
                    if self._rows and self.full:
                        break
                    try:
                        self._row(data[pos + 4:pos + 4 + size])
                    except MessageDecodeError as exc:
                        raise MessageDecodeError(str(exc), walked) from None
                    taken += 1
                pos += 4 + size
                walked += 1
        except BaseException:
            self._clear()
            raise
        return pos, walked

    def _row(self, m: bytes) -> None:
        n = len(m)
        p = 0
        found: dict[int, Any] = {}
        body: bytes | None = None
        while p < n:
            if p + 3 > n or m[p] != 0x00 or m[p + 1] != 0x53:
                raise MessageDecodeError(f"no section descriptor at byte {p}")
            code = m[p + 2]
            at = p + 3
            value, p = value_at(m, at, n)
            if code == 0x75:
                if not isinstance(value, bytes):
                    raise MessageDecodeError(f"a data section at byte {at} holds type "
                                             f"0x{m[at]:02x}, not a binary")
                body = value if body is None else body + value
            else:
                found[code] = (value, at)
        header = self._list(m, found, 0x70, "header")
        props = self._list(m, found, 0x73, "properties")
        props += [None] * (13 - len(props))
        ann = self._map(m, found, 0x72, "message annotations")
        app = dict(self._map(m, found, 0x74, "application properties"))
        typ, app_id = app.pop("x-basic-type", None), app.pop("x-basic-app-id", None)
        if body is None and 0x77 in found:
            v = found[0x77][0]
            body = v if isinstance(v, bytes) else str(v).encode()
        priority = ann.get("x-basic-priority", header[1] if len(header) > 1 else None)
        mode = ann.get("x-basic-delivery-mode")
        if mode is None and header:
            mode = 2 if header[0] else None
        text = self._text
        text["body"].add(body or b"")
        text["routing_key"].add(column_text(ann.get("x-routing-key")))
        text["exchange"].add(column_text(ann.get("x-exchange")))
        text["content_type"].add(column_text(props[6]))
        text["content_encoding"].add(column_text(props[7]))
        headers = {k: header_text(v) for k, v in app.items()}
        for k, v in headers.items():
            self._keys.add(k)
            self._values.add(v)
        self._map_offsets.append(len(self._keys.offsets) - 1)
        self._map_valid.append(bool(headers))
        self._ints["delivery_mode"].add(_int32(mode, "the delivery mode"))
        self._ints["priority"].add(_int32(priority, "the priority"))
        text["correlation_id"].add(column_text(props[5]))
        text["reply_to"].add(column_text(props[4]))
        text["expiration"].add(column_text(ann.get("x-basic-expiration")))
        text["message_id"].add(column_text(props[0]))
        self._time.add(_micros(props[9]))
        text["type"].add(column_text(typ))
        text["user_id"].add(column_text(props[1]))
        text["app_id"].add(column_text(app_id))
        self._rows += 1

    @staticmethod
    def _list(m: bytes, found: dict[int, Any], code: int, what: str) -> list[Any]:
        value, at = found.get(code, (None, 0))
        if value is None:
            return []
        if m[_undescribed(m, at)] not in (0x45, 0xC0, 0xD0):
            raise MessageDecodeError(f"the {what} section at byte {at} is not a list")
        return list(value)

    @staticmethod
    def _map(m: bytes, found: dict[int, Any], code: int, what: str) -> dict[str, Any]:
        value, at = found.get(code, (None, 0))
        if value is None or value == []:  # null, or an empty list or array
            return {}
        if m[_undescribed(m, at)] not in (0xC1, 0xD1):
            raise MessageDecodeError(f"the {what} section at byte {at} is not a map")
        return value  # type: ignore[no-any-return]

    def take(self) -> tuple[int, list[tuple[Any, ...]]]:
        """The rows gathered so far as (rows, one tuple of buffers per column of
        :data:`COLUMNS`), and a new batch begun. A column's tuple begins with its null count
        and validity bitmap (None without nulls); then a string or binary column has its int32
        offsets and its bytes, a number column its values (int32; int64 microseconds for
        ``timestamp``), ``headers`` its int32 offsets into the entries, then the keys' offsets
        and bytes and the values' offsets and bytes."""
        out: list[tuple[Any, ...]] = []
        for name in COLUMNS:
            if name == "headers":
                out.append((*_bitmap(self._map_valid), _le(self._map_offsets),
                            _le(self._keys.offsets), bytes(self._keys.data),
                            _le(self._values.offsets), bytes(self._values.data)))
            elif name in self._ints or name == "timestamp":
                col = self._time if name == "timestamp" else self._ints[name]
                out.append((*_bitmap(col.valid), _le(col.values)))
            else:
                t = self._text[name]
                out.append((*_bitmap(t.valid), _le(t.offsets), bytes(t.data)))
        rows = self._rows
        self._clear()
        return rows, out


def _undescribed(m: bytes, p: int) -> int:
    """Where the value at ``p`` (read already) has its own type code, past its descriptors."""
    while m[p] == 0x00:
        _, p = value_at(m, p + 1, len(m))
    return p


def _int32(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not -(1 << 31) <= value < 1 << 31:
        raise MessageDecodeError(f"{what} is {value!r}, not a 32-bit integer")
    return value


def _micros(created: Any) -> int | None:
    """``creation_time`` (milliseconds) in whole seconds, as microseconds."""
    if created is None:
        return None
    if not isinstance(created, int):
        raise MessageDecodeError(f"the creation time is {created!r}, not a timestamp")
    seconds = created // 1000
    if not _SECONDS_MIN <= seconds <= _SECONDS_MAX:
        raise MessageDecodeError(f"the creation time {created} is out of the years 1 to 9999")
    return seconds * 1_000_000


__all__ = ["COLUMNS", "FULL_BYTES", "MAX_DEPTH", "MessageDecodeError", "StreamSections",
           "column_text", "header_text", "text_at", "truthy_at", "value_at"]
