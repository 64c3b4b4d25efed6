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

import math
import struct
import sys
from dataclasses import dataclass
from typing import Literal, NoReturn, TypeAlias

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


class ErlangSyntaxError(ValueError):
    """The text is not a well-formed Erlang term.

    :ivar line: 1-based line of the offending character.
    :ivar column: 1-based column (in characters) of the offending character.
    :ivar reason: what went wrong, without the position (e.g. ``expected ',' or '}' ...``).
    """

    def __init__(self, reason: str, line: int, column: int) -> None:
        super().__init__(f"line {line}, column {column}: {reason}")
        self.reason = reason
        self.line = line
        self.column = column


# Reserved words of Erlang: written bare they are not atoms (file:consult rejects them).
# 'maybe' and 'else' are only reserved with the maybe_expr feature, so they stay plain atoms.
_RESERVED = frozenset(
    [
        "after",
        "and",
        "andalso",
        "band",
        "begin",
        "bnot",
        "bor",
        "bsl",
        "bsr",
        "bxor",
        "case",
        "catch",
        "cond",
        "div",
        "end",
        "fun",
        "if",
        "let",
        "not",
        "of",
        "or",
        "orelse",
        "receive",
        "rem",
        "try",
        "when",
        "xor",
    ]
)

# Single-letter escapes (after a backslash) and the code point each stands for.
_SIMPLE_ESCAPES = {
    "b": 8,
    "d": 127,
    "e": 27,
    "f": 12,
    "n": 10,
    "r": 13,
    "s": 32,
    "t": 9,
    "v": 11,
}

_MAX_DEPTH = 200  # nesting limit: far beyond any configuration, well within Python's stack
_MAX_CODE_POINT = 0x10FFFF


def _is_whitespace(c: str) -> bool:
    # erl_scan: everything up to and including space, and Latin-1 128..160, is white space.
    return c <= " " or "\x80" <= c <= "\xa0"


def _is_lower(c: str) -> bool:
    # Erlang atoms start with a lowercase letter: a-z or Latin-1 223..255 except 247 (division).
    return "a" <= c <= "z" or ("\xdf" <= c <= "\xff" and c != "\xf7")


def _is_upper(c: str) -> bool:
    return "A" <= c <= "Z" or ("\xc0" <= c <= "\xde" and c != "\xd7")


def _is_name_char(c: str) -> bool:
    return _is_lower(c) or _is_upper(c) or "0" <= c <= "9" or c in "_@"


def _digit_value(c: str) -> int:
    """Value of ``c`` as a digit in bases up to 36, or 99 if it is not a digit."""
    if "0" <= c <= "9":
        return ord(c) - ord("0")
    if "a" <= c <= "z":
        return ord(c) - ord("a") + 10
    if "A" <= c <= "Z":
        return ord(c) - ord("A") + 10
    return 99


# --------------------------------------------------------------------------------------------
# Tokens


@dataclass(frozen=True)
class _Token:
    """One lexical token.

    ``kind`` is one of ``atom`` (value: the name), ``qatom`` (quoted atom), ``var``, ``string``
    (value: the decoded text), ``int`` (``$c`` literals included), ``float``, ``punct`` (value:
    the punctuation, e.g. ``<<``), ``dot`` (the terminating dot) and ``eof``.
    """

    kind: str
    value: str | int | float
    line: int
    column: int
    text: str  # the source text, for messages

    def describe(self) -> str:
        if self.kind == "eof":
            return "end of input"
        if self.kind == "dot":
            return "'.'"
        if self.kind in ("atom", "qatom"):
            return f"atom {_short(self.text)}"
        if self.kind == "var":
            return f"variable {self.text}"
        if self.kind == "string":
            return f"string {_short(self.text)}"
        if self.kind in ("int", "float"):
            return f"number {_short(self.text)}"
        return f"'{self.text}'"


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


_TWO_CHAR_PUNCT = ("<<", ">>", "=>", ":=")
_ONE_CHAR_PUNCT = "{}[](),|#-+/:<>="


class _Lexer:
    """Turns the text into tokens, one at a time, tracking line and column."""

    def __init__(self, text: str) -> None:
        text = text.removeprefix("\ufeff")
        self.text = text
        self.pos = 0
        self.line = 1
        self.column = 1

    # -- low level ---------------------------------------------------------------------------

    def _peek(self, offset: int = 0) -> str:
        i = self.pos + offset
        return self.text[i] if i < len(self.text) else ""

    def _advance(self) -> str:
        c = self.text[self.pos]
        self.pos += 1
        if c == "\n":
            self.line += 1
            self.column = 1
        else:
            self.column += 1
        return c

    def _error(self, reason: str, line: int | None = None, column: int | None = None) -> NoReturn:
        raise ErlangSyntaxError(
            reason, self.line if line is None else line, self.column if column is None else column
        )

    def _skip_blanks(self) -> None:
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if _is_whitespace(c):
                self._advance()
            elif c == "%":
                while self.pos < len(self.text) and self.text[self.pos] != "\n":
                    self._advance()
            else:
                return

    # -- tokens ------------------------------------------------------------------------------

    def next_token(self) -> _Token:
        self._skip_blanks()
        line, column, start = self.line, self.column, self.pos
        if self.pos >= len(self.text):
            return _Token("eof", "", line, column, "")
        c = self.text[self.pos]

        def token(kind: str, value: str | float) -> _Token:
            return _Token(kind, value, line, column, self.text[start : self.pos])

        if "0" <= c <= "9":
            kind, number = self._number()
            return token(kind, number)
        if c == "$":
            self._advance()
            if self.pos >= len(self.text):
                self._error("expected a character after '$'")
            if self._peek() == "\\":
                self._advance()
                return token("int", self._escape())
            return token("int", ord(self._advance()))
        if c == '"':
            return token("string", self._quoted('"', "string", line, column))
        if c == "'":
            return token("qatom", self._quoted("'", "quoted atom", line, column))
        if _is_lower(c):
            while self.pos < len(self.text) and _is_name_char(self.text[self.pos]):
                self._advance()
            return token("atom", self.text[start : self.pos])
        if _is_upper(c) or c == "_":
            while self.pos < len(self.text) and _is_name_char(self.text[self.pos]):
                self._advance()
            return token("var", self.text[start : self.pos])
        if c == ".":
            self._advance()
            following = self._peek()
            if following == "" or following == "%" or _is_whitespace(following):
                return token("dot", ".")
            return token("punct", ".")
        two = self.text[self.pos : self.pos + 2]
        if two in _TWO_CHAR_PUNCT:
            self._advance()
            self._advance()
            return token("punct", two)
        if c in _ONE_CHAR_PUNCT:
            self._advance()
            return token("punct", c)
        self._error(f"unexpected character {c!r}")

    def _digits(self, base: int, what: str) -> str:
        """Digits of ``base`` with single underscores between them; returns them without ``_``."""
        out: list[str] = []
        while True:
            c = self._peek()
            if c and _digit_value(c) < base:
                out.append(self._advance())
            elif c == "_" and out and self._peek(1) and _digit_value(self._peek(1)) < base:
                self._advance()
            else:
                break
        if not out:
            self._error(f"expected {what}")
        return "".join(out)

    def _number(self) -> tuple[str, int | float]:
        line, column = self.line, self.column
        digits = self._digits(10, "a digit")
        if self._peek() == "#":
            base = int(digits)
            if not 2 <= base <= 36:
                self._error(f"radix {base} is out of range: it must be 2..36", line, column)
            self._advance()
            return "int", int(self._digits(base, f"a base-{base} digit after '{base}#'"), base)
        if self._peek() == "." and "0" <= self._peek(1) <= "9":
            self._advance()
            fraction = self._digits(10, "a digit")
            exponent = ""
            if self._peek() in ("e", "E"):
                # Only an exponent if digits follow: "1.5e" is the float 1.5 and the atom e.
                has_sign = self._peek(1) in ("+", "-")
                first_digit = self._peek(2 if has_sign else 1)
                if first_digit and "0" <= first_digit <= "9":
                    self._advance()
                    exponent = "e" + (self._advance() if has_sign else "")
                    exponent += self._digits(10, "a digit in the exponent")
            value = float(f"{digits}.{fraction}{exponent}")
            if math.isinf(value):
                self._error("float literal is too large", line, column)
            return "float", value
        return "int", int(digits)

    def _escape(self) -> int:
        """The code point of an escape sequence; the backslash has been consumed."""
        line, column = self.line, self.column - 1
        if self.pos >= len(self.text):
            self._error("unterminated escape sequence", line, column)
        c = self._advance()
        if c in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[c]
        if "0" <= c <= "7":
            value = ord(c) - ord("0")
            for _ in range(2):
                if "0" <= self._peek() <= "7":
                    value = value * 8 + ord(self._advance()) - ord("0")
                else:
                    break
            return value
        if c == "x":
            if self._peek() == "{":
                self._advance()
                hex_digits = ""
                while self._peek() and _digit_value(self._peek()) < 16:
                    hex_digits += self._advance()
                if not hex_digits or self._peek() != "}":
                    self._error("expected hexadecimal digits and '}' in a \\x{...} escape")
                self._advance()
                value = int(hex_digits, 16)
                if value > _MAX_CODE_POINT or 0xD800 <= value <= 0xDFFF:
                    self._error(f"\\x{{{hex_digits}}} is not a Unicode scalar value", line, column)
                return value
            hex_digits = ""
            for _ in range(2):
                if self._peek() and _digit_value(self._peek()) < 16:
                    hex_digits += self._advance()
            if len(hex_digits) != 2:
                self._error("expected two hexadecimal digits after \\x (or \\x{...})")
            return int(hex_digits, 16)
        if c == "^":
            if self.pos >= len(self.text):
                self._error("expected a character after \\^")
            return ord(self._advance()) & 0x1F
        # Any other character stands for itself: \\ \" \' and also e.g. \z.
        return ord(c)

    def _quoted(self, quote: str, what: str, line: int, column: int) -> str:
        self._advance()  # the opening quote
        out: list[str] = []
        while True:
            if self.pos >= len(self.text):
                self._error(f"unterminated {what}: missing closing {quote}", line, column)
            c = self._advance()
            if c == quote:
                return "".join(out)
            if c == "\\":
                out.append(chr(self._escape()))
            else:
                out.append(c)


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
        self._next()  # '<<'
        out = bytearray()
        if self._is(">>"):
            self._next()
            return bytes(out)
        while True:
            out += self._segment()
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
