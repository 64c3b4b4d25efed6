"""The control plane's bearer token: its file, and how a local client finds it.

The daemon makes the token at its first start (``secrets.token_urlsafe(32)``) in a file beside
the state file (``NAME.runtime.token`` for ``NAME.runtime.json``) or at ``--http-token-file``,
created 0600 in one step (``O_CREAT | O_EXCL | O_NOFOLLOW``: never a window with a wider mode,
never through a symbolic link), and reuses it on later starts; a file that the group or others
may read or write, or that is not a regular file of the daemon's user, is refused.

A client on the same machine (``pumpd status``) finds the file with no flag: once listening, the
daemon writes a small record, ``endpoint-PORT.json``, into a directory of its user's own
(``$XDG_RUNTIME_DIR/pumpd``, else ``$XDG_STATE_HOME/pumpd`` or ``~/.local/state/pumpd``, mode
0700) naming its token file, its pid and whether it speaks TLS. The record holds no secret; a
client uses it only while that pid is alive, so a process that takes the port after pumpd has
gone is not sent the token.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

TOKEN_BYTES = 32  # secrets.token_urlsafe(32): 43 characters, 256 bits
MIN_LENGTH, MAX_LENGTH = 16, 512
# RFC 6750's b64token: what may follow "Bearer " in an Authorization header.
_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
ENV_TOKEN_FILE = "PUMPD_TOKEN_FILE"


class TokenFileError(Exception):
    """A token file that cannot be made, read or trusted. The message is one line and never
    contains the token."""


def default_path(state_path: str | os.PathLike[str]) -> Path:
    """Beside the state file: ``X.runtime.token`` for ``X.runtime.json``."""
    return Path(state_path).with_suffix(".token")


def load_or_create(path: str | os.PathLike[str]) -> str:
    """The daemon's token: the file's, or a new one written to a new file (mode 0600).

    :raises TokenFileError: when the file cannot be created, or exists but is not a regular
        file of this user, is readable or writable by others, or holds no valid token.
    """
    path = os.fspath(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        return read(path, strict=True)
    except OSError as exc:
        raise TokenFileError(f"cannot create the token file {path}: "
                             f"{exc.strerror or exc}") from None
    token = secrets.token_urlsafe(TOKEN_BYTES)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(token + "\n")
    return token


def read(path: str | os.PathLike[str], strict: bool = False) -> str:
    """The token in ``path``. ``strict`` (the daemon's own file): not through a symbolic link,
    owned by this user, mode without any group or other bit.

    :raises TokenFileError: see :func:`load_or_create`.
    """
    path = os.fspath(path)
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK  # a FIFO must not hang the reader
    if strict:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise TokenFileError(f"the token file {path} is a symbolic link: give the file "
                                 "itself") from None
        raise TokenFileError(f"cannot read the token file {path}: "
                             f"{exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TokenFileError(f"the token file {path} is not a regular file")
        if strict and st.st_uid != os.geteuid():
            raise TokenFileError(f"the token file {path} belongs to another user (uid "
                                 f"{st.st_uid}): it must be pumpd's own")
        if strict and st.st_mode & 0o077:
            raise TokenFileError(f"the token file {path} has mode "
                                 f"{stat.S_IMODE(st.st_mode):04o}: others may read or change "
                                 f"it (chmod 600 {path}, or remove it to get a new token)")
        data = os.read(fd, MAX_LENGTH + 2)
    finally:
        os.close(fd)
    token = data.decode("ascii", errors="replace").strip()
    if not (MIN_LENGTH <= len(token) <= MAX_LENGTH) or not _TOKEN.fullmatch(token):
        raise TokenFileError(f"the token file {path} does not hold a token ({MIN_LENGTH} to "
                             f"{MAX_LENGTH} characters of A-Z a-z 0-9 - . _ ~ + / on one line)")
    return token


# ------------------------------------------------------------------------- the endpoint record


@dataclass(frozen=True)
class EndpointRecord:
    """What a running daemon tells its local clients about its endpoint."""

    port: int
    pid: int
    token_file: str
    tls: bool
    tls_cert: str | None  # a client may trust it (a self-signed endpoint)


def record_dir() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime):
        return Path(runtime, "pumpd")
    state = os.environ.get("XDG_STATE_HOME")
    base = Path(state) if state and os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "pumpd"


def _record_path(port: int) -> Path:
    return record_dir() / f"endpoint-{port}.json"


def write_record(record: EndpointRecord) -> Path:
    """Write (replace) the record for ``record.port``.

    :raises OSError: when the directory or the file cannot be written.
    """
    path = _record_path(record.port)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"port": record.port, "pid": record.pid, "token_file": record.token_file,
                   "tls": record.tls, "tls_cert": record.tls_cert}, f)
    os.replace(tmp, path)
    return path


def announce(port: int, token_file: str, tls: bool, tls_cert: str | None) -> str | None:
    """Write this process's record for ``port``; what went wrong, in one line, or None (not
    fatal: clients can still be given the token file)."""
    record = EndpointRecord(port, os.getpid(), os.path.abspath(token_file), tls,
                            os.path.abspath(tls_cert) if tls_cert else None)
    try:
        write_record(record)
    except OSError as exc:
        return (f"cannot write the endpoint record for local clients ({exc}): pumpd status "
                f"needs --http-token-file {record.token_file}")
    return None


def remove_record(port: int, pid: int) -> None:
    """Remove the record for ``port`` if it is still ``pid``'s (another daemon may have the
    port by now)."""
    found = find_record(port, check_alive=False)
    if found is not None and found.pid == pid:
        try:
            _record_path(port).unlink()
        except OSError:
            pass


def find_record(port: int, check_alive: bool = True) -> EndpointRecord | None:
    """The record of the daemon on ``port``, if one is there and (``check_alive``) its pid runs."""
    try:
        doc = json.loads(_record_path(port).read_text(encoding="utf-8"))
        record = EndpointRecord(int(doc["port"]), int(doc["pid"]), str(doc["token_file"]),
                                bool(doc["tls"]),
                                None if doc.get("tls_cert") is None else str(doc["tls_cert"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if record.port != port:
        return None
    if check_alive:
        try:
            os.kill(record.pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # alive, as another user
    return record
