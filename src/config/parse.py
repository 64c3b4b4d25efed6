"""Reading and validating a pumpd configuration file into :class:`pumpd.config.model.PumpConfig`.

The file is JSON: ``{"shovels": {"NAME": {...}, ...}}``, optionally with ``"shovels_per_process":
K`` beside ``"shovels"`` (the daemon's packing, see README). Each shovel is written in one of two
forms, never a mix of both:

* the Shovel seed's clauses, one to one: ``sources``, ``destinations``, ``queue``,
  ``prefetch_count``, ``ack_mode``, ``publish_properties``, ``publish_fields``,
  ``reconnect_delay``; plus pumpd's own ``workers``, ``source_read_hold_ms``, ``undeliverable``
  and ``own_process``, and the
  dynamic-shovel extras under seed-style names (``delete_after``, ``add_forward_headers``,
  ``add_timestamp_header``, and the current static format's ``delete_after_duration``,
  ``consumer_args``, ``consumer_name``);
* the flat names of a RabbitMQ dynamic shovel (``src-uri``, ``src-queue``, ``dest-exchange``, ...,
  AMQP 0-9-1 only), normalised the way ``rabbit_amqp091_shovel:parse_source/parse_dest`` does.

Validation stops at the first error (shovels in file order, a shovel's clauses in a fixed order):
one :class:`ConfigError` naming the file, the shovel and the clause.

What the plugin accepts but ignores, or reads differently from pumpd, is accepted with a warning
in :attr:`ShovelConfig.warnings` (``pumpd check`` and the importers print them).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import orjson

from .model import (
    AckMode,
    BrokerURI,
    Declaration,
    DeleteAfter,
    Disposition,
    Endpoint,
    PumpConfig,
    ShovelConfig,
    UndeliverablePolicy,
)
from .uri import URIError, format_uri, parse_uri, redact, uri_notes
from .vocabulary import (
    AMQP10_KEYS,
    BASIC_PROPERTIES,
    BIT,
    DECLARATION_METHODS,
    DYNAMIC_KEYS,
    LEGACY_DYNAMIC_KEYS,
    PUBLISH_FIELDS,
    REQUIRED_FIELDS,
    SEED_CLAUSES,
    SEED_EXTRAS,
    SHORTSTR,
    USES_LAST_QUEUE,
)

__all__ = ["ConfigError", "load_config", "parse_config", "shovel_to_json"]

_SHORTSTR_PROPERTIES = tuple(name for name, kind in BASIC_PROPERTIES.items()
                             if kind == SHORTSTR and name != "expiration")

# A worker process hosts at most this many shovels (one event loop; each shovel holds two
# connections, so the process's descriptors bound it too).
MAX_SHOVELS_PER_PROCESS = 1000
# pumpd's own: allowed in both forms
_COMMON_CLAUSES = ("workers", "source_read_hold_ms", "undeliverable", "own_process")
_SEED_ALL = SEED_CLAUSES + SEED_EXTRAS + _COMMON_CLAUSES
# The legacy pre-3.7 dynamic names are accepted as the plugin does, but not together with their
# current name.
_LEGACY_NAME = {current: legacy for legacy, current in LEGACY_DYNAMIC_KEYS.items()}
_DYNAMIC_ALL = DYNAMIC_KEYS + tuple(LEGACY_DYNAMIC_KEYS) + _COMMON_CLAUSES
# The plugin's floor for delete_after_duration (rabbit_shovel.hrl, SOFT_..._FLOOR), in seconds.
PLUGIN_DURATION_FLOOR = 60
MAX_DURATION = 315_360_000  # ten years: rabbit_misc:check_expiry on the value in milliseconds

DEFAULT_PREFETCH = 1000
DEFAULT_RECONNECT_DELAY = 5.0  # seed; also ?DEFAULT_RECONNECT_DELAY in rabbit_shovel.hrl
_MAX_PREFETCH = 65535  # basic.qos prefetch-count is a short
DEFAULT_READ_HOLD_MS = 1  # the event loop's timers count whole milliseconds
_MAX_READ_HOLD_MS = 1000
_INT64 = 2**63


class ConfigError(Exception):
    """A configuration that pumpd will not run, located as precisely as possible.

    ``str()`` reads ``config.json: shovel 'orders': clause 'prefetch_count': must be a
    non-negative integer, got -1``. Passwords in URIs never appear in it.
    """

    def __init__(self, message: str, *, source: str = "<config>", shovel: str | None = None,
                 clause: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.source = source
        self.shovel = shovel
        self.clause = clause

    def __str__(self) -> str:
        parts = [self.source]
        if self.shovel is not None:
            parts.append(f"shovel {self.shovel!r}")
        if self.clause is not None:
            parts.append(f"clause {self.clause!r}")
        parts.append(self.message)
        return redact(": ".join(parts))  # a safety net: every URI shown is already redacted


class _Ctx:
    """Where validation is: raises :class:`ConfigError` with the file and shovel filled in."""

    def __init__(self, source: str, shovel: str | None = None) -> None:
        self.source = source
        self.shovel = shovel
        self.warnings: list[str] = []

    def fail(self, clause: str | None, message: str) -> NoReturn:
        raise ConfigError(message, source=self.source, shovel=self.shovel, clause=clause)

    def warn(self, clause: str | None, message: str) -> None:
        """Accepted, but pumpd reads it differently from the plugin, or the plugin ignores it."""
        self.warnings.append(redact(f"clause {clause!r}: {message}" if clause else message))


def _show(value: object) -> str:
    """A value as JSON text for "got ..." in a message; strings redacted and shortened."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, (str, bool, int, float)) or value is None:
        text = redact(json.dumps(value, ensure_ascii=False))
        return text if len(text) <= 80 else text[:77] + "..."
    return f"a Python {type(value).__name__}"


def _suggest(name: str, known: Sequence[str]) -> str:
    match = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(ctx: _Ctx, clause: str, value: object, low: int, high: int | None = None) -> int:
    if (isinstance(value, int) and not isinstance(value, bool) and value >= low
            and (high is None or value <= high)):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= low:
        ctx.fail(clause, f"must be at most {high}, got {value}")
    what = {0: "a non-negative integer", 1: "a positive integer"}.get(low, f"an integer >= {low}")
    ctx.fail(clause, f"must be {what}, got {_show(value)}")


def _number(ctx: _Ctx, clause: str, value: object) -> float:
    if (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value >= 0):
        return float(value)
    ctx.fail(clause, f"must be a non-negative number (seconds), got {_show(value)}")


def _reconnect_delay(ctx: _Ctx, clause: str, value: object) -> float:
    """The plugin restarts a worker only for a positive integer delay (rabbit_shovel_worker_sup,
    rabbit_shovel_dyn_worker_sup): anything else means "never reconnect" there."""
    if (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and value < 0):
        ctx.warn(clause, f"{value:g} is read as 0, as the plugin does: the shovel stops for good "
                         "after its first failure")
        return 0.0
    delay = _number(ctx, clause, value)
    if delay > 0 and not float(delay).is_integer():
        ctx.warn(clause, f"{delay:g} s: pumpd reconnects after {delay:g} s, where the plugin "
                         "never reconnects (it restarts a shovel only for a whole number of "
                         "seconds)")
    return delay


def _duration(ctx: _Ctx, clause: str, value: object) -> float | None:
    """delete_after_duration: a positive whole number of seconds, as the plugin validates it."""
    if value is None:
        return None
    if not _is_int(value) or not isinstance(value, int) or value <= 0:
        ctx.fail(clause, f"must be a positive integer (seconds), got {_show(value)}")
    if value > MAX_DURATION:
        ctx.fail(clause, f"must be at most {MAX_DURATION} seconds, got {value}")
    if value < PLUGIN_DURATION_FLOOR:
        ctx.warn(clause, f"{value} s: pumpd stops after {value} s; the plugin raises any value "
                         f"under {PLUGIN_DURATION_FLOOR} s to {PLUGIN_DURATION_FLOOR} s "
                         "(delete_after_duration_floor)")
    return float(value)


def _consumer(ctx: _Ctx, args_clause: str, name_clause: str,
              obj: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """basic.consume's arguments (an AMQP table; [] is the plugin's "none") and tag."""
    raw = obj.get(args_clause, {})
    args = {} if raw == [] else _table(ctx, args_clause, raw)
    priority = args.get("x-priority")
    if priority is not None and not _is_int(priority):
        ctx.fail(f"{args_clause}.x-priority", f"must be an integer, got {_show(priority)}")
    offset = args.get("x-stream-offset")
    if offset is not None and not (_is_int(offset) or isinstance(offset, str)):
        ctx.fail(f"{args_clause}.x-stream-offset",
                 'must be "first", "last", "next", an offset (integer) or an interval such as '
                 f'"1h", got {_show(offset)}')
    tag = _shortstr(ctx, name_clause, obj.get(name_clause, ""))
    return args, tag


def _bool(ctx: _Ctx, clause: str, value: object) -> bool:
    if not isinstance(value, bool):
        ctx.fail(clause, f"must be true or false, got {_show(value)}")
    return value


def _shortstr(ctx: _Ctx, clause: str, value: object, what: str = "must be a string") -> str:
    if not isinstance(value, str):
        ctx.fail(clause, f"{what}, got {_show(value)}")
    if len(value.encode("utf-8")) > 255:  # AMQP shortstr
        ctx.fail(clause, f"must be at most 255 bytes in UTF-8, got {len(value.encode())}")
    return value


def _object(ctx: _Ctx, clause: str, value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        ctx.fail(clause, f"must be an object, got {_show(value)}")
    return value


def _table(ctx: _Ctx, clause: str, value: object) -> dict[str, Any]:
    """An AMQP field table from a JSON object: every value must be encodable.

    :raises ConfigError: on a non-object, a key over 255 bytes, or an unencodable value.
    """
    table = _object(ctx, clause, value)

    def check(v: object, path: str) -> None:
        at = f"at {path}: " if path else ""
        if isinstance(v, dict):
            for k, item in v.items():
                if not isinstance(k, str) or len(k.encode("utf-8")) > 255:
                    ctx.fail(clause, f"{at}table key {k!r} must be a string of at most 255 bytes")
                check(item, f"{path}.{k}" if path else k)
        elif isinstance(v, list):
            for i, item in enumerate(v):
                check(item, f"{path}[{i}]")
        elif isinstance(v, int) and not isinstance(v, bool):
            if not -_INT64 <= v < _INT64:
                ctx.fail(clause, f"{at}integer {v} does not fit in 64 bits")
        elif not (isinstance(v, (str, bool, float)) or v is None):
            ctx.fail(clause, f"{at}{_show(v)} is not a JSON value")

    check(table, "")
    return dict(table)


def _check_keys(ctx: _Ctx, clause_prefix: str, obj: Mapping[str, Any], known: Sequence[str],
                what: str = "unknown clause") -> None:
    for key in obj:
        if key not in known:
            ctx.fail(f"{clause_prefix}{key}", f"{what}{_suggest(key, known)}")


# --- the seed's clauses ---------------------------------------------------------------------


def _declaration(ctx: _Ctx, clause: str, item: object, declared_queue: bool) -> Declaration:
    """One element of a ``declarations`` list: ``"queue.declare"`` or ``{"queue.bind": {...}}``.

    pumpd extension: ``{"queue.declare": {...}, "if_missing": true}`` (see
    :attr:`Declaration.if_missing`).

    :param declared_queue: whether a queue.declare comes earlier in the same list.
    :raises ConfigError: on an unknown method or field, a wrong type, or a missing field.
    """
    if_missing = False
    if isinstance(item, str):
        method, fields_obj = item, {}
    elif isinstance(item, dict):
        keys = [k for k in item if k != "if_missing"]
        if len(keys) != 1:
            ctx.fail(clause, "a declaration object must have exactly one key, the method name "
                             f"(e.g. {{\"queue.declare\": {{...}}}}), got {len(keys)}")
        method = keys[0]
        if "if_missing" in item:
            if_missing = _bool(ctx, f"{clause}.if_missing", item["if_missing"])
            if if_missing and method != "queue.declare":
                ctx.fail(f"{clause}.if_missing", "applies to queue.declare only")
        fields_obj = item[method]
        if not isinstance(fields_obj, dict):
            ctx.fail(clause, f"the fields of {method} must be an object, got {_show(fields_obj)}")
    else:
        ctx.fail(clause, f"a declaration is a method name or an object, got {_show(item)}")
    if method not in DECLARATION_METHODS:
        ctx.fail(clause, f"unsupported method {method!r}"
                         f"{_suggest(method, list(DECLARATION_METHODS))}; "
                         f"supported: {', '.join(DECLARATION_METHODS)}")
    spec = DECLARATION_METHODS[method]
    fields: dict[str, Any] = {}
    for name, value in fields_obj.items():
        where = f"{clause}.{method}.{name}"
        if name not in spec:
            ctx.fail(where, f"{method} has no field {name!r}{_suggest(name, list(spec))}; "
                            f"its fields: {', '.join(spec)}")
        kind = spec[name]
        if kind == BIT:
            fields[name] = _bool(ctx, where, value)
        elif kind == SHORTSTR:
            fields[name] = _shortstr(ctx, where, value)
        else:
            fields[name] = _table(ctx, where, value)
    for name in REQUIRED_FIELDS.get(method, ()):
        if not fields.get(name):
            ctx.fail(clause, f"{method} needs a non-empty {name!r}")
    if method in USES_LAST_QUEUE and not fields.get("queue") and not declared_queue:
        ctx.fail(clause, f"{method} with queue \"\" means the most recently declared queue, but "
                         "no queue.declare comes before it")
    return Declaration(method, fields, if_missing=if_missing)


def _endpoint(ctx: _Ctx, clause: str, value: object) -> Endpoint:
    """``sources`` / ``destinations``: ``brokers`` (or ``broker``) and optional ``declarations``.

    :raises ConfigError: on a bad shape, an unknown key, a malformed URI or declaration.
    """
    obj = _object(ctx, clause, value)
    _check_keys(ctx, f"{clause}.", obj, ("brokers", "broker", "declarations"), "unknown key")
    if "brokers" in obj and "broker" in obj:
        ctx.fail(clause, "give 'brokers' (a list) or 'broker' (one URI), not both")
    if "brokers" in obj:
        raw = obj["brokers"]
        if not isinstance(raw, list) or not raw:
            ctx.fail(f"{clause}.brokers", f"must be a non-empty list of URIs, got {_show(raw)}")
        pairs = [(f"{clause}.brokers[{i}]", u) for i, u in enumerate(raw)]
    elif "broker" in obj:
        pairs = [(f"{clause}.broker", obj["broker"])]
    else:
        ctx.fail(clause, "missing 'brokers' (a list of URIs) or 'broker' (one URI)")
    brokers = tuple(_uri(ctx, where, u) for where, u in pairs)
    declarations: list[Declaration] = []
    raw_decls = obj.get("declarations", [])
    if not isinstance(raw_decls, list):
        ctx.fail(f"{clause}.declarations", f"must be a list, got {_show(raw_decls)}")
    for i, item in enumerate(raw_decls):
        declared = any(d.method == "queue.declare" for d in declarations)
        declarations.append(_declaration(ctx, f"{clause}.declarations[{i}]", item, declared))
    return Endpoint(brokers=brokers, declarations=tuple(declarations))


def _uri(ctx: _Ctx, clause: str, value: object) -> BrokerURI:
    if not isinstance(value, str):
        ctx.fail(clause, f"must be an AMQP URI string, got {_show(value)}")
    try:
        uri = parse_uri(value)
    except URIError as exc:
        ctx.fail(clause, str(exc))
    for note in uri_notes(uri):
        ctx.warn(clause, note)
    return uri


def _publish_properties(ctx: _Ctx, clause: str, value: object) -> dict[str, Any]:
    """The basic properties to set on every re-published message, each type-checked.

    :raises ConfigError: on an unknown property or a value the property cannot hold.
    """
    # [] is how an export writes "none" (an empty Erlang property list)
    obj = _object(ctx, clause, {} if value == [] else value)
    _check_keys(ctx, f"{clause}.", obj, tuple(BASIC_PROPERTIES), "not a basic property")
    props: dict[str, Any] = {}
    for name, v in obj.items():
        where = f"{clause}.{name}"
        if name in _SHORTSTR_PROPERTIES:
            props[name] = _shortstr(ctx, where, v)
        elif name == "expiration":  # RabbitMQ wants milliseconds as a string of digits
            s = _shortstr(ctx, where, v, 'must be a string of digits (milliseconds), e.g. "60000"')
            if not (s.isascii() and s.isdigit()):
                ctx.fail(where, f'must be a string of digits (milliseconds), got {_show(s)}')
            props[name] = s
        elif name == "delivery_mode":
            if not _is_int(v) or v not in (1, 2):
                ctx.fail(where, f"must be 1 (transient) or 2 (persistent), got {_show(v)}")
            props[name] = v
        elif name == "priority":
            props[name] = _int(ctx, where, v, 0, 255)
        elif name == "timestamp":  # seconds since the epoch, an AMQP 64-bit timestamp
            props[name] = _int(ctx, where, v, 0, _INT64 - 1)
        else:  # headers
            props[name] = _table(ctx, where, v)
    return props


def _publish_fields(
    ctx: _Ctx, clause: str, value: object
) -> tuple[str | None, str | None, bool]:
    obj = _object(ctx, clause, value)
    _check_keys(ctx, f"{clause}.", obj, tuple(PUBLISH_FIELDS), "not a publish field")
    exchange = routing_key = None
    if "exchange" in obj:  # "" is the default exchange
        exchange = _shortstr(ctx, f"{clause}.exchange", obj["exchange"])
    if "routing_key" in obj:
        routing_key = _shortstr(ctx, f"{clause}.routing_key", obj["routing_key"])
    mandatory = _bool(ctx, f"{clause}.mandatory", obj.get("mandatory", True))
    return exchange, routing_key, mandatory


def _delete_after(ctx: _Ctx, clause: str, value: object) -> DeleteAfter | int:
    if value in ("never", "queue-length"):
        return DeleteAfter(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    ctx.fail(clause, f'must be "never", "queue-length" or a non-negative integer, '
                     f"got {_show(value)}")


def _enum_value(ctx: _Ctx, clause: str, value: object, allowed: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in allowed:
        hint = _suggest(value, allowed) if isinstance(value, str) else ""
        ctx.fail(clause, f"must be one of {', '.join(allowed)}, got {_show(value)}{hint}")
    return value


_POLICIES = (Disposition.PARK.value, Disposition.DEAD_LETTER.value, Disposition.STOP.value)
_UNROUTABLE_POLICIES = (Disposition.DROP.value, Disposition.PARK.value, Disposition.STOP.value)


def _undeliverable(ctx: _Ctx, value: object) -> UndeliverablePolicy:
    """``"undeliverable": "stop"`` or ``{"policy": ..., "park_queue": ..., "unroutable": ...}``."""
    clause = "undeliverable"
    if isinstance(value, str):
        value = {"policy": value}
    obj = _object(ctx, clause, value)
    _check_keys(ctx, f"{clause}.", obj, ("policy", "park_queue", "unroutable"))
    default = UndeliverablePolicy()
    policy = _enum_value(ctx, f"{clause}.policy", obj.get("policy", default.policy.value),
                         _POLICIES)
    unroutable = _enum_value(ctx, f"{clause}.unroutable",
                             obj.get("unroutable", default.unroutable.value), _UNROUTABLE_POLICIES)
    park_queue = _shortstr(ctx, f"{clause}.park_queue", obj.get("park_queue", default.park_queue))
    if not park_queue:
        ctx.fail(f"{clause}.park_queue", "must name a queue (the server-named \"\" cannot be "
                                         "found again)")
    return UndeliverablePolicy(Disposition(policy), park_queue, Disposition(unroutable))


def _seed_shovel(ctx: _Ctx, obj: Mapping[str, Any]) -> ShovelConfig:
    """A shovel in the seed's clauses.

    :raises ConfigError: on the first bad clause.
    """
    _check_keys(ctx, "", obj, _SEED_ALL)
    for clause in ("sources", "destinations", "queue"):
        if clause not in obj:
            ctx.fail(clause, "missing (it is mandatory)")
    source = _endpoint(ctx, "sources", obj["sources"])
    destination = _endpoint(ctx, "destinations", obj["destinations"])
    queue = _shortstr(ctx, "queue", obj["queue"])
    exchange, routing_key, mandatory = _publish_fields(
        ctx, "publish_fields", obj.get("publish_fields", {})
    )
    modes = [m.value for m in AckMode]
    consumer_args, consumer_tag = _consumer(ctx, "consumer_args", "consumer_name", obj)
    return ShovelConfig(
        name=ctx.shovel or "",
        source=source,
        destination=destination,
        queue=queue,
        prefetch_count=_int(ctx, "prefetch_count", obj.get("prefetch_count", DEFAULT_PREFETCH),
                            0, _MAX_PREFETCH),
        ack_mode=AckMode(_enum_value(ctx, "ack_mode", obj.get("ack_mode", "on_confirm"), modes)),
        publish_properties=_publish_properties(ctx, "publish_properties",
                                               obj.get("publish_properties", {})),
        publish_exchange=exchange,
        publish_routing_key=routing_key,
        publish_mandatory=mandatory,
        reconnect_delay=_reconnect_delay(ctx, "reconnect_delay",
                                         obj.get("reconnect_delay", DEFAULT_RECONNECT_DELAY)),
        delete_after=_delete_after(ctx, "delete_after", obj.get("delete_after", "never")),
        delete_after_duration=_duration(ctx, "delete_after_duration",
                                        obj.get("delete_after_duration")),
        consumer_arguments=consumer_args,
        consumer_tag=consumer_tag,
        add_forward_headers=_bool(ctx, "add_forward_headers",
                                  obj.get("add_forward_headers", False)),
        add_timestamp_header=_bool(ctx, "add_timestamp_header",
                                   obj.get("add_timestamp_header", False)),
        workers=_int(ctx, "workers", obj.get("workers", 1), 1),
        source_read_hold_ms=_int(ctx, "source_read_hold_ms",
                                 obj.get("source_read_hold_ms", DEFAULT_READ_HOLD_MS), 0,
                                 _MAX_READ_HOLD_MS),
        own_process=_bool(ctx, "own_process", obj.get("own_process", False)),
        undeliverable=_undeliverable(ctx, obj.get("undeliverable", {})),
    )


# --- the dynamic shovel's flat names --------------------------------------------------------


def _dynamic_shovel(ctx: _Ctx, obj: Mapping[str, Any]) -> ShovelConfig:
    """A shovel in RabbitMQ's dynamic-shovel names, normalised as the plugin does.

    Replicates rabbit_amqp091_shovel:parse_source/parse_dest: ``src-queue`` is checked with a
    passive declare and created durable (with ``src-queue-args``) when missing, or only checked
    with ``src-predeclared``; ``src-exchange`` gets a server-named exclusive queue bound with
    ``src-exchange-key`` (default ""); ``dest-queue`` is ensured the same way and published to
    through the default exchange with the queue name as routing key; ``dest-exchange`` and
    ``dest-exchange-key`` each replace the original exchange / routing key when given.

    :raises ConfigError: on the first bad key.
    """
    _check_dynamic_keys(ctx, obj)
    _warn_dynamic_ignored(ctx, obj)

    def where(key: str) -> str:
        """The name this definition uses for ``key``: the current one or its legacy one."""
        legacy = _LEGACY_NAME.get(key)
        return legacy if legacy is not None and legacy in obj else key

    def get(key: str, default: object) -> object:
        return obj.get(where(key), default)

    queue, src_decls = _dynamic_source(ctx, obj)
    dest_decls, publish_exchange, publish_routing_key = _dynamic_destination(ctx, obj)
    ack_mode = _enum_value(ctx, "ack-mode", obj.get("ack-mode", "on-confirm"),
                           ("on-confirm", "on-publish", "no-ack"))
    consumer_args, consumer_tag = _consumer(ctx, "src-consumer-args", "src-consumer-name", obj)
    return ShovelConfig(
        name=ctx.shovel or "",
        source=Endpoint(_uri_list(ctx, "src-uri", obj["src-uri"]), src_decls),
        destination=Endpoint(_uri_list(ctx, "dest-uri", obj["dest-uri"]), dest_decls),
        queue=queue,
        prefetch_count=_int(ctx, where("src-prefetch-count"),
                            get("src-prefetch-count", DEFAULT_PREFETCH), 0, _MAX_PREFETCH),
        ack_mode=AckMode(ack_mode.replace("-", "_")),
        publish_properties=_publish_properties(ctx, where("dest-publish-properties"),
                                               get("dest-publish-properties", {})),
        publish_exchange=publish_exchange,
        publish_routing_key=publish_routing_key,
        reconnect_delay=_reconnect_delay(ctx, "reconnect-delay",
                                         obj.get("reconnect-delay", DEFAULT_RECONNECT_DELAY)),
        delete_after=_delete_after(ctx, where("src-delete-after"),
                                   get("src-delete-after", "never")),
        delete_after_duration=_duration(ctx, "src-delete-after-duration",
                                        obj.get("src-delete-after-duration")),
        consumer_arguments=consumer_args,
        consumer_tag=consumer_tag,
        add_forward_headers=_bool(ctx, where("dest-add-forward-headers"),
                                  get("dest-add-forward-headers", False)),
        add_timestamp_header=_bool(ctx, where("dest-add-timestamp-header"),
                                   get("dest-add-timestamp-header", False)),
        workers=_int(ctx, "workers", obj.get("workers", 1), 1),
        source_read_hold_ms=_int(ctx, "source_read_hold_ms",
                                 obj.get("source_read_hold_ms", DEFAULT_READ_HOLD_MS), 0,
                                 _MAX_READ_HOLD_MS),
        own_process=_bool(ctx, "own_process", obj.get("own_process", False)),
        undeliverable=_undeliverable(ctx, obj.get("undeliverable", {})),
    )


def _check_dynamic_keys(ctx: _Ctx, obj: Mapping[str, Any]) -> None:
    """The keys a dynamic shovel may have, which it must have, and which exclude each other.

    :raises ConfigError: on the first key that is unknown, missing, or in conflict.
    """
    amqp10 = [k for k in obj if k in AMQP10_KEYS]
    if amqp10:
        ctx.fail(amqp10[0], "is an AMQP 1.0 shovel's key: pumpd speaks AMQP 0-9-1 only (an "
                            "AMQP 1.0 source or destination cannot be moved to pumpd)")
    _check_keys(ctx, "", obj, _DYNAMIC_ALL, "unknown key")
    for key in ("src-protocol", "dest-protocol"):
        if key in obj and obj[key] != "amqp091":
            if obj[key] in ("amqp10", "local"):
                ctx.fail(key, f"{obj[key]} shovels are not supported: pumpd speaks AMQP 0-9-1 only "
                              '(use "amqp091")')
            ctx.fail(key, f'must be "amqp091", got {_show(obj[key])}')
    for legacy, current in LEGACY_DYNAMIC_KEYS.items():
        if legacy in obj and current in obj:
            ctx.fail(legacy, f"give {current!r} or its legacy name {legacy!r}, not both")
    for key in ("src-uri", "dest-uri"):
        if key not in obj:
            ctx.fail(key, "missing (it is mandatory)")
    if ("src-queue" in obj) == ("src-exchange" in obj):
        ctx.fail("src-queue", "give exactly one of 'src-queue' and 'src-exchange'")
    if "dest-queue" in obj and "dest-exchange" in obj:
        ctx.fail("dest-queue", "give at most one of 'dest-queue' and 'dest-exchange'")


def _warn_dynamic_ignored(ctx: _Ctx, obj: Mapping[str, Any]) -> None:
    """Keys the plugin silently ignores in these combinations. The broker accepted them, so a
    definitions export has them: said at check time, not refused."""
    # (dest-exchange-key alone is meaningful: it replaces the routing key, keeping the exchange.)
    for key, needs in (("src-exchange-key", "src-exchange"), ("src-queue-args", "src-queue"),
                       ("dest-queue-args", "dest-queue")):
        if key in obj and needs not in obj:
            ctx.warn(key, f"ignored, as the plugin does: it only applies together with {needs!r}")
    if "dest-exchange-key" in obj and "dest-queue" in obj:
        ctx.warn("dest-exchange-key", "ignored, as the plugin does: with 'dest-queue' messages go "
                                      "to that queue through the default exchange")
    for side in ("src", "dest"):
        key = f"{side}-predeclared"
        if _bool(ctx, key, obj.get(key, False)):
            if f"{side}-queue" not in obj:
                ctx.warn(key, f"ignored, as the plugin does: it only applies together with "
                              f"'{side}-queue'")
            elif f"{side}-queue-args" in obj:  # the plugin's check_queue ignores them
                ctx.warn(f"{side}-queue-args", f"ignored with {key}, as the plugin does: the "
                                               "queue is only checked, never declared")


def _dynamic_source(ctx: _Ctx, obj: Mapping[str, Any]) -> tuple[str, tuple[Declaration, ...]]:
    """The queue to consume from and the source's declarations (parse_source)."""
    if "src-queue" in obj:
        queue = _shortstr(ctx, "src-queue", obj["src-queue"])
        if not queue:
            ctx.fail("src-queue", "must not be empty")
        return queue, (_ensure_queue(ctx, "src", obj, queue),)
    exchange = _shortstr(ctx, "src-exchange", obj["src-exchange"])
    if not exchange:
        ctx.fail("src-exchange", "must not be empty (the default exchange cannot be bound)")
    key = _shortstr(ctx, "src-exchange-key", obj.get("src-exchange-key", ""))
    # "": the server-named queue declared just before
    return "", (Declaration("queue.declare", {"exclusive": True}),
                Declaration("queue.bind", {"queue": "", "exchange": exchange, "routing_key": key}))


def _dynamic_destination(
    ctx: _Ctx, obj: Mapping[str, Any]
) -> tuple[tuple[Declaration, ...], str | None, str | None]:
    """The destination's declarations, and the exchange and routing key to publish with
    (parse_dest; None keeps the message's own)."""
    if "dest-queue" in obj:
        dest_queue = _shortstr(ctx, "dest-queue", obj["dest-queue"])
        if not dest_queue:
            ctx.fail("dest-queue", "must not be empty")
        return (_ensure_queue(ctx, "dest", obj, dest_queue),), "", dest_queue
    exchange = routing_key = None
    if "dest-exchange" in obj:
        exchange = _shortstr(ctx, "dest-exchange", obj["dest-exchange"])
    if "dest-exchange-key" in obj:
        routing_key = _shortstr(ctx, "dest-exchange-key", obj["dest-exchange-key"])
    return (), exchange, routing_key


def _ensure_queue(ctx: _Ctx, side: str, obj: Mapping[str, Any], queue: str) -> Declaration:
    """The plugin's ensure_queue (passive, then durable if missing) or check_queue (predeclared)."""
    if obj.get(f"{side}-predeclared", False):
        return Declaration("queue.declare", {"queue": queue, "passive": True})
    fields: dict[str, Any] = {"queue": queue, "durable": True}
    if obj.get(f"{side}-queue-args") not in (None, [], {}):
        fields["arguments"] = _table(ctx, f"{side}-queue-args", obj[f"{side}-queue-args"])
    return Declaration("queue.declare", fields, if_missing=True)


def _uri_list(ctx: _Ctx, clause: str, value: object) -> tuple[BrokerURI, ...]:
    if isinstance(value, str):
        return (_uri(ctx, clause, value),)
    if not isinstance(value, list) or not value:
        ctx.fail(clause, f"must be a URI or a non-empty list of URIs, got {_show(value)}")
    return tuple(_uri(ctx, f"{clause}[{i}]", u) for i, u in enumerate(value))


# --- whole files ----------------------------------------------------------------------------


def _delete_after_name(definition: Mapping[str, Any]) -> str:
    return "delete-after" if "delete-after" in definition else "src-delete-after"


def _check_shovel(ctx: _Ctx, shovel: ShovelConfig, delete_after_clause: str) -> None:
    """Rules across clauses.

    :raises ConfigError: when clauses that are each valid do not go together.
    """
    source_declares = [d for d in shovel.source.declarations if d.method == "queue.declare"]
    if shovel.queue == "" and not source_declares:
        ctx.fail("queue", '"" means the most recently declared queue, but the source declarations '
                          "declare none")
    if isinstance(shovel.delete_after, int) and shovel.ack_mode is AckMode.NO_ACK:
        # The plugin's rule: with no acks it cannot count what was transferred.
        ctx.fail(delete_after_clause,
                 "a number of messages cannot be combined with ack mode no_ack")
    if shovel.ack_mode is AckMode.NO_ACK and shovel.undeliverable.policy is not Disposition.PARK:
        # With no_ack the source has let go of every message before pumpd sees it: it can
        # neither be rejected to a dead-letter exchange nor left in the queue.
        ctx.fail("undeliverable", f"policy {shovel.undeliverable.policy.value!r} needs acks "
                                  "(ack mode no_ack leaves nothing to reject or keep): use park")
    if shovel.undeliverable.unroutable is not Disposition.DROP and not shovel.publish_mandatory:
        ctx.fail("undeliverable", f"unroutable {shovel.undeliverable.unroutable.value!r} needs "
                                  "publish_fields.mandatory true: without it the destination "
                                  "drops unroutable messages without telling")
    if shovel.workers > 1:
        # Competing consumers must share one named queue; a server-named or exclusive queue
        # would give each worker its own copy of every message, or lock the others out.
        exclusive = any(d.arguments.get("exclusive") for d in source_declares)
        if shovel.queue == "" or exclusive:
            ctx.fail("workers", "more than one worker needs a shared, named, non-exclusive source "
                                "queue")


def parse_config(obj: Any, *, source: str = "<config>") -> PumpConfig:
    """Validate a decoded configuration and normalise it.

    :param obj: the decoded JSON, ``{"shovels": {"NAME": {...}, ...}}``.
    :param source: how errors name the configuration (usually its file name).
    :returns: every shovel, in file order.
    :raises ConfigError: at the first error found (shovels in file order).
    """
    ctx = _Ctx(source)
    if not isinstance(obj, dict):
        ctx.fail(None, f'the top level must be an object {{"shovels": {{...}}}}, got {_show(obj)}')
    _check_keys(ctx, "", obj, ("shovels", "shovels_per_process"), "unknown top-level key")
    per_process = (_int(ctx, "shovels_per_process", obj["shovels_per_process"], 1,
                        MAX_SHOVELS_PER_PROCESS)
                   if "shovels_per_process" in obj else None)
    if "shovels" not in obj:
        ctx.fail(None, 'missing "shovels" at the top level')
    shovels_obj = obj["shovels"]
    if not isinstance(shovels_obj, dict):
        ctx.fail("shovels", f"must be an object mapping shovel names to definitions, got "
                            f"{_show(shovels_obj)}")
    shovels: dict[str, ShovelConfig] = {}
    for name, definition in shovels_obj.items():
        sctx = _Ctx(source, name)
        if not isinstance(name, str) or not name.strip():
            sctx.fail(None, "a shovel name must not be empty")
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
            sctx.fail(None, "a shovel name must not contain control characters")
        if not isinstance(definition, dict):
            sctx.fail(None, f"a shovel definition must be an object, got {_show(definition)}")
        seed_keys = [k for k in definition if k in _SEED_ALL and k not in _COMMON_CLAUSES]
        flat_keys = [k for k in definition if k in _DYNAMIC_ALL and k not in _COMMON_CLAUSES]
        if seed_keys and flat_keys:
            sctx.fail(flat_keys[0], f"mixes dynamic-shovel names ({flat_keys[0]!r}) with the "
                                    f"seed's clauses ({seed_keys[0]!r}): use one form per shovel")
        # Neither form recognised: guess from the spelling, for the "did you mean" hint.
        dynamic = bool(flat_keys) or (not seed_keys and any("-" in k for k in definition))
        shovel = (_dynamic_shovel if dynamic else _seed_shovel)(sctx, definition)
        _check_shovel(sctx, shovel, _delete_after_name(definition) if dynamic else "delete_after")
        if sctx.warnings:
            shovel = dataclasses.replace(shovel, warnings=tuple(sctx.warnings))
        shovels[name] = shovel
    return PumpConfig(shovels=shovels, shovels_per_process=per_process)


class _PairsDict(dict[str, Any]):
    """A JSON object that remembers which of its keys were given more than once."""

    duplicates: list[str]


def _pairs_hook(pairs: list[tuple[str, Any]]) -> _PairsDict:
    d = _PairsDict()
    d.duplicates = []
    for key, value in pairs:
        if key in d and key not in d.duplicates:
            d.duplicates.append(key)
        d[key] = value
    return d


def _find_duplicate(value: object, path: list[str]) -> tuple[list[str], str] | None:
    if isinstance(value, _PairsDict):
        if value.duplicates:
            return path, value.duplicates[0]
        for key, item in value.items():
            found = _find_duplicate(item, [*path, key])
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _find_duplicate(item, [*path[:-1], f"{path[-1]}[{i}]"] if path else [f"[{i}]"])
            if found:
                return found
    return None


def _check_duplicates(data: bytes, source: str) -> None:
    """orjson keeps the last of duplicate keys silently; find them with the stdlib parser.

    :raises ConfigError: naming the first duplicate key (a shovel name, a clause, or deeper).
    """
    try:
        tree = json.loads(data, object_pairs_hook=_pairs_hook)
    except (ValueError, RecursionError):  # orjson accepted it: nothing more to learn here
        return
    found = _find_duplicate(tree, [])
    if found is None:
        return
    path, key = found
    if path == ["shovels"]:
        raise ConfigError("this shovel name is given twice (shovel names must be distinct)",
                          source=source, shovel=key)
    if len(path) >= 2 and path[0] == "shovels":
        clause = ".".join([*path[2:], key])
        raise ConfigError(f"key {key!r} is given twice", source=source, shovel=path[1],
                          clause=clause)
    raise ConfigError(f"key {key!r} is given twice at {'.'.join(path) or 'the top level'}",
                      source=source)


def load_config(path: str | os.PathLike[str]) -> PumpConfig:
    """Read, parse and validate a configuration file.

    :raises ConfigError: when the file cannot be read, is not valid JSON (with its line and
        column), has a duplicate key, or fails validation (see :func:`parse_config`).
    """
    source = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ConfigError(f"cannot read the file: {exc.strerror or exc}", source=source) from None
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        line = getattr(exc, "lineno", None) or data[: exc.pos].count(b"\n") + 1
        col = getattr(exc, "colno", None)
        where = f"line {line}" + (f", column {col}" if col else "")
        raise ConfigError(f"invalid JSON at {where}: {exc.msg}", source=source) from None
    _check_duplicates(data, source)
    return parse_config(obj, source=source)


# --- back to JSON ---------------------------------------------------------------------------


def shovel_to_json(shovel: ShovelConfig) -> dict[str, Any]:
    """The shovel in the seed form, which :func:`parse_config` reads back to an equal shovel.

    Passwords included: for the daemon's state file, never for logs.
    """

    def endpoint(ep: Endpoint) -> dict[str, Any]:
        out: dict[str, Any] = {"brokers": [format_uri(u) for u in ep.brokers]}
        decls: list[Any] = []
        for d in ep.declarations:
            if not d.arguments and not d.if_missing:
                decls.append(d.method)
            else:
                item: dict[str, Any] = {d.method: dict(d.arguments)}
                if d.if_missing:
                    item["if_missing"] = True
                decls.append(item)
        if decls:
            out["declarations"] = decls
        return out

    fields: dict[str, Any] = {
        k: v for k, v in (("exchange", shovel.publish_exchange),
                          ("routing_key", shovel.publish_routing_key)) if v is not None}
    if not shovel.publish_mandatory:
        fields["mandatory"] = False
    delete_after = shovel.delete_after
    return {
        "sources": endpoint(shovel.source),
        "destinations": endpoint(shovel.destination),
        "queue": shovel.queue,
        "prefetch_count": shovel.prefetch_count,
        "ack_mode": shovel.ack_mode.value,
        "publish_properties": dict(shovel.publish_properties),
        "publish_fields": fields,
        "reconnect_delay": shovel.reconnect_delay,
        "workers": shovel.workers,
        "source_read_hold_ms": shovel.source_read_hold_ms,
        **({"own_process": True} if shovel.own_process else {}),
        "delete_after": delete_after.value if isinstance(delete_after, DeleteAfter)
        else delete_after,
        "add_forward_headers": shovel.add_forward_headers,
        "add_timestamp_header": shovel.add_timestamp_header,
        **({"delete_after_duration": int(shovel.delete_after_duration)}
           if shovel.delete_after_duration is not None else {}),
        **({"consumer_args": dict(shovel.consumer_arguments)}
           if shovel.consumer_arguments else {}),
        **({"consumer_name": shovel.consumer_tag} if shovel.consumer_tag else {}),
        "undeliverable": {"policy": shovel.undeliverable.policy.value,
                          "park_queue": shovel.undeliverable.park_queue,
                          "unroutable": shovel.undeliverable.unroutable.value},
    }
