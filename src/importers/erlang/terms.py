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

The types in the table are :mod:`.types`' (exported here too); :mod:`.binary`
makes the bytes of binary segments, and :func:`format_term` (:mod:`.format`) writes a
term back.

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

from collections.abc import Callable
from typing import NoReturn

from ...config.limits import MAX_BINARY_BYTES
from .binary import Spec, encode_segment
from .format import format_term
from .lexer import MAX_CODE_POINT, RESERVED_WORDS, ErlangSyntaxError, Lexer, Token
from .types import Atom, ErlString, Term

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
        self._lexer = Lexer(text)
        self._token = self._lexer.next_token()
        self.positions: dict[int, tuple[int, int]] | None = {} if record_positions else None

    # -- helpers -----------------------------------------------------------------------------

    def _next(self) -> Token:
        token = self._token
        self._token = self._lexer.next_token()
        return token

    def _is(self, punct: str) -> bool:
        return self._token.kind == "punct" and self._token.value == punct

    def _error(self, reason: str, token: Token | None = None) -> NoReturn:
        token = token or self._token
        raise ErlangSyntaxError(reason, token.line, token.column)

    def _expected(self, what: str) -> NoReturn:
        self._error(f"expected {what}, found {self._token.describe()}")

    def _expect(self, punct: str, what: str) -> Token:
        if not self._is(punct):
            self._expected(what)
        return self._next()

    def _record(self, term: Term, token: Token) -> Term:
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
            if token.value in RESERVED_WORDS:
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

    def _separated(self, close: str, what: str, read_item: Callable[[], None]) -> None:
        """Items separated by ',' up to ``close``, which is consumed; ``read_item`` reads one.

        :param what: the enclosing term, for the message when neither ',' nor ``close`` follows
            an item ("a tuple").
        """
        if self._is(close):
            self._next()
            return
        while True:
            read_item()
            if self._is(","):
                self._next()
            elif self._is(close):
                self._next()
                return
            else:
                self._expected(f"',' or '{close}' in {what}")

    def _tuple(self, depth: int) -> Term:
        start = self._next()
        items: list[Term] = []
        self._separated("}", "a tuple", lambda: items.append(self._term(depth + 1)))
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

    def _join_tail(self, heads: list[Term], tail: Term, bar: Token, tail_token: Token) -> Term:
        """``[H1, H2 | Tail]`` with a proper-list tail, as the flat list it denotes."""
        if isinstance(tail, ErlString):
            # [$a | "bc"] is the string "abc" in Erlang; keep it a string when it still is one.
            if all(isinstance(h, int) and 0 <= h <= MAX_CODE_POINT for h in heads):
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

        def association() -> None:
            key_token = self._token
            key = self._term(depth + 1)
            try:
                hash(key)
            except TypeError:
                self._error("a map key must not contain lists or maps", key_token)
            self._expect("=>", "'=>' after a map key")
            result[key] = self._term(depth + 1)

        self._separated("}", "a map", association)
        return self._record(result, start)

    # -- binaries ----------------------------------------------------------------------------

    def _binary(self) -> bytes:
        start = self._next()  # '<<'
        out = bytearray()

        def segment() -> None:
            out.extend(self._segment())
            if len(out) > MAX_BINARY_BYTES:
                self._error(f"a binary of more than {MAX_BINARY_BYTES} bytes", start)

        self._separated(">>", "a binary", segment)
        return bytes(out)

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
        return encode_segment(value, size, self._segment_specs(), start)

    def _segment_specs(self) -> list[Spec]:
        """A segment's type specifiers: ``/utf8``, ``/unit:8-little``, or none."""
        specs: list[Spec] = []
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
        return specs


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
