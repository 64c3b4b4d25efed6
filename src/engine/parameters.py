"""Connection parameters for pika from a parsed :class:`~pumpd.config.model.BrokerURI`.

Parsing a URI (:mod:`pumpd.config.uri`) never imports pika; connecting does, from here.
"""

from __future__ import annotations

import os
import ssl
from typing import Any

import pika
import pika.channel
import pika.credentials
import pika.spec

from ..config.model import BrokerURI
from ..config.uri import DEFAULT_SOCKET_TIMEOUT, DEFAULT_STACK_TIMEOUT, URIError

__all__ = ["local_broker_address", "to_pika_parameters"]


def _ssl_context(uri: BrokerURI) -> ssl.SSLContext:
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


LOCAL_BROKER_ENV = "PUMPD_LOCAL_BROKER"


def local_broker_address(uri: BrokerURI) -> tuple[str, int]:
    """Where a host-less URI (the seed's "local broker") connects: 127.0.0.1 on the URI's port,
    or ``host:port`` from the environment variable PUMPD_LOCAL_BROKER when it is set (pumpd runs
    outside the broker, so "local" has to be told when the broker is not on the default port).

    :raises URIError: when PUMPD_LOCAL_BROKER is not ``host:port``
    """
    setting = os.environ.get(LOCAL_BROKER_ENV, "").strip()
    if not setting:
        return "127.0.0.1", uri.port
    host, sep, port = setting.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise URIError(uri.redacted(), f"{LOCAL_BROKER_ENV}={setting!r} is not host:port")
    return host.strip("[]"), int(port)


def to_pika_parameters(uri: BrokerURI, *, client_name: str) -> pika.ConnectionParameters:
    """Connection parameters for pika, from public pika API only.

    :param client_name: shown as the connection's name in the broker's management UI.
    :raises URIError: when an amqps URI's certificate or key file cannot be loaded.
    """
    host, port = (uri.host, uri.port) if uri.host is not None else local_broker_address(uri)
    kwargs: dict[str, Any] = {
        "host": host,
        "port": port,
        "virtual_host": uri.vhost,
        "credentials": (pika.credentials.ExternalCredentials()
                        if uri.auth_mechanisms[:1] == ("external",)
                        else pika.PlainCredentials(uri.username, uri.password)),
        "client_properties": {"connection_name": client_name},
        # pumpd reconnects itself (reconnect_delay, another broker of the list): one attempt.
        "connection_attempts": 1,
        # A blocked destination is a state the shovel reports and waits out, never a failure.
        "blocked_connection_timeout": None,
    }
    if uri.connection_timeout is None:
        kwargs["socket_timeout"] = DEFAULT_SOCKET_TIMEOUT
        kwargs["stack_timeout"] = DEFAULT_STACK_TIMEOUT
    else:  # connection_timeout bounds the whole bring-up, TCP connect included
        kwargs["socket_timeout"] = min(DEFAULT_SOCKET_TIMEOUT, uri.connection_timeout)
        kwargs["stack_timeout"] = uri.connection_timeout
    if uri.heartbeat is not None:  # otherwise pika accepts the broker's proposal
        kwargs["heartbeat"] = uri.heartbeat
    if uri.channel_max:  # None or 0: pika's default, the protocol maximum
        kwargs["channel_max"] = uri.channel_max
    if uri.frame_max:  # None or 0: pika's default, its largest frame
        kwargs["frame_max"] = uri.frame_max
    if uri.scheme == "amqps":
        kwargs["ssl_options"] = pika.SSLOptions(_ssl_context(uri),
                                                server_hostname=tls_server_name(uri))
    return pika.ConnectionParameters(**kwargs)
