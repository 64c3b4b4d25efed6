"""JSON from outside the process, read one way: configuration files (``pumpd check``,
``pumpd --config``), the daemon's state file, ``PUT /api/shovels/NAME`` bodies and the
importers' inputs.

One reader, so that a definition means the same wherever it is written. What it refuses:

* input that is not UTF-8, or larger than its bound;
* anything that is not strict JSON (``NaN``, ``Infinity``, a trailing comma, ...);
* a key given twice in one object: which of the two would win is a guess, so neither does;
* an integer outside the signed 64-bit range: the widest integer AMQP carries (a field table's
  long-long, a timestamp) and the widest pumpd counts with. Every integer is kept exact, as a
  Python ``int``; none is turned into a float on the way;
* a number that is not finite (``1e400``): a float stays a float, a finite one;
* objects and arrays nested deeper than the bound (see :mod:`.limits`);
* a string or key holding a lone surrogate (``"\\ud800"``): it has no UTF-8 form, so nothing
  could write it on the wire or back into a file.

The standard library's parser does the reading (orjson keeps the last of duplicate keys
silently and turns a large integer into a float); the parser's hooks mark what is refused, and
one pass over the decoded tree, without recursion, reports the first mark with its path.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from .limits import MAX_DOCUMENT_DEPTH

__all__ = ["INT64_BOUND", "JsonInputError", "path_text", "read_json"]

# A signed 64-bit integer i (AMQP's long-long): -INT64_BOUND <= i < INT64_BOUND
INT64_BOUND = 2**63
_INT64_DIGITS = len(str(-INT64_BOUND))  # the longest literal that can fit, sign included

Step = str | int  # a key of an object, or an index of an array


class JsonInputError(Exception):
    """JSON that pumpd will not read.

    :ivar reason: what is wrong, in words (the key or value named, shortened).
    :ivar path: where in the document: the keys and indexes down to the value (for a key given
        twice, down to that key); empty for the document itself or a syntax error.
    :ivar line: 1-based line of a syntax error (None when the error has a path instead).
    :ivar column: 1-based column of a syntax error.

    ``str()`` is ``at PATH: REASON``, or ``line L, column C: REASON``.
    """

    def __init__(self, reason: str, path: Sequence[Step] = (), *, line: int | None = None,
                 column: int | None = None, duplicate: bool = False) -> None:
        self.reason = reason
        self.path = tuple(path)
        self.line = line
        self.column = column
        self.duplicate = duplicate  # a key given twice; the path ends with that key
        if line is not None:
            where = f"line {line}, column {column}: "
        elif self.path:
            where = f"at {path_text(self.path)}: "
        else:
            where = ""
        super().__init__(f"{where}{reason}")


def path_text(path: Sequence[Step]) -> str:
    """``("shovels", "a", "brokers", 0)`` as ``shovels.a.brokers[0]``, each key shortened."""
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{_key_text(step)}" if out
                                                          else _key_text(step))
    return out


def _key_text(key: str) -> str:
    text = "".join(c if c.isprintable() else "?" for c in key[:40])
    return text if len(text) < 40 else text[:37] + "..."


def _literal_text(text: str) -> str:
    """A number's literal for a message: in full when short, else its start and its length."""
    return text if len(text) <= 40 else f"{text[:24]}... ({len(text)} characters)"


class _Refused:
    """A value the parser's hooks met and the tree pass reports with its path."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class _Duplicated:
    """An object in which a key is given twice (the parser's object hook saw it)."""

    __slots__ = ("key", "pairs")

    def __init__(self, key: str, pairs: list[tuple[str, Any]]) -> None:
        self.key = key
        self.pairs = pairs


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any] | _Duplicated:
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            return _Duplicated(key, pairs)
        seen.add(key)
    raise AssertionError("unreachable: fewer keys than pairs means a key repeats")


def _integer(text: str) -> int | _Refused:
    if len(text) <= _INT64_DIGITS:  # a longer literal cannot fit: never build its int
        value = int(text)
        if -INT64_BOUND <= value < INT64_BOUND:
            return value
    return _Refused(f"integer {_literal_text(text)} does not fit in a signed 64-bit integer "
                    f"(-2^63 to 2^63-1)")


def _float(text: str) -> float | _Refused:
    value = float(text)
    if math.isfinite(value):
        return value
    return _Refused(f"number {_literal_text(text)} is not finite (too large for a double)")


def _constant(name: str) -> _Refused:
    return _Refused(f"{name} is not a JSON number")


def _no_surrogate(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def read_json(data: bytes | str, *, max_bytes: int, max_depth: int = MAX_DOCUMENT_DEPTH) -> Any:
    """The JSON value in ``data``, read by the rules above.

    :param max_bytes: the largest input read (in UTF-8 bytes).
    :param max_depth: the deepest nesting of objects and arrays (the document itself is 1).
    :raises JsonInputError: at the first thing refused, with its line and column (syntax) or
        its path in the document.
    """
    if isinstance(data, str):
        text = data
        if len(text) > max_bytes and len(text.encode("utf-8", "replace")) > max_bytes:
            raise JsonInputError(f"larger than {max_bytes} bytes")
    else:
        if len(data) > max_bytes:
            raise JsonInputError(f"larger than {max_bytes} bytes")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            before = data[: exc.start]
            line = before.count(b"\n") + 1
            column = len(before[before.rfind(b"\n") + 1:].decode("utf-8", "replace")) + 1
            raise JsonInputError(f"not UTF-8 (byte 0x{data[exc.start]:02x})", line=line,
                                 column=column) from None
    try:
        tree = json.loads(text, object_pairs_hook=_object, parse_int=_integer,
                          parse_float=_float, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        raise JsonInputError(exc.msg, line=exc.lineno, column=exc.colno) from None
    except RecursionError:  # the parser recurses: far past the bound, found again without
        raise JsonInputError(f"objects and arrays nested more than {max_depth} deep",
                             _too_deep_at(text, max_depth)) from None
    _check_tree(tree, max_depth)
    return tree


# A JSON string, or a character that opens, closes or separates: all a scan for depth needs
_STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},:]')


def _too_deep_at(text: str, max_depth: int) -> tuple[Step, ...]:
    """The path to the first object or array nested deeper than ``max_depth``, found by a scan
    of the text without recursion (for a document too deep for the parser); ``()`` when the
    scan finds none (the text is not JSON either)."""
    stack: list[list[Step | None]] = []  # per open container: its child being read
    last_string = ""
    for match in _STRUCTURE.finditer(text):
        token = match.group()
        if token in "{[":
            if len(stack) >= max_depth:
                return tuple(step for (step,) in stack if step is not None)
            stack.append([0 if token == "[" else None])
        elif token in "}]":
            if stack:
                stack.pop()
        elif token == ":":
            if stack:
                try:
                    stack[-1][0] = json.loads(last_string)
                except ValueError:
                    stack[-1][0] = last_string
        elif token == ",":
            if stack and isinstance(stack[-1][0], int):
                stack[-1][0] += 1
        else:
            last_string = token
    return ()


def _check_tree(tree: Any, max_depth: int) -> None:
    """Report a refused value, a key given twice, a lone surrogate or too deep a nesting (the
    first in document order, an object's own repeated key before its values), without
    recursion.

    :raises JsonInputError: naming its path.
    """
    stack: list[tuple[Any, tuple[Step, ...], int]] = [(tree, (), 1)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, str):
            if not _no_surrogate(value):
                raise JsonInputError("a string with a lone surrogate (\\ud800-\\udfff) is not "
                                     "Unicode text", path)
            continue
        if isinstance(value, _Refused):
            raise JsonInputError(value.reason, path)
        if not isinstance(value, (dict, list, _Duplicated)):
            continue
        if depth > max_depth:
            raise JsonInputError(f"objects and arrays nested more than {max_depth} deep", path)
        if isinstance(value, list):
            stack.extend((item, (*path, i), depth + 1) for i, item in reversed(list(
                enumerate(value))))
            continue
        if isinstance(value, _Duplicated):
            raise JsonInputError(f"key {_key_text(value.key)!r} is given twice",
                                 (*path, value.key), duplicate=True)
        for key in value:
            if not _no_surrogate(key):
                raise JsonInputError("a key with a lone surrogate (\\ud800-\\udfff) is not "
                                     "Unicode text", path)
        stack.extend((item, (*path, key), depth + 1) for key, item in reversed(value.items()))
