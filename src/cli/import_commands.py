"""Importers: existing RabbitMQ shovel definitions, printed as pumpd's JSON configuration.

Two sources are understood:

- :func:`pumpd.importers.erlang.shovels.import_erlang_config` -- the static shovels of a ``rabbitmq.config`` /
  ``advanced.config`` file: its ``{rabbitmq_shovel, [{shovels, [...]}]}`` clause in the static
  format (``sources``, ``destinations``, ``queue``, ...) or the current one (``source``,
  ``destination``, ``ack_mode``, ``reconnect_delay``), converted clause by clause.
- :func:`pumpd.importers.definitions_export.import_definitions` -- the dynamic shovels of a ``rabbitmqctl export_definitions``
  document, kept in RabbitMQ's flat names (``src-uri``, ``dest-exchange``, ...).

Both print only what the input states, except where the plugin's default differs from pumpd's
(the current static format's ``ack_mode`` no_ack), which is written out. Warnings (what pumpd
reads differently from the plugin, what the plugin's defaults lose) go to stderr. Anything the importers cannot translate faithfully is refused with a
:class:`ConfigImportError` naming the shovel and the clause, rather than guessed at.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import orjson

from .. import exitcodes
from ..config.json_input import JsonInputError, read_json
from ..config.limits import MAX_IMPORT_BYTES
from ..config.parse import ConfigError, parse_config
from ..config.redaction import redact, register_uri_secrets
from ..importers.definitions_export import import_definitions
from ..importers.erlang.shovels import import_erlang_config
from ..importers.import_errors import JSON, ConfigImportError

__all__ = ["JSON", "ConfigImportError", "decode_utf8", "main_import_definitions",
           "main_import_erlang"]

# ============================================================================================
# Command-line entry points


def check_warnings(document: dict[str, JSON]) -> list[str]:
    """What ``pumpd check`` will say about an imported document: each shovel's warnings (where
    pumpd reads a definition differently from the plugin), or why it will refuse it."""
    try:
        config = parse_config(document, source="the imported configuration")
    except ConfigError as exc:
        return [f"pumpd will refuse this: {exc}"]
    return [f"shovel {name!r}: {w}" for name, s in config.shovels.items() for w in s.warnings]


def _read(path: str) -> bytes:
    """The file, at most :data:`MAX_IMPORT_BYTES` of it.

    :raises ConfigImportError: when it is larger (nothing past the bound is read).
    """
    with open(path, "rb") as f:
        data = f.read(MAX_IMPORT_BYTES + 1)
    if len(data) > MAX_IMPORT_BYTES:
        raise ConfigImportError(f"the file is larger than {MAX_IMPORT_BYTES} bytes: not a "
                                "configuration", source=path)
    return data


def _run(command: str, path: str,
         convert: Callable[[bytes, list[str]], dict[str, JSON]]) -> int:
    warnings: list[str] = []
    try:
        data = _read(path)
        # Known before any message can quote a piece of the file: stderr redacts them by value
        # (the JSON on stdout keeps them: it is the configuration to run).
        register_uri_secrets(data.decode("utf-8", "replace"))
        document = convert(data, warnings)
        text = orjson.dumps(document, option=orjson.OPT_INDENT_2).decode("utf-8") + "\n"
        # On stderr, so that stdout stays the JSON document to redirect into a file.
        notes = warnings + check_warnings(document)
    except OSError as exc:
        print(f"pumpd: {command}: {path}: {exc.strerror or exc}", file=sys.stderr)
        return exitcodes.CONFIG_ERROR
    except ValueError as exc:  # an embedded NUL in the path
        print(f"pumpd: {command}: {path!r}: {exc}", file=sys.stderr)
        return exitcodes.CONFIG_ERROR
    except ConfigImportError as exc:
        print(redact(f"pumpd: {command}: {exc}"), file=sys.stderr)
        return exitcodes.CONFIG_ERROR
    except Exception as exc:  # a bug: still one line, and the input named
        print(redact(f"pumpd: {command}: {path}: cannot import this file (internal error "
                     f"{type(exc).__name__}, please report it)"), file=sys.stderr)
        return exitcodes.CONFIG_ERROR
    for note in notes:
        print(redact(f"pumpd: {command}: warning: {note}"), file=sys.stderr)
    sys.stdout.write(text)
    sys.stdout.flush()
    return exitcodes.OK


def decode_utf8(data: bytes, source: str) -> str:
    """A file's bytes as text.

    :raises ConfigImportError: at the line and column of the first byte that is not UTF-8.
    """
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
    def convert(data: bytes, warnings: list[str]) -> dict[str, JSON]:
        return import_erlang_config(decode_utf8(data, path), source=path, warnings=warnings)

    return _run("import-erlang", path, convert)


def main_import_definitions(path: str) -> int:
    """``pumpd import-definitions FILE``: print the dynamic shovels of a definitions export.

    :returns: 0 after printing the JSON on stdout, or 2 after printing one error line on stderr
        (``pumpd: import-definitions: FILE: ...``).
    """
    def convert(data: bytes, warnings: list[str]) -> dict[str, JSON]:
        try:
            obj = read_json(data, max_bytes=MAX_IMPORT_BYTES)
        except JsonInputError as exc:
            if exc.line is not None:
                raise ConfigImportError(f"not valid JSON: {exc.reason}", source=path,
                                        line=exc.line, column=exc.column) from None
            raise ConfigImportError(str(exc), source=path) from None
        return import_definitions(obj, source=path)

    return _run("import-definitions", path, convert)
