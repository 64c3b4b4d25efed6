"""Throwaway private RabbitMQ nodes, for tests, ``make demo`` and benchmarks.

:class:`LocalNode` runs Debian's ``rabbitmq-server`` (the ``/usr/lib/rabbitmq/bin`` scripts, not
the ``/usr/sbin`` wrappers, which switch to the ``rabbitmq`` user and its Erlang cookie) as a
private node with its own name, ports, data and log directories, configuration and Erlang cookie.
It never touches a system node (``rabbit@localhost`` on 5672, distribution port 25672) and never
reads ``/etc/rabbitmq``::

    with LocalNode(plugins=["rabbitmq_management"]) as node:
        conn = pika.BlockingConnection(pika.URLParameters(node.uri()))
        ...

How a node is isolated:

* ports: the AMQP, Erlang distribution and (with ``rabbitmq_management``) management HTTP ports
  are picked by :func:`find_free_port` below the kernel's ephemeral range, all on 127.0.0.1.
  ``RABBITMQ_DIST_PORT`` is always set explicitly, since the Erlang default (AMQP port + 20000)
  may collide with another node's; ``RABBITMQ_NODE_PORT`` is never set, because together with
  ``listeners.tcp.1`` it makes a second listener on the same port (``eaddrinuse``).
* configuration: the node's base directory holds its ``rabbitmq.conf``, an empty
  ``rabbitmq-env.conf`` (so ``/etc/rabbitmq/rabbitmq-env.conf`` and ``/etc/rabbitmq/rabbitmq.conf``,
  which pin 5672, are not read), its enabled-plugins file and ``.erlang.cookie``; ``HOME`` points
  there for the server and for every ``rabbitmqctl`` call (:mod:`pumpd.testing.nodefiles`).
* processes: the server runs in its own session and process group, so :meth:`LocalNode.kill`
  can SIGKILL the whole group (the script, ``beam.smp`` and its port programs) and leave no
  orphan. ``epmd`` is shared by every Erlang node on the host (the system node's included); it
  daemonizes into its own session and is never killed here.

Nodes do not outlive the Python process that started them, as far as Python can help it: an
:mod:`atexit` hook SIGKILLs every node still running at interpreter exit and removes the
directories that :class:`LocalNode` created. (If the Python process itself is SIGKILLed, no hook
runs; the node keeps running in its own session and must be killed by hand.)

Starting a node takes a few seconds (measured on 2 CPUs: 3.5 s without plugins, 3.9 s with
management and shovel, 7 s for both started in parallel); :meth:`LocalNode.start` waits until
the AMQP port accepts TCP connections and ``rabbitmqctl await_startup`` succeeds. A graceful
:meth:`LocalNode.stop` takes 1.5 s, or 6.5 s with the management plugin (it waits 5 s for its
statistics collector); :meth:`LocalNode.kill` is instant.

This module runs the node's process; ``rabbitmqctl``, URIs and the management API are
:class:`~pumpd.testing.nodecontrol.NodeControl`'s.
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .node_errors import LocalNodeError, ManagementHTTPError
from .nodecontrol import CTL, NodeControl
from .nodefiles import NodeFiles, TLSListener, node_environment, rabbitmq_conf
from .ports import LOCALHOST, broker_answers, find_free_port, port_is_free
from .processes import PrivateProcess, tail, wait_leader

if TYPE_CHECKING:
    pass

__all__ = [
    "CTL",
    "SERVER",
    "LocalNode",
    "LocalNodeError",
    "ManagementHTTPError",
    "TLSListener",
    "broker_answers",
    "find_free_port",
]

#: The server start script that runs the node as the calling user (not the /usr/sbin wrapper).
SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"

# Nodes created and not yet closed; the atexit hook kills them and removes their directories.
_open_nodes: set[LocalNode] = set()
_open_lock = threading.Lock()


class LocalNode(PrivateProcess, NodeControl):
    """A throwaway RabbitMQ node with its own ports, directories and Erlang cookie.

    Creating the object picks the ports and names but starts nothing; call :meth:`start` or use
    it as a context manager (``with LocalNode() as node:`` starts it and, on exit, stops it and
    removes its directories).

    :param plugins: plugins to enable, e.g. ``["rabbitmq_management", "rabbitmq_shovel"]``.
        The default is none, which starts fastest. ``rabbitmq_management`` gets a management
        port (:attr:`management_port`) on 127.0.0.1; ``rabbitmq_amqp1_0`` makes the AMQP port
        speak AMQP 1.0 too (:meth:`amqp10_address`), at no measurable cost in start time.
    :param name: the short node name (before ``@localhost``); unique by default.
    :param base_dir: where configuration, data and logs go; a fresh temporary directory
        (removed by :meth:`close`) by default. A given directory is never removed.
    :param start_timeout: seconds :meth:`start` waits for the node to answer.
    """

    def __init__(
        self,
        plugins: Sequence[str] = (),
        *,
        name: str | None = None,
        base_dir: str | os.PathLike[str] | None = None,
        start_timeout: float = 90.0,
        tls: TLSListener | None = None,
    ) -> None:
        self.plugins: tuple[str, ...] = tuple(plugins)
        #: With ``tls``, the node also listens for AMQPS on :attr:`tls_port` (and, with
        #: ``rabbitmq_stream``, for the streams protocol over TLS on :attr:`stream_tls_port`).
        self.tls = tls
        self.tls_port: int | None = None
        self.stream_tls_port: int | None = None
        self.name = name or f"pumpd-{os.getpid()}-{secrets.token_hex(4)}"
        self.nodename = f"{self.name}@localhost"
        self.start_timeout = start_timeout
        self._owns_dir = base_dir is None
        if base_dir is None:
            self.base_dir = Path(tempfile.mkdtemp(prefix=f"{self.name}-"))
        else:
            self.base_dir = Path(base_dir)
        #: Its configuration, data and log files.
        self.files = NodeFiles.under(self.base_dir, self.nodename)
        self.amqp_port = 0
        self.dist_port = 0
        self.management_port = None
        #: The streams protocol port, or ``None`` without ``rabbitmq_stream``.
        self.stream_port: int | None = None
        self._pick_ports()
        self._proc: subprocess.Popen[bytes] | None = None
        self._closed = False
        with _open_lock:
            _open_nodes.add(self)
        #: Seconds the last successful :meth:`start` took.
        self.last_start_seconds: float | None = None

    # ------------------------------------------------------------------------------- ports

    @property
    def pid(self) -> int | None:
        """PID of the server script (also the process group id), or ``None`` if not started."""
        return self._proc.pid if self._proc is not None else None

    def _pick_ports(self) -> None:
        self.amqp_port = find_free_port()
        self.dist_port = find_free_port()
        if "rabbitmq_management" in self.plugins:
            self.management_port = find_free_port()
        if "rabbitmq_stream" in self.plugins:
            self.stream_port = find_free_port()
        if self.tls is not None:
            self.tls_port = find_free_port()
            if self.stream_port is not None:
                self.stream_tls_port = find_free_port()

    def _ports(self) -> list[int]:
        ports = [self.amqp_port, self.dist_port]
        if self.management_port is not None:
            ports.append(self.management_port)
        if self.stream_port is not None:
            ports.append(self.stream_port)
        ports += [p for p in (self.tls_port, self.stream_tls_port) if p is not None]
        return ports

    def _write_files(self) -> None:
        self.files.write(rabbitmq_conf(self.amqp_port, management_port=self.management_port,
                                       stream_port=self.stream_port, tls=self.tls,
                                       tls_port=self.tls_port,
                                       stream_tls_port=self.stream_tls_port), self.plugins)

    # --------------------------------------------------------------------------- lifecycle

    def start(self) -> LocalNode:
        """Start the node and wait until it answers; returns ``self``.

        On the first start, if another process took one of the picked ports in the meantime,
        new ports are picked and the start is retried (twice at most). On later starts
        (:meth:`restart`) the ports and data are kept, so durable queues survive.

        :raises LocalNodeError: the node died or did not answer within ``start_timeout``; the
            message includes the tail of its logs.
        """
        if self._closed:
            raise LocalNodeError(f"{self.nodename} was closed")
        if self.is_running():
            raise LocalNodeError(f"{self.nodename} is already running")
        for exe in (SERVER, CTL):
            if not os.access(exe, os.X_OK):
                raise LocalNodeError(
                    f"{exe} not found or not executable; install Debian's rabbitmq-server package"
                )
        first_start = not self.files.mnesia_base.joinpath(self.nodename).exists()
        attempts = 3 if first_start else 1
        for attempt in range(attempts):
            busy = [p for p in self._ports() if not port_is_free(p)]
            if busy:
                if first_start and attempt + 1 < attempts:
                    self._pick_ports()
                    continue
                raise LocalNodeError(f"{self.nodename}: port(s) {busy} already in use")
            try:
                self._start_once()
                return self
            except _PortClash:
                if attempt + 1 >= attempts:
                    raise
                self._pick_ports()
        raise AssertionError("unreachable")

    def _start_once(self) -> None:
        self._write_files()
        began = time.monotonic()
        with self.files.console_log.open("ab") as log:
            log.write(f"\n=== pumpd.localnode: starting {self.nodename} ===\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                [SERVER],
                env=node_environment(self.files, self.nodename, self.dist_port),
                cwd=self.base_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._await_startup(began + self.start_timeout)
        except BaseException:
            self._kill_group()
            raise
        self.last_start_seconds = time.monotonic() - began

    def _await_startup(self, deadline: float) -> None:
        """Wait until the AMQP port accepts connections and ``rabbitmqctl await_startup``
        succeeds (then the management port too, if any).

        The AMQP listener opens near the end of the boot, so it is polled first: cheap, where
        ``await_startup`` fails at once while the node is not reachable yet, and running the
        CLI (an Erlang VM of its own) during the boot only slows the boot down.
        """
        while not broker_answers(LOCALHOST, self.amqp_port, timeout=0.5):
            self._check_alive()
            if time.monotonic() > deadline:
                raise self._startup_error("the AMQP port did not open")
            time.sleep(0.05)
        # The authoritative check: the rabbit application and its plugins have fully booted.
        while True:
            self._check_alive()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._startup_error("rabbitmqctl await_startup did not succeed")
            result = self.run_ctl(
                ["await_startup", "--timeout", str(max(1, int(remaining)))],
                timeout=remaining + 10,
            )
            if result.returncode == 0:
                break
            time.sleep(0.2)
        if self.management_port is not None:
            while not broker_answers(LOCALHOST, self.management_port, timeout=0.5):
                self._check_alive()
                if time.monotonic() > deadline:
                    raise self._startup_error("the management port did not open")
                time.sleep(0.05)

    def _check_alive(self) -> None:
        assert self._proc is not None
        if self._proc.poll() is not None:
            logs = self._log_tails()
            msg = f"{self.nodename} exited with status {self._proc.returncode} while starting"
            if "eaddrinuse" in logs or "already_used" in logs:
                raise _PortClash(f"{msg}; a port was taken:\n{logs}")
            raise LocalNodeError(f"{msg}:\n{logs}")

    def _startup_error(self, what: str) -> LocalNodeError:
        return LocalNodeError(
            f"{self.nodename} did not start within {self.start_timeout:.0f} s ({what}):\n"
            + self._log_tails()
        )

    def _log_tails(self) -> str:
        return (
            f"--- {self.files.console_log} ---\n{tail(self.files.console_log)}\n"
            f"--- {self.files.node_log} ---\n{tail(self.files.node_log)}"
        )

    def answers(self, timeout: float = 1.0) -> bool:
        """Whether the node's AMQP port accepts TCP connections."""
        return broker_answers(LOCALHOST, self.amqp_port, timeout)

    def ensure_running(self, fresh_on_failure: bool = False) -> LocalNode:
        """Restart the node (same ports and data) unless it is running and answers.

        :param fresh_on_failure: when the restart fails (a broker that cannot recover its own
            data after a kill), move the data aside (``mnesia.broken-N``, kept for a look) and
            start the node empty, so that one broker's failure does not fail every later test
            that shares the node; the test that killed it has seen its own failure
        """
        if not (self.is_running() and self.answers()):
            try:
                self.restart()
            except LocalNodeError:
                if not fresh_on_failure:
                    raise
                self._kill_group()
                self._proc = None
                broken = self.files.mnesia_base.with_name(
                    f"mnesia.broken-{len(list(self.files.base_dir.glob('mnesia.broken-*')))}")
                self.files.mnesia_base.rename(broken)
                self.files.mnesia_base.mkdir()
                self.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the node gracefully (``rabbitmqctl stop``); SIGKILL its process group if that
        fails or takes longer than ``timeout`` seconds. Data stays; :meth:`restart` resumes."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            try:
                stopped = self.run_ctl(["stop"], timeout=timeout).returncode == 0
            except subprocess.TimeoutExpired:
                stopped = False
            if stopped:
                wait_leader(self._proc, timeout)
        self._kill_group()

    def _forget(self) -> None:
        with _open_lock:
            _open_nodes.discard(self)

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return (
            f"<LocalNode {self.nodename} amqp={self.amqp_port} dist={self.dist_port} "
            f"management={self.management_port} {state}>"
        )


class _PortClash(LocalNodeError):
    """The node died at startup because a picked port was taken (retried with new ports)."""


@atexit.register
def _kill_open_nodes() -> None:
    """SIGKILL nodes still open at interpreter exit and remove their temporary dirs."""
    with _open_lock:
        nodes = list(_open_nodes)
    for node in nodes:
        try:
            node.kill()
        finally:
            node._closed = True
            if node._owns_dir:
                shutil.rmtree(node.base_dir, ignore_errors=True)
