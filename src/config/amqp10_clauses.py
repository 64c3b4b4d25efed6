"""The clauses of an AMQP 1.0 side, each read and checked: its URIs, its address, and what an
AMQP 1.0 destination sets on every message (properties, application properties, message
annotations).

Both forms read them through here: the static form's ``"sources"`` / ``"destinations"`` with
``"protocol": "amqp10"`` (:mod:`.clauses`) and the dynamic form's ``src-protocol`` /
``dest-protocol`` ``amqp10`` (:mod:`.dynamic`), as the plugin validates them
(rabbit_amqp10_shovel:validate_src_funs / validate_dest_funs): an address is a string; the three
maps' values are strings. Stricter than the plugin, deliberately: an address must not be empty;
dest-properties takes only the properties section's fields, each of its AMQP 1.0 type (the two
timestamps and group_sequence as integers, or as the strings of digits the plugin's validation
lets through); an annotation's key is a symbol (ASCII); every string and map is bounded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .amqp10_uri import read_amqp10_uri
from .json_input import INT64_BOUND
from .limits import MAX_ADDRESS, MAX_SHORTSTR, MAX_TABLE_STRING, MAX_TABLE_VALUES, MAX_UINT
from .model import Amqp10URI, DeleteAfter, Endpoint
from .spec import ENDPOINT, SHOVEL
from .uri import URIError
from .values import Context, is_int, object_value, path_part, show, suggest, utf8_size
from .vocabulary import AMQP10_PROPERTIES

__all__ = [
    "AMQP10_MESSAGE_CHANGES_NOTE",
    "read_address",
    "read_amqp10_message_maps",
    "read_amqp10_prefetch",
    "read_amqp10_properties",
    "read_amqp10_uri_list",
    "read_one_amqp10_uri",
    "read_string_map",
    "refuse_queue_length",
    "warn_undeclared",
]

# Said at check time of each of dest-properties, dest-application-properties and
# dest-message-annotations that a shovel gives.
AMQP10_MESSAGE_CHANGES_NOTE = (
    "pumpd sets these on every message it sends, as the plugin did up to RabbitMQ 4.1; the "
    "plugin 4.2 and later accepts the key but leaves messages unchanged (an AMQP 1.0 bare "
    "message is immutable): leave the key out for that")
_DIGITS_LIMIT = 19  # digits of the largest timestamp (a signed 64-bit integer)


def read_amqp10_uri_list(ctx: Context, clause: str, value: object,
                         expected: str = "a non-empty list of URIs") -> tuple[Amqp10URI, ...]:
    """A non-empty list of AMQP 1.0 URIs, at most the spec's bound, each read as
    :func:`read_one_amqp10_uri` does.

    :param expected: what the clause takes, for the message when ``value`` is not such a list.
    """
    if not isinstance(value, list) or not value:
        ctx.fail(clause, f"must be {expected}, got {show(value)}")
    most = ENDPOINT["brokers"].int_max()
    if len(value) > most:
        ctx.fail(clause, f"at most {most} URIs, got {len(value)}")
    return tuple(read_one_amqp10_uri(ctx, f"{clause}[{i}]", u) for i, u in enumerate(value))


def read_one_amqp10_uri(ctx: Context, clause: str, value: object) -> Amqp10URI:
    """One AMQP 1.0 URI, parsed; what pumpd reads differently from the plugin is a warning."""
    if not isinstance(value, str):
        ctx.fail(clause, f"must be an AMQP URI string, got {show(value)}")
    most = ENDPOINT["broker"].int_max()
    if len(value) > most:
        ctx.fail(clause, f"a URI of at most {most} characters, got {len(value)}")
    try:
        uri, notes = read_amqp10_uri(value)
    except URIError as exc:
        ctx.fail(clause, str(exc))
    for note in notes:
        ctx.warn(clause, note)
    return uri


def read_address(ctx: Context, clause: str, value: object) -> str:
    """An AMQP 1.0 source or target address: a non-empty string of at most MAX_ADDRESS bytes."""
    if not isinstance(value, str):
        ctx.fail(clause, f"must be an AMQP 1.0 address (a string), got {show(value)}")
    if not value:
        ctx.fail(clause, 'must not be empty (RabbitMQ\'s addresses are "/queues/NAME" and '
                         '"/exchanges/NAME/KEY")')
    size = utf8_size(ctx, clause, value)
    if size > MAX_ADDRESS:
        ctx.fail(clause, f"must be at most {MAX_ADDRESS} bytes in UTF-8, got {size}")
    return value


def read_amqp10_prefetch(ctx: Context, clause: str, value: object) -> int:
    """An AMQP 1.0 source's link credit: 0 would never let a message through (AMQP 1.0 has no
    "unlimited"), so at least 1."""
    low, high = SHOVEL["prefetch_count"].int_bounds()
    if is_int(value) and isinstance(value, int) and value == 0:
        ctx.fail(clause, "must be at least 1 for an AMQP 1.0 source: it is the link credit, and "
                         "a credit of 0 never lets a message through (AMQP 1.0 has no "
                         "unlimited credit)")
    if not (is_int(value) and isinstance(value, int) and low <= value <= high):
        ctx.fail(clause, f"must be an integer from 1 to {high} (the link credit), got "
                         f"{show(value)}")
    return value


def refuse_queue_length(ctx: Context, clause: str, value: DeleteAfter | int) -> None:
    """An AMQP 1.0 source has no queue length to read (rabbit_amqp10_shovel refuses it)."""
    if value is DeleteAfter.QUEUE_LENGTH:
        ctx.fail(clause, 'must be "never" or a number of messages for an AMQP 1.0 source: it '
                         'has no queue length to read ("queue-length" is AMQP 0-9-1\'s)')


def read_amqp10_properties(ctx: Context, clause: str, value: object) -> dict[str, str | int]:
    """dest-properties: the properties section's fields by the plugin's names, each of its type
    ([] reads as none, as an export writes an empty one)."""
    obj = object_value(ctx, clause, {} if value == [] else value)
    out: dict[str, str | int] = {}
    for name, v in obj.items():
        where = f"{clause}.{path_part(name)}"
        kind = AMQP10_PROPERTIES.get(name)
        if kind is None:
            ctx.fail(where, f"not an AMQP 1.0 property{suggest(name, list(AMQP10_PROPERTIES))}; "
                            f"the properties: {', '.join(AMQP10_PROPERTIES)}")
        if kind == "timestamp":
            out[name] = _integer(ctx, where, v, 0, INT64_BOUND - 1,
                                 "a timestamp (milliseconds since the epoch)")
        elif kind == "uint":
            out[name] = _integer(ctx, where, v, 0, MAX_UINT, "a sequence number")
        else:
            out[name] = _string(ctx, where, v, symbol=kind == "symbol")
    return out


def read_string_map(ctx: Context, clause: str, value: object, *, symbols: bool) -> dict[str, str]:
    """dest-application-properties / dest-message-annotations: keys (symbols: ASCII) to string
    values, as the plugin validates them ([] reads as none)."""
    obj = object_value(ctx, clause, {} if value == [] else value)
    if len(obj) > MAX_TABLE_VALUES:
        ctx.fail(clause, f"at most {MAX_TABLE_VALUES} entries, got {len(obj)}")
    out: dict[str, str] = {}
    for key, v in obj.items():
        where = f"{clause}.{path_part(key)}"
        if not key:
            ctx.fail(clause, "a key must not be empty")
        if symbols and not key.isascii():
            ctx.fail(where, "an annotation's key is an AMQP symbol: ASCII only")
        if utf8_size(ctx, where, key) > MAX_SHORTSTR:
            ctx.fail(where, f"a key of at most {MAX_SHORTSTR} bytes in UTF-8")
        out[key] = _string(ctx, where, v, symbol=False)
    return out


def read_amqp10_message_maps(ctx: Context, obj: Mapping[str, Any],
                             names: Mapping[str, str]) -> dict[str, Any]:
    """The three maps an AMQP 1.0 destination sets, as :class:`ShovelConfig` fields, from
    ``obj`` under ``names`` (field -> the key this form gives it); each given one is warned
    about (:data:`AMQP10_MESSAGE_CHANGES_NOTE`)."""
    out: dict[str, Any] = {}
    for field, key in names.items():
        if key not in obj:
            continue
        if field == "amqp10_properties":
            out[field] = read_amqp10_properties(ctx, key, obj[key])
        else:
            out[field] = read_string_map(ctx, key, obj[key],
                                         symbols=field == "amqp10_message_annotations")
        if out[field]:
            ctx.warn(key, AMQP10_MESSAGE_CHANGES_NOTE)
    return out


def _string(ctx: Context, where: str, value: object, *, symbol: bool) -> str:
    if not isinstance(value, str):
        ctx.fail(where, f"must be a string, got {show(value)}")
    if symbol and not value.isascii():
        ctx.fail(where, "is an AMQP symbol: ASCII only")
    size = utf8_size(ctx, where, value)
    if size > MAX_TABLE_STRING:
        ctx.fail(where, f"must be at most {MAX_TABLE_STRING} bytes in UTF-8, got {size}")
    return value


def _integer(ctx: Context, where: str, value: object, low: int, high: int, what: str) -> int:
    """An integer in [low, high], or a string of its digits (how the plugin's validation, which
    takes strings only, lets such a value through)."""
    number: int | None = None
    if is_int(value) and isinstance(value, int):
        number = value
    elif (isinstance(value, str) and value.isascii() and value.isdigit()
          and len(value) <= _DIGITS_LIMIT):
        number = int(value)
    if number is None or not low <= number <= high:
        ctx.fail(where, f"must be {what}: an integer from {low} to {high}, got {show(value)}")
    return number


def warn_undeclared(ctx: Context, clause: str, side: Endpoint) -> Endpoint:
    """Warn, at ``clause``, that the queue of ``side``'s ``/queues/NAME`` address is not
    declared when the definition asks for it (``predeclared`` false); returns ``side``."""
    if side.declare_address_queue and side.address_queue is not None:
        ctx.warn(clause, f"pumpd does not declare the queue {side.address_queue!r} that the "
                         "address names (the plugin does, through RabbitMQ 4's AMQP management): "
                         "it must exist before the shovel starts; set predeclared to true to "
                         "say it does")
    return side
