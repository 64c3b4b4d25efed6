"""A private node's files and environment: what isolates it from a system node.

The node's base directory holds its ``rabbitmq.conf``, an empty ``rabbitmq-env.conf`` (so
``/etc/rabbitmq/rabbitmq-env.conf`` and ``/etc/rabbitmq/rabbitmq.conf``, which pin 5672, are not
read), its enabled-plugins file and ``.erlang.cookie``; ``HOME`` points there for the server and
for every ``rabbitmqctl`` call (:func:`node_environment`). See :mod:`pumpd.testing.localnode`.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .node_errors import LocalNodeError
from .ports import LOCALHOST

#: The plugin that makes a node speak AMQP 1.0 on its AMQP port (beside 0-9-1: the protocol
#: header tells them apart). It offers SASL PLAIN, AMQPLAIN and ANONYMOUS; ANONYMOUS logs in as
#: its ``default_user``, guest.
AMQP10_PLUGIN = "rabbitmq_amqp1_0"


@dataclass(frozen=True)
class TLSListener:
    """PEM files for an AMQPS listener: the CA that signs client certificates, the server's
    certificate and key; with ``require_client_cert`` the node refuses clients without one."""

    cacertfile: str
    certfile: str
    keyfile: str
    require_client_cert: bool = True


@dataclass(frozen=True)
class NodeFiles:
    """Where one node's configuration, data and logs are (:meth:`under` its base directory)."""

    base_dir: Path
    config_file: Path  # rabbitmq.conf
    env_file: Path  # rabbitmq-env.conf, empty
    plugins_file: Path  # the enabled-plugins file
    mnesia_base: Path  # RABBITMQ_MNESIA_BASE: the data lives in a subdirectory named after the node
    log_base: Path  # RABBITMQ_LOG_BASE
    console_log: Path  # where the server's stdout and stderr go
    node_log: Path  # the node's own log file
    cookie: Path  # .erlang.cookie, read by the node and by rabbitmqctl through HOME

    @classmethod
    def under(cls, base_dir: Path, nodename: str) -> NodeFiles:
        log_base = base_dir / "log"
        return cls(
            base_dir=base_dir,
            config_file=base_dir / "rabbitmq.conf",
            env_file=base_dir / "rabbitmq-env.conf",
            plugins_file=base_dir / "enabled_plugins",
            mnesia_base=base_dir / "mnesia",
            log_base=log_base,
            console_log=base_dir / "console.log",
            node_log=log_base / f"{nodename}.log",
            cookie=base_dir / ".erlang.cookie",
        )

    def write(self, conf: Sequence[str], plugins: Sequence[str]) -> None:
        """Write the configuration lines ``conf``, an empty env file, the plugins file and (once)
        the Erlang cookie, making the directories first."""
        for d in (self.base_dir, self.mnesia_base, self.log_base):
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise LocalNodeError(f"cannot create {d}: {exc}") from exc
            if not os.access(d, os.W_OK | os.X_OK):
                raise LocalNodeError(
                    f"{d} is not writable by uid {os.getuid()}; run as root or pass a writable "
                    "base_dir"
                )
        self.config_file.write_text("\n".join(conf) + "\n")
        self.env_file.write_text("")
        self.plugins_file.write_text(f"[{','.join(plugins)}].\n")
        if not self.cookie.exists():
            # Written before anything starts: otherwise the node and a concurrent rabbitmqctl
            # could each create one.
            fd = os.open(self.cookie, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
            with os.fdopen(fd, "w") as f:
                f.write("".join(secrets.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(20)))


def rabbitmq_conf(amqp_port: int, *, management_port: int | None = None,
                  stream_port: int | None = None, tls: TLSListener | None = None,
                  tls_port: int | None = None, stream_tls_port: int | None = None) -> list[str]:
    """The lines of a node's ``rabbitmq.conf``: every listener on 127.0.0.1, at the given ports.
    The streams TLS listener (``stream_tls_port``) uses the AMQPS listener's ``ssl_options``."""
    conf = [
        f"listeners.tcp.1 = {LOCALHOST}:{amqp_port}",
        "loopback_users = none",
        # Classic queues on the second storage version, the only one RabbitMQ 4 has: the
        # first one's journal can fail its own recovery after a SIGKILL (a node that then
        # never starts again), and the tests kill nodes on purpose.
        "classic_queue.default_version = 2",
    ]
    if management_port is not None:
        conf += [
            f"management.tcp.port = {management_port}",
            f"management.tcp.ip = {LOCALHOST}",
        ]
    if stream_port is not None:
        # advertised: clients reconnect to the host and port the metadata names (the
        # default is the machine's hostname and 5552)
        conf += [
            f"stream.listeners.tcp.1 = {LOCALHOST}:{stream_port}",
            f"stream.advertised_host = {LOCALHOST}",
            f"stream.advertised_port = {stream_port}",
        ]
    if tls is not None:
        conf += [
            f"listeners.ssl.1 = {LOCALHOST}:{tls_port}",
            f"ssl_options.cacertfile = {tls.cacertfile}",
            f"ssl_options.certfile = {tls.certfile}",
            f"ssl_options.keyfile = {tls.keyfile}",
            "ssl_options.verify = verify_peer",
            f"ssl_options.fail_if_no_peer_cert = {str(tls.require_client_cert).lower()}",
        ]
    if tls is not None and stream_tls_port is not None:
        conf += [
            f"stream.listeners.ssl.1 = {LOCALHOST}:{stream_tls_port}",
            f"stream.advertised_tls_host = {LOCALHOST}",
            f"stream.advertised_tls_port = {stream_tls_port}",
        ]
    return conf


def node_environment(files: NodeFiles, nodename: str, dist_port: int) -> dict[str, str]:
    """Environment for the server and for rabbitmqctl: nothing inherited from RABBITMQ_*."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RABBITMQ_", "ERL_")) and k not in {"HOME", "NOTIFY_SOCKET"}
    }
    env.update(
        HOME=str(files.base_dir),
        RABBITMQ_NODENAME=nodename,
        RABBITMQ_DIST_PORT=str(dist_port),
        RABBITMQ_MNESIA_BASE=str(files.mnesia_base),
        RABBITMQ_LOG_BASE=str(files.log_base),
        RABBITMQ_ENABLED_PLUGINS_FILE=str(files.plugins_file),
        RABBITMQ_CONFIG_FILE=str(files.config_file),
        RABBITMQ_CONF_ENV_FILE=str(files.env_file),
        # The distribution listener on loopback only, like the AMQP one.
        RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
        ERL_EPMD_ADDRESS=LOCALHOST,
    )
    return env
