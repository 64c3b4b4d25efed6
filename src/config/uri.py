"""AMQP URIs: parse them, registering their passwords for redaction (pika's parameters:
engine/parameters.py).

The syntax is RabbitMQ's AMQP URI specification (https://www.rabbitmq.com/uri-spec.html)::

    amqp[s]://[user[:password]@]host[:port][/vhost][?query]

with the Shovel plugin's extensions: a host-less ``amqp://`` means the local broker
(:attr:`BrokerURI.host` is ``None``), and a query part with ``heartbeat``, ``channel_max``,
``frame_max``, ``connection_timeout``, ``auth_mechanism`` and, for ``amqps``, any subset of the TLS
parameters (amqp_uri.erl).

The spec's corner cases, all honoured here: ``amqp://host`` has the vhost ``/``,
``amqp://host/`` has the *empty* vhost, ``amqp://host/%2f`` has ``/``; an omitted user or password
is ``guest``, an empty one (``amqp://:@host``) stays empty.

Two deliberate leniencies, both unambiguous: a ``:`` inside the password and an unencoded ``@``
inside the user information are accepted (the host can contain neither: the user information
ends at the last ``@`` before the host). Refused as ambiguous, so that no piece of a password is
ever read as a host, port, vhost or query (and shown as one): an unencoded ``/``, ``?`` or ``#``
in the user information (``amqp://u:s/e@cret@h``), an unencoded ``@`` after ``host:port``
(``amqp://u:12/x@h``, which RFC 3986 reads as host ``u``, port 12, vhost ``x@h``), and a
malformed query parameter after ``password=`` (an ``&`` in the key's passphrase). Every password
is registered with :mod:`.redaction` before anything can fail. ``connection_timeout`` is
in milliseconds, as in RabbitMQ's Erlang client, so that URIs copied from Shovel or Federation
definitions keep their meaning; below one second is rejected as the likely mistake of writing
seconds.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from .limits import MAX_CONNECTION_TIMEOUT_MS, MAX_URI
from .model import DEFAULT_PORTS, Amqp10URI, BrokerURI, TLSOptions
from .redaction import (
    redact,
    redact_uri,
    register_one_uri_secrets,
    register_secret,
    split_userinfo,
    uri_authority,
)

__all__ = [
    "DEFAULT_PORTS",
    "DEFAULT_SOCKET_TIMEOUT",
    "DEFAULT_STACK_TIMEOUT",
    "TLS_PARAMS",
    "URIError",
    "URIParts",
    "decode_component",
    "format_uri",
    "parse_host_port",
    "parse_int_param",
    "parse_tls_params",
    "parse_uri",
    "redact",
    "split_uri",
]

DEFAULT_USER = "guest"
DEFAULT_PASSWORD = "guest"
DEFAULT_VHOST = "/"
# Said wherever a URI naming the empty vhost may be a slip for the default one.
EMPTY_VHOST_NOTE = (
    'a URI whose path is only "/" names the empty vhost "": the default vhost "/" is written '
    "%2F, as in amqp://host/%2F, or leave the path out"
)
# TCP connect timeout, and the timeout for the whole TCP + TLS + AMQP handshake (pika's default).
DEFAULT_SOCKET_TIMEOUT = 10.0
DEFAULT_STACK_TIMEOUT = 15.0

_INT_PARAMS = ("heartbeat", "channel_max", "frame_max", "connection_timeout")
# amqp_uri:build_ssl_broker/2 reads any subset of these.
TLS_PARAMS = ("cacertfile", "certfile", "keyfile", "verify", "fail_if_no_peer_cert", "password",
               "depth", "server_name_indication", "customize_hostname_check")
# amqp_uri:mechanisms/1 (amqp_auth_mechanisms): may be given more than once, first usable wins.
AUTH_MECHANISMS = ("plain", "amqplain", "external")
_MIN_CONNECTION_TIMEOUT_MS = 1000
# The frame sizes pika accepts (pika.spec), so that parsing a URI does not import pika;
# tests/unit/test_uri.py checks they agree.
FRAME_MIN_SIZE = 4096
FRAME_MAX_SIZE = 131072

# RFC 3986 reg-name characters (unreserved, sub-delims, and "%" for pct-encoding).
_HOST_CHARS = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=%]*")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")


class URIError(ValueError):
    """An AMQP URI that cannot be used. The message quotes the URI without its password.

    :ivar uri: the offending URI, redacted.
    :ivar reason: what is wrong with it.
    :param kind: the protocol the URI was read for, as the message names it ("AMQP",
        "AMQP 1.0").
    """

    def __init__(self, text: str, reason: str, *, kind: str = "AMQP") -> None:
        self.uri = redact_uri(text)
        self.reason = reason
        super().__init__(f"invalid {kind} URI {self.uri!r}: {reason}")


def decode_component(text: str, what: str, uri: str) -> str:
    """Percent-decode one URI component as UTF-8.

    :raises URIError: on a malformed ``%`` escape or bytes that are not UTF-8 (the value itself is
        never quoted: it may be a password).
    """
    if _BAD_PERCENT.search(text):
        raise URIError(uri, f"malformed percent-escape in the {what} ('%' must be followed by two "
                            "hex digits; write a literal '%' as %25)")
    try:
        return unquote(text, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise URIError(uri, f"the {what} is not valid UTF-8 once percent-decoded") from None


def parse_host_port(hostport: str, scheme: str, uri: str) -> tuple[str | None, int]:
    """``host[:port]`` → (host or ``None`` for the local broker, port).

    :raises URIError: on a bad IPv6 literal, a bad character in the host, or a bad port.
    """
    if hostport.startswith("["):
        close = hostport.find("]")
        if close < 0:
            raise URIError(uri, "unterminated '[' in the host (IPv6 literal)")
        literal, after = hostport[1:close], hostport[close + 1 :]
        try:
            ipaddress.IPv6Address(literal)
        except ValueError:
            raise URIError(uri, f"{literal!r} is not a valid IPv6 address") from None
        host: str | None = literal
        if after and not after.startswith(":"):
            raise URIError(uri, "unexpected text after the IPv6 literal")
        port_text = after[1:] if after else ""
        has_port = bool(after)
    else:
        raw_host, sep, port_text = hostport.partition(":")
        has_port = bool(sep)
        if ":" in port_text:
            raise URIError(uri, "an IPv6 address must be written in brackets, e.g. amqp://[::1]")
        if not _HOST_CHARS.fullmatch(raw_host):
            raise URIError(uri, "invalid character in the host")
        host = decode_component(raw_host, "host", uri) or None
    port = DEFAULT_PORTS[scheme]
    if has_port and port_text:  # "host:" with an empty port means the default port (RFC 3986)
        # The value is not quoted: in a malformed URI it could be a piece of a password.
        if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5
                and 0 < int(port_text) <= 65535):
            raise URIError(uri, "the port must be a number from 1 to 65535")
        port = int(port_text)
    return host, port


def parse_int_param(name: str, value: str, low: int, high: int | None, uri: str) -> int:
    """One integer query parameter, range-checked.

    :raises URIError: when ``value`` is not a plain decimal integer within [low, high].
    """
    if not (value.isascii() and value.isdigit()):
        raise URIError(uri, f"query parameter {name!r} must be a non-negative integer, "
                            f"got {value[:40]!r}")
    if len(value.lstrip("0")) > 18:  # beyond every bound below; int() of it could be slow
        bound = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise URIError(uri, f"query parameter {name!r} must be {bound}, got {len(value)} digits")
    n = int(value)
    if n < low or (high is not None and n > high):
        bound = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise URIError(uri, f"query parameter {name!r} must be {bound}, got {n}")
    return n


def _parse_query(query: str, scheme: str, uri: str) -> tuple[dict[str, str], tuple[str, ...]]:
    """``a=1&b=2`` → ({"a": "1", "b": "2"}, auth mechanisms), names checked, values decoded.

    :raises URIError: on a parameter without a value, a duplicate, an unknown parameter, a TLS
        parameter on a plain ``amqp`` URI, or an unknown auth_mechanism.
    """
    params: dict[str, str] = {}
    mechanisms: list[str] = []
    for piece in query.split("&"):
        if not piece:
            continue  # "?a=1&" or "?&a=1": harmless
        raw_name, sep, raw_value = piece.partition("=")
        name = decode_component(raw_name, "query", uri)
        if "password" in params and (not sep or name not in _INT_PARAMS + TLS_PARAMS
                                     + ("auth_mechanism",)):
            # Not quoted: most likely the rest of a passphrase holding an unencoded '&'.
            raise URIError(uri, "a malformed query parameter follows 'password' (write an '&' "
                                "inside the key's password as %26)")
        if not sep:
            raise URIError(uri, f"query parameter {name!r} needs a value ({name}=...)")
        if name == "auth_mechanism":
            mechanism = decode_component(raw_value, "value of 'auth_mechanism'", uri)
            if mechanism not in AUTH_MECHANISMS:
                raise URIError(uri, f"query parameter 'auth_mechanism' must be one of "
                                    f"{', '.join(AUTH_MECHANISMS)}, got {mechanism!r} (a custom "
                                    "Erlang module:function mechanism cannot run outside the "
                                    "broker)")
            if mechanism not in mechanisms:
                mechanisms.append(mechanism)
            continue
        if name == "password":
            register_secret(raw_value)  # a name written encoded escapes _register_secrets
        if name in params:
            raise URIError(uri, f"query parameter {name!r} is given twice")
        if name in TLS_PARAMS and scheme != "amqps":
            raise URIError(uri, f"query parameter {name!r} is a TLS option: it needs the amqps "
                                "scheme")
        if name not in _INT_PARAMS and name not in TLS_PARAMS:
            known = ", ".join(_INT_PARAMS + ("auth_mechanism",)
                              + (TLS_PARAMS if scheme == "amqps" else ()))
            raise URIError(uri, f"unknown query parameter {name!r} (known: {known})")
        params[name] = decode_component(raw_value, f"value of {name!r}", uri)
    return params, tuple(mechanisms)


def parse_tls_params(params: dict[str, str], uri: str) -> TLSOptions | None:
    """Any subset of the TLS parameters, as amqp_uri.erl takes them; none: the system's CAs,
    the peer verified.

    :raises URIError: on an empty file path, a key without its certificate, or a value the
        plugin would refuse too (verify, fail_if_no_peer_cert, depth, customize_hostname_check).
    """
    if not any(p in params for p in TLS_PARAMS):
        return None
    for p in ("cacertfile", "certfile", "keyfile"):
        if p in params and not params[p]:
            raise URIError(uri, f"query parameter {p!r} must be a file path, got ''")
    if "keyfile" in params and "certfile" not in params:
        raise URIError(uri, "query parameter 'keyfile' needs 'certfile' (the client certificate "
                            "the key belongs to)")
    verify = params.get("verify", "verify_peer")
    if verify not in ("verify_peer", "verify_none"):
        raise URIError(uri, f"query parameter 'verify' must be verify_peer or verify_none, "
                            f"got {verify!r}")
    fail = params.get("fail_if_no_peer_cert", "false")
    if fail not in ("true", "false"):
        raise URIError(uri, f"query parameter 'fail_if_no_peer_cert' must be true or false, "
                            f"got {fail!r}")
    depth = None
    if "depth" in params:
        depth = parse_int_param("depth", params["depth"], 0, 255, uri)
    check = params.get("customize_hostname_check")
    if check is not None and check != "https":
        raise URIError(uri, f"query parameter 'customize_hostname_check' must be https (the "
                            f"only value RabbitMQ's client knows), got {check!r}")
    sni = params.get("server_name_indication")
    if sni == "":
        raise URIError(uri, "query parameter 'server_name_indication' must be a host name or "
                            "disable, got ''")
    return TLSOptions(
        cacertfile=params.get("cacertfile"),
        certfile=params.get("certfile"),
        keyfile=params.get("keyfile"),
        verify=verify == "verify_peer",
        fail_if_no_peer_cert=fail == "true",
        password=params.get("password"),
        depth=depth,
        server_name_indication=sni,
        customize_hostname_check=check,
    )


@dataclass(frozen=True)
class URIParts:
    """A URI cut at its delimiters, nothing decoded yet (:func:`split_uri`)."""

    scheme: str  # lower case
    userinfo: str | None  # None: no "@"
    hostport: str
    path: str | None  # what follows the first "/" after the authority; None: no "/"
    query: str | None  # what follows "?"; None: no "?"


def split_uri(text: str) -> URIParts:
    """Cut an AMQP URI (either protocol's) into its parts, registering its passwords first.

    :raises URIError: on a URI too long, a scheme other than amqp / amqps, whitespace or control
        characters, an ambiguous user information (see the module's docstring) or a fragment.
    """
    if isinstance(text, str) and len(text) > MAX_URI:
        # quoting none of it: cut anywhere, the redactor could not tell its password
        raise URIError(f"{text.partition(':')[0][:10]}://...",
                       f"a URI must be at most {MAX_URI} characters, got {len(text)}")
    scheme, after_scheme = _scheme(text)
    userinfo, rest, suspicious = split_userinfo(after_scheme)
    if suspicious:
        raise URIError(text, "the user or password contains an unencoded '/', '?' or '#' "
                             "(percent-encode it: %2F, %3F, %23)")
    if userinfo is None and "@" in rest and ":" in uri_authority(rest):
        # RFC 3986 reads "amqp://u:12/x@host" as host "u", port 12, vhost "x@host", but it is
        # more likely the password "12/x" with an unencoded "/": refused as ambiguous, so that
        # no piece of a password is ever taken for a vhost or a file name.
        raise URIError(text, "an '@' after host:port must be percent-encoded (%40); if it ends "
                             "a password, percent-encode the password's '/', '?' and '#' "
                             "(%2F, %3F, %23)")
    if "#" in rest:
        raise URIError(text, "a URI fragment ('#...') is not allowed")
    rest, has_query, query = rest.partition("?")
    hostport, has_path, path = rest.partition("/")
    return URIParts(scheme, userinfo, hostport, path if has_path else None,
                    query if has_query else None)


def parse_uri(text: str) -> BrokerURI:
    """Parse one AMQP URI (the spec, plus the plugin's host-less form and query parameters).

    :param text: e.g. ``"amqp://fred:secret@host1.domain/my_vhost?heartbeat=5"``.
    :returns: the parsed URI; user, password, host and vhost percent-decoded.
    :raises URIError: (a :class:`ValueError`) naming what is wrong, quoting the URI redacted.
    """
    parts = split_uri(text)
    scheme, hostport = parts.scheme, parts.hostport
    username, password = _credentials(parts.userinfo, text)
    host, port = parse_host_port(hostport, scheme, text)
    # "amqp://host": no path at all
    vhost = _vhost(parts.path, text) if parts.path is not None else DEFAULT_VHOST
    if host is None and has_port_in(hostport):
        # amqp_uri.erl: port_requires_host. Without a host the URI is the plugin's direct
        # (in-broker) connection, which has no port; "amqp://:1234" is a mistake either way.
        raise URIError(text, "a port needs a host (port_requires_host): write "
                             "amqp://localhost:PORT, or leave the port out for the local broker")
    params, mechanisms = (_parse_query(parts.query, scheme, text) if parts.query is not None
                          else ({}, ()))
    limits = _connection_limits(params, text)
    tls = parse_tls_params(params, text) if scheme == "amqps" else None
    if mechanisms and mechanisms[0] == "external" and (tls is None or tls.certfile is None):
        # EXTERNAL logs in as the client certificate's subject: without one it cannot succeed.
        raise URIError(text, "auth_mechanism=external logs in with a client certificate: it needs "
                             "amqps and a certfile (and keyfile) in the query")
    return BrokerURI(scheme=scheme, host=host, port=port, username=username, password=password,
                     vhost=vhost, **limits, tls=tls, auth_mechanisms=mechanisms)


def _scheme(text: str) -> tuple[str, str]:
    """The scheme (lower case) and what follows ``://``, once the whole text is known clean."""
    if not isinstance(text, str):
        raise URIError(repr(text), "a URI must be a string")
    m = _SCHEME.match(text)
    if m is None:
        raise URIError(text, "expected amqp://... or amqps://...")
    # Before anything can fail: an error message quotes the URI, and may quote a piece of it.
    register_one_uri_secrets(text)
    scheme = m.group(1).lower()
    if scheme not in DEFAULT_PORTS:
        raise URIError(text, f"unsupported scheme {m.group(1)!r} (use amqp or amqps)")
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise URIError(text, "a URI must not contain whitespace or control characters "
                             "(percent-encode them)")
    return scheme, text[m.end():]


def _credentials(userinfo: str | None, uri: str) -> tuple[str, str]:
    """User and password; each left out is ``guest``, each given empty stays empty."""
    username, password = DEFAULT_USER, DEFAULT_PASSWORD
    if userinfo is not None:
        raw_user, has_password, raw_password = userinfo.partition(":")
        username = decode_component(raw_user, "user", uri)
        if has_password:
            password = decode_component(raw_password, "password", uri)
    return username, password


def _vhost(path: str, uri: str) -> str:
    """The vhost a path names: ``amqp://host/`` the empty one, ``amqp://host/%2f`` ``/``."""
    if "/" in path:
        raise URIError(uri, "the vhost must be a single path segment (write '/' inside a "
                            "vhost name as %2F)")
    return decode_component(path, "vhost", uri)


# The query's integer parameters that limit the connection: name, lowest, highest. heartbeat
# is in seconds (0 disables heartbeats); channel_max 0 means no limit (the protocol maximum).
_LIMIT_PARAMS = (("heartbeat", 0, 65535), ("channel_max", 0, 65535),
                 ("frame_max", 0, FRAME_MAX_SIZE))


def _connection_limits(params: dict[str, str], uri: str) -> dict[str, Any]:
    """heartbeat, channel_max, frame_max and connection_timeout (seconds), None where not given."""
    limits: dict[str, Any] = {name: parse_int_param(name, params[name], low, high, uri)
                              if name in params else None
                              for name, low, high in _LIMIT_PARAMS}
    frame_max = limits["frame_max"]
    if frame_max is not None and 0 < frame_max < FRAME_MIN_SIZE:
        raise URIError(uri, f"query parameter 'frame_max' must be 0 (no limit) or from "
                            f"{FRAME_MIN_SIZE} to {FRAME_MAX_SIZE}, got {frame_max}")
    limits["connection_timeout"] = None
    if "connection_timeout" in params:
        ms = parse_int_param("connection_timeout", params["connection_timeout"], 1,
                        MAX_CONNECTION_TIMEOUT_MS, uri)
        if ms < _MIN_CONNECTION_TIMEOUT_MS:
            raise URIError(uri, f"query parameter 'connection_timeout' is in milliseconds (as in "
                                f"RabbitMQ's Erlang client) and must be at least "
                                f"{_MIN_CONNECTION_TIMEOUT_MS}, got {ms}; for {ms} seconds "
                                f"write {ms * 1000}")
        limits["connection_timeout"] = ms / 1000.0
    return limits


def has_port_in(hostport: str) -> bool:
    """Whether ``host[:port]`` states a port (``host:`` with nothing after the colon does not)."""
    if hostport.startswith("["):
        after = hostport[hostport.find("]") + 1:]
        return after.startswith(":") and len(after) > 1
    return bool(hostport.partition(":")[2])


def format_uri(uri: BrokerURI | Amqp10URI) -> str:
    """The URI as text that its parser (:func:`parse_uri`, or
    :func:`pumpd.config.amqp10_uri.parse_amqp10_uri`) reads back to an equal one.

    Includes the password: for state files, never for logs (use ``uri.redacted()``).
    """
    return uri.text_with_password()


def uri_notes(uri: BrokerURI) -> list[str]:
    """Where pumpd reads this URI differently from RabbitMQ's Erlang client (for check time)."""
    notes: list[str] = []
    if uri.tls is not None and uri.tls.depth is not None:
        notes.append(f"{uri.redacted()}: TLS 'depth' is not enforced by pumpd (Python's ssl "
                     "has no setting for it): OpenSSL's own limit applies")
    if uri.auth_mechanisms and uri.auth_mechanisms[0] == "amqplain":
        notes.append(f"{uri.redacted()}: auth_mechanism amqplain: pumpd logs in with PLAIN "
                     "(the same user and password; RabbitMQ offers both unless configured "
                     "otherwise)")
    return notes
