"""A configuration's errors, where validation is, and the checks of single JSON values.

Every check raises :class:`ConfigError` through a :class:`Context`, which names the file, the shovel
and the clause; the clauses (:mod:`.clauses`, :mod:`.dynamic`) and the whole file
(:mod:`.parse`) are built from these.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from .json_input import INT64_BOUND
from .limits import (
    MAX_DOCUMENT_DEPTH,
    MAX_SHORTSTR,
    MAX_TABLE_DEPTH,
    MAX_TABLE_STRING,
    MAX_TABLE_VALUES,
)
from .uri import redact


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


class Context:
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


def show(value: object) -> str:
    """A value as JSON text for "got ..." in a message; strings redacted and shortened."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"  # its digits could be a page long
    if isinstance(value, (str, bool, int, float)) or value is None:
        if isinstance(value, str) and len(value) > 200:
            value = value[:200]
        text = redact(json.dumps(value, ensure_ascii=False))
        return text if len(text) <= 80 else text[:77] + "..."
    return f"a Python {type(value).__name__}"


def suggest(name: str, known: Sequence[str]) -> str:
    """A " (did you mean 'x'?)" hint for a misspelt name, or "" when none is close."""
    match = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def is_int(value: object) -> bool:
    """A JSON integer (``true`` and ``false`` are not, though Python's bool is an int)."""
    return isinstance(value, int) and not isinstance(value, bool)


def int_value(ctx: Context, clause: str, value: object, low: int, high: int | None = None) -> int:
    """``value`` as an integer in [low, high]; :raises ConfigError: otherwise."""
    if (isinstance(value, int) and not isinstance(value, bool) and value >= low
            and (high is None or value <= high)):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= low:
        ctx.fail(clause, f"must be at most {high}, got {show(value)}")
    what = {0: "a non-negative integer", 1: "a positive integer"}.get(low, f"an integer >= {low}")
    ctx.fail(clause, f"must be {what}, got {show(value)}")


def is_finite_number(value: object) -> bool:
    """A JSON number that is a finite float (math.isfinite overflows on a huge int)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -INT64_BOUND <= value < INT64_BOUND
    return isinstance(value, float) and math.isfinite(value)


def seconds_value(ctx: Context, clause: str, value: object, high: float) -> float:
    """``value`` as a non-negative, finite number of seconds up to ``high``."""
    if is_finite_number(value) and isinstance(value, (int, float)) and value >= 0:
        if value > high:
            ctx.fail(clause, f"must be at most {high:g} seconds, got {show(value)}")
        return float(value)
    ctx.fail(clause, f"must be a non-negative number (seconds), got {show(value)}")


def bool_value(ctx: Context, clause: str, value: object) -> bool:
    """``value`` as JSON ``true`` or ``false``."""
    if not isinstance(value, bool):
        ctx.fail(clause, f"must be true or false, got {show(value)}")
    return value


def utf8_size(ctx: Context, clause: str | None, text: str) -> int:
    """The length of ``text`` in UTF-8, which every string on the wire is.

    :raises ConfigError: when it holds a lone surrogate (no UTF-8 form).
    """
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        ctx.fail(clause, "must be valid Unicode text (it holds a lone surrogate)")


def shortstr_value(ctx: Context, clause: str, value: object,
                   what: str = "must be a string") -> str:
    """``value`` as an AMQP short string: text of at most 255 bytes in UTF-8."""
    if not isinstance(value, str):
        ctx.fail(clause, f"{what}, got {show(value)}")
    size = utf8_size(ctx, clause, value)
    if size > MAX_SHORTSTR:  # AMQP shortstr
        ctx.fail(clause, f"must be at most {MAX_SHORTSTR} bytes in UTF-8, got {size}")
    return value


def object_value(ctx: Context, clause: str, value: object) -> dict[str, Any]:
    """``value`` as a JSON object."""
    if not isinstance(value, dict):
        ctx.fail(clause, f"must be an object, got {show(value)}")
    return value


def table_value(ctx: Context, clause: str, value: object) -> dict[str, Any]:
    """An AMQP field table from a JSON object: every value must be encodable, and bounded.

    :raises ConfigError: on a non-object, a key over 255 bytes, an unencodable value, tables or
        arrays nested more than ``MAX_TABLE_DEPTH`` deep, more than ``MAX_TABLE_VALUES`` values,
        or a string over ``MAX_TABLE_STRING`` bytes.
    """
    table = object_value(ctx, clause, value)
    count = 0

    def check(v: object, path: str, depth: int) -> None:
        nonlocal count
        at = f"at {path}: " if path else ""
        count += 1
        if count > MAX_TABLE_VALUES:
            ctx.fail(clause, f"{at}more than {MAX_TABLE_VALUES} values in one table")
        if isinstance(v, (dict, list)) and depth > MAX_TABLE_DEPTH:
            ctx.fail(clause, f"{at}tables and arrays nested more than {MAX_TABLE_DEPTH} deep")
        if isinstance(v, dict):
            for k, item in v.items():
                if not isinstance(k, str) or utf8_size(ctx, clause, k) > MAX_SHORTSTR:
                    ctx.fail(clause, f"{at}table key {show(k)} must be a string of at most "
                                     f"{MAX_SHORTSTR} bytes")
                check(item, f"{path}.{path_part(k)}" if path else path_part(k), depth + 1)
        elif isinstance(v, list):
            for i, item in enumerate(v):
                check(item, f"{path}[{i}]", depth + 1)
        elif isinstance(v, int) and not isinstance(v, bool):
            if not -INT64_BOUND <= v < INT64_BOUND:
                ctx.fail(clause, f"{at}integer {show(v)} does not fit in 64 bits")
        elif isinstance(v, str):
            size = utf8_size(ctx, clause, v)
            if size > MAX_TABLE_STRING:
                ctx.fail(clause, f"{at}a string of {size} bytes: at most {MAX_TABLE_STRING}")
        elif not (isinstance(v, (bool, float)) or v is None):
            ctx.fail(clause, f"{at}{show(v)} is not a JSON value")
        elif isinstance(v, float) and not math.isfinite(v):
            ctx.fail(clause, f"{at}{v} is not a finite number")

    check(table, "", 1)
    return dict(table)


def path_part(key: object) -> str:
    """A key as one step of a path in a message: shortened, so that a message stays a line."""
    text = "".join(c if c.isprintable() else "?" for c in str(key)[:40])
    return text if len(text) < 40 else text[:37] + "..."


def check_nesting(obj: object, source: str, limit: int = MAX_DOCUMENT_DEPTH) -> None:
    """Refuse a decoded document nested deeper than ``limit`` (objects and arrays), without
    recursion: every later step may then recurse safely.

    :raises ConfigError: naming the path of the first value found too deep, and the bound.
    """
    stack: list[tuple[object, tuple[str, ...], int]] = [(obj, (), 1)]
    while stack:
        value, path, depth = stack.pop()
        if depth > limit:
            shovel = clause = None
            steps = path
            if len(path) > 1 and path[0] == "shovels":
                shovel, steps = path[1], path[2:]
                if steps:
                    clause, steps = steps[0], steps[1:]
            where = "".join(s if s.startswith("[") or (not i and clause is None) else f".{s}"
                            for i, s in enumerate(steps)).lstrip(".")
            raise ConfigError(f"{'at ' + where + ': ' if where else ''}objects and arrays nested "
                              f"more than {limit} deep", source=source, shovel=shovel,
                              clause=clause)
        if isinstance(value, dict):
            children: Any = ((path_part(k), v) for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            children = ((f"[{i}]", v) for i, v in enumerate(value))
        else:
            continue
        for step, child in children:
            if isinstance(child, (dict, list, tuple)):
                stack.append((child, (*path, step), depth + 1))


def check_keys(ctx: Context, clause_prefix: str, obj: Mapping[str, Any], known: Sequence[str],
               what: str = "unknown clause") -> None:
    """Refuse the first key of ``obj`` not in ``known``, with a "did you mean" hint."""
    for key in obj:
        if key not in known:
            ctx.fail(f"{clause_prefix}{key}", f"{what}{suggest(key, known)}")


def enum_value(ctx: Context, clause: str, value: object, allowed: Sequence[str]) -> str:
    """``value`` as one of the strings ``allowed``."""
    if not isinstance(value, str) or value not in allowed:
        hint = suggest(value, allowed) if isinstance(value, str) else ""
        ctx.fail(clause, f"must be one of {', '.join(allowed)}, got {show(value)}{hint}")
    return value
