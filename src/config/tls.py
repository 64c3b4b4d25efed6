"""The TLS side of an amqps URI, with the standard library alone: the context that verifies the
broker (and presents a client certificate), and the name it is verified against. The engine's
AMQP connections and plan-migration's management API requests both use it.
"""

from __future__ import annotations

import ssl

from .model import BrokerURI
from .uri import URIError

__all__ = ["ssl_context", "tls_server_name"]


def ssl_context(uri: BrokerURI) -> ssl.SSLContext:
    """The TLS context for an amqps URI.

    Without TLS options: the system's CAs, the peer's certificate and host name verified. With
    some: ``cacertfile`` replaces the system's CAs, ``certfile`` / ``keyfile`` (``password``)
    are the client certificate, ``verify_none`` turns verification off.

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
    # fail_if_no_peer_cert is a server-side option in Erlang's ssl: a client has no use for it.
    # customize_hostname_check=https is how Python's ssl matches host names already.
    return ctx


def tls_server_name(uri: BrokerURI) -> str | None:
    """The name sent as SNI and verified: server_name_indication, else the host."""
    sni = uri.tls.server_name_indication if uri.tls is not None else None
    if sni == "disable":
        return None
    return sni or uri.effective_host
