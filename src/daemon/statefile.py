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

It also keeps which shovels are paused (``pumpd pause``, issue 23), the configuration file's
included: ``"paused": ["NAME", ...]``, so that a restarted daemon starts them paused. A file
written before pauses existed has no such key: nothing is paused. :func:`save` keeps the list
as it is, :func:`save_paused` keeps the shovels as they are.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

__all__ = ["StateFileError", "default_path", "load", "load_paused", "save", "save_paused"]


class StateFileError(Exception):
    """The state file cannot be read or written."""


def default_path(config_path: str | os.PathLike[str]) -> Path:
    """``/etc/pumpd/shovels.json`` -> ``/etc/pumpd/shovels.runtime.json``."""
    p = Path(config_path)
    return p.with_name(f"{p.stem if p.suffix else p.name}.runtime.json")


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The raw definitions in the state file, by name; ``{}`` when there is no file yet.

    Validation is the caller's (see :mod:`pumpd.daemon.definitions`), with the configuration parser.

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
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return {"shovels": {}}
    except OSError as exc:
        raise StateFileError(f"{os.fspath(path)}: cannot read the state file: "
                             f"{exc.strerror or exc}") from None
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise StateFileError(f"{os.fspath(path)}: the state file is not valid JSON: "
                             f"{exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("shovels"), dict):
        raise StateFileError(f'{os.fspath(path)}: the state file must be {{"shovels": {{...}}}}')
    return doc


def save(path: str | os.PathLike[str], shovels: Mapping[str, Any]) -> None:
    """Replace the state file's shovels with ``shovels`` (raw definitions by name), atomically;
    the paused ones stay as the file has them.

    :raises StateFileError: when the file cannot be written (the old one is left as it was).
    """
    _write(path, {"shovels": dict(shovels), "paused": sorted(_paused_kept(path))})


def save_paused(path: str | os.PathLike[str], paused: Iterable[str]) -> None:
    """Replace the state file's list of paused shovels, atomically; its shovels stay.

    :raises StateFileError: when the file cannot be read or written.
    """
    _write(path, {"shovels": load(path), "paused": sorted(set(paused))})


def _paused_kept(path: str | os.PathLike[str]) -> frozenset[str]:
    try:
        return load_paused(path)
    except StateFileError:
        return frozenset()  # an unreadable file is being replaced: its pauses go with it


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
