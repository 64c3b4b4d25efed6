"""The Python types of Erlang terms, as the term reader (:mod:`.terms`) makes them and
the writer (:mod:`.format`) writes them."""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["Atom", "ErlString", "Term"]


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
