"""Connection parameters for pika from a parsed :class:`~pumpd.config.model.BrokerURI`, and how
long each step of a connection may wait for the broker (:class:`StepTimeouts`).

Parsing a URI (:mod:`pumpd.config.uri`) never imports pika; connecting does, from here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pika
import pika.channel
import pika.credentials
import pika.spec

from ..config.model import BrokerURI
from ..config.tls import ssl_context, tls_server_name
from ..config.uri import DEFAULT_SOCKET_TIMEOUT, DEFAULT_STACK_TIMEOUT, URIError

__all__ = ["ANSWER_TIMEOUT", "WORK_TIMEOUT", "StepTimeouts", "local_broker_address", "step_timeouts",
           "to_pika_parameters"]


LOCAL_BROKER_ENV = "PUMPD_LOCAL_BROKER"

# The bounds of the steps after connection.open-ok (the handshake's are pika's socket_timeout
# and stack_timeout, set below from config/uri.py's defaults). A step that ran out fails the
# attempt with a LinkError naming it; the pump reconnects as after any failure.
# channel.open, confirm.select, basic.qos, basic.cancel: a broker answers these at once, or
# has refused already (a channel limit closes the connection at once).
ANSWER_TIMEOUT = 10.0
# A declaration (a passive one too: the queue answers after what waits in its mailbox) or
# basic.consume: the broker may have work to do first (a quorum queue's members started, a
# stream's offset found, a queue deleted). The backlog reader's passive declare waits as long:
# whether a source that answers slowly is stalled is the stall rule's to say (stall.py).
WORK_TIMEOUT = 30.0


@dataclass(frozen=True)
class StepTimeouts:
    """Seconds one step of a link waits for the broker's answer."""

    answer: float  # channel.open, confirm.select, basic.qos, basic.cancel
    work: float  # declarations (passive ones too), basic.consume


def step_timeouts(uri: BrokerURI) -> StepTimeouts:
    """The defaults, or the URI's ``connection_timeout`` (which bounds the bring-up) for the
    steps that answer at once; a declaration waits at least :data:`WORK_TIMEOUT`."""
    answer = ANSWER_TIMEOUT if uri.connection_timeout is None else uri.connection_timeout
    return StepTimeouts(answer=answer, work=max(answer, WORK_TIMEOUT))


def local_broker_address(uri: BrokerURI) -> tuple[str, int]:
    """Where a host-less URI (the plugin's "local broker") connects: 127.0.0.1 on the URI's port,
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
        kwargs["ssl_options"] = pika.SSLOptions(ssl_context(uri),
                                                server_hostname=tls_server_name(uri))
    return pika.ConnectionParameters(**kwargs)
