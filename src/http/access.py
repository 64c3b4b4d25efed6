"""Who may do what on the HTTP endpoint: the Host check, the bearer token, what is open.

Checked for every request, in this order, before it is routed:

1. ``Host`` must name this endpoint (against DNS rebinding: a web page whose name was made to
   resolve to this address sends its own name): an IP literal, ``localhost``, the name the
   endpoint was bound to, or a name given with ``--http-allowed-host``; with a port, the
   endpoint's own (except for an allowed name, which may sit behind a proxy). Otherwise 421.
2. A bearer token (``Authorization: Bearer TOKEN``, compared in constant time) for everything
   except the status page itself, reads of ``/api/*`` when ``--http-open-reads`` opens them,
   and ``GET /metrics`` when ``--metrics-open`` does. Otherwise 401 with
   ``WWW-Authenticate: Bearer``, the same answer whether the header was missing or wrong.
"""

from __future__ import annotations

import hmac
import ipaddress
import ssl
from dataclasses import dataclass, field

READ_METHODS = ("GET", "HEAD")
PAGE_PATHS = ("/", "/index.html")


@dataclass(frozen=True)
class Access:
    """The endpoint's access settings (``--http-*`` options)."""

    token: str = field(repr=False)
    token_file: str = ""
    open_reads: bool = False  # GET /api/* without a token
    metrics_open: bool = False  # GET /metrics without a token
    allowed_hosts: frozenset[str] = frozenset()  # extra names for the Host header, lower case
    tls: ssl.SSLContext | None = None
    tls_cert: str | None = None
    tls_key: str | None = None


def _split_host(value: str) -> tuple[str, int | None] | None:
    """``name[:port]`` or ``[v6]:port`` of a Host header; None when malformed."""
    value = value.strip()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1:]
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:] if rest else None
    else:
        name, sep, port_text = value.rpartition(":")
        if not sep:
            name, port_text = value, None
    if port_text is not None and not (port_text.isdigit() and len(port_text) <= 5):
        return None
    if not name:
        return None
    return name.lower(), int(port_text) if port_text is not None else None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_allowed(host_header: str | None, bound_host: str | None, port: int | None,
                 allowed: frozenset[str]) -> bool:
    """Whether a request's ``Host`` names this endpoint (see the module docstring)."""
    if not host_header:
        return False
    split = _split_host(host_header)
    if split is None:
        return False
    name, given_port = split
    if name in allowed:
        return True
    if not (_is_ip(name) or name == "localhost"
            or (bound_host is not None and name == bound_host.lower())):
        return False
    return given_port is None or port is None or given_port == port


def bearer_matches(authorization: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``token`` (constant-time comparison)."""
    if not authorization or not token:
        return False
    scheme, _, given = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode("utf-8", "replace"), token.encode("ascii"))


def needs_token(access: Access, method: str, path: str) -> bool:
    """Whether this request must carry the token (``path`` without its query)."""
    if method in READ_METHODS:
        if path in PAGE_PATHS:
            return False  # a static page; it asks the user for the token for its own requests
        if path == "/metrics":
            return not access.metrics_open
        if path == "/api" or path.startswith("/api/"):
            return not access.open_reads
    return True


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` only listens on this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def server_context(cert: str, key: str) -> ssl.SSLContext:
    """A server TLS context (TLS 1.2 or later) with this certificate chain and key.

    :raises ssl.SSLError, OSError: when the files cannot be read or do not match.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    return ctx
