"""The tokenizer of the Erlang term reader (:mod:`.terms`): characters to tokens.

Tokens carry their 1-based line and column, so that every :class:`ErlangSyntaxError`, raised
here or by the parser, says where the offending character is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NoReturn

from ...config.limits import MAX_INTEGER_DIGITS


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
RESERVED_WORDS = frozenset(
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

MAX_CODE_POINT = 0x10FFFF  # the largest Unicode code point


def _is_whitespace(c: str) -> bool:
    # erl_scan: everything up to and including space, and Latin-1 128..160, is white space.
    return c <= " " or "\x80" <= c <= "\xa0"


def is_lower(c: str) -> bool:
    # Erlang atoms start with a lowercase letter: a-z or Latin-1 223..255 except 247 (division).
    return "a" <= c <= "z" or ("\xdf" <= c <= "\xff" and c != "\xf7")


def _is_upper(c: str) -> bool:
    return "A" <= c <= "Z" or ("\xc0" <= c <= "\xde" and c != "\xd7")


def is_name_char(c: str) -> bool:
    """A character an unquoted atom or a variable may hold after its first."""
    return is_lower(c) or _is_upper(c) or "0" <= c <= "9" or c in "_@"


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
class Token:
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


class Lexer:
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

    def next_token(self) -> Token:
        self._skip_blanks()
        line, column, start = self.line, self.column, self.pos
        if self.pos >= len(self.text):
            return Token("eof", "", line, column, "")
        c = self.text[self.pos]

        def token(kind: str, value: str | float) -> Token:
            return Token(kind, value, line, column, self.text[start : self.pos])

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
        if is_lower(c):
            while self.pos < len(self.text) and is_name_char(self.text[self.pos]):
                self._advance()
            return token("atom", self.text[start : self.pos])
        if _is_upper(c) or c == "_":
            while self.pos < len(self.text) and is_name_char(self.text[self.pos]):
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

    def _digits(self, base: int, what: str, line: int, column: int) -> str:
        """Digits of ``base`` with single underscores between them; returns them without ``_``.

        At most :data:`MAX_INTEGER_DIGITS` of them: int() of a longer string is refused or slow
        (CPython's int_max_str_digits), and no configuration value is that long.
        """
        out: list[str] = []
        while True:
            c = self._peek()
            if c and _digit_value(c) < base:
                if len(out) == MAX_INTEGER_DIGITS:
                    self._error(f"a number of more than {MAX_INTEGER_DIGITS} digits", line,
                                column)
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
        digits = self._digits(10, "a digit", line, column)
        if self._peek() == "#":
            base = int(digits)
            if not 2 <= base <= 36:
                self._error(f"radix {digits[:8]} is out of range: it must be 2..36", line, column)
            self._advance()
            return "int", int(self._digits(base, f"a base-{base} digit after '{base}#'", line,
                                           column), base)
        if self._peek() == "." and "0" <= self._peek(1) <= "9":
            self._advance()
            fraction = self._digits(10, "a digit", line, column)
            exponent = ""
            if self._peek() in ("e", "E"):
                # Only an exponent if digits follow: "1.5e" is the float 1.5 and the atom e.
                has_sign = self._peek(1) in ("+", "-")
                first_digit = self._peek(2 if has_sign else 1)
                if first_digit and "0" <= first_digit <= "9":
                    self._advance()
                    exponent = "e" + (self._advance() if has_sign else "")
                    exponent += self._digits(10, "a digit in the exponent", line, column)
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
                while self._peek() and _digit_value(self._peek()) < 16 and len(hex_digits) < 8:
                    hex_digits += self._advance()
                if not hex_digits or self._peek() != "}":
                    self._error("expected hexadecimal digits and '}' in a \\x{...} escape")
                self._advance()
                value = int(hex_digits, 16)
                if value > MAX_CODE_POINT or 0xD800 <= value <= 0xDFFF:
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
