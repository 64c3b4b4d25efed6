"""What a shovel added at run time (``PUT /api/shovels/NAME``) may touch.

A configuration file is the operator's; a PUT body comes over the network, so it is held to
less:

- TLS files (``cacertfile``, ``certfile``, ``keyfile`` in an ``amqps`` URI) only under a
  directory given with ``--tls-dir`` (none by default: no TLS file at all), after resolving
  symbolic links and ``..`` (:func:`os.path.realpath`), and never one of the daemon's own files
  (its token file, state file, configuration, endpoint certificate and key). The answer names
  the option, never whether the file exists: a PUT cannot probe what the daemon may read.
- ``auth_mechanism=external`` (a login with the client certificate) only with such a file.
- No declaration that destroys or unlinks something on a broker (``queue.delete``,
  ``queue.purge``, ``queue.unbind``, ``exchange.delete``, ``exchange.unbind``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from ..config.model import Amqp10URI, BrokerURI, SaslMechanism, ShovelConfig

DESTRUCTIVE_METHODS = ("queue.delete", "queue.purge", "queue.unbind", "exchange.delete",
                       "exchange.unbind")
TLS_FILE_OPTIONS = ("cacertfile", "certfile", "keyfile")


class Refused(Exception):
    """A run-time shovel that goes beyond what a PUT may do; the message is one line."""


def _inside(path: str, directory: str) -> bool:
    return os.path.commonpath([path, directory]) == directory


def _check_file(where: str, option: str, path: str, tls_dirs: Sequence[str],
                protected: frozenset[str]) -> None:
    if not tls_dirs:
        raise Refused(f"{where}: URI option {option!r}: TLS files are not accepted in a shovel "
                      "added at run time (the daemon allows none: start it with --tls-dir DIR)")
    real = os.path.realpath(path)
    if real in protected:
        raise Refused(f"{where}: URI option {option!r}: that file is one of pumpd's own")
    if not any(_inside(real, d) for d in tls_dirs):
        raise Refused(f"{where}: URI option {option!r}: the file is not under a directory "
                      f"allowed by --tls-dir ({', '.join(tls_dirs)})")


def _check_broker(where: str, uri: BrokerURI | Amqp10URI, tls_dirs: Sequence[str],
                  protected: frozenset[str]) -> None:
    tls = uri.tls
    for option in TLS_FILE_OPTIONS:
        path = getattr(tls, option) if tls is not None else None
        if path is not None:
            _check_file(where, option, path, tls_dirs, protected)
    external, option = ((uri.sasl is SaslMechanism.EXTERNAL, "sasl=external")
                        if isinstance(uri, Amqp10URI)
                        else ("external" in uri.auth_mechanisms, "auth_mechanism=external"))
    if external and (tls is None or tls.certfile is None):
        raise Refused(f"{where}: {option} needs a client certificate "
                      "(certfile) under a directory allowed by --tls-dir")


def check(cfg: ShovelConfig, tls_dirs: Sequence[str], protected_files: Iterable[str]) -> None:
    """Refuse what a run-time shovel may not do.

    :param tls_dirs: the ``--tls-dir`` directories, already resolved (:func:`resolve_dirs`).
    :param protected_files: the daemon's own files.
    :raises Refused: naming the first URI option or declaration method that is not allowed.
    """
    protected = frozenset(os.path.realpath(p) for p in protected_files if p)
    for side, key, endpoint in (("source", "src-uri", cfg.source),
                                ("destination", "dest-uri", cfg.destination)):
        for decl in endpoint.declarations:
            if decl.method in DESTRUCTIVE_METHODS:
                raise Refused(f"{side} declaration {decl.method!r}: a shovel added at run time "
                              "may not delete, purge or unbind (define it in the configuration "
                              "file instead)")
        for i, uri in enumerate(endpoint.uris):
            where = key if len(endpoint.uris) == 1 else f"{key}[{i}]"
            _check_broker(where, uri, tls_dirs, protected)


def resolve_dirs(dirs: Iterable[str]) -> tuple[str, ...]:
    """``--tls-dir`` values as real, absolute paths.

    :raises Refused: for one that is not a directory.
    """
    out = []
    for d in dirs:
        real = os.path.realpath(d)
        if not os.path.isdir(real):
            raise Refused(f"--tls-dir {d}: not a directory")
        out.append(real)
    return tuple(out)
