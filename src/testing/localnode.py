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
  there for the server and for every ``rabbitmqctl`` call.
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
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .errors import LocalNodeError, ManagementHTTPError
from .ports import LOCALHOST, broker_answers, find_free_port, port_is_free
from .processes import kill_group, tail, wait_leader

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "CTL",
    "SERVER",
    "LocalNode",
    "LocalNodeError",
    "ManagementHTTPError",
    "broker_answers",
    "find_free_port",
]

#: The server start script that runs the node as the calling user (not the /usr/sbin wrapper).
SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
#: The control CLI that talks to a node with the cookie found in ``$HOME``.
CTL = "/usr/lib/rabbitmq/bin/rabbitmqctl"

# Nodes created and not yet closed; the atexit hook kills them and removes their directories.
_open_nodes: set[LocalNode] = set()
_open_lock = threading.Lock()


@dataclass(frozen=True)
class TLSListener:
    """PEM files for an AMQPS listener: the CA that signs client certificates, the server's
    certificate and key; with ``require_client_cert`` the node refuses clients without one."""

    cacertfile: str
    certfile: str
    keyfile: str
    require_client_cert: bool = True


class LocalNode:
    """A throwaway RabbitMQ node with its own ports, directories and Erlang cookie.

    Creating the object picks the ports and names but starts nothing; call :meth:`start` or use
    it as a context manager (``with LocalNode() as node:`` starts it and, on exit, stops it and
    removes its directories).

    :param plugins: plugins to enable, e.g. ``["rabbitmq_management", "rabbitmq_shovel"]``.
        The default is none, which starts fastest. ``rabbitmq_management`` gets a management
        port (:attr:`management_port`) on 127.0.0.1.
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
        #: With ``tls``, the node also listens for AMQPS on :attr:`tls_port`.
        self.tls = tls
        self.tls_port: int | None = None
        self.name = name or f"pumpd-{os.getpid()}-{secrets.token_hex(4)}"
        #: Full Erlang node name, e.g. ``pumpd-123-0a1b2c3d@localhost``.
        self.nodename = f"{self.name}@localhost"
        self.start_timeout = start_timeout
        self._owns_dir = base_dir is None
        if base_dir is None:
            self.base_dir = Path(tempfile.mkdtemp(prefix=f"{self.name}-"))
        else:
            self.base_dir = Path(base_dir)
        self.amqp_port = 0
        self.dist_port = 0
        #: The management HTTP port, or ``None`` without ``rabbitmq_management``.
        self.management_port: int | None = None
        #: The streams protocol port, or ``None`` without ``rabbitmq_stream``.
        self.stream_port: int | None = None
        self._pick_ports()
        self._proc: subprocess.Popen[bytes] | None = None
        self._closed = False
        with _open_lock:
            _open_nodes.add(self)
        #: Seconds the last successful :meth:`start` took.
        self.last_start_seconds: float | None = None

    # ----------------------------------------------------------------- paths and environment

    @property
    def config_file(self) -> Path:
        """The node's ``rabbitmq.conf``."""
        return self.base_dir / "rabbitmq.conf"

    @property
    def env_file(self) -> Path:
        """The node's (empty) ``rabbitmq-env.conf``."""
        return self.base_dir / "rabbitmq-env.conf"

    @property
    def plugins_file(self) -> Path:
        """The node's enabled-plugins file."""
        return self.base_dir / "enabled_plugins"

    @property
    def mnesia_base(self) -> Path:
        """``RABBITMQ_MNESIA_BASE``: the node's data lives in a subdirectory named after it."""
        return self.base_dir / "mnesia"

    @property
    def log_base(self) -> Path:
        """``RABBITMQ_LOG_BASE``."""
        return self.base_dir / "log"

    @property
    def console_log(self) -> Path:
        """Where the server's stdout and stderr go."""
        return self.base_dir / "console.log"

    @property
    def node_log(self) -> Path:
        """The node's own log file."""
        return self.log_base / f"{self.nodename}.log"

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

    def _ports(self) -> list[int]:
        ports = [self.amqp_port, self.dist_port]
        if self.management_port is not None:
            ports.append(self.management_port)
        if self.stream_port is not None:
            ports.append(self.stream_port)
        return ports

    def _env(self) -> dict[str, str]:
        """Environment for the server and for rabbitmqctl: nothing inherited from RABBITMQ_*."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("RABBITMQ_", "ERL_")) and k not in {"HOME", "NOTIFY_SOCKET"}
        }
        env.update(
            HOME=str(self.base_dir),
            RABBITMQ_NODENAME=self.nodename,
            RABBITMQ_DIST_PORT=str(self.dist_port),
            RABBITMQ_MNESIA_BASE=str(self.mnesia_base),
            RABBITMQ_LOG_BASE=str(self.log_base),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.plugins_file),
            RABBITMQ_CONFIG_FILE=str(self.config_file),
            RABBITMQ_CONF_ENV_FILE=str(self.env_file),
            # The distribution listener on loopback only, like the AMQP one.
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
            ERL_EPMD_ADDRESS=LOCALHOST,
        )
        return env

    def _write_files(self) -> None:
        """Write configuration, an empty env file, the plugins file and the Erlang cookie."""
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
        conf = [
            f"listeners.tcp.1 = {LOCALHOST}:{self.amqp_port}",
            "loopback_users = none",
        ]
        if self.management_port is not None:
            conf += [
                f"management.tcp.port = {self.management_port}",
                f"management.tcp.ip = {LOCALHOST}",
            ]
        if self.stream_port is not None:
            # advertised: clients reconnect to the host and port the metadata names (the
            # default is the machine's hostname and 5552)
            conf += [
                f"stream.listeners.tcp.1 = {LOCALHOST}:{self.stream_port}",
                f"stream.advertised_host = {LOCALHOST}",
                f"stream.advertised_port = {self.stream_port}",
            ]
        if self.tls is not None:
            conf += [
                f"listeners.ssl.1 = {LOCALHOST}:{self.tls_port}",
                f"ssl_options.cacertfile = {self.tls.cacertfile}",
                f"ssl_options.certfile = {self.tls.certfile}",
                f"ssl_options.keyfile = {self.tls.keyfile}",
                "ssl_options.verify = verify_peer",
                f"ssl_options.fail_if_no_peer_cert = {str(self.tls.require_client_cert).lower()}",
            ]
        self.config_file.write_text("\n".join(conf) + "\n")
        self.env_file.write_text("")
        self.plugins_file.write_text(f"[{','.join(self.plugins)}].\n")
        cookie = self.base_dir / ".erlang.cookie"
        if not cookie.exists():
            # Written before anything starts: otherwise the node and a concurrent rabbitmqctl
            # could each create one.
            fd = os.open(cookie, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
            with os.fdopen(fd, "w") as f:
                f.write("".join(secrets.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(20)))

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
        first_start = not self.mnesia_base.joinpath(self.nodename).exists()
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
        with self.console_log.open("ab") as log:
            log.write(f"\n=== pumpd.localnode: starting {self.nodename} ===\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                [SERVER],
                env=self._env(),
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
            result = self._run_ctl(
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
            f"--- {self.console_log} ---\n{tail(self.console_log)}\n"
            f"--- {self.node_log} ---\n{tail(self.node_log)}"
        )

    def is_running(self) -> bool:
        """Whether the server process started by this object is still alive."""
        return self._proc is not None and self._proc.poll() is None

    def answers(self, timeout: float = 1.0) -> bool:
        """Whether the node's AMQP port accepts TCP connections."""
        return broker_answers(LOCALHOST, self.amqp_port, timeout)

    def ensure_running(self) -> LocalNode:
        """Restart the node (same ports and data) unless it is running and answers."""
        if not (self.is_running() and self.answers()):
            self.restart()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the node gracefully (``rabbitmqctl stop``); SIGKILL its process group if that
        fails or takes longer than ``timeout`` seconds. Data stays; :meth:`restart` resumes."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            try:
                stopped = self._run_ctl(["stop"], timeout=timeout).returncode == 0
            except subprocess.TimeoutExpired:
                stopped = False
            if stopped:
                wait_leader(self._proc, timeout)
        self._kill_group()

    def _kill_group(self) -> None:
        if self._proc is not None:
            kill_group(self._proc, self._ports())

    def kill(self) -> None:
        """SIGKILL the node's whole process group (an unclean crash), leaving no orphan."""
        self._kill_group()

    def restart(self) -> LocalNode:
        """Stop the node if it runs, then start it again with the same ports and data dir."""
        if self.is_running():
            self.stop()
        self._proc = None
        return self.start()

    def close(self, graceful: bool = True) -> None:
        """Stop the node and remove the directories this object created. Idempotent.

        :param graceful: stop with :meth:`stop` (``rabbitmqctl stop``; about 1.5 s, or 6.5 s
            with the management plugin, which waits 5 s for its statistics collector), or
            with :meth:`kill` (instant; fine when the data is thrown away anyway).
        """
        if self._closed:
            return
        try:
            if graceful:
                self.stop()
            else:
                self.kill()
        finally:
            self._closed = True
            with _open_lock:
                _open_nodes.discard(self)
            if self._owns_dir:
                shutil.rmtree(self.base_dir, ignore_errors=True)

    # ---------------------------------------------------------------------------- control

    def _run_ctl(self, args: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [CTL, "-n", self.nodename, *args],
            check=False,
            env=self._env(),
            cwd=self.base_dir,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def ctl(self, *args: str, timeout: float = 60.0) -> str:
        """Run ``rabbitmqctl -n NODE ARGS...`` against this node and return its stdout.

        :raises LocalNodeError: non-zero exit status (the message has stdout and stderr) or
            timeout.
        """
        try:
            result = self._run_ctl(args, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise LocalNodeError(
                f"rabbitmqctl {' '.join(args)}: timed out after {timeout} s"
            ) from exc
        if result.returncode != 0:
            raise LocalNodeError(
                f"rabbitmqctl -n {self.nodename} {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stderr.strip()}\n{result.stdout.strip()}"
            )
        return result.stdout

    def uri(self, vhost: str = "/", user: str = "guest", password: str = "guest") -> str:
        """An ``amqp://`` URI for this node; the vhost, user and password are percent-encoded."""
        q = urllib.parse.quote
        return (
            f"amqp://{q(user, safe='')}:{q(password, safe='')}@{LOCALHOST}:{self.amqp_port}/"
            f"{q(vhost, safe='')}"
        )

    def add_vhost(self, vhost: str, *, grant_guest: bool = True) -> None:
        """Create ``vhost``; by default give ``guest`` full permissions on it."""
        self.ctl("add_vhost", vhost)
        if grant_guest:
            self.ctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")

    def delete_vhost(self, vhost: str) -> None:
        """Delete ``vhost`` and everything in it."""
        self.ctl("delete_vhost", vhost)

    def add_user(
        self,
        user: str,
        password: str,
        vhost: str = "/",
        configure: str = ".*",
        write: str = ".*",
        read: str = ".*",
    ) -> None:
        """Create ``user`` with ``password`` and the given permissions on ``vhost``."""
        self.ctl("add_user", user, password)
        self.ctl("set_permissions", "-p", vhost, user, configure, write, read)

    def set_vm_memory_high_watermark(self, fraction: float) -> None:
        """Set the memory alarm threshold (fraction of RAM). ``0`` raises the alarm at once,
        blocking every publishing connection; ``0.4`` (RabbitMQ's default) clears it."""
        self.ctl("set_vm_memory_high_watermark", repr(float(fraction)))

    def management_request(self, method: str, path: str, body: Any = None) -> Any:
        """Call the management HTTP API as guest/guest; returns the decoded JSON (or ``None``).

        :param path: e.g. ``/api/overview``; the caller percent-encodes vhost names
            (``/api/queues/%2F``).
        :param body: sent as JSON when not ``None``.
        :raises ManagementHTTPError: on an HTTP error status.
        """
        if self.management_port is None:
            raise LocalNodeError(f"{self.nodename} runs without rabbitmq_management")
        url = f"http://{LOCALHOST}:{self.management_port}/{path.lstrip('/')}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method.upper())
        request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            text = exc.read().decode("utf-8", errors="replace")
            raise ManagementHTTPError(method.upper(), url, exc.code, text) from exc
        return json.loads(raw) if raw.strip() else None

    # ---------------------------------------------------------------------- context manager

    def __enter__(self) -> Self:
        if not self.is_running():
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

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
