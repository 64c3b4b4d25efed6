"""A reader for Erlang terms as written in ``rabbitmq.config`` / ``advanced.config`` files.

The classic RabbitMQ configuration file is one Erlang term followed by a dot, read by the broker
with ``file:consult/1``. This module reads the same syntax without an Erlang runtime: a tokenizer
and a recursive-descent parser, no ``eval`` and no regular-expression shortcuts.

Python representation of each kind of term:

=====================  ==========================================================================
Erlang                 Python
=====================  ==========================================================================
atom ``foo``, ``'a b'``  :class:`Atom` (a ``str`` subclass). ``true`` / ``false`` stay atoms.
string ``"text"``      :class:`ErlString` (a ``str`` subclass). Adjacent strings are concatenated.
binary ``<<"x">>``     ``bytes``
integer, ``$c``, ``16#ff``  ``int``
float ``1.5e3``        ``float``
tuple ``{a, b}``       ``tuple``
list ``[a, b]``        ``list`` (``[H | T]`` with a proper-list tail is flattened)
map ``#{k => v}``      ``dict``
=====================  ==========================================================================

``Atom("x") == ErlString("x") == "x"`` as Python strings; tell them apart with ``isinstance``.
Erlang makes no difference between a string and a list of character codes; neither does the
reader beyond the literal syntax: ``"ab"`` gives an :class:`ErlString`, ``[97, 98]`` a list.

Binary segments support the forms that appear in configuration: string, character and integer
segments, ``Value:Size``, and the type specifiers ``integer``, ``float``, ``utf8``, ``utf16``,
``utf32``, ``signed``, ``unsigned``, ``big``, ``little``, ``native`` and ``unit:N``. Where Erlang
would silently truncate a value to fit a segment (``<<300>>``, or ``<<"é">>``-style characters
above 255 without ``/utf8``), the reader refuses with an error instead: in a configuration file
that is always a mistake.

Every syntax error is an :class:`ErlangSyntaxError` carrying the 1-based line and column of the
offending character and what was expected there.
"""

from __future__ import annotations

import struct
import sys
from typing import Literal, NoReturn, TypeAlias

from ..config.limits import MAX_BINARY_BYTES
from .erlang_lexer import (
    _MAX_CODE_POINT,
    _RESERVED,
    ErlangSyntaxError,
    _is_lower,
    _is_name_char,
    _Lexer,
    _Token,
)

__all__ = [
    "Atom",
    "ErlString",
    "ErlangSyntaxError",
    "Positions",
    "Term",
    "format_term",
    "parse_term",
    "parse_term_with_positions",
    "parse_terms",
]


class Atom(str):
    """An Erlang atom. Compares equal to a ``str`` with the same text."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Atom({str.__repr__(self)})"


class ErlString(str):
    """An Erlang string literal (``"..."``). Compares equal to a ``str`` with the same text."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"ErlString({str.__repr__(self)})"


Term: TypeAlias = (
    Atom
    | ErlString
    | bytes
    | int
    | float
    | tuple["Term", ...]
    | list["Term"]
    | dict["Term", "Term"]
)
"""Any term the reader can produce."""


# nesting limit: far beyond any configuration, well within Python's stack
_MAX_DEPTH = 200


# --------------------------------------------------------------------------------------------
# Parser


class Positions:
    """Where the terms of one parse started in the text (1-based line and column).

    Recorded for lists, non-empty tuples, maps, atoms and strings; ``of`` returns ``None`` for
    anything else (integers, floats, binaries, ``()``), so callers fall back to an enclosing
    term. Holds a reference to the parsed term, which keeps the identity-based table valid.
    """

    def __init__(self, table: dict[int, tuple[int, int]], root: object) -> None:
        self._table = table
        self._root = root

    def of(self, term: object) -> tuple[int, int] | None:
        """The (line, column) where ``term`` starts, if it was recorded."""
        return self._table.get(id(term))


class _Parser:
    def __init__(self, text: str, *, record_positions: bool = False) -> None:
        self._lexer = _Lexer(text)
        self._token = self._lexer.next_token()
        self.positions: dict[int, tuple[int, int]] | None = {} if record_positions else None

    # -- helpers -----------------------------------------------------------------------------

    def _next(self) -> _Token:
        token = self._token
        self._token = self._lexer.next_token()
        return token

    def _is(self, punct: str) -> bool:
        return self._token.kind == "punct" and self._token.value == punct

    def _error(self, reason: str, token: _Token | None = None) -> NoReturn:
        token = token or self._token
        raise ErlangSyntaxError(reason, token.line, token.column)

    def _expected(self, what: str) -> NoReturn:
        self._error(f"expected {what}, found {self._token.describe()}")

    def _expect(self, punct: str, what: str) -> _Token:
        if not self._is(punct):
            self._expected(what)
        return self._next()

    def _record(self, term: Term, token: _Token) -> Term:
        # () is a shared object in CPython, so it has no identity of its own to record.
        if (
            self.positions is not None
            and isinstance(term, (list, tuple, dict, Atom, ErlString))
            and term != ()
        ):
            self.positions[id(term)] = (token.line, token.column)
        return term

    # -- entry points ------------------------------------------------------------------------

    def parse_one(self) -> Term:
        term = self._term(0)
        if self._token.kind == "dot":
            self._next()
            if self._token.kind != "eof":
                self._expected("end of input after the terminating '.'")
        elif self._token.kind != "eof":
            self._expected("'.' or end of input after the term")
        return term

    def parse_all(self) -> list[Term]:
        terms: list[Term] = []
        while self._token.kind != "eof":
            terms.append(self._term(0))
            if self._token.kind == "dot":
                self._next()
            elif self._token.kind != "eof":
                self._expected("'.' after the term")
        return terms

    # -- terms -------------------------------------------------------------------------------

    def _term(self, depth: int) -> Term:
        if depth > _MAX_DEPTH:
            self._error(f"terms are nested more than {_MAX_DEPTH} deep")
        token = self._token
        kind = token.kind
        if kind == "punct":
            if token.value == "{":
                return self._tuple(depth)
            if token.value == "[":
                return self._list(depth)
            if token.value == "<<":
                return self._binary()
            if token.value == "#":
                return self._map(depth)
            if token.value in ("-", "+"):
                return self._signed_number()
        elif kind in ("int", "float"):
            self._next()
            assert isinstance(token.value, (int, float))
            return token.value
        elif kind == "string":
            return self._record(ErlString(self._strings()), token)
        elif kind == "atom":
            self._next()
            assert isinstance(token.value, str)
            if token.value in _RESERVED:
                self._error(
                    f"'{token.value}' is a reserved word; write it as '{token.value}' "
                    "(quoted) to use it as an atom",
                    token,
                )
            return self._record(Atom(token.value), token)
        elif kind == "qatom":
            self._next()
            assert isinstance(token.value, str)
            return self._record(Atom(token.value), token)
        elif kind == "var":
            self._error(
                f"expected a term, found variable {token.text} (a term cannot contain "
                f"variables; write '{token.text}' for an atom)"
            )
        self._expected("a term")

    def _strings(self) -> str:
        """One string token, or several adjacent ones (Erlang concatenates them)."""
        parts: list[str] = []
        while self._token.kind == "string":
            value = self._next().value
            assert isinstance(value, str)
            parts.append(value)
        return "".join(parts)

    def _signed_number(self) -> int | float:
        sign = self._next()
        token = self._token
        if token.kind not in ("int", "float"):
            self._error(f"expected a number after '{sign.value}', found {token.describe()}", token)
        self._next()
        assert isinstance(token.value, (int, float))
        return -token.value if sign.value == "-" else token.value

    def _tuple(self, depth: int) -> Term:
        start = self._next()
        items: list[Term] = []
        if not self._is("}"):
            while True:
                items.append(self._term(depth + 1))
                if self._is(","):
                    self._next()
                elif self._is("}"):
                    break
                else:
                    self._expected("',' or '}' in a tuple")
        self._next()
        return self._record(tuple(items), start)

    def _list(self, depth: int) -> Term:
        start = self._next()
        items: list[Term] = []
        if self._is("]"):
            self._next()
            return self._record(items, start)
        while True:
            items.append(self._term(depth + 1))
            if self._is(","):
                self._next()
            elif self._is("|"):
                bar = self._next()
                tail_token = self._token
                tail = self._term(depth + 1)
                self._expect("]", "']' after the tail of a list")
                return self._record(self._join_tail(items, tail, bar, tail_token), start)
            elif self._is("]"):
                self._next()
                return self._record(items, start)
            else:
                self._expected("',', '|' or ']' in a list")

    def _join_tail(self, heads: list[Term], tail: Term, bar: _Token, tail_token: _Token) -> Term:
        """``[H1, H2 | Tail]`` with a proper-list tail, as the flat list it denotes."""
        if isinstance(tail, ErlString):
            # [$a | "bc"] is the string "abc" in Erlang; keep it a string when it still is one.
            if all(isinstance(h, int) and 0 <= h <= _MAX_CODE_POINT for h in heads):
                return ErlString("".join(chr(h) for h in heads if isinstance(h, int)) + tail)
            return heads + [ord(c) for c in tail]
        if isinstance(tail, list):
            return heads + tail
        self._error(
            f"the tail after '|' must be a proper list, found {format_term(tail, 40)} "
            "(improper lists are not supported)",
            tail_token,
        )

    def _map(self, depth: int) -> Term:
        start = self._next()
        self._expect("{", "'{' after '#' (a map is written #{Key => Value, ...})")
        result: dict[Term, Term] = {}
        if not self._is("}"):
            while True:
                key_token = self._token
                key = self._term(depth + 1)
                try:
                    hash(key)
                except TypeError:
                    self._error("a map key must not contain lists or maps", key_token)
                self._expect("=>", "'=>' after a map key")
                result[key] = self._term(depth + 1)
                if self._is(","):
                    self._next()
                elif self._is("}"):
                    break
                else:
                    self._expected("',' or '}' in a map")
        self._next()
        return self._record(result, start)

    # -- binaries ----------------------------------------------------------------------------

    def _binary(self) -> bytes:
        start = self._next()  # '<<'
        out = bytearray()
        if self._is(">>"):
            self._next()
            return bytes(out)
        while True:
            out += self._segment()
            if len(out) > MAX_BINARY_BYTES:
                self._error(f"a binary of more than {MAX_BINARY_BYTES} bytes", start)
            if self._is(","):
                self._next()
            elif self._is(">>"):
                self._next()
                return bytes(out)
            else:
                self._expected("',' or '>>' in a binary")

    def _segment(self) -> bytes:
        start = self._token
        value: str | int | float
        if start.kind == "string":
            value = self._strings()
        elif start.kind in ("int", "float"):
            self._next()
            assert isinstance(start.value, (int, float))
            value = start.value
        elif self._is("-") or self._is("+"):
            value = self._signed_number()
        else:
            self._expected("a string or a number as a binary segment")

        size: int | None = None
        if self._is(":"):
            self._next()
            size_token = self._token
            if size_token.kind != "int":
                self._expected("a segment size (an integer) after ':'")
            self._next()
            assert isinstance(size_token.value, int)
            size = size_token.value

        specs: list[tuple[str, int | None, _Token]] = []
        if self._is("/"):
            self._next()
            while True:
                spec_token = self._token
                if spec_token.kind != "atom":
                    self._expected("a type specifier (e.g. utf8, integer, little)")
                self._next()
                assert isinstance(spec_token.value, str)
                argument: int | None = None
                if self._is(":"):
                    self._next()
                    arg_token = self._token
                    if arg_token.kind != "int":
                        self._expected(f"an integer after '{spec_token.value}:'")
                    self._next()
                    assert isinstance(arg_token.value, int)
                    argument = arg_token.value
                specs.append((spec_token.value, argument, spec_token))
                if self._is("-"):
                    self._next()
                else:
                    break
        return _encode_segment(value, size, specs, start)


def _encode_segment(
    value: str | float,
    size: int | None,
    specs: list[tuple[str, int | None, _Token]],
    where: _Token,
) -> bytes:
    """The bytes of one binary segment (see the module docstring for what is supported)."""

    def fail(reason: str, token: _Token = where) -> NoReturn:
        raise ErlangSyntaxError(reason, token.line, token.column)

    seg_type = "integer"
    endian: Literal["big", "little"] = "big"
    unit: int | None = None
    for name, argument, token in specs:
        if name == "unit":
            if argument is None or not 1 <= argument <= 256:
                fail("unit needs a value 1..256, e.g. unit:8", token)
            unit = argument
            continue
        if argument is not None:
            fail(f"type specifier '{name}' takes no ':' argument", token)
        if name in ("integer", "float", "utf8", "utf16", "utf32"):
            seg_type = name
        elif name in ("signed", "unsigned"):
            pass  # only matters when matching a binary, not when building one
        elif name == "big":
            endian = "big"
        elif name == "little":
            endian = "little"
        elif name == "native":
            endian = sys.byteorder
        elif name in ("binary", "bytes", "bitstring", "bits"):
            fail(f"'{name}' segments are not supported in a literal term", token)
        else:
            fail(f"unknown binary type specifier '{name}'", token)

    if seg_type.startswith("utf"):
        if size is not None or unit is not None:
            fail(f"a {seg_type} segment takes no size or unit")
        codec = {"utf8": "utf-8", "utf16": "utf-16", "utf32": "utf-32"}[seg_type]
        if codec != "utf-8":
            codec += "-be" if endian == "big" else "-le"
        if isinstance(value, float):
            fail(f"a {seg_type} segment needs a character or a string, not a float")
        chars = value if isinstance(value, str) else [value]
        out = bytearray()
        for ch in chars:
            code = ord(ch) if isinstance(ch, str) else ch
            if not 0 <= code <= _MAX_CODE_POINT or 0xD800 <= code <= 0xDFFF:
                fail(f"{code} is not a Unicode scalar value ({seg_type} segment)")
            out += chr(code).encode(codec)
        return bytes(out)

    bits = (size if size is not None else (64 if seg_type == "float" else 8)) * (unit or 1)
    if bits > MAX_BINARY_BYTES * 8:  # before anything of that size is made
        fail(f"a segment of {bits} bits: a binary holds at most {MAX_BINARY_BYTES} bytes")
    if bits % 8:
        fail(f"a segment of {bits} bits is not whole bytes (bitstrings are not supported)")
    width = bits // 8

    if seg_type == "float":
        if isinstance(value, str):
            fail("a float segment needs a number, not a string")
        formats = {2: "e", 4: "f", 8: "d"}
        if width not in formats:
            fail(f"a float segment must be 16, 32 or 64 bits, not {bits}")
        try:
            return struct.pack((">" if endian == "big" else "<") + formats[width], float(value))
        except (OverflowError, struct.error):
            fail(f"{value} does not fit in a {bits}-bit float")

    if isinstance(value, float):
        fail("a float in a binary needs the /float type specifier")
    integers = [ord(c) for c in value] if isinstance(value, str) else [value]
    out = bytearray()
    low = -(1 << (bits - 1)) if bits else 0  # accept anything that fits signed or unsigned
    high = (1 << bits) - 1
    for integer in integers:
        if not low <= integer <= high:
            what = f"character {chr(integer)!r} ({integer})" if isinstance(value, str) else integer
            hint = ' (write <<"..."/utf8>> for non-Latin-1 text)' if isinstance(value, str) else ""
            fail(f"{what} does not fit in a segment of {bits} bits{hint}")
        if width:
            out += (integer & high).to_bytes(width, endian)
    return bytes(out)


# --------------------------------------------------------------------------------------------
# Public API


def parse_term(text: str) -> Term:
    """Read one term, optionally followed by its terminating dot, as in a config file.

    :param text: the whole text; comments (``%`` to end of line) and white space are allowed
        anywhere between tokens.
    :raises ErlangSyntaxError: the text is not exactly one well-formed term.
    """
    return _Parser(text).parse_one()


def parse_term_with_positions(text: str) -> tuple[Term, Positions]:
    """Like :func:`parse_term`, and also tell where each list, tuple, map, atom and string began.

    :raises ErlangSyntaxError: the text is not exactly one well-formed term.
    """
    parser = _Parser(text, record_positions=True)
    term = parser.parse_one()
    assert parser.positions is not None
    return term, Positions(parser.positions, term)


def parse_terms(text: str) -> list[Term]:
    """Read a sequence of dot-terminated terms, as ``file:consult/1`` does.

    The dot after the last term may be left out.

    :raises ErlangSyntaxError: on the first malformed term.
    """
    return _Parser(text).parse_all()


def _atom_needs_quotes(name: str) -> bool:
    if not name or not _is_lower(name[0]) or name in _RESERVED:
        return True
    return not all(_is_name_char(c) for c in name)


def _quote(text: str, quote: str) -> str:
    out = [quote]
    for c in text:
        if c == quote or c == "\\":
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif c < " " or c == "\x7f":
            out.append(f"\\x{{{ord(c):X}}}")
        else:
            out.append(c)
    out.append(quote)
    return "".join(out)


def _format(term: object) -> str:
    if isinstance(term, Atom):
        return _quote(term, "'") if _atom_needs_quotes(term) else str(term)
    if isinstance(term, str):
        return _quote(term, '"')
    if isinstance(term, (bytes, bytearray)):
        if not term:
            return "<<>>"
        try:
            text = term.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None and all(c >= " " and c != "\x7f" for c in text):
            suffix = "" if text.isascii() else "/utf8"
            return f"<<{_quote(text, chr(34))}{suffix}>>"
        return "<<" + ",".join(str(b) for b in term) + ">>"
    if isinstance(term, bool):
        return "true" if term else "false"
    if isinstance(term, int):
        return str(term)
    if isinstance(term, float):
        text = repr(term)
        if "." not in text and "e" in text:
            mantissa, exponent = text.split("e")
            text = f"{mantissa}.0e{exponent}"
        return text
    if isinstance(term, tuple):
        return "{" + ", ".join(_format(t) for t in term) + "}"
    if isinstance(term, list):
        return "[" + ", ".join(_format(t) for t in term) + "]"
    if isinstance(term, dict):
        return "#{" + ", ".join(f"{_format(k)} => {_format(v)}" for k, v in term.items()) + "}"
    return repr(term)


def format_term(term: object, limit: int | None = None) -> str:
    """Write ``term`` in Erlang syntax (the inverse of :func:`parse_term`), for messages.

    :param limit: if given, shorten the result to about that many characters with ``...``.
    """
    text = _format(term)
    if limit is not None and len(text) > limit:
        text = text[: max(limit - 3, 1)] + "..."
    return text
