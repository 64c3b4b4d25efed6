"""Values of an Erlang-terms config read as pumpd's JSON: property lists, text, booleans,
integers in range, AMQP fields by their type and the Erlang client's typed field tables.

:class:`TermReader` is what :mod:`.shovels` walks the ``rabbitmq_shovel`` clause with; every
failure is a :class:`~pumpd.importers.import_errors.ConfigImportError` at the term's line and column.
"""

from __future__ import annotations

from typing import NoReturn

from ...config.vocabulary import BIT, LONGLONG, OCTET, SHORTSTR, TABLE
from ..import_errors import JSON, ConfigImportError
from .terms import Atom, ErlString, Positions, Term, format_term

# The deprecated `ticket` field of the declaration methods, which brokers ignore, is accepted
# and left out of the output (the vocabulary's field lists leave it out).
_DROPPED_FIELDS = ("ticket",)
# basic.publish fields the importer refuses, and why.
_REFUSED_PUBLISH_FIELDS = {
    "immediate": "RabbitMQ does not support immediate (it closes the connection); remove the field",
}

_UNSIGNED_RANGES = {OCTET: 0xFF, LONGLONG: (1 << 64) - 1}

# AMQP field-table value types of the Erlang client (rabbit_binary_generator), with the integer
# range of each integer type.
_TABLE_INT_RANGES = {
    "byte": (-(1 << 7), (1 << 7) - 1),
    "unsignedbyte": (0, (1 << 8) - 1),
    "short": (-(1 << 15), (1 << 15) - 1),
    "unsignedshort": (0, (1 << 16) - 1),
    "signedint": (-(1 << 31), (1 << 31) - 1),
    "unsignedint": (0, (1 << 32) - 1),
    "long": (-(1 << 63), (1 << 63) - 1),
    "timestamp": (0, (1 << 64) - 1),
}
_TABLE_TYPES = (
    "longstr", "binary", "bool", "float", "double", "decimal", "table", "array", "void",
    *_TABLE_INT_RANGES,
)  # fmt: skip

Pair = tuple[str, Term, Term]  # (key, value, the item it came from -- for error positions)


class TermReader:
    """Reads typed values out of a parsed term; every failure names where it is in the file."""

    def __init__(self, positions: Positions, source: str) -> None:
        self._positions = positions
        self._source = source
        self.warnings: list[str] = []

    def warn(self, message: str, *at: object) -> None:
        for term in at:
            position = self._positions.of(term)
            if position is not None:
                self.warnings.append(f"{self._source}:{position[0]}:{position[1]}: {message}")
                return
        self.warnings.append(f"{self._source}: {message}")

    def fail(self, reason: str, *at: object) -> NoReturn:
        """Raise, positioned at the first of ``at`` whose position is known."""
        for term in at:
            position = self._positions.of(term)
            if position is not None:
                raise ConfigImportError(
                    reason, source=self._source, line=position[0], column=position[1]
                )
        raise ConfigImportError(reason, source=self._source)

    def _list(self, ctx: str, value: Term, item: Term, expected: str) -> list[Term]:
        """``value`` as an Erlang list (``""`` is ``[]`` in Erlang), or fail naming ``expected``."""
        if isinstance(value, ErlString) and not value:
            return []
        if not isinstance(value, list):
            self.fail(f"{ctx}: expected {expected}, found {format_term(value, 60)}", value, item)
        return value

    def _fields(
        self, ctx: str, value: Term, item: Term, types: dict[str, str], what: str
    ) -> dict[str, JSON]:
        """A property list of named AMQP fields, each converted by its type."""
        out: dict[str, JSON] = {}
        for key, sub, sub_item in self._proplist(value, ctx, item):
            if key in _DROPPED_FIELDS:
                continue  # deprecated, ignored by the broker
            if what == "basic.publish" and key in _REFUSED_PUBLISH_FIELDS:
                self.fail(f"{ctx}: {key}: {_REFUSED_PUBLISH_FIELDS[key]}", sub_item)
            if key not in types:
                of = f" of {what}" if what else ""
                self.fail(
                    f"{ctx}: unknown field '{key}'{of} (expected one of {', '.join(types)})",
                    sub_item,
                )
            field_ctx = f"{ctx}: {key}"
            kind = types[key]
            if kind == SHORTSTR:
                out[key] = self._text(field_ctx, sub, sub_item)
            elif kind == BIT:
                out[key] = self._bool(field_ctx, sub, sub_item)
            elif kind == TABLE:
                out[key] = self._table(field_ctx, sub, sub_item)
            else:
                out[key] = self._int(field_ctx, sub, sub_item, 0, _UNSIGNED_RANGES[kind])
        return out

    # -- AMQP tables -------------------------------------------------------------------------

    def _table(self, ctx: str, value: Term, item: Term) -> dict[str, JSON]:
        """``[{Name, Type, Value}, ...]`` as the Erlang client writes a field table."""
        value = self._list(ctx, value, item, "a field table [{Name, Type, Value}, ...]")
        out: dict[str, JSON] = {}
        for entry in value:
            if not (isinstance(entry, tuple) and len(entry) == 3):
                self.fail(
                    f'{ctx}: expected a typed table entry {{<<"name">>, Type, Value}}, found '
                    f"{format_term(entry, 60)}",
                    entry,
                    value,
                    item,
                )
            name = self._text(ctx, entry[0], entry, what="a binary name")
            if name in out:
                self.fail(f"{ctx}: the table has the key {name!r} twice", entry, value, item)
            out[name] = self._typed_value(f"{ctx}: {name}", entry[1], entry[2], entry)
        return out

    def _typed_value(self, ctx: str, type_: Term, value: Term, item: Term) -> JSON:
        """One AMQP table value given as ``Type, Value`` (see ``rabbit_binary_generator``)."""
        if not (isinstance(type_, Atom) and type_ in _TABLE_TYPES):
            self.fail(
                f"{ctx}: unknown field type {format_term(type_, 30)} (expected one of "
                f"{', '.join(_TABLE_TYPES)})",
                type_,
                item,
            )
        found = format_term(value, 40)
        if type_ in ("longstr", "binary"):
            return self._text(ctx, value, item, what=f"a binary for type {type_}")
        if type_ in _TABLE_INT_RANGES:
            low, high = _TABLE_INT_RANGES[type_]
            return self._int(ctx, value, item, low, high, what=f"an integer of type {type_}")
        if type_ == "bool":
            return self._bool(ctx, value, item)
        if type_ in ("float", "double"):
            if isinstance(value, (int, float)):
                return float(value)
            self.fail(f"{ctx}: expected a number of type {type_}, found {found}", value, item)
        if type_ == "decimal":
            # The Erlang client writes a decimal as {Scale, Unscaled}: Unscaled / 10^Scale.
            # JSON has no decimal type, so the value is written as a number.
            if isinstance(value, tuple) and len(value) == 2:
                scale, unscaled = value
                if (
                    isinstance(scale, int)
                    and isinstance(unscaled, int)
                    and 0 <= scale <= 255
                    and -(1 << 31) <= unscaled < (1 << 31)
                ):
                    return unscaled if scale == 0 else unscaled / 10**scale
            self.fail(f"{ctx}: expected a decimal {{Scale, Value}}, found {found}", value, item)
        if type_ == "table":
            return self._table(ctx, value, item)
        if type_ == "array":
            return self._array(ctx, value, item)
        assert type_ == "void"
        return None

    def _array(self, ctx: str, value: Term, item: Term) -> list[JSON]:
        value = self._list(ctx, value, item, "an array [{Type, Value}, ...]")
        out: list[JSON] = []
        for index, entry in enumerate(value):
            if not (isinstance(entry, tuple) and len(entry) == 2):
                self.fail(
                    f"{ctx}: expected a typed array element {{Type, Value}}, found "
                    f"{format_term(entry, 60)}",
                    entry,
                    value,
                    item,
                )
            out.append(self._typed_value(f"{ctx}[{index}]", entry[0], entry[1], entry))
        return out

    # -- scalars and property lists ----------------------------------------------------------

    def _proplist(self, value: Term, ctx: str, item: Term) -> list[Pair]:
        """``[{key, Value}, bare_atom, ...]``: a bare atom means ``{atom, true}``.

        Keys must be atoms and may appear only once.
        """
        value = self._list(ctx, value, item, "a property list [{Key, Value}, ...]")
        pairs: list[Pair] = []
        seen: set[str] = set()
        for entry in value:
            sub: Term
            if isinstance(entry, Atom):
                key, sub = str(entry), Atom("true")
            elif isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], Atom):
                key, sub = str(entry[0]), entry[1]
            else:
                self.fail(
                    f"{ctx}: expected {{key, Value}} or an atom, found {format_term(entry, 60)}",
                    entry,
                    value,
                    item,
                )
            if key in seen:
                self.fail(f"{ctx}: '{key}' is given twice", entry, value, item)
            seen.add(key)
            pairs.append((key, sub, entry))
        return pairs

    def _text(self, ctx: str, value: Term, item: Term, *, what: str = "a binary or string") -> str:
        """A binary (UTF-8) or a string (a character list) as a Python string."""
        if isinstance(value, bytes):
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError:
                self.fail(
                    f"{ctx}: the binary {format_term(value, 40)} is not valid UTF-8 (write "
                    'non-ASCII text as <<"..."/utf8>>)',
                    item,
                )
        if isinstance(value, ErlString):
            return str(value)
        if isinstance(value, list) and all(
            isinstance(c, int) and 0 <= c <= 0x10FFFF and not 0xD800 <= c <= 0xDFFF for c in value
        ):
            return "".join(chr(c) for c in value if isinstance(c, int))
        self.fail(f"{ctx}: expected {what}, found {format_term(value, 40)}", value, item)

    def _bool(self, ctx: str, value: Term, item: Term) -> bool:
        if isinstance(value, Atom) and value in ("true", "false"):
            return value == "true"
        self.fail(f"{ctx}: expected true or false, found {format_term(value, 40)}", value, item)

    def _int(
        self,
        ctx: str,
        value: Term,
        item: Term,
        low: int,
        high: int,
        *,
        what: str = "an integer",
    ) -> int:
        if isinstance(value, int) and low <= value <= high:
            return value
        if isinstance(value, int):
            self.fail(f"{ctx}: {value} is out of range {low}..{high}", item)
        self.fail(f"{ctx}: expected {what}, found {format_term(value, 40)}", value, item)
