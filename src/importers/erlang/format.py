"""Erlang terms written back in Erlang syntax, for messages: the inverse of the reader
(:mod:`.terms`)."""

from __future__ import annotations

from .lexer import RESERVED_WORDS, is_lower, is_name_char
from .types import Atom

__all__ = ["format_term"]


def _atom_needs_quotes(name: str) -> bool:
    if not name or not is_lower(name[0]) or name in RESERVED_WORDS:
        return True
    return not all(is_name_char(c) for c in name)


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
    """Write ``term`` in Erlang syntax (the inverse of :func:`.terms.parse_term`), for
    messages.

    :param limit: if given, shorten the result to about that many characters with ``...``.
    """
    text = _format(term)
    if limit is not None and len(text) > limit:
        text = text[: max(limit - 3, 1)] + "..."
    return text
