"""The TLS side of an amqps URI, with the standard library alone: the context that verifies the
broker (and presents a client certificate), and the name it is verified against. The engine's
AMQP connections (AMQP 0-9-1 and AMQP 1.0 URIs alike) and plan-migration's management API
requests use it.
"""

from __future__ import annotations

import ssl

from .model import Amqp10URI, BrokerURI
from .uri import URIError

__all__ = ["ssl_context", "tls_server_name"]


# An AMQP 1.0 URI's versions=... as Python's ssl names them
_VERSIONS = {"tlsv1": ssl.TLSVersion.TLSv1, "tlsv1.1": ssl.TLSVersion.TLSv1_1,
             "tlsv1.2": ssl.TLSVersion.TLSv1_2, "tlsv1.3": ssl.TLSVersion.TLSv1_3}


def ssl_context(uri: BrokerURI | Amqp10URI) -> ssl.SSLContext:
    """The TLS context for an amqps URI.

    Without TLS options: the system's CAs, the peer's certificate and host name verified. With
    some: ``cacertfile`` replaces the system's CAs, ``certfile`` / ``keyfile`` (``password``)
    are the client certificate, ``verify_none`` turns verification off, ``versions`` (an AMQP
    1.0 URI's) bounds the TLS versions to its lowest and highest.

    :raises URIError: when a certificate or key file cannot be loaded.
    """
    tls = uri.tls
    if tls is None:
        return ssl.create_default_context()
    try:
        ctx = ssl.create_default_context(cafile=tls.cacertfile)
        if tls.certfile is not None:
            ctx.load_cert_chain(tls.certfile, tls.keyfile, password=tls.password)
    except (OSError, ssl.SSLError) as exc:
        # The file names are the user's own configuration, safe to show; the URI is redacted.
        raise URIError(uri.redacted(), f"cannot load the TLS files: {exc}") from None
    if not tls.verify or tls.server_name_indication == "disable":
        # Erlang checks the host name against the SNI name: with SNI disabled, it checks none.
        ctx.check_hostname = False  # must come before verify_mode, or ssl refuses CERT_NONE
    if not tls.verify:
        ctx.verify_mode = ssl.CERT_NONE
    if tls.versions:  # a range without a gap: the parser has made sure
        try:
            ctx.minimum_version = _VERSIONS[tls.versions[0]]
            ctx.maximum_version = _VERSIONS[tls.versions[-1]]
        except (ValueError, ssl.SSLError) as exc:  # a version this OpenSSL does not offer
            raise URIError(uri.redacted(), f"TLS versions {','.join(tls.versions)}: "
                                           f"{exc}") from None
    # fail_if_no_peer_cert is a server-side option in Erlang's ssl: a client has no use for it.
    # customize_hostname_check=https is how Python's ssl matches host names already.
    return ctx


def tls_server_name(uri: BrokerURI | Amqp10URI) -> str | None:
    """The name sent as SNI and verified: server_name_indication, else the host."""
    sni = uri.tls.server_name_indication if uri.tls is not None else None
    if sni == "disable":
        return None
    return sni or uri.effective_host
