"""A configuration's errors, where validation is, and the checks of single JSON values.

Every check raises :class:`ConfigError` through a :class:`_Ctx`, which names the file, the shovel
and the clause; the clauses (:mod:`.clauses`, :mod:`.dynamic`) and the whole file
(:mod:`.parse`) are built from these.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from .uri import redact

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


def _enum_value(ctx: _Ctx, clause: str, value: object, allowed: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in allowed:
        hint = _suggest(value, allowed) if isinstance(value, str) else ""
        ctx.fail(clause, f"must be one of {', '.join(allowed)}, got {_show(value)}{hint}")
    return value
