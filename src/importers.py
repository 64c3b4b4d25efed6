"""Importers: existing RabbitMQ shovel definitions, printed as pumpd's JSON configuration.

Two sources are understood:

- :func:`pumpd.import_erlang.import_erlang_config` -- the static shovels of a ``rabbitmq.config`` /
  ``advanced.config`` file: its ``{rabbitmq_shovel, [{shovels, [...]}]}`` clause in the seed's
  format (``sources``, ``destinations``, ``queue``, ``prefetch_count``, ``ack_mode``,
  ``publish_properties``, ``publish_fields``, ``reconnect_delay``), converted clause by clause.
- :func:`pumpd.import_definitions.import_definitions` -- the dynamic shovels of a ``rabbitmqctl export_definitions``
  document, kept in RabbitMQ's flat names (``src-uri``, ``dest-exchange``, ...).

Both print only what the input states: no defaults are filled in (pumpd's own defaults apply
when the JSON is loaded). Anything the importers cannot translate faithfully is refused with a
:class:`ConfigImportError` naming the shovel and the clause, rather than guessed at.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import orjson

from . import exitcodes

__all__ = ["JSON", "ConfigImportError", "main_import_definitions", "main_import_erlang"]

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


# ============================================================================================
# Command-line entry points


def _emit(document: dict[str, JSON]) -> None:
    sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode("utf-8") + "\n")
    sys.stdout.flush()


def _run(command: str, path: str, convert: Callable[[bytes], dict[str, JSON]]) -> int:
    try:
        with open(path, "rb") as f:
            data = f.read()
        document = convert(data)
    except OSError as exc:
        print(f"pumpd: {command}: {path}: {exc.strerror or exc}", file=sys.stderr)
        return exitcodes.CONFIG_ERROR
    except ConfigImportError as exc:
        print(f"pumpd: {command}: {exc}", file=sys.stderr)
        return exitcodes.CONFIG_ERROR
    _emit(document)
    return exitcodes.OK


def _decode_utf8(data: bytes, source: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        line = before.count(b"\n") + 1
        column = len(before[before.rfind(b"\n") + 1 :].decode("utf-8", "replace")) + 1
        raise ConfigImportError(
            "the file is not valid UTF-8", source=source, line=line, column=column
        ) from exc


def main_import_erlang(path: str) -> int:
    """``pumpd import-erlang FILE``: print the file's static shovels as pumpd JSON.

    :returns: 0 after printing the JSON on stdout, or 2 after printing one error line on stderr
        (``pumpd: import-erlang: FILE:LINE:COL: ...``).
    """
    # imported here: import_erlang takes ConfigImportError from this module
    from .import_erlang import import_erlang_config

    def convert(data: bytes) -> dict[str, JSON]:
        return import_erlang_config(_decode_utf8(data, path), source=path)

    return _run("import-erlang", path, convert)


def main_import_definitions(path: str) -> int:
    """``pumpd import-definitions FILE``: print the dynamic shovels of a definitions export.

    :returns: 0 after printing the JSON on stdout, or 2 after printing one error line on stderr
        (``pumpd: import-definitions: FILE: ...``).
    """
    # imported here: import_definitions takes ConfigImportError from this module
    from .import_definitions import import_definitions

    def convert(data: bytes) -> dict[str, JSON]:
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ConfigImportError(
                f"not valid JSON: {exc.msg}", source=path, line=exc.lineno, column=exc.colno
            ) from exc
        return import_definitions(obj, source=path)

    return _run("import-definitions", path, convert)
