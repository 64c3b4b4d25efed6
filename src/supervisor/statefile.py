"""The daemon's state file: shovels added at run time (``PUT /api/shovels/NAME``), kept across
restarts of pumpd.

The file is itself a pumpd configuration, ``{"shovels": {"NAME": {definition}, ...}}``, holding
each definition exactly as it was PUT (either configuration form), so ``pumpd check --config
FILE`` reads it and an operator can move a shovel into the main configuration by copying it. It
contains broker passwords: it is created with mode 0600.

Its default location is next to the configuration file, ``NAME.runtime.json`` for ``NAME.json``
(``--state-file`` chooses another). Every change rewrites it atomically: a temporary file in the
same directory, flushed and fsynced, renamed over the old one, and the directory fsynced, so a
crash leaves either the old or the new file, never a mix.

It also keeps which shovels are paused (``pumpd pause``), the configuration file's included:
``"paused": ["NAME", ...]``, so that a restarted daemon starts them paused. A file written
before pauses existed has no such key: nothing is paused.

The daemon's memory is what the file is written from, both its shovels and its pauses: never
what was read back from the file, so a file that cannot be read loses nothing that the daemon
knows. Such a file (not valid JSON, an edit cut short, a directory in its place, unreadable) is
not overwritten either: :func:`save` refuses, and so does every run-time change, until the file
reads again. The operator recovers by fixing the file or removing it; the next change then
writes what the daemon runs.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from ..config.json_input import JsonInputError, read_json
from ..config.limits import MAX_DOCUMENT_BYTES

__all__ = ["StateFileError", "default_path", "load", "load_paused", "save"]


class StateFileError(Exception):
    """The state file cannot be read or written."""


def default_path(config_path: str | os.PathLike[str]) -> Path:
    """``/etc/pumpd/shovels.json`` -> ``/etc/pumpd/shovels.runtime.json``."""
    p = Path(config_path)
    return p.with_name(f"{p.stem if p.suffix else p.name}.runtime.json")


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The raw definitions in the state file, by name; ``{}`` when there is no file yet.

    Validation is the caller's (see :mod:`pumpd.supervisor.definitions`), with the configuration parser.

    :raises StateFileError: when the file exists but cannot be read or is not
        ``{"shovels": {...}}`` JSON.
    """
    return dict(_read(path)["shovels"])


def load_paused(path: str | os.PathLike[str]) -> frozenset[str]:
    """The names of the shovels paused, as the state file keeps them (none in a file written
    before pauses existed, or when there is no file yet).

    :raises StateFileError: as :func:`load`, and when ``"paused"`` is not a list of names.
    """
    paused = _read(path).get("paused", [])
    if not isinstance(paused, list) or not all(isinstance(n, str) for n in paused):
        raise StateFileError(f'{os.fspath(path)}: "paused" in the state file must be a list '
                             "of shovel names")
    return frozenset(paused)


def _read(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The whole document, ``{"shovels": {}}`` when there is no file yet."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_DOCUMENT_BYTES + 1)  # one byte more: the reader refuses the size
    except FileNotFoundError:
        return {"shovels": {}}
    except OSError as exc:
        raise StateFileError(f"{os.fspath(path)}: cannot read the state file: "
                             f"{exc.strerror or exc}") from None
    try:
        doc = read_json(data, max_bytes=MAX_DOCUMENT_BYTES)
    except JsonInputError as exc:
        raise StateFileError(f"{os.fspath(path)}: the state file is not valid JSON: "
                             f"{exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("shovels"), dict):
        raise StateFileError(f'{os.fspath(path)}: the state file must be {{"shovels": {{...}}}}')
    return doc


def save(path: str | os.PathLike[str], shovels: Mapping[str, Any],
         paused: Iterable[str]) -> None:
    """Replace the state file with ``shovels`` (raw definitions by name) and ``paused`` (the
    names of the paused shovels), both as the daemon holds them, atomically.

    :raises StateFileError: when the file there cannot be read or is not a state file (it is
        left as it is, for the operator to fix or remove), or when the new one cannot be written
        (the old one is left as it was).
    """
    try:
        load_paused(path)
    except StateFileError as exc:
        raise StateFileError(f"{exc}; nothing is written to it until it reads again (fix the "
                             "file or remove it: the next change writes what the daemon "
                             "runs)") from None
    _write(path, {"shovels": dict(shovels), "paused": sorted(set(paused))})


def _write(path: str | os.PathLike[str], doc: dict[str, Any]) -> None:
    if not doc["paused"]:
        del doc["paused"]  # an old pumpd reads the file as it always did
    target = Path(path)
    data = orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"
    directory = target.parent if str(target.parent) else Path(".")
    tmp_name: str | None = None
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                                        dir=directory)
        with os.fdopen(fd, "wb") as f:  # mkstemp creates it 0600: the file holds passwords
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, target)
        tmp_name = None
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # make the rename itself durable
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise StateFileError(f"{target}: cannot write the state file: "
                             f"{exc.strerror or exc}") from None
    finally:
        if tmp_name is not None:
            try:
                os.unlink(tmp_name)
            except OSError:
                pass
