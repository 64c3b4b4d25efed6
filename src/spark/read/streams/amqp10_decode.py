"""A stream message (AMQP 1.0, as RabbitMQ stores it) turned into the readers' row.

RabbitMQ 3.10 stores a message published over AMQP 0-9-1 as AMQP 1.0 sections: the exchange,
routing key, priority, delivery mode and expiration as message annotations (``x-exchange``,
``x-routing-key``, ``x-basic-*``), type and app id as application properties ``x-basic-type`` /
``x-basic-app-id`` beside the headers, the rest as the properties section (``creation_time`` in
milliseconds is the 0-9-1 ``timestamp``), the body as data sections. This decoder reads only
what those sections use (a pure-Python reader of AMQP 1.0's encoding, several times faster per
message than a general one) and gives the row in :data:`pumpd.spark.read.schema.COLUMNS` order.
Nested values (lists, maps, arrays) become JSON in ``headers``. A read task decodes whole chunks
into columns instead (:mod:`pumpd.dataplane.stream_sections_ref` and its native twin), tested
row for row against this decoder.
"""

from __future__ import annotations

import struct
from datetime import datetime, timezone
from typing import Any

from ....dataplane.stream_sections_ref import header_text

_U32 = struct.Struct(">I")
# fixed-width codes: (how to unpack, width); the one-byte codes are read without struct
_FIXED: dict[int, tuple[Any, int]] = {
    0x51: (struct.Struct(">b"), 1), 0x54: (struct.Struct(">b"), 1),  # byte, smallint
    0x55: (struct.Struct(">b"), 1),  # smalllong
    0x60: (struct.Struct(">H"), 2), 0x61: (struct.Struct(">h"), 2),  # ushort, short
    0x70: (_U32, 4), 0x71: (struct.Struct(">i"), 4), 0x72: (struct.Struct(">f"), 4),
    0x80: (struct.Struct(">Q"), 8), 0x83: (struct.Struct(">Q"), 8),  # ulong, timestamp (ms)
    0x81: (struct.Struct(">q"), 8), 0x82: (struct.Struct(">d"), 8),  # long, double
}
# codes of no payload: null, true, false, uint0, ulong0, list0
_EMPTY: dict[int, Any] = {0x40: None, 0x41: True, 0x42: False, 0x43: 0, 0x44: 0, 0x45: ()}


class AmqpDecodeError(ValueError):
    """A stream message that is not AMQP 1.0 as this decoder knows it."""


def _value(b: bytes, p: int) -> tuple[Any, int]:
    """One encoded value at ``p``: (value, position after it)."""
    c = b[p]
    p += 1
    if c == 0x00:  # described: skip the descriptor, keep the value
        _, p = _value(b, p)
        return _value(b, p)
    if c in _EMPTY:
        v = _EMPTY[c]
        return ([] if v == () else v), p
    if c in _FIXED:
        unpack, width = _FIXED[c]
        return unpack.unpack_from(b, p)[0], p + width
    if c in (0x50, 0x52, 0x53):  # ubyte, smalluint, smallulong
        return b[p], p + 1
    if c == 0x56:
        return b[p] == 1, p + 1
    if c == 0x73:  # char (UTF-32)
        return chr(_U32.unpack_from(b, p)[0]), p + 4
    if c == 0x98:  # uuid
        return b[p:p + 16].hex(), p + 16
    if c in (0xA0, 0xA1, 0xA3, 0xB0, 0xB1, 0xB3):  # binary, string, symbol (8 / 32 bit size)
        wide = c >= 0xB0
        n = _U32.unpack_from(b, p)[0] if wide else b[p]
        p += 4 if wide else 1
        raw = b[p:p + n]
        return (raw if c in (0xA0, 0xB0) else raw.decode("utf-8", "replace")), p + n
    if c in (0xC0, 0xC1, 0xD0, 0xD1, 0xE0, 0xF0):  # list, map, array (8 / 32 bit size)
        return _compound(b, p, c)
    raise AmqpDecodeError(f"AMQP 1.0 type code 0x{c:02x} at byte {p - 1}")


def _compound(b: bytes, p: int, c: int) -> tuple[Any, int]:
    """A list, map or array whose size begins at ``p`` (``c``: its type code)."""
    wide = c in (0xD0, 0xD1, 0xF0)
    size = _U32.unpack_from(b, p)[0] if wide else b[p]
    count = _U32.unpack_from(b, p + 4)[0] if wide else b[p + 1]
    q = p + (8 if wide else 2)
    end = p + (4 if wide else 1) + size
    items: list[Any] = []
    if c in (0xE0, 0xF0):  # an array: one constructor for every element
        ctor = b[q:q + 1]
        q += 1
        for _ in range(count):
            v, n = _value(ctor + b[q:end], 0)
            items.append(v)
            q += n - 1
        return items, end
    for _ in range(count):
        v, q = _value(b, q)
        items.append(v)
    if c in (0xC1, 0xD1):
        return {str(items[i]): items[i + 1] for i in range(0, len(items), 2)}, end
    return items, end


def sections(raw: bytes) -> dict[int, Any]:
    """Section code (0x70 header ... 0x78 footer) -> decoded value; data sections joined."""
    out: dict[int, Any] = {}
    p, n = 0, len(raw)
    while p < n:
        if raw[p] != 0x00 or raw[p + 1] != 0x53:
            raise AmqpDecodeError(f"no section descriptor at byte {p}")
        code = raw[p + 2]
        value, p = _value(raw, p + 3)
        if code == 0x75:
            out[0x75] = out.get(0x75, b"") + value
        else:
            out[code] = value
    return out


def _s(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def row_of_amqp10(raw: bytes, offset: int, stream: str) -> tuple[Any, ...]:
    """The row of one stream message (see the module docstring)."""
    sec = sections(raw)
    ann: dict[str, Any] = sec.get(0x72) or {}
    props: list[Any] = list(sec.get(0x73) or ())
    props += [None] * (13 - len(props))
    app: dict[str, Any] = dict(sec.get(0x74) or {})
    header: list[Any] = list(sec.get(0x70) or ())
    typ, app_id = app.pop("x-basic-type", None), app.pop("x-basic-app-id", None)
    headers = {k: header_text(v) for k, v in app.items()} or None
    body = sec.get(0x75)
    if body is None and 0x77 in sec:  # an amqp-value body (a client of the streams protocol)
        v = sec[0x77]
        body = v if isinstance(v, bytes) else str(v).encode()
    created = props[9]
    priority = ann.get("x-basic-priority", header[1] if len(header) > 1 else None)
    mode = ann.get("x-basic-delivery-mode")
    if mode is None and header:
        mode = 2 if header[0] else None
    return (
        body or b"",
        _s(ann.get("x-routing-key")),
        _s(ann.get("x-exchange")),
        _s(props[6]),
        _s(props[7]),
        headers,
        mode,
        priority,
        _s(props[5]),
        _s(props[4]),
        _s(ann.get("x-basic-expiration")),
        _s(props[0]),
        None if created is None else datetime.fromtimestamp(created // 1000, tz=timezone.utc),
        _s(typ),
        _s(props[1]),
        _s(app_id),
        None,  # cluster_id: not kept by the broker's AMQP 1.0 conversion
        offset,
        stream,
        False,
    )
