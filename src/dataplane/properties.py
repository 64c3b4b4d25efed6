"""AMQP 0-9-1 basic properties, field tables and message ids: the one codec pumpd has.

Everything in pumpd that writes or reads a content header's property list, or encodes a field
table, does it here: a shovel's ``publish_properties`` (:func:`encode_property_overrides`), the
forward headers' hop table (:func:`encode_hop`), :class:`pumpd.Publisher` and the Spark data
source (:func:`encode_properties`, :class:`IdSplice`, :func:`encode_rows`), parking's added
headers (:func:`table_entry`) and every ``message_id`` read back (:func:`message_id_of`). The
native plane (``pumpd._fastpath``) reads :data:`PROPERTY_KINDS` and :data:`FIELD_SIZES` at import
and splices ids the way :class:`IdSplice` does; ``tests/unit/test_properties.py`` checks both.

Field values keep their Python types: ``str`` → ``S``, ``bytes`` → ``x``, ``bool`` → ``t``,
``int`` → signed 64-bit ``l``, ``float`` → double ``d``, ``Decimal`` → ``D``, ``datetime`` (whole
seconds) → ``T``, a mapping → ``F``, ``list``/``tuple`` → ``A``, ``None`` → ``V``. Under
:data:`SHOVEL_RULES` an ``int`` that fits 32 signed bits is ``I``, as pika wrote a shovel's
``publish_properties`` before this codec (so the bytes a shovel sends did not change). What
cannot be carried unaltered (a datetime with microseconds, a ``Decimal`` beyond 32 bits, an
``int`` beyond 64 bits, a non-finite decimal, other types) raises ``TypeError`` / ``ValueError``.
"""

from __future__ import annotations

import calendar
import decimal
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..config.vocabulary import BASIC_PROPERTIES, LONGLONG, OCTET, SHORTSTR, TABLE

# The 14 basic properties in wire order; flag bit for index i is 1 << (15 - i).
PROPERTY_NAMES: tuple[str, ...] = tuple(BASIC_PROPERTIES)
PROPERTY_INDEX = {name: i for i, name in enumerate(PROPERTY_NAMES)}
# Wire kinds: s = shortstr, t = table, o = octet, q = 64-bit (timestamp).
_WIRE_KIND = {SHORTSTR: "s", TABLE: "t", OCTET: "o", LONGLONG: "q"}
PROPERTY_KINDS = "".join(_WIRE_KIND[kind] for kind in BASIC_PROPERTIES.values())
HEADERS_INDEX = PROPERTY_INDEX["headers"]
MESSAGE_ID_INDEX = PROPERTY_INDEX["message_id"]
USER_ID_INDEX = PROPERTY_INDEX["user_id"]

# Field value types as RabbitMQ's rabbit_binary_parser reads them: a fixed size in bytes, or
# LONG for a u32 length followed by that many bytes. 's' is a signed 16-bit integer there (the
# 0-9-1 spec's short string is not used by any client RabbitMQ talks to).
LONG = -1
FIELD_SIZES: dict[int, int] = {
    ord("t"): 1, ord("b"): 1, ord("B"): 1, ord("s"): 2, ord("u"): 2, ord("I"): 4, ord("i"): 4,
    ord("l"): 8, ord("L"): 8, ord("f"): 4, ord("d"): 8, ord("D"): 5, ord("T"): 8, ord("V"): 0,
    ord("S"): LONG, ord("x"): LONG, ord("A"): LONG, ord("F"): LONG,
}

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_DECIMAL = struct.Struct(">Bi")


class FrameError(ValueError):
    """The byte stream is not valid AMQP 0-9-1 framing (a broker or network fault); here: a
    content header's property list that cannot be read. (:mod:`.frames` raises it too.)"""


class UnparseableProperties(FrameError):
    """A message's properties cannot be parsed where the relay must edit them: the message is
    undeliverable, not the stream broken."""


@dataclass(frozen=True)
class TableRules:
    """How a field table's integers are written: ``narrow_ints`` writes one that fits 32 signed
    bits as ``I`` (pika's choice), otherwise every ``int`` is ``l``."""

    narrow_ints: bool = False


PUBLISHER_RULES = TableRules()
SHOVEL_RULES = TableRules(narrow_ints=True)


def shortstr(value: bytes) -> bytes:
    if len(value) > 255:
        raise ValueError(f"short string longer than 255 bytes: {value[:40]!r}...")
    return bytes((len(value),)) + value


def longstr(value: bytes) -> bytes:
    return _U32.pack(len(value)) + value


# -- encoding ------------------------------------------------------------------------------------


def _decimal_value(value: decimal.Decimal) -> bytes:
    exponent = value.as_tuple().exponent
    if not isinstance(exponent, int):
        raise ValueError(f"header decimal {value} is not finite")
    scale = max(0, -exponent)
    raw = int(value.scaleb(scale))
    if scale > 255 or not -(1 << 31) <= raw < (1 << 31):
        raise ValueError(f"header decimal {value} does not fit AMQP's decimal (32-bit value)")
    return b"D" + _DECIMAL.pack(scale, raw)


def field_value(value: Any, rules: TableRules = PUBLISHER_RULES) -> bytes:
    """One typed field value (its type octet first), as the module docstring lists."""
    if isinstance(value, str):
        return b"S" + longstr(value.encode())
    if isinstance(value, (bytes, bytearray, memoryview)):
        return b"x" + longstr(bytes(value))
    if isinstance(value, bool):
        return b"t\x01" if value else b"t\x00"
    if isinstance(value, int):
        if rules.narrow_ints and -(1 << 31) <= value < (1 << 31):
            return b"I" + _I32.pack(value)
        if not -(1 << 63) <= value < (1 << 63):
            raise ValueError(f"header integer {value} does not fit AMQP's signed 64 bits")
        return b"l" + _I64.pack(value)
    if isinstance(value, float):
        return b"d" + _F64.pack(value)
    if isinstance(value, decimal.Decimal):
        return _decimal_value(value)
    if isinstance(value, datetime):
        if value.microsecond:
            raise ValueError(f"header timestamp {value} has sub-second digits AMQP cannot carry")
        return b"T" + _U64.pack(calendar.timegm(value.utctimetuple()))
    if isinstance(value, Mapping):
        return b"F" + encode_table(value, rules)
    if isinstance(value, (list, tuple)):
        return b"A" + longstr(b"".join(field_value(item, rules) for item in value))
    if value is None:
        return b"V"
    raise TypeError(f"cannot encode a {type(value).__name__} in an AMQP table: {value!r}")


def table_entry(key: bytes, typed_value: bytes) -> bytes:
    """One table entry: the key (a short string) and an already typed value."""
    return shortstr(key) + typed_value


def encode_table(table: Mapping[str, Any], rules: TableRules = PUBLISHER_RULES) -> bytes:
    """A field table (u32 length, then the entries), types kept as the module docstring lists."""
    return longstr(b"".join(table_entry(k.encode(), field_value(v, rules))
                            for k, v in table.items()))


def append_to_table(table: bytes | None, entries: Mapping[str, Any]) -> bytes:
    """``table`` (encoded; None: an empty one) with ``entries`` appended, typed as
    :func:`encode_table` types them, every existing byte kept."""
    return longstr((b"" if table is None else table[4:]) + encode_table(entries)[4:])


def encode_hop(fields: Sequence[tuple[str, str]]) -> bytes:
    """A forward-header hop table, every value a long string ('S') as the plugin writes it."""
    return encode_table(dict(fields))


def encode_property_value(name: str, value: Any, rules: TableRules = PUBLISHER_RULES) -> bytes:
    """One basic property's value as it appears on the wire (after the flags).

    :raises KeyError: for a name that is not one of the 14 basic properties
    :raises TypeError, ValueError: for a value its wire type cannot carry unaltered
    """
    if name not in PROPERTY_INDEX:
        raise KeyError(f"{name!r} is not a basic property")
    kind = PROPERTY_KINDS[PROPERTY_INDEX[name]]
    if kind == "s":
        return shortstr(value.encode() if isinstance(value, str) else bytes(value))
    if kind == "o":
        return bytes((int(value),))
    if kind == "q":
        if isinstance(value, datetime):
            value = calendar.timegm(value.utctimetuple())
        return _U64.pack(int(value))
    return encode_table(value, rules)


def encode_property_overrides(properties: Mapping[str, Any]) -> dict[int, bytes]:
    """A shovel's ``publish_properties`` as property index → encoded value, ready to splice."""
    return {PROPERTY_INDEX[name]: encode_property_value(name, v, SHOVEL_RULES)
            for name, v in properties.items()}


def join_properties(values: Sequence[bytes | None]) -> bytes:
    """The property flags and the encoded values present (None: absent), in wire order."""
    flags = 0
    for i, value in enumerate(values):
        if value is not None:
            flags |= 1 << (15 - i)
    return _U16.pack(flags) + b"".join(v for v in values if v is not None)


def encode_properties(properties: Mapping[str, Any] | None) -> bytes:
    """The content header's property flags and values for a dict of basic properties
    (``content_type``, ``headers``, ``delivery_mode``, ``message_id``, ...); None values are
    left out.

    :raises KeyError: for a name that is not one of the 14 basic properties
    :raises TypeError, ValueError: for a value its wire type cannot carry unaltered
    """
    if not properties:
        return b"\x00\x00"
    values: list[bytes | None] = [None] * len(PROPERTY_KINDS)
    for name, value in properties.items():
        if value is not None:
            encoded = encode_property_value(name, value)  # KeyError for a name not a property
            values[PROPERTY_INDEX[name]] = encoded
    return join_properties(values)


# -- message ids ---------------------------------------------------------------------------------


class IdSplice:
    """Raw properties for many messages that differ only in their ``message_id``: everything
    else encoded once, before (``head``, flags included) and after (``tail``) the id."""

    def __init__(self, properties: Mapping[str, Any] | None) -> None:
        props = {k: v for k, v in (properties or {}).items()
                 if v is not None and k != "message_id"}
        before = {k: v for k, v in props.items() if PROPERTY_INDEX[k] < MESSAGE_ID_INDEX}
        after = {k: v for k, v in props.items() if PROPERTY_INDEX[k] > MESSAGE_ID_INDEX}
        flags = 1 << (15 - MESSAGE_ID_INDEX)
        for k in props:
            flags |= 1 << (15 - PROPERTY_INDEX[k])
        self.head = _U16.pack(flags) + encode_properties(before)[2:]
        self.tail = encode_properties(after)[2:]

    def of(self, message_id: bytes) -> bytes:
        return self.head + shortstr(message_id) + self.tail


def encode_rows(n: int, properties: Mapping[str, Any] | None,
                columns: Mapping[str, Sequence[Any]], ids: Sequence[bytes] | None) -> list[bytes]:
    """Raw properties for ``n`` messages: ``properties`` for all, then row ``i``'s value of each
    column (None: the shared value stays), then ``ids[i]`` as its message_id."""
    if not columns:
        if ids is None:
            return [encode_properties(properties)] * n
        of = IdSplice(properties).of
        return [of(mid) for mid in ids]
    names = [k for k in PROPERTY_NAMES if k in columns]
    unknown = set(columns) - set(names)
    if unknown:
        raise KeyError(f"{sorted(unknown)[0]!r} is not a basic property")
    cols = [columns[k] for k in names]
    out: list[bytes] = []
    for i in range(n):
        props = dict(properties or {})
        for name, col in zip(names, cols, strict=True):
            if col[i] is not None:
                props[name] = col[i]
        if ids is not None:
            props["message_id"] = ids[i]
        out.append(encode_properties(props))
    return out


# -- decoding ------------------------------------------------------------------------------------


def split_properties(raw: bytes | bytearray | memoryview) -> list[bytes | None]:
    """The 14 encoded property values of a content header (None where absent).

    :raises FrameError: when the property list is truncated or uses flag continuation
    """
    raw = bytes(raw)
    if len(raw) < 2:
        raise FrameError("content header without property flags")
    flags = _U16.unpack_from(raw, 0)[0]
    if flags & 1:
        raise FrameError("property flag continuation is not used by basic properties")
    values: list[bytes | None] = [None] * len(PROPERTY_NAMES)
    pos = 2
    for i, kind in enumerate(PROPERTY_KINDS):
        if not flags & (1 << (15 - i)):
            continue
        if kind == "s":
            end = pos + 1 + (raw[pos] if pos < len(raw) else 0)
        elif kind == "t":
            end = pos + 4 + (_U32.unpack_from(raw, pos)[0] if pos + 4 <= len(raw) else 0)
        elif kind == "o":
            end = pos + 1
        else:
            end = pos + 8
        if end > len(raw):
            raise FrameError("content header properties truncated")
        values[i] = raw[pos:end]
        pos = end
    return values


def message_id_of(raw_properties: bytes) -> bytes | None:
    """The ``message_id`` in a raw property list, or None (also when the list cannot be read
    that far: a returned or refused message's properties come from a broker)."""
    try:
        value = split_properties(raw_properties)[MESSAGE_ID_INDEX]
    except FrameError:
        return None
    return None if value is None else shortstr_value(value)


def shortstr_value(encoded: bytes) -> bytes:
    """The bytes of an encoded short-string property value (its length octet dropped)."""
    return encoded[1:]


def message_id_text(raw_properties: bytes) -> str | None:
    """:func:`message_id_of` as text, for messages and logs (undecodable bytes replaced)."""
    mid = message_id_of(raw_properties)
    return None if mid is None else mid.decode("utf-8", "replace")


def table_entries(table: bytes) -> list[tuple[bytes, int, int, int]]:
    """(key, entry start, value start (its type octet), entry end) of each entry of an encoded
    field table (``table`` starts with its u32 length).

    :raises UnparseableProperties: for a truncated table or an unknown field type
    """
    if len(table) < 4:
        raise UnparseableProperties("headers table truncated")
    end = 4 + _U32.unpack_from(table, 0)[0]
    if end > len(table):
        raise UnparseableProperties("headers table truncated")
    entries = []
    pos = 4
    while pos < end:
        vpos = pos + 1 + table[pos]
        if vpos >= end:
            raise UnparseableProperties("headers table truncated")
        size = FIELD_SIZES.get(table[vpos])
        if size is None:
            raise UnparseableProperties(f"headers table has an unknown field type 0x{table[vpos]:02x}")
        if size == LONG:
            if vpos + 5 > end:
                raise UnparseableProperties("headers table truncated")
            size = 4 + _U32.unpack_from(table, vpos + 1)[0]
        entry_end = vpos + 1 + size
        if entry_end > end:
            raise UnparseableProperties("headers table truncated")
        entries.append((table[pos + 1 : vpos], pos, vpos, entry_end))
        pos = entry_end
    return entries


# -- header edits without decoding the user's table ---------------------------------------------
#
FORWARD_HEADER = b"x-shovelled"
TIMESTAMP_HEADER = b"x-shovelled-timestamp"
INVALID_HEADERS = b"x-invalid-headers"


def _array(elements: bytes) -> bytes:
    return b"A" + longstr(elements)


def _prepend(table: bytes, key: bytes, element: bytes) -> tuple[bytes, bytes | None]:
    """``element`` (a typed value) put first in the array ``key`` of ``table`` (the entries,
    without the table's length), as rabbit_basic:prepend_table_header does. An absent key gets a
    new array, appended; a key holding something else gets a new array in its place, and that
    other typed value is returned (the plugin moves it to ``x-invalid-headers``)."""
    for k, start, vpos, end in table_entries(longstr(table)):
        if k != key:
            continue
        start, vpos, end = start - 4, vpos - 4, end - 4
        if table[vpos] == ord("A"):
            new = _array(element + table[vpos + 5 : end])
            return table[: vpos] + new + table[end:], None
        return table[: vpos] + _array(element) + table[end:], table[vpos:end]
    return table + table_entry(key, _array(element)), None


def edit_headers(table: bytes | None, hop: bytes | None, timestamp: int | None) -> bytes:
    """The headers table with this hop first in ``x-shovelled`` and / or ``x-shovelled-timestamp``
    set to ``timestamp`` (a 64-bit signed 'l', replacing an existing one in place, as
    rabbit_misc:set_table_value does); every other entry byte for byte, in its place.

    :param table: the encoded headers table (u32 length + entries), None when absent
    :param hop: this hop's encoded table (u32 length + entries), None for no forward header
    :raises UnparseableProperties: for a headers table that cannot be parsed
    """
    entries = b""
    if table is not None:
        table_entries(table)  # validates: the edits below rely on the top level being whole
        entries = table[4 : 4 + _U32.unpack_from(table, 0)[0]]
    if hop is not None:
        entries, displaced = _prepend(entries, FORWARD_HEADER, b"F" + hop)
        if displaced is not None:
            entries = _set_invalid(entries, displaced)
    if timestamp is not None:
        value = field_value(timestamp)  # always l under PUBLISHER_RULES
        for k, _start, vpos, end in table_entries(longstr(entries)):
            if k == TIMESTAMP_HEADER:
                entries = entries[: vpos - 4] + value + entries[end - 4 :]
                break
        else:
            entries += table_entry(TIMESTAMP_HEADER, value)
    return longstr(entries)


def _set_invalid(entries: bytes, displaced: bytes) -> bytes:
    """rabbit_basic:set_invalid_header: a non-array ``x-shovelled`` goes first in
    ``x-invalid-headers``' array of the same name (a table, created if absent; a non-table
    ``x-invalid-headers`` is itself moved into the new table first)."""
    for k, _start, vpos, end in table_entries(longstr(entries)):
        if k != INVALID_HEADERS:
            continue
        vpos, end = vpos - 4, end - 4
        if entries[vpos] == ord("F"):
            inner = entries[vpos + 5 : end]
        else:
            inner = table_entry(INVALID_HEADERS, _array(entries[vpos:end]))
        inner, _ = _prepend(inner, FORWARD_HEADER, displaced)
        return entries[:vpos] + b"F" + longstr(inner) + entries[end:]
    inner = table_entry(FORWARD_HEADER, _array(displaced))
    return entries + table_entry(INVALID_HEADERS, b"F" + longstr(inner))


def edit_properties(
    raw: bytes,
    overrides: Mapping[int, bytes],
    hop: bytes | None,
    timestamp: int | None,
) -> bytes:
    """Raw properties with the overrides put in, then the forward / timestamp headers spliced
    into the headers table (the plugin's order: publish_properties, then the hop, then the
    timestamp). A message without headers gets a table.

    :raises UnparseableProperties: when the properties or the headers table cannot be parsed
    """
    try:
        values = split_properties(raw)
    except FrameError as exc:
        raise UnparseableProperties(str(exc)) from None
    for index, encoded in overrides.items():
        values[index] = encoded
    if hop is not None or timestamp is not None:
        values[HEADERS_INDEX] = edit_headers(values[HEADERS_INDEX], hop, timestamp)
    return join_properties(values)
