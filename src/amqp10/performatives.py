"""AMQP 1.0's performatives (§2.7), the composite types they carry (error §2.8.14, the delivery
states §3.4, source and target §3.5) and the SASL frames' bodies (§5.3.3).

Each is a dataclass declared once: its fields in the spec's order, snake_case, each with its
AMQP type (the field's ``metadata``); a field without a default is mandatory, a field whose
default is not None has the spec's default. The class decorator :func:`_composite` registers it
under its descriptor code and symbolic name; :func:`encode_performative` and
:func:`decode_performative` work from that one table. On the wire each is a described list; a
field at its default is sent as null, and trailing nulls are left off.

Decoding accepts the descriptor as its ulong code or its symbolic name (``amqp:open:list``) and
checks each field's AMQP type: a wrong type, a mandatory field left null, or an unknown
descriptor is a :class:`DecodeError` naming the performative and the field. A delivery state or
a target that is not one of this module's (a transactional state, a coordinator) is kept as the
:class:`Described` value it came as.

:func:`encode_transfer`, :func:`encode_disposition` and :func:`decode_transfer_fields` are the
per-message cases, written out for speed; they give the same bytes and values as the general
functions.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, NamedTuple, TypeVar

from .codec import _DECODERS as _VALUE_DECODERS
from .codec import (
    DecodeError,
    EncodeError,
    decode_value,
    encode_binary,
    encode_boolean,
    encode_string,
    encode_symbol,
    encode_ubyte,
    encode_uint,
    encode_ulong,
    encode_ushort,
    encode_value,
)
from .values import Array, Described, Symbol, UByte, UInt, ULong, UShort

__all__ = [
    "RCV_SETTLE_FIRST", "RCV_SETTLE_SECOND", "ROLE_RECEIVER", "ROLE_SENDER", "SASL_AUTH",
    "SASL_OK", "SASL_SYS", "SASL_SYS_PERM", "SASL_SYS_TEMP", "SND_SETTLE_MIXED",
    "SND_SETTLE_SETTLED", "SND_SETTLE_UNSETTLED",
    "Accepted", "Attach", "Begin", "Close", "DeliveryState", "Detach", "Disposition", "End",
    "Error", "Flow", "Modified", "Open", "Performative", "Received", "Rejected", "Released",
    "SaslChallenge", "SaslInit", "SaslMechanisms", "SaslOutcome", "SaslResponse", "Source",
    "Target", "Transfer",
    "decode_performative", "decode_transfer_fields", "descriptor_of", "encode_disposition",
    "encode_performative", "encode_transfer",
]

ROLE_SENDER = False
ROLE_RECEIVER = True
SND_SETTLE_UNSETTLED = 0
SND_SETTLE_SETTLED = 1
SND_SETTLE_MIXED = 2
RCV_SETTLE_FIRST = 0
RCV_SETTLE_SECOND = 1
SASL_OK = 0
SASL_AUTH = 1
SASL_SYS = 2
SASL_SYS_PERM = 3
SASL_SYS_TEMP = 4

#: the most bytes a delivery tag may have (§2.8.7)
MAX_DELIVERY_TAG = 32


# --------------------------------------------------------------------------------------------
# Field types: how a field's Python value is encoded, and which decoded values it accepts


class _Wrong(Exception):
    """A decoded field value not of the field's type (the caller names performative and
    field)."""


class FieldType(NamedTuple):
    name: str
    #: the Python value (not None) -> its encoding as this AMQP type
    encode: Callable[[Any], bytes]
    #: a decoded value (not None) -> the field's Python value; :class:`_Wrong` if not this type
    accept: Callable[[Any], Any]


def _exact(cls: type, name: str) -> Callable[[Any], Any]:
    def accept(v: Any) -> Any:
        if type(v) is not cls:
            raise _Wrong(f"is {_amqp_type(v)}, not {name}")
        return v
    return accept


def _amqp_type(v: Any) -> str:
    if isinstance(v, Described):
        return f"a described value ({v.descriptor!r})"
    names = {type(None): "null", bool: "boolean", int: "long", float: "double", str: "string",
             bytes: "binary", list: "list", dict: "map"}
    return names.get(type(v), type(v).__name__.lower())


def _symbols_encode(v: Any) -> bytes:
    if isinstance(v, str):
        return encode_symbol(v)
    return encode_value(Array(0xA3, tuple(Symbol(s) for s in v)))


def _symbols_accept(v: Any) -> Any:
    # a "multiple" field: one value, or an array of them
    if type(v) is Symbol:
        return [v]
    if isinstance(v, Array) and v.code == 0xA3 and v.descriptor is None:
        return list(v.items)
    raise _Wrong(f"is {_amqp_type(v)}, not a symbol or an array of symbols")


def _symbol_keys(v: Any) -> dict[Any, Any]:
    return {Symbol(k) if type(k) is str else k: x for k, x in v.items()}


def _fields_encode(v: Any) -> bytes:
    return encode_value(_symbol_keys(v))


def _fields_accept(v: Any) -> Any:
    if type(v) is not dict:
        raise _Wrong(f"is {_amqp_type(v)}, not a map")
    for k in v:
        if type(k) is not Symbol:
            raise _Wrong(f"has the key {k!r} ({_amqp_type(k)}): its keys are symbols")
    return v


def _any(v: Any) -> Any:
    return v


BOOLEAN = FieldType("boolean", encode_boolean, _exact(bool, "a boolean"))
UBYTE = FieldType("ubyte", encode_ubyte, _exact(UByte, "a ubyte"))
USHORT = FieldType("ushort", encode_ushort, _exact(UShort, "a ushort"))
UINT = FieldType("uint", encode_uint, _exact(UInt, "a uint"))
ULONG = FieldType("ulong", encode_ulong, _exact(ULong, "a ulong"))
STRING = FieldType("string", encode_string, _exact(str, "a string"))
SYMBOL = FieldType("symbol", encode_symbol, _exact(Symbol, "a symbol"))
SYMBOLS = FieldType("symbol[]", _symbols_encode, _symbols_accept)
BINARY = FieldType("binary", encode_binary, _exact(bytes, "a binary"))
FIELDS = FieldType("fields", _fields_encode, _fields_accept)
ANY = FieldType("*", encode_value, _any)


def _composite_type(name: str, codes: tuple[int, ...], keep_others: bool) -> FieldType:
    """A field holding one of the composites ``codes`` (or, when ``keep_others``, any
    described value, kept as it came)."""

    def encode(v: Any) -> bytes:
        if isinstance(v, Described):
            return encode_value(v)
        return encode_performative(v)

    def accept(v: Any) -> Any:
        if not isinstance(v, Described):
            raise _Wrong(f"is {_amqp_type(v)}, not {name}")
        schema = _schema_for(v.descriptor)
        if schema is None or schema.code not in codes:
            if keep_others:
                return v
            raise _Wrong(f"is {_amqp_type(v)}, not {name}")
        return schema.from_list(v.value)

    return FieldType(name, encode, accept)


# --------------------------------------------------------------------------------------------
# The table: one entry per composite type, made from its dataclass


def _f(t: FieldType) -> dict[str, FieldType]:
    return {"amqp": t}


class _Field(NamedTuple):
    name: str
    type: FieldType
    default: Any
    mandatory: bool


class _Schema:
    """One composite type: its class, descriptor, and fields in the wire's order."""

    __slots__ = ("cls", "code", "constructor", "fields", "getter", "name", "symbol")

    def __init__(self, cls: type, code: int, symbol: str) -> None:
        self.cls = cls
        self.code = code
        self.symbol = symbol
        self.name = symbol.split(":")[1]
        self.constructor = b"\x00\x53" + bytes([code])
        fields = []
        for f in dataclasses.fields(cls):
            mandatory = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            default = None if mandatory or f.default is dataclasses.MISSING else f.default
            fields.append(_Field(f.name, f.metadata["amqp"], default, mandatory))
        self.fields = tuple(fields)
        names = [f.name for f in fields]
        self.getter: Callable[[Any], tuple[Any, ...]] = (
            attrgetter(*names) if len(names) > 1 else
            (lambda p: (getattr(p, names[0]),)) if names else (lambda p: ()))

    def encode(self, p: Any) -> bytes:
        parts = []
        for f, v in zip(self.fields, self.getter(p), strict=True):
            # a value at the spec's default goes as null: the same meaning, fewer bytes
            if v is None or (f.default is not None and type(v) is type(f.default)
                             and v == f.default):
                if f.mandatory:
                    raise EncodeError(f"{self.name}: the mandatory field {f.name} is None")
                parts.append(b"\x40")
                continue
            try:
                parts.append(f.type.encode(v))
            except EncodeError as e:
                raise EncodeError(f"{self.name} field {f.name}: {e}") from None
            except (ValueError, TypeError, AttributeError, struct.error, OverflowError) as e:
                raise EncodeError(f"{self.name} field {f.name} = {v!r} is not "
                                  f"{f.type.name} ({e})") from None
        while parts and parts[-1] == b"\x40":
            parts.pop()
        return self.constructor + _list_bytes(parts)

    def from_list(self, items: Any, position: int = 0) -> Any:
        if type(items) is not list:
            raise DecodeError(f"{self.name} is {_amqp_type(items)}, not a list", position)
        kw = {}
        n = len(items)
        for i, f in enumerate(self.fields):
            v = items[i] if i < n else None
            if v is None:
                if f.mandatory:
                    raise DecodeError(f"{self.name}: the mandatory field {f.name} is absent",
                                      position)
                kw[f.name] = f.default
                continue
            try:
                kw[f.name] = f.type.accept(v)
            except _Wrong as e:
                raise DecodeError(f"{self.name} field {f.name} {e}", position) from None
            except DecodeError as e:
                raise DecodeError(f"{self.name} field {f.name}: {e}", position) from None
        return self.cls(**kw)


def _map_bytes(pairs: list[tuple[bytes, bytes]]) -> bytes:
    body = b"".join([k + v for k, v in pairs])
    size = len(body) + 1
    count = 2 * len(pairs)
    if size < 256 and count < 256:
        return bytes((0xC1, size, count)) + body
    return struct.pack(">BII", 0xD1, size + 3, count) + body


def _list_bytes(parts: list[bytes]) -> bytes:
    if not parts:
        return b"\x45"
    body = b"".join(parts)
    size = len(body) + 1
    if size < 256 and len(parts) < 256:
        return bytes((0xC0, size, len(parts))) + body
    return struct.pack(">BII", 0xD0, size + 3, len(parts)) + body


_BY_CLASS: dict[type, _Schema] = {}
_BY_DESCRIPTOR: dict[Any, _Schema] = {}


def _schema_for(descriptor: Any) -> _Schema | None:
    # a descriptor is a ulong or a symbol; anything else (a list, say) names nothing
    if type(descriptor) is ULong or type(descriptor) is Symbol:
        return _BY_DESCRIPTOR.get(descriptor)
    return None
_T = TypeVar("_T")


def _composite(code: int, symbol: str) -> Callable[[type[_T]], type[_T]]:
    def register(cls: type[_T]) -> type[_T]:
        schema = _Schema(cls, code, symbol)
        _BY_CLASS[cls] = schema
        _BY_DESCRIPTOR[ULong(code)] = schema
        _BY_DESCRIPTOR[Symbol(symbol)] = schema
        return cls
    return register


# --------------------------------------------------------------------------------------------
# The composite types (fields as in the spec; a default other than None is the spec's)


@_composite(0x1D, "amqp:error:list")
@dataclass(slots=True)
class Error:
    condition: Symbol = field(metadata=_f(SYMBOL))
    description: str | None = field(default=None, metadata=_f(STRING))
    info: dict[Symbol, Any] | None = field(default=None, metadata=_f(FIELDS))


_ERROR = _composite_type("an error", (0x1D,), keep_others=False)


@_composite(0x23, "amqp:received:list")
@dataclass(slots=True)
class Received:
    section_number: int = field(metadata=_f(UINT))
    section_offset: int = field(metadata=_f(ULONG))


@_composite(0x24, "amqp:accepted:list")
@dataclass(slots=True)
class Accepted:
    pass


@_composite(0x25, "amqp:rejected:list")
@dataclass(slots=True)
class Rejected:
    error: Error | None = field(default=None, metadata=_f(_ERROR))


@_composite(0x26, "amqp:released:list")
@dataclass(slots=True)
class Released:
    pass


@_composite(0x27, "amqp:modified:list")
@dataclass(slots=True)
class Modified:
    delivery_failed: bool | None = field(default=None, metadata=_f(BOOLEAN))
    undeliverable_here: bool | None = field(default=None, metadata=_f(BOOLEAN))
    message_annotations: dict[Symbol, Any] | None = field(default=None, metadata=_f(FIELDS))


DeliveryState = Received | Accepted | Rejected | Released | Modified | Described
_DELIVERY_STATE = _composite_type("a delivery state", (0x23, 0x24, 0x25, 0x26, 0x27),
                                  keep_others=True)
_OUTCOME = _composite_type("an outcome", (0x24, 0x25, 0x26, 0x27), keep_others=True)


def _unsettled_encode(v: Any) -> bytes:
    enc = _DELIVERY_STATE.encode
    return _map_bytes([(encode_value(k), b"\x40" if x is None else enc(x))
                       for k, x in v.items()])


def _unsettled_accept(v: Any) -> Any:
    if type(v) is not dict:
        raise _Wrong(f"is {_amqp_type(v)}, not a map")
    accept = _DELIVERY_STATE.accept
    return {k: None if x is None else accept(x) for k, x in v.items()}


#: delivery tag -> its delivery state (or None), the unsettled map of an attach
_UNSETTLED = FieldType("unsettled", _unsettled_encode, _unsettled_accept)


@_composite(0x28, "amqp:source:list")
@dataclass(slots=True)
class Source:
    address: Any = field(default=None, metadata=_f(ANY))  # an address: a string in practice
    durable: int = field(default=0, metadata=_f(UINT))  # terminus-durability
    expiry_policy: Symbol = field(default=Symbol("session-end"), metadata=_f(SYMBOL))
    timeout: int = field(default=0, metadata=_f(UINT))  # seconds
    dynamic: bool = field(default=False, metadata=_f(BOOLEAN))
    dynamic_node_properties: dict[Symbol, Any] | None = field(default=None,
                                                              metadata=_f(FIELDS))
    distribution_mode: Symbol | None = field(default=None, metadata=_f(SYMBOL))
    #: filter name -> filter (a described value, as sent), the filter-set
    filter: dict[Symbol, Any] | None = field(default=None, metadata=_f(FIELDS))
    default_outcome: Any = field(default=None, metadata=_f(_OUTCOME))
    outcomes: list[Symbol] | None = field(default=None, metadata=_f(SYMBOLS))
    capabilities: list[Symbol] | None = field(default=None, metadata=_f(SYMBOLS))


@_composite(0x29, "amqp:target:list")
@dataclass(slots=True)
class Target:
    address: Any = field(default=None, metadata=_f(ANY))
    durable: int = field(default=0, metadata=_f(UINT))
    expiry_policy: Symbol = field(default=Symbol("session-end"), metadata=_f(SYMBOL))
    timeout: int = field(default=0, metadata=_f(UINT))
    dynamic: bool = field(default=False, metadata=_f(BOOLEAN))
    dynamic_node_properties: dict[Symbol, Any] | None = field(default=None,
                                                              metadata=_f(FIELDS))
    capabilities: list[Symbol] | None = field(default=None, metadata=_f(SYMBOLS))


_SOURCE = _composite_type("a source", (0x28,), keep_others=False)
# a target may be another kind of node (a transaction coordinator): kept as it came
_TARGET = _composite_type("a target", (0x29,), keep_others=True)


# --------------------------------------------------------------------------------------------
# The performatives


@_composite(0x10, "amqp:open:list")
@dataclass(slots=True)
class Open:
    container_id: str = field(metadata=_f(STRING))
    hostname: str | None = field(default=None, metadata=_f(STRING))
    max_frame_size: int = field(default=0xFFFF_FFFF, metadata=_f(UINT))
    channel_max: int = field(default=0xFFFF, metadata=_f(USHORT))
    idle_time_out: int | None = field(default=None, metadata=_f(UINT))  # milliseconds
    outgoing_locales: list[Symbol] | None = field(default=None, metadata=_f(SYMBOLS))
    incoming_locales: list[Symbol] | None = field(default=None, metadata=_f(SYMBOLS))
    offered_capabilities: list[Symbol] | None = field(default=None, metadata=_f(SYMBOLS))
    desired_capabilities: list[Symbol] | None = field(default=None, metadata=_f(SYMBOLS))
    properties: dict[Symbol, Any] | None = field(default=None, metadata=_f(FIELDS))


@_composite(0x11, "amqp:begin:list")
@dataclass(slots=True)
class Begin:
    remote_channel: int | None = field(default=None, metadata=_f(USHORT))
    next_outgoing_id: int = field(kw_only=True, metadata=_f(UINT))
    incoming_window: int = field(kw_only=True, metadata=_f(UINT))
    outgoing_window: int = field(kw_only=True, metadata=_f(UINT))
    handle_max: int = field(default=0xFFFF_FFFF, metadata=_f(UINT))
    offered_capabilities: list[Symbol] | None = field(default=None, metadata=_f(SYMBOLS))
    desired_capabilities: list[Symbol] | None = field(default=None, metadata=_f(SYMBOLS))
    properties: dict[Symbol, Any] | None = field(default=None, metadata=_f(FIELDS))


@_composite(0x12, "amqp:attach:list")
@dataclass(slots=True)
class Attach:
    name: str = field(metadata=_f(STRING))
    handle: int = field(metadata=_f(UINT))
    role: bool = field(metadata=_f(BOOLEAN))  # ROLE_SENDER (False) or ROLE_RECEIVER (True)
    snd_settle_mode: int = field(default=SND_SETTLE_MIXED, metadata=_f(UBYTE))
    rcv_settle_mode: int = field(default=RCV_SETTLE_FIRST, metadata=_f(UBYTE))
    source: Source | None = field(default=None, metadata=_f(_SOURCE))
    target: Target | Described | None = field(default=None, metadata=_f(_TARGET))
    unsettled: dict[Any, DeliveryState | None] | None = field(default=None,
                                                             metadata=_f(_UNSETTLED))
    incomplete_unsettled: bool = field(default=False, metadata=_f(BOOLEAN))
    initial_delivery_count: int | None = field(default=None, metadata=_f(UINT))
    max_message_size: int | None = field(default=None, metadata=_f(ULONG))
    offered_capabilities: list[Symbol] | None = field(default=None, metadata=_f(SYMBOLS))
    desired_capabilities: list[Symbol] | None = field(default=None, metadata=_f(SYMBOLS))
    properties: dict[Symbol, Any] | None = field(default=None, metadata=_f(FIELDS))


@_composite(0x13, "amqp:flow:list")
@dataclass(slots=True)
class Flow:
    next_incoming_id: int | None = field(default=None, metadata=_f(UINT))
    incoming_window: int = field(kw_only=True, metadata=_f(UINT))
    next_outgoing_id: int = field(kw_only=True, metadata=_f(UINT))
    outgoing_window: int = field(kw_only=True, metadata=_f(UINT))
    handle: int | None = field(default=None, metadata=_f(UINT))
    delivery_count: int | None = field(default=None, metadata=_f(UINT))
    link_credit: int | None = field(default=None, metadata=_f(UINT))
    available: int | None = field(default=None, metadata=_f(UINT))
    drain: bool = field(default=False, metadata=_f(BOOLEAN))
    echo: bool = field(default=False, metadata=_f(BOOLEAN))
    properties: dict[Symbol, Any] | None = field(default=None, metadata=_f(FIELDS))


@_composite(0x14, "amqp:transfer:list")
@dataclass(slots=True)
class Transfer:
    handle: int = field(metadata=_f(UINT))
    delivery_id: int | None = field(default=None, metadata=_f(UINT))
    delivery_tag: bytes | None = field(default=None, metadata=_f(BINARY))
    message_format: int | None = field(default=None, metadata=_f(UINT))
    settled: bool | None = field(default=None, metadata=_f(BOOLEAN))
    more: bool = field(default=False, metadata=_f(BOOLEAN))
    rcv_settle_mode: int | None = field(default=None, metadata=_f(UBYTE))
    state: DeliveryState | None = field(default=None, metadata=_f(_DELIVERY_STATE))
    resume: bool = field(default=False, metadata=_f(BOOLEAN))
    aborted: bool = field(default=False, metadata=_f(BOOLEAN))
    batchable: bool = field(default=False, metadata=_f(BOOLEAN))


@_composite(0x15, "amqp:disposition:list")
@dataclass(slots=True)
class Disposition:
    role: bool = field(metadata=_f(BOOLEAN))
    first: int = field(metadata=_f(UINT))
    last: int | None = field(default=None, metadata=_f(UINT))
    settled: bool = field(default=False, metadata=_f(BOOLEAN))
    state: DeliveryState | None = field(default=None, metadata=_f(_DELIVERY_STATE))
    batchable: bool = field(default=False, metadata=_f(BOOLEAN))


@_composite(0x16, "amqp:detach:list")
@dataclass(slots=True)
class Detach:
    handle: int = field(metadata=_f(UINT))
    closed: bool = field(default=False, metadata=_f(BOOLEAN))
    error: Error | None = field(default=None, metadata=_f(_ERROR))


@_composite(0x17, "amqp:end:list")
@dataclass(slots=True)
class End:
    error: Error | None = field(default=None, metadata=_f(_ERROR))


@_composite(0x18, "amqp:close:list")
@dataclass(slots=True)
class Close:
    error: Error | None = field(default=None, metadata=_f(_ERROR))


# --------------------------------------------------------------------------------------------
# SASL (§5.3.3)


@_composite(0x40, "amqp:sasl-mechanisms:list")
@dataclass(slots=True)
class SaslMechanisms:
    sasl_server_mechanisms: list[Symbol] = field(metadata=_f(SYMBOLS))


@_composite(0x41, "amqp:sasl-init:list")
@dataclass(slots=True)
class SaslInit:
    mechanism: Symbol = field(metadata=_f(SYMBOL))
    initial_response: bytes | None = field(default=None, metadata=_f(BINARY))
    hostname: str | None = field(default=None, metadata=_f(STRING))


@_composite(0x42, "amqp:sasl-challenge:list")
@dataclass(slots=True)
class SaslChallenge:
    challenge: bytes = field(metadata=_f(BINARY))


@_composite(0x43, "amqp:sasl-response:list")
@dataclass(slots=True)
class SaslResponse:
    response: bytes = field(metadata=_f(BINARY))


@_composite(0x44, "amqp:sasl-outcome:list")
@dataclass(slots=True)
class SaslOutcome:
    code: int = field(metadata=_f(UBYTE))  # SASL_OK ... SASL_SYS_TEMP
    additional_data: bytes | None = field(default=None, metadata=_f(BINARY))


Performative = (Open | Begin | Attach | Flow | Transfer | Disposition | Detach | End | Close
                | SaslMechanisms | SaslInit | SaslChallenge | SaslResponse | SaslOutcome)

_PERFORMATIVE_CODES = frozenset(range(0x10, 0x19)) | frozenset(range(0x40, 0x45))


# --------------------------------------------------------------------------------------------
# Encoding and decoding


def descriptor_of(cls: type) -> tuple[int, str]:
    """A composite class's descriptor: its code and its symbolic name."""
    schema = _BY_CLASS[cls]
    return schema.code, schema.symbol


def encode_performative(p: Any) -> bytes:
    """``p`` (a performative, or any composite of this module) as its described list."""
    schema = _BY_CLASS.get(type(p))
    if schema is None:
        raise EncodeError(f"{type(p).__name__} is not an AMQP 1.0 composite type of "
                          "pumpd.amqp10.performatives")
    return schema.encode(p)


def decode_performative(buf: bytes | memoryview, pos: int = 0,
                        end: int | None = None) -> tuple[Any, int]:
    """The performative (or SASL frame body) at ``buf[pos:]``, and the position after it (where
    a transfer's payload starts)."""
    if end is None or end > len(buf):
        end = len(buf)
    if pos >= end:
        raise DecodeError("no performative: the frame body is empty", pos)
    if buf[pos] != 0x00:
        raise DecodeError("a performative is a described list, not this", pos, buf[pos])
    descriptor, p = decode_value(buf, pos + 1, end)
    schema = _schema_for(descriptor)
    if schema is None or schema.code not in _PERFORMATIVE_CODES:
        raise DecodeError(f"unknown performative descriptor {descriptor!r}", pos + 1)
    if p >= end:
        raise DecodeError(f"{schema.name} has no field list", p)
    code = buf[p]
    if code not in (0x45, 0xC0, 0xD0):
        raise DecodeError(f"{schema.name}'s fields are not a list", p, code)
    items, after = decode_value(buf, p, end)
    return schema.from_list(items, p), after


# ---- the per-message cases

_U8 = struct.Struct(">BB")
_U32 = struct.Struct(">BI")
_TRANSFER_HEAD = b"\x00\x53\x14"
_DISPOSITION_HEAD = b"\x00\x53\x15"
_STATE_BYTES: dict[type, bytes] = {
    Accepted: b"\x00\x53\x24\x45",
    Released: b"\x00\x53\x26\x45",
}


def _uint(v: int) -> bytes:
    if v == 0:
        return b"\x43"
    if v < 256:
        return _U8.pack(0x52, v)
    return _U32.pack(0x70, v)


def encode_transfer(handle: int, delivery_id: int | None, delivery_tag: bytes | None,
                    settled: bool, more: bool, message_format: int = 0) -> bytes:
    """A transfer performative with these fields (the rest absent): the same bytes as
    :func:`encode_performative` of that :class:`Transfer`, without its generality."""
    try:
        parts = [_uint(handle),
                 b"\x40" if delivery_id is None else _uint(delivery_id)]
        if delivery_tag is None:
            parts.append(b"\x40")
        else:
            if len(delivery_tag) > MAX_DELIVERY_TAG:
                raise EncodeError(f"transfer field delivery_tag: {len(delivery_tag)} bytes, "
                                  f"at most {MAX_DELIVERY_TAG}")
            parts.append(_U8.pack(0xA0, len(delivery_tag)) + delivery_tag)
        parts.append(_uint(message_format))
        parts.append(b"\x41" if settled else b"\x42")
        if more:
            parts.append(b"\x41")
    except struct.error as e:
        raise EncodeError(f"transfer: a field is not a uint ({e}): handle={handle!r}, "
                          f"delivery_id={delivery_id!r}, message_format={message_format!r}"
                          ) from None
    body = b"".join(parts)
    return _TRANSFER_HEAD + bytes((0xC0, len(body) + 1, len(parts))) + body


def encode_disposition(role: bool, first: int, last: int | None, settled: bool,
                       state: Any) -> bytes:
    """A disposition performative (``batchable`` absent): the same bytes as
    :func:`encode_performative` of that :class:`Disposition`."""
    try:
        parts = [b"\x41" if role else b"\x42", _uint(first)]
        parts.append(b"\x40" if last is None else _uint(last))
    except struct.error as e:
        raise EncodeError(f"disposition: first {first!r} or last {last!r} is not a uint ({e})"
                          ) from None
    if state is None:
        if settled:
            parts.append(b"\x41")
        elif last is None:
            parts.pop()  # trailing nulls are left off
    else:
        parts.append(b"\x41" if settled else b"\x40")
        sb = _STATE_BYTES.get(type(state))
        if sb is None:
            sb = (encode_value(state) if isinstance(state, Described)
                  else encode_performative(state))
        parts.append(sb)
    body = b"".join(parts)
    if len(body) < 255:
        return _DISPOSITION_HEAD + bytes((0xC0, len(body) + 1, len(parts))) + body
    return _DISPOSITION_HEAD + struct.pack(">BII", 0xD0, len(body) + 4, len(parts)) + body


def decode_transfer_fields(buf: bytes | memoryview, pos: int = 0,
                           end: int | None = None) -> tuple[Transfer, int]:
    """A transfer at ``buf[pos:]`` and where its payload starts; :class:`DecodeError` if the
    performative there is not a transfer. As :func:`decode_performative`, faster for the
    common encodings."""
    if end is None or end > len(buf):
        end = len(buf)
    # the common shape: 0x00 0x53 0x14, a list8 whose elements are each one simple value
    if end - pos >= 6 and buf[pos] == 0 and buf[pos + 1] == 0x53 and buf[pos + 2] == 0x14 \
            and buf[pos + 3] == 0xC0:
        size = buf[pos + 4]
        count = buf[pos + 5]
        stop = pos + 5 + size
        if size >= 1 and stop <= end and count <= size - 1:
            items: list[Any] = []
            p = pos + 6
            decoders = _VALUE_DECODERS
            for _ in range(count):
                if p >= stop:
                    break
                fn = decoders.get(buf[p])
                if fn is None:
                    break
                v, p = fn(buf, p + 1, stop, 1)
                items.append(v)
            else:
                if p == stop:
                    return _TRANSFER.from_list(items, pos + 3), p
    p_, after = decode_performative(buf, pos, end)
    if not isinstance(p_, Transfer):
        raise DecodeError(f"expected a transfer, got {_BY_CLASS[type(p_)].name}", pos)
    return p_, after


_TRANSFER = _BY_CLASS[Transfer]
