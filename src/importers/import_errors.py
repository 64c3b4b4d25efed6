"""The importers' shared vocabulary: the JSON value type and the error every importer raises."""

from __future__ import annotations

from typing import Any

__all__ = ["JSON", "ConfigImportError"]

JSON = Any  # a JSON-compatible value: dict, list, str, int, float, bool or None


class ConfigImportError(Exception):
    """The input cannot be imported.

    :ivar source: the file (or other name) the input came from.
    :ivar line: 1-based line in the source, when known.
    :ivar column: 1-based column in the source, when known.
    :ivar reason: the problem, without the location.

    ``str()`` gives ``SOURCE:LINE:COL: reason`` (or ``SOURCE: reason`` without a position).
    """

    def __init__(
        self, reason: str, *, source: str, line: int | None = None, column: int | None = None
    ) -> None:
        self.reason = reason
        self.source = source
        self.line = line
        self.column = column
        where = source if line is None else f"{source}:{line}:{column}"
        super().__init__(f"{where}: {reason}")
