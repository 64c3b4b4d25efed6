"""Qpid Proton as the AMQP 1.0 peer that is not pumpd, and one description of a message that both
sides produce, so a test compares what Proton sent with what pumpd decoded, or what Proton
received after pumpd moved it.

Proton (Debian's ``python3-qpid-proton``) belongs to the system interpreter, not to the
project's virtual environment: it runs as a subprocess, ``/usr/bin/python3 proton_peer.py``
(see that script for its commands, its message recipes and the description's format, the
"typed JSON"). Here:

* :func:`proton_unavailable` / :func:`skip_unless_proton`: whether that interpreter has Proton.
* :func:`proton_send`, :func:`proton_receive`: Proton sends recipe messages to, or takes messages
  from, an AMQP 1.0 address (:class:`pumpd.testing.Amqp10Address`); each message comes back as
  a :class:`PeerMessage` (its description as Proton decodes it, and its bytes).
* :func:`proton_encode`, :func:`proton_describe` (:func:`proton_describe_many`),
  :func:`proton_reencode_many`: Proton's encoding of a recipe message, Proton's description of
  encoded bytes, and Proton's own encoding of the values it decodes from them.
* :func:`typed`, :func:`describe`, :func:`pumpd_describe`: the same typed JSON of pumpd's values
  and :class:`pumpd.amqp10.message.Message`.
* :func:`as_delivered_by_rabbitmq`: what RabbitMQ 3.10 delivers of a message sent to it (it
  rewrites the header and reverses a body of several sections), and :func:`differences`, a
  readable list of where two descriptions differ.

A test of a shovel reads::

    sent = proton_send(amqp10_a, "/amq/queue/src", "every-type", 4)
    ...  # pumpd moves the messages from node A to node B
    got = proton_receive(amqp10_b, "/amq/queue/dst", 4)
    for s, g in zip(sent, got, strict=True):
        assert not differences(as_delivered_by_rabbitmq(s.description, hops=2), g.description)
"""

from __future__ import annotations

import functools
import json
import struct
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pumpd.amqp10.codec import ARRAY_TYPE_CODE
from pumpd.amqp10.message import AmqpSequence, AmqpValue, Message, decode_message
from pumpd.amqp10.values import (
    Array,
    Byte,
    Char,
    Decimal32,
    Decimal64,
    Decimal128,
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
from pumpd.testing import Amqp10Address

__all__ = [
    "CARRIED_BY_RABBITMQ", "KINDS", "PEER_SCRIPT", "SYSTEM_PYTHON", "PeerMessage",
    "ProtonPeerError", "as_delivered_by_rabbitmq", "describe", "differences", "proton_describe",
    "proton_describe_many", "proton_encode", "proton_receive", "proton_reencode_many",
    "proton_send", "proton_unavailable", "pumpd_describe", "run_peer", "skip_unless_proton",
    "typed",
]

#: The interpreter Debian's python3-qpid-proton is installed for.
SYSTEM_PYTHON = "/usr/bin/python3"
PEER_SCRIPT = Path(__file__).with_name("proton_peer.py")
#: The peer's message recipes (proton_peer.RECIPES): message I of kind K is the same every time.
KINDS = ("simple", "every-type", "value-body", "sequence-body", "large", "many-sections",
         "many-sequences", "exotic")
#: The kinds RabbitMQ 3.10 carries (it aborts the connection over each ``exotic`` message).
CARRIED_BY_RABBITMQ = tuple(k for k in KINDS if k != "exotic")
#: Seconds a subprocess may take beyond the peer's own timeout (interpreter start, connection
#: close).
_MARGIN = 30.0


class ProtonPeerError(AssertionError):
    """The Proton peer failed: the command, its exit status and its stderr are in the text."""


@functools.cache
def proton_unavailable() -> str | None:
    """Why :data:`SYSTEM_PYTHON` cannot run the peer (None: it can)."""
    try:
        result = subprocess.run([SYSTEM_PYTHON, "-c", "import proton; print(proton.VERSION)"],
                                capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{SYSTEM_PYTHON} cannot run: {e}"
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["?"])[-1]
        return (f"{SYSTEM_PYTHON} cannot import proton ({last}): install Debian's "
                "python3-qpid-proton (tools/system-packages does)")
    return None


def skip_unless_proton() -> None:
    """Skip the calling test, saying why, when the peer cannot run."""
    reason = proton_unavailable()
    if reason is not None:
        pytest.skip(reason)


def run_peer(*args: str, stdin: str | None = None, timeout: float = 60.0) -> str:
    """Run ``proton_peer.py ARGS`` and return its stdout; :class:`ProtonPeerError` (quoting
    stderr) when it fails or outlives ``timeout`` seconds."""
    command = [SYSTEM_PYTHON, str(PEER_SCRIPT), *args]
    shown = " ".join(command)
    try:
        result = subprocess.run(command, input=stdin, capture_output=True, text=True,
                                timeout=timeout)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        raise ProtonPeerError(f"{shown}: still running after {timeout} s; stderr:\n"
                              f"{(err or '').strip()}") from None
    if result.returncode != 0:
        raise ProtonPeerError(f"{shown}: exit status {result.returncode}; stderr:\n"
                              f"{result.stderr.strip()}")
    return result.stdout


@dataclass(frozen=True)
class PeerMessage:
    """One message Proton sent or received: its typed JSON (as Proton decodes it) and its
    encoded bytes (the transfer's payload)."""

    description: dict[str, Any]
    raw: bytes


def _peer_messages(stdout: str) -> list[PeerMessage]:
    out = []
    for line in stdout.splitlines():
        item = json.loads(line)
        out.append(PeerMessage(item["description"], bytes.fromhex(item["bytes"])))
    return out


def _link_args(address: Amqp10Address, node_address: str, count: int,
               timeout: float) -> list[str]:
    args = [address.url(), node_address, "--count", str(count), "--timeout", str(timeout),
            "--with-bytes"]
    if address.hostname is not None:
        args += ["--hostname", address.hostname]
    return args


def proton_send(address: Amqp10Address, target: str, kind: str, count: int, first: int = 0,
                timeout: float = 30.0) -> list[PeerMessage]:
    """Proton sends messages first..first+count-1 of recipe ``kind`` to ``target`` (a link
    target, e.g. ``/amq/queue/Q``), one at a time, each once the previous one is accepted;
    returns them as sent. :class:`ProtonPeerError` unless every one is accepted."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {KINDS}")
    stdout = run_peer("send", *_link_args(address, target, count, timeout), "--kind", kind,
                      "--first", str(first), timeout=timeout * 2 + _MARGIN)
    return _peer_messages(stdout)


def proton_receive(address: Amqp10Address, source: str, count: int,
                   timeout: float = 30.0) -> list[PeerMessage]:
    """Proton takes ``count`` messages from ``source`` (a link source), accepting each;
    :class:`ProtonPeerError` if fewer come within ``timeout`` seconds (those that came are
    accepted all the same)."""
    stdout = run_peer("receive", *_link_args(address, source, count, timeout),
                      timeout=timeout * 2 + _MARGIN)
    return _peer_messages(stdout)


def proton_encode(kind: str, index: int = 0) -> bytes:
    """Proton's encoding of message ``index`` of recipe ``kind``."""
    return bytes.fromhex(run_peer("encode", kind, "--index", str(index)).strip())


def proton_describe(raw: bytes) -> dict[str, Any]:
    """Proton's typed JSON of the encoded message ``raw``."""
    return proton_describe_many([raw])[0]


def proton_describe_many(raws: list[bytes]) -> list[dict[str, Any]]:
    """Proton's typed JSON of each encoded message (one subprocess for them all)."""
    stdout = run_peer("describe-bytes", stdin="".join(f"{r.hex()}\n" for r in raws))
    out = [json.loads(line) for line in stdout.splitlines()]
    if len(out) != len(raws):
        raise ProtonPeerError(f"describe-bytes gave {len(out)} descriptions of {len(raws)}")
    return out


def proton_reencode_many(raws: list[bytes]) -> list[bytes]:
    """Each encoded message as Proton encodes the values it decodes from it."""
    stdout = run_peer("reencode", stdin="".join(f"{r.hex()}\n" for r in raws))
    out = [bytes.fromhex(line) for line in stdout.splitlines()]
    if len(out) != len(raws):
        raise ProtonPeerError(f"reencode gave {len(out)} messages of {len(raws)}")
    return out


# --------------------------------------------------------------------------------------------
# The typed JSON of pumpd's values (the format is proton_peer.py's)

def _hex(v: Any) -> str:
    return bytes(v).hex()


_SCALARS: dict[type, tuple[str, Any]] = {
    bool: ("boolean", bool),
    UByte: ("ubyte", int),
    UShort: ("ushort", int),
    UInt: ("uint", int),
    ULong: ("ulong", int),
    Byte: ("byte", int),
    Short: ("short", int),
    Int: ("int", int),
    int: ("long", int),
    Timestamp: ("timestamp", int),
    Float: ("float", lambda v: struct.pack(">f", v).hex()),
    float: ("double", lambda v: struct.pack(">d", v).hex()),
    Decimal32: ("decimal32", lambda v: v.raw.hex()),
    Decimal64: ("decimal64", lambda v: v.raw.hex()),
    Decimal128: ("decimal128", lambda v: v.raw.hex()),
    Char: ("char", str),
    Symbol: ("symbol", str),
    str: ("string", str),
    bytes: ("binary", _hex),
    bytearray: ("binary", _hex),
    memoryview: ("binary", _hex),
    uuid.UUID: ("uuid", str),
}

#: an Array's type code (pumpd's canonical one) -> the type's name in the typed JSON
ARRAY_TYPE_NAMES = {
    0x40: "null", 0x56: "boolean", 0x50: "ubyte", 0x60: "ushort", 0x70: "uint", 0x80: "ulong",
    0x51: "byte", 0x61: "short", 0x71: "int", 0x81: "long", 0x83: "timestamp", 0x72: "float",
    0x82: "double", 0x74: "decimal32", 0x84: "decimal64", 0x94: "decimal128", 0x73: "char",
    0x98: "uuid", 0xA0: "binary", 0xA1: "string", 0xA3: "symbol", 0xC0: "list", 0xC1: "map",
    0xE0: "array",
}
# an array element is encoded as its array's type whatever its Python type (a plain int in an
# array of ints is an int): described as that type too
_ELEMENT_CASTS: dict[int, Any] = {
    0x56: bool, 0x50: UByte, 0x60: UShort, 0x70: UInt, 0x80: ULong, 0x51: Byte, 0x61: Short,
    0x71: Int, 0x81: int, 0x83: Timestamp, 0x72: Float, 0x82: float, 0x73: Char, 0xA0: bytes,
    0xA1: str, 0xA3: Symbol,
}


def typed(v: Any) -> list[Any]:
    """The typed JSON of one pumpd value (:mod:`pumpd.amqp10.values`), as it goes on the
    wire."""
    if v is None:
        return ["null", None]
    t = type(v)
    scalar = _SCALARS.get(t)
    if scalar is not None:
        name, payload = scalar
        if t is int and not -(1 << 63) <= v < (1 << 63):
            raise ValueError(f"int {v} is beyond an AMQP long")
        return [name, payload(v)]
    if t is list or t is tuple:
        return ["list", [typed(x) for x in v]]
    if t is dict:
        return ["map", [[typed(k), typed(x)] for k, x in v.items()]]
    if t is Described:
        return ["described", typed(v.descriptor), typed(v.value)]
    if t is Array:
        return _typed_array(v)
    raise ValueError(f"{t.__name__} {v!r} is not a pumpd AMQP 1.0 value")


def _typed_array(a: Array) -> list[Any]:
    code = ARRAY_TYPE_CODE.get(a.code)
    if code is None:
        raise ValueError(f"Array code 0x{a.code:02x} is not a type's")
    name = ARRAY_TYPE_NAMES[code]
    cast = _ELEMENT_CASTS.get(code)
    items = []
    for x in a.items:
        item = typed(cast(x) if cast is not None else x)
        if item[0] != name:
            raise ValueError(f"an array of {name} has an element {x!r} ({item[0]})")
        items.append(item)
    out = ["array", name, items]
    if a.descriptor is not None:
        out.append(typed(a.descriptor))
    return out


def _as(cls: type) -> Any:
    return lambda v: typed(cls(v))


def _message_id(v: Any) -> list[Any]:
    # a plain int is a ulong id (what pumpd's encoder sends for it)
    return ["ulong", v] if type(v) is int else typed(v)


# each field of the header and properties sections is of one type on the wire, whatever its
# Python type in a Message built by hand (pumpd's encoder writes a plain int priority as a ubyte)
_HEADER_FIELDS = (
    ("durable", _as(bool)), ("priority", _as(UByte)), ("ttl", _as(UInt)),
    ("first_acquirer", _as(bool)), ("delivery_count", _as(UInt)),
)
_PROPERTIES_FIELDS = (
    ("message_id", _message_id), ("user_id", _as(bytes)), ("to", _as(str)),
    ("subject", _as(str)), ("reply_to", _as(str)), ("correlation_id", _message_id),
    ("content_type", _as(Symbol)), ("content_encoding", _as(Symbol)),
    ("absolute_expiry_time", _as(Timestamp)), ("creation_time", _as(Timestamp)),
    ("group_id", _as(str)), ("group_sequence", _as(UInt)), ("reply_to_group_id", _as(str)),
)


def _fields(section: Any, table: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    out = {}
    for name, as_typed in table:
        v = getattr(section, name)
        if v is not None:
            out[name] = as_typed(v)
    return out


def _annotations(v: dict[Any, Any]) -> dict[str, Any]:
    out = {}
    for k, x in v.items():
        if isinstance(k, str):  # a Symbol, or a str pumpd's encoder sends as one
            key = str(k)
        elif type(k) is int or type(k) is ULong:
            key = json.dumps(["ulong", int(k)])
        else:
            key = json.dumps(typed(k))
        out[key] = typed(x)
    return out


def _application_properties(v: dict[Any, Any]) -> dict[str, Any]:
    return {k if type(k) is str else json.dumps(typed(k)): typed(x) for k, x in v.items()}


def _body(sections: list[Any]) -> list[Any]:
    kinds = {"data" if isinstance(s, bytes | bytearray | memoryview) else
             "sequence" if isinstance(s, AmqpSequence) else
             "value" if isinstance(s, AmqpValue) else type(s).__name__ for s in sections}
    if len(kinds) != 1 or not kinds <= {"data", "sequence", "value"}:
        raise ValueError(f"a body of {sorted(kinds)} sections")
    kind = kinds.pop()
    if kind == "data":
        return ["data", *[bytes(s).hex() for s in sections]]
    if kind == "sequence":
        return ["sequence", *[[typed(x) for x in s.items] for s in sections]]
    if len(sections) != 1:
        raise ValueError(f"a body of {len(sections)} amqp-value sections")
    return ["value", typed(sections[0].value)]


def describe(m: Message) -> dict[str, Any]:
    """The typed JSON of pumpd's ``m``: what :func:`pumpd.amqp10.message.encode_message` puts
    on the wire, in proton_peer.py's format."""
    out: dict[str, Any] = {}
    if m.header is not None:
        out["header"] = _fields(m.header, _HEADER_FIELDS)
    if m.delivery_annotations is not None:
        out["delivery_annotations"] = _annotations(m.delivery_annotations)
    if m.message_annotations is not None:
        out["message_annotations"] = _annotations(m.message_annotations)
    if m.properties is not None:
        out["properties"] = _fields(m.properties, _PROPERTIES_FIELDS)
    if m.application_properties is not None:
        out["application_properties"] = _application_properties(m.application_properties)
    if m.body:
        out["body"] = _body(m.body)
    if m.footer is not None:
        out["footer"] = _annotations(m.footer)
    return out


def pumpd_describe(raw: bytes) -> dict[str, Any]:
    """The typed JSON of ``raw`` as pumpd's :func:`decode_message` reads it."""
    return describe(decode_message(raw))


# --------------------------------------------------------------------------------------------
# Comparing descriptions

def _short(v: Any) -> str:
    text = json.dumps(v)
    return text if len(text) <= 160 else f"{text[:150]}... ({len(text)} characters)"


def differences(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Where ``actual`` differs from ``expected`` (two typed JSON descriptions or parts of
    them), one line per difference: its path, the expected and the actual value."""
    where = path or "(the whole)"
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = []
        for k in expected:
            if k not in actual:
                out.append(f"{path}/{k}: expected {_short(expected[k])}, missing")
            else:
                out += differences(expected[k], actual[k], f"{path}/{k}")
        out += [f"{path}/{k}: not expected, got {_short(actual[k])}" for k in actual
                if k not in expected]
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{where}: expected {len(expected)} items {_short(expected)}, got "
                    f"{len(actual)} {_short(actual)}"]
        out = []
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            out += differences(e, a, f"{path}[{i}]")
        return out
    if expected != actual or type(expected) is not type(actual):
        return [f"{where}: expected {_short(expected)}, got {_short(actual)}"]
    return []


def as_delivered_by_rabbitmq(sent: dict[str, Any], hops: int = 1,
                             redelivered: bool = False) -> dict[str, Any]:
    """What RabbitMQ 3.10's AMQP 1.0 plugin delivers of a message described as ``sent`` after
    ``hops`` brokers (a shovel from one to another: 2).

    The broker keeps the encoded message annotations, properties, application properties, body
    sections and footer as they came, and makes a new header from the AMQP 0-9-1 properties it
    mapped the old one to: ``durable`` always there (false when it was absent), ``priority``
    and ``ttl`` as sent, ``first_acquirer`` true unless redelivered, ``delivery_count`` gone.
    A body of several sections comes back in the reverse order (each broker reverses it once).
    Delivery annotations it does not take at all (it aborts the connection: see the
    ``exotic`` recipe). tests/integration/test_amqp10_interop.py holds the broker to this."""
    if hops < 1:
        raise ValueError(f"hops is {hops}: a message delivered went through a broker at least")
    if "delivery_annotations" in sent:
        raise ValueError("RabbitMQ 3.10 aborts the connection over delivery annotations")
    header = sent.get("header", {})
    new_header = {"durable": ["boolean", header.get("durable", ["boolean", False])[1]]}
    for name in ("priority", "ttl"):
        if name in header:
            new_header[name] = header[name]
    new_header["first_acquirer"] = ["boolean", not redelivered]
    out: dict[str, Any] = {"header": new_header}
    for name in ("message_annotations", "properties", "application_properties", "footer"):
        if name in sent:
            out[name] = sent[name]
    if "body" in sent:
        kind, *sections = sent["body"]
        out["body"] = [kind, *(sections[::-1] if hops % 2 else sections)]
    return out
