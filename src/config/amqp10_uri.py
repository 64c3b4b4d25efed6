"""AMQP 1.0 URIs, read as the Shovel plugin's AMQP 1.0 client reads them
(deps/amqp10_client: amqp10_client:parse_uri/1)::

    amqp[s]://[user:password@]host[:port][/][?query]

The port defaults to 5672 (amqp) or 5671 (amqps). There is no vhost path: RabbitMQ takes the
virtual host from the open frame's ``hostname`` (``?hostname=vhost:NAME``). The query's
parameters:

* ``sasl``: ``anon``, ``plain`` or ``external``. Left out: ``plain`` when the URI has user
  information, else ``anon``. ``plain`` needs ``user:password``; with ``anon`` or ``external``
  the user information is not used (said at check time).
* ``hostname`` (default: the host), ``container_id`` (default: a generated one),
  ``idle_time_out`` (milliseconds asked of the peer; 0 or left out: none) and
  ``max_frame_size`` (bytes, 512 and up; default 1 MiB, amqp10_client's).
* ``transfer_limit_margin``: the client's own flow-control slack: an integer, accepted and not
  used (said at check time).
* ``amqps`` only: ``cacertfile``, ``certfile``, ``keyfile``, ``verify`` (verify_peer |
  verify_none), ``fail_if_no_peer_cert``, ``server_name_indication`` (a name, or ``disable``),
  ``customize_hostname_check`` (``https``) and ``versions`` (``tlsv1.2,tlsv1.3``), as
  amqp10_client takes them; ``password`` (the key's passphrase) and ``depth`` as an AMQP 0-9-1
  URI takes them (amqp10_client ignores both). They are pumpd's TLS options
  (:class:`~pumpd.config.model.TLSOptions`, :mod:`pumpd.config.tls`).

Refused here where amqp10_client accepts the URI and then fails, or silently reads it otherwise:
a host-less URI or one with a vhost path; user information that is not ``user:password`` with
both non-empty while SASL PLAIN is used (``amqp10_client`` crashes on it at connect time);
``sasl=plain`` without user information; an unknown parameter, an unknown ``sasl`` value or a
parameter given twice (ignored, or the last one kept, by amqp10_client); AMQP 0-9-1's
``heartbeat``, ``frame_max``, ``channel_max``, ``connection_timeout`` and ``auth_mechanism``
(the error names the AMQP 1.0 parameter to use); a TLS parameter on an ``amqp`` URI; a negative
``idle_time_out``; ``versions`` naming an unknown version or a set with a gap (Python's ssl
takes a lowest and a highest version). The scheme is read case-insensitively, and a ``:`` inside
the password is part of it, as in an AMQP 0-9-1 URI. Every password is registered with
:mod:`.redaction` before anything can fail, as for AMQP 0-9-1 URIs (:mod:`.uri`).
"""

from __future__ import annotations

import dataclasses
import re

from .limits import MAX_OPEN_NAME, MAX_UINT
from .model import Amqp10URI, SaslMechanism, TLSOptions
from .redaction import register_secret
from .uri import (
    TLS_PARAMS,
    URIError,
    decode_component,
    parse_host_port,
    parse_int_param,
    parse_tls_params,
    split_uri,
)
from .vocabulary import AMQP10_SASL, TLS_VERSIONS

__all__ = ["AMQP10_PARAMS", "MIN_MAX_FRAME_SIZE", "amqp10_uri_notes", "parse_amqp10_uri",
           "read_amqp10_uri"]

# AMQP 1.0's MIN-MAX-FRAME-SIZE (§2.7.1): no peer may ask for less
MIN_MAX_FRAME_SIZE = 512
# The query parameters amqp10_client reads, besides the TLS ones.
AMQP10_PARAMS = ("sasl", "hostname", "idle_time_out", "max_frame_size", "container_id",
                 "transfer_limit_margin")
_TLS = (*TLS_PARAMS, "versions")
# AMQP 0-9-1 URI parameters, and what an AMQP 1.0 URI has instead.
_AMQP091_ONLY = {
    "heartbeat": "idle_time_out (in milliseconds)",
    "frame_max": "max_frame_size",
    "channel_max": "no such limit in its URI",
    "connection_timeout": "no such timeout in its URI",
    "auth_mechanism": "sasl=plain, sasl=external or sasl=anon",
}
_INTEGER = re.compile(r"-?[0-9]{1,18}")


def parse_amqp10_uri(text: str) -> Amqp10URI:
    """Parse one AMQP 1.0 URI.

    :param text: e.g. ``"amqps://fred:secret@host:5671?hostname=vhost:orders&idle_time_out=60000"``
    :raises URIError: (a :class:`ValueError`) naming what is wrong, quoting the URI redacted.
    """
    return read_amqp10_uri(text)[0]


def read_amqp10_uri(text: str) -> tuple[Amqp10URI, list[str]]:
    """:func:`parse_amqp10_uri`, with what pumpd reads differently from the plugin, or does not
    use, in words (for check time; see also :func:`amqp10_uri_notes`).

    :raises URIError: as :func:`parse_amqp10_uri`.
    """
    try:
        return _read(text)
    except URIError as exc:  # "invalid AMQP 1.0 URI ...", whichever step refused it
        raise URIError(exc.uri, exc.reason, kind="AMQP 1.0") from None


def _read(text: str) -> tuple[Amqp10URI, list[str]]:
    parts = split_uri(text)
    scheme = parts.scheme
    if parts.path:  # "amqp://host/" is fine: amqp10_client allows the path "/"
        raise URIError(text, "an AMQP 1.0 URI has no vhost path (amqp10_client: "
                             "path_segment_not_supported): RabbitMQ takes the virtual host from "
                             "the hostname parameter, e.g. amqp://host?hostname=vhost:NAME")
    host, port = parse_host_port(parts.hostport, scheme, text)
    if host is None:
        raise URIError(text, "an AMQP 1.0 URI needs a host (a host-less amqp:// is the plugin's "
                             "in-broker AMQP 0-9-1 connection)")
    params = _query(parts.query or "", scheme, text)
    notes: list[str] = []
    sasl, username, password = _login(parts.userinfo, params.get("sasl"), text, notes)
    hostname = params.get("hostname")
    if hostname == "":
        raise URIError(text, "query parameter 'hostname' must not be empty (leave it out to send "
                             "the host)")
    container_id = params.get("container_id")
    if container_id == "":
        raise URIError(text, "query parameter 'container_id' must not be empty (leave it out for "
                             "a generated one)")
    for name, value in (("hostname", hostname), ("container_id", container_id)):
        if value is not None and len(value.encode("utf-8", "replace")) > MAX_OPEN_NAME:
            raise URIError(text, f"query parameter {name!r} must be at most {MAX_OPEN_NAME} "
                                 "bytes in UTF-8")
    idle = (parse_int_param("idle_time_out", params["idle_time_out"], 0, MAX_UINT, text)
            if "idle_time_out" in params else 0)
    frame = (parse_int_param("max_frame_size", params["max_frame_size"], MIN_MAX_FRAME_SIZE,
                             MAX_UINT, text)
             if "max_frame_size" in params else None)
    if "transfer_limit_margin" in params:
        if not _INTEGER.fullmatch(params["transfer_limit_margin"]):
            raise URIError(text, "query parameter 'transfer_limit_margin' must be an integer, got "
                                 f"{params['transfer_limit_margin'][:40]!r}")
        notes.append("transfer_limit_margin is amqp10_client's own flow-control slack: pumpd "
                     "does not use it")
    tls = parse_tls_params(params, text) if scheme == "amqps" else None
    versions = _versions(params.get("versions"), text)
    if versions:  # a TLS parameter: the query has made sure the scheme is amqps
        tls = dataclasses.replace(tls or TLSOptions(), versions=versions)
    if sasl is SaslMechanism.EXTERNAL and (tls is None or tls.certfile is None):
        notes.append("sasl=external without a client certificate (amqps with certfile and "
                     "keyfile): the server must know the client's identity some other way")
    uri = Amqp10URI(
        scheme=scheme, host=host, port=port, sasl=sasl, username=username, password=password,
        hostname=None if hostname == host else hostname, idle_time_out=idle,
        **({"max_frame_size": frame} if frame is not None else {}),
        container_id=container_id, tls=tls)
    return uri, [f"{uri.redacted()}: {note}" for note in notes] + amqp10_uri_notes(uri)


def amqp10_uri_notes(uri: Amqp10URI) -> list[str]:
    """Where pumpd reads this URI differently from the plugin's client (for check time)."""
    notes: list[str] = []
    if uri.tls is not None and uri.tls.depth is not None:
        notes.append(f"{uri.redacted()}: TLS 'depth' is not enforced by pumpd (Python's ssl "
                     "has no setting for it): OpenSSL's own limit applies")
    if uri.tls is not None and uri.tls.password is not None:
        notes.append(f"{uri.redacted()}: the key's passphrase ('password') is used by pumpd; "
                     "the plugin's AMQP 1.0 client ignores it (it needs an unencrypted key)")
    return notes


def _query(query: str, scheme: str, uri: str) -> dict[str, str]:
    """``a=1&b=2`` -> {"a": "1", "b": "2"}, names checked, values decoded.

    :raises URIError: on a parameter without a value, a duplicate, an unknown or AMQP 0-9-1
        parameter, or a TLS parameter on an ``amqp`` URI.
    """
    params: dict[str, str] = {}
    for piece in query.split("&"):
        if not piece:
            continue  # "?a=1&" or "?&a=1": harmless
        raw_name, sep, raw_value = piece.partition("=")
        name = decode_component(raw_name, "query", uri)
        if "password" in params and (not sep or name not in AMQP10_PARAMS + _TLS):
            # Not quoted: most likely the rest of a passphrase holding an unencoded '&'.
            raise URIError(uri, "a malformed query parameter follows 'password' (write an '&' "
                                "inside the key's password as %26)")
        if not sep:
            raise URIError(uri, f"query parameter {name!r} needs a value ({name}=...)")
        if name == "password":
            register_secret(raw_value)  # a name written encoded escapes the first registration
        if name in _AMQP091_ONLY:
            raise URIError(uri, f"query parameter {name!r} belongs to AMQP 0-9-1 URIs: an AMQP 1.0 "
                                f"URI has {_AMQP091_ONLY[name]}")
        if name in params:
            raise URIError(uri, f"query parameter {name!r} is given twice")
        if name in _TLS and scheme != "amqps":
            raise URIError(uri, f"query parameter {name!r} is a TLS option: it needs the amqps "
                                "scheme")
        if name not in AMQP10_PARAMS and name not in _TLS:
            known = ", ".join(AMQP10_PARAMS + (_TLS if scheme == "amqps" else ()))
            raise URIError(uri, f"unknown query parameter {name!r} for an AMQP 1.0 URI (known: "
                                f"{known})")
        params[name] = decode_component(raw_value, f"value of {name!r}", uri)
    return params


def _login(userinfo: str | None, sasl_param: str | None, uri: str,
           notes: list[str]) -> tuple[SaslMechanism, str, str]:
    """The SASL mechanism, user and password, as amqp10_client:parse_uri/1 chooses them.

    :raises URIError: on an unknown mechanism, PLAIN without user information, or user
        information that is not ``user:password`` with both non-empty where PLAIN uses it.
    """
    if sasl_param is not None and sasl_param not in AMQP10_SASL:
        raise URIError(uri, f"query parameter 'sasl' must be one of {', '.join(AMQP10_SASL)}, "
                            f"got {sasl_param[:40]!r}")
    if sasl_param in ("anon", "external"):
        if userinfo:
            notes.append(f"sasl={sasl_param}: the user information is not used, as the "
                         "plugin's client does")
        return SaslMechanism(sasl_param), "", ""
    if not userinfo:
        if sasl_param == "plain":
            raise URIError(uri, "sasl=plain needs user:password before the host "
                                "(amqp10_client: plain_sasl_missing_userinfo)")
        return SaslMechanism.ANONYMOUS, "", ""
    raw_user, _, raw_password = userinfo.partition(":")
    if not raw_user or not raw_password:
        # amqp10_client splits at ':' and takes exactly two non-empty parts (a crash otherwise)
        raise URIError(uri, "the user information of an AMQP 1.0 URI is user:password, both "
                            "non-empty (SASL PLAIN); for no login leave it out or add sasl=anon")
    return (SaslMechanism.PLAIN, decode_component(raw_user, "user", uri),
            decode_component(raw_password, "password", uri))


def _versions(value: str | None, uri: str) -> tuple[str, ...]:
    """``versions=tlsv1.2,tlsv1.3``: known versions without a gap, oldest first.

    :raises URIError: on an unknown version, an empty list, or a gap.
    """
    if value is None:
        return ()
    names = [v for v in value.split(",") if v]
    unknown = [v for v in names if v not in TLS_VERSIONS]
    if not names or unknown:
        raise URIError(uri, f"query parameter 'versions' takes a comma-separated list of "
                            f"{', '.join(TLS_VERSIONS)}, got {value[:60]!r}")
    indexes = sorted({TLS_VERSIONS.index(v) for v in names})
    if indexes != list(range(indexes[0], indexes[-1] + 1)):
        raise URIError(uri, "query parameter 'versions' must name a range of versions without a "
                            f"gap (pumpd sets a lowest and a highest version), got {value[:60]!r}")
    return tuple(TLS_VERSIONS[i] for i in indexes)

